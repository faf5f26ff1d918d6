"""The shipped apps deployed as Flower deploys them: ``flower-superlink`` and three ``flower-supernode`` processes on
127.0.0.1, TLS with certificates this test makes (plain HTTP gets no answer), SuperNode authentication with
registered keys (a SuperNode with an unregistered key is refused) (:mod:`fixtures_flower_deployment`), the app
started by ``flwr run`` (examples/flower). Every process is started
and stopped by the test, by PID; the whole test is bounded (each ``flwr run`` killed after 600 s).
"""

import csv
import json
import shutil
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tomllib

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")
pytest.importorskip("cryptography", reason="the test makes its TLS certificates with cryptography")

from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fixtures_flower import run_apps_in_process  # noqa: E402
from fixtures_flower_deployment import Deployment  # noqa: E402
from upfl.data import generate_synthetic  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NODES = 3


@pytest.fixture
def task_identity(monkeypatch):
    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def example_config(overrides: dict) -> dict:
    """examples/flower's run config with ``overrides``: what ``flwr run --run-config`` gives the apps."""
    doc = tomllib.loads((ROOT / "examples" / "flower" / "pyproject.toml").read_text())
    return {**doc["tool"]["flwr"]["app"]["config"], **overrides}


def as_flag(overrides: dict) -> str:
    return " ".join(f"{k}={json.dumps(v) if isinstance(v, str) else str(v).lower()}" for k, v in overrides.items())


@pytest.mark.deployment
def test_tls_deployment_equals_the_simulation_and_survives_a_killed_supernode(tmp_path, task_identity):
    data = generate_synthetic("synthetic_1_1", tmp_path / "data", data_seed=5, num_devices=NODES)
    app = tmp_path / "app"
    shutil.copytree(ROOT / "examples" / "flower", app, ignore=shutil.ignore_patterns("data", "runs"))
    common = {
        "data-path": str(data),
        "local-epochs": 2,
        "fraction-train": 1.0,
        "fraction-evaluate": 1.0,
        "save-models": True,
    }
    whole = {**common, "num-server-rounds": 4, "out-dir": str(tmp_path / "deployed")}
    cut = {**common, "num-server-rounds": 6, "round-timeout": 20, "out-dir": str(tmp_path / "cut")}
    started = time.monotonic()
    with Deployment(tmp_path / "deployment", NODES) as deployment:
        up = time.monotonic() - started
        # TLS only: a plain-HTTP request gets no answer; node authentication: an unregistered key is refused
        with pytest.raises((ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{deployment.port}/health", timeout=10)
        intruder = deployment.start_unregistered_node()
        assert intruder.wait(timeout=120) != 0
        assert "Failed to activate SuperNode" in deployment.logs["unregistered"].read_text()
        assert len(deployment.listed_nodes()) == NODES
        done = deployment.run(app, as_flag(whole))
        assert done.returncode == 0, done.stdout[-4000:]
        killed = []

        def kill_after_round_one(line):
            if "round 1 train" in line and not killed:
                deployment.kill_node(2)
                killed.append(line)

        done_cut = deployment.run(app, as_flag(cut), on_line=kill_after_round_one)
        assert done_cut.returncode == 0, done_cut.stdout[-4000:]
        assert killed
    wall = time.monotonic() - started
    # the same run config in one process (the apps called directly): the same global model after every round
    simulated, sim_rows, _ = run_apps_in_process(example_config(whole | {"out-dir": ""}), tmp_path / "sim", NODES)
    deployed = np.load(tmp_path / "deployed" / "models.npz")
    diffs = [float(np.abs(deployed[f"w{t}"] - simulated[t].numpy()).max()) for t in range(5)]
    print(f"TLS deployment up in {up:.0f} s, both runs {wall:.0f} s; max |deployed - simulated| per round {diffs}")
    assert max(diffs) <= 1e-7, diffs
    with open(tmp_path / "deployed" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["messages"]) for r in rows] == [0, 2 * NODES, 0, 2 * NODES, 0]
    for r, s in zip(rows, sim_rows, strict=True):
        assert float(r["test_loss"]) == pytest.approx(float(s["test_loss"]), abs=1e-7)
    # the killed SuperNode: the run completes all 6 rounds and names the short training rounds
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    with open(tmp_path / "cut" / "metrics.csv") as f:
        assert [int(r["iteration"]) for r in csv.DictReader(f)] == list(range(7))
    short = summary["rounds_with_fewer_nodes"]
    print("rounds with fewer nodes after SuperNode 2 was killed:", short)
    assert set(short) == {"3", "5"}
    assert all(v["sent"] == NODES and v["models"] == NODES - 1 for v in short.values())
    assert summary["training_messages"] == {"1": NODES, "3": NODES, "5": NODES}
