"""The run config: validation resolves without changing its argument."""

from upfl import config as cfgmod


def test_validate_returns_a_resolved_copy_and_leaves_its_argument_alone():
    cfg = cfgmod.from_dict({"data": {"path": "d"}, "algorithm": {"name": "fedavg"}})
    cfg.devices.straggler_policy = {"fedavg": "drop", "default": "partial"}
    checked = cfgmod.validate(cfg)
    assert checked.devices.straggler_policy == "drop"
    assert cfg.devices.straggler_policy == {"fedavg": "drop", "default": "partial"}
    assert (
        cfgmod.validate(
            cfgmod.from_dict(
                {
                    "data": {"path": "d"},
                    "algorithm": {"name": "fedprox"},
                    "devices": {"straggler_policy": {"fedavg": "drop", "default": "partial"}},
                }
            )
        ).devices.straggler_policy
        == "partial"
    )
