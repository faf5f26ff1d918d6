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


def test_to_dict_is_asdict_and_shares_no_container_with_the_config():
    """``to_dict`` (which every config hash and summary.json go through) makes what ``dataclasses.asdict`` makes,
    keys in the same order, containers copied: editing the dict leaves the config alone."""
    import dataclasses
    import json

    cfg = cfgmod.from_dict(
        {
            "data": {"path": "d"},
            "algorithm": {"name": "upcycled", "mu": 0.5, "lam": 0.43},
            "model": {"name": "mlp", "options": {"hidden": [64, 32], "dropout": 0.1, "act": {"name": "relu"}}},
            "privacy": {"mechanism": "output", "sigma": [0.5, 1.0], "tau": 10.0},
        }
    )
    cfg.devices.straggler_policy = {"fedavg": "drop", "default": "partial"}
    made = cfgmod.to_dict(cfg)
    assert made == dataclasses.asdict(cfg)
    assert json.dumps(made) == json.dumps(dataclasses.asdict(cfg))
    made["model"]["options"]["hidden"].append(16)
    made["devices"]["straggler_policy"]["fedavg"] = "partial"
    assert cfg.model.options["hidden"] == [64, 32] and cfg.devices.straggler_policy["fedavg"] == "drop"
