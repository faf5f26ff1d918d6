"""Every Flower strategy the docs name, in the shipped apps, under UpcycledFL and alone; node sampling from the seed.

The apps run in this process (:mod:`fixtures_flower`: the ServerApp and ClientApp called as Flower calls them), on a
5-device synthetic set, so each run takes about two seconds.
"""

import json

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")

from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fixtures_flower import run_apps_in_process  # noqa: E402
from upfl import config as cfgmod  # noqa: E402
from upfl.data import generate_synthetic  # noqa: E402
from upfl.engine import simulation  # noqa: E402
from upfl.flower import FLOWER_STRATEGIES, run_config_to_upfl  # noqa: E402

NUM_DEVICES = 5
ROUNDS = 6
SEEDS = (0, 1, 2, 3)

ENGINE_TWIN = {
    "FedAvg": ("fedavg", {}),
    "FedProx": ("fedprox", {}),
    "FedAvgM": ("fedavgm", {"algorithm.server_momentum": 0.5, "algorithm.nesterov": False, "algorithm.server_lr": 1.0}),
    "FedAdam": ("fedadam", {"algorithm.server_lr": 0.03}),
    "FedYogi": ("fedyogi", {"algorithm.server_lr": 0.03}),
}
"""The engine's algorithm of the same name and its settings matching the strategy's arguments below (the
strategies without one: FedAdagrad, FedMedian, FedTrimmedAvg)."""

STRATEGY_ARGS = {
    "FedAvg": {},
    "FedProx": {},
    "FedAvgM": {"server_momentum": 0.5, "server_learning_rate": 1.0},
    "FedAdam": {"eta": 0.03},
    "FedYogi": {"eta": 0.03},
    "FedAdagrad": {"eta": 0.03},
    "FedMedian": {},
    "FedTrimmedAvg": {},
}

EXACT_TWINS = {("FedAvg", False), ("FedAvg", True), ("FedProx", False), ("FedProx", True), ("FedAvgM", False)}
"""Where Flower's strategy computes the engine's numbers (docs/flower.md, "Where Flower's version of a base
differs from the engine's"): the global model after every round equals ``upfl run``'s."""


@pytest.fixture
def task_identity(monkeypatch):
    """Flower stamps messages with the running task's identity; the in-process grid runs outside any task."""
    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("strategies")
    return str(generate_synthetic("synthetic_1_1", root / "s11", data_seed=7, num_devices=NUM_DEVICES))


def run_config_of(name, upcycled, data, seed=0):
    fedprox = name == "FedProx"
    algorithm = ("upcycled" if fedprox else "upcycled_fedavg") if upcycled else ("fedprox" if fedprox else "fedavg")
    return {
        "num-server-rounds": ROUNDS,
        "data-path": data,
        "algorithm": algorithm,
        **({"mu": 0.5} if fedprox else {}),
        **({"lam": 0.5} if upcycled and fedprox else {"step": 0.5} if upcycled else {}),
        "fraction-train": 1.0,
        "straggler": 0.0,
        "local-epochs": 1,
        "batch-size": 16,
        "lr": 0.02,
        "seed": seed,
        "strategy": name,
        "strategy-args": json.dumps(STRATEGY_ARGS[name]),
    }


def engine_run(run_config, engine_algorithm, extra, out):
    """``upfl run`` of the run config with the engine's algorithm ``engine_algorithm``: (model of every iteration,
    final test accuracy)."""
    doc = cfgmod.to_dict(run_config_to_upfl({k: v for k, v in run_config.items() if not k.startswith("strategy")}))
    cfgmod.set_key(doc, "algorithm.name", engine_algorithm)
    for key, value in extra.items():
        cfgmod.set_key(doc, key, value)
    seen = []
    evaluate = simulation.Simulation.evaluate

    def recording(self, w):
        seen.append(torch.as_tensor(w).detach().cpu().clone())
        return evaluate(self, w)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(simulation.Simulation, "evaluate", recording)
        simulation.run(cfgmod.validate(cfgmod.from_dict(doc)), out, log=lambda *_: None)
    import pandas as pd

    return seen, float(pd.read_csv(out / "metrics.csv")["test_acc"].iloc[-1])


def even_round_residuals(models, c):
    """max |w^t - (w^{t-1} + c (w^{t-1} - w^{t-2}))| of every even round t (Eq. 5), in the strategy's own dtype."""
    return [
        float((models[t] - (models[t - 1] + c * (models[t - 1] - models[t - 2]))).abs().max())
        for t in range(2, ROUNDS + 1, 2)
    ]


MATRIX: dict[tuple[str, bool], dict] = {}


@pytest.mark.parametrize("upcycled", [True, False], ids=["upcycled", "alone"])
@pytest.mark.parametrize("name", FLOWER_STRATEGIES)
def test_every_strategy_in_the_shipped_apps(name, upcycled, data, tmp_path, task_identity):
    """Messages per round (training and federated evaluation): [2N, 0, 2N, 0, ...] upcycled, 2N every round alone;
    even rounds Eq. (5) to 1e-7 in the strategy's dtype; the model after every round ``upfl run``'s where the engine
    computes the same numbers, else the final accuracy within the engine's spread over seeds."""
    run_config = run_config_of(name, upcycled, data)
    models, rows, _ = run_apps_in_process(run_config, tmp_path / "flower", NUM_DEVICES)
    assert sorted(models) == list(range(ROUNDS + 1))
    assert all(torch.isfinite(w).all() for w in models.values())
    messages = [int(r["messages"]) for r in rows]
    want = [0] + ([2 * NUM_DEVICES, 0] * (ROUNDS // 2) if upcycled else [2 * NUM_DEVICES] * ROUNDS)
    assert messages == want, messages
    assert [r["kind"] for r in rows] == ["init"] + (["train", "upcycle"] * (ROUNDS // 2) if upcycled else ["train"] * 6)
    residual = max(even_round_residuals(models, 0.5)) if upcycled else None  # c = 0.5: step, or mu/(mu+lam)
    if upcycled:
        assert residual <= 1e-7, residual
    accuracy = float(rows[-1]["test_acc"])
    entry = {"messages": messages[1:], "residual": residual, "dtype": str(models[ROUNDS].dtype), "acc": accuracy}
    if name in ENGINE_TWIN:
        algorithm, extra = ENGINE_TWIN[name]
        engine_algorithm = (
            ("upcycled" if algorithm == "fedprox" else f"upcycled_{algorithm}") if upcycled else algorithm
        )
        accuracies = []
        for seed in SEEDS:
            engine_models, acc = engine_run(
                run_config_of(name, upcycled, data, seed), engine_algorithm, extra, tmp_path / f"engine{seed}"
            )
            accuracies.append(acc)
            if seed == run_config["seed"] and (name, upcycled) in EXACT_TWINS:
                diffs = [float((models[t].float() - engine_models[t]).abs().max()) for t in range(ROUNDS + 1)]
                entry["model_vs_engine"] = max(diffs)
                assert max(diffs) <= 1e-5, diffs
        spread = max(accuracies) - min(accuracies)
        entry.update({"engine": engine_algorithm, "engine_acc": accuracies, "spread": spread})
        assert min(accuracies) - spread - 1e-9 <= accuracy <= max(accuracies) + spread + 1e-9, (accuracy, accuracies)
    MATRIX[(name, upcycled)] = entry
    print(f"{name} {'upcycled' if upcycled else 'alone'}: {json.dumps(entry)}")
    assert np.isfinite(accuracy)


def upfl_run_models(run_config, out):
    """``upfl run`` of the same config: the global model of every iteration (``evaluation.every: 1``)."""
    seen = []
    evaluate = simulation.Simulation.evaluate

    def recording(self, w):
        seen.append(torch.as_tensor(w).detach().cpu().clone())
        return evaluate(self, w)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(simulation.Simulation, "evaluate", recording)
        simulation.run(cfgmod.validate(run_config_to_upfl(run_config)), out, log=lambda *_: None)
    return seen


@pytest.fixture(scope="module")
def ten_devices(tmp_path_factory):
    root = tmp_path_factory.mktemp("sampling")
    return str(generate_synthetic("synthetic_1_1", root / "s11", data_seed=3, num_devices=10))


@pytest.mark.parametrize("algorithm", ["upcycled", "fedavg"])
def test_fraction_train_samples_upfl_runs_devices(algorithm, ten_devices, tmp_path, task_identity):
    """fraction-train 0.3 of 10 nodes: each training round trains the 3 devices ``upfl run`` draws from the stream
    keyed (seed, round) (:func:`upfl.draws.rounds.sample_clients`), so the global model equals ``upfl run``'s after
    every round to 1e-7; node ids unrelated to the partition ids."""
    from upfl.draws.rounds import sample_clients, training_rounds_before

    rounds = 6
    run_config = {
        "num-server-rounds": rounds,
        "data-path": ten_devices,
        "algorithm": algorithm,
        **({"mu": 0.5, "lam": 0.5} if algorithm == "upcycled" else {}),
        "fraction-train": 0.3,
        "straggler": 0.3,
        "local-epochs": 2,
        "batch-size": 16,
        "seed": 11,
        "fraction-evaluate": 0.0,
    }
    models, rows, grid = run_apps_in_process(run_config, tmp_path / "flower", 10)
    engine = upfl_run_models(run_config, tmp_path / "upfl")
    diffs = [float((models[t] - engine[t]).abs().max()) for t in range(rounds + 1)]
    print(f"{algorithm}, fraction-train 0.3: max |flower - upfl run| per round {diffs}")
    assert max(diffs) <= 1e-7, diffs
    node_of = dict(enumerate(grid.node_ids))
    trained = [node for kind, node in grid.received if kind == "train"]
    expected = []
    for t in range(1, rounds + 1):
        if algorithm == "upcycled" and t % 2 == 0:
            continue
        expected += sorted(node_of[i] for i in sample_clients(11, training_rounds_before(algorithm, t), 10, 0.3))
    per_round = [int(r["messages"]) for r in rows[1:]]
    assert per_round == ([3, 0] * 3 if algorithm == "upcycled" else [3] * rounds)
    assert sorted(trained) == sorted(expected) and len(trained) == len(expected)


def test_a_node_that_leaves_leaves_a_run_that_completes_and_names_its_short_rounds(data, tmp_path, task_identity):
    """Node of device 2 gone from round 3 on: the run completes all rounds, summary.json lists rounds 3 and 5 (its
    training messages got no reply) with the models received, and device 2's releases stop at one. The privacy
    block lists every value the server received, per message type, with what the epsilons cover."""
    run_config = {
        **run_config_of("FedAvg", True, data),
        "privacy-mechanism": "output",
        "privacy-tau": 1.0,
        "privacy-sigma": 0.5,
    }
    models, rows, _ = run_apps_in_process(run_config, tmp_path / "flower", NUM_DEVICES, leaves={2: 3})
    assert [int(r["iteration"]) for r in rows] == list(range(ROUNDS + 1))
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    short = {"sent": 5, "models": 4, "errors": []}
    assert summary["rounds_with_fewer_nodes"] == {"3": short, "5": short}
    privacy = summary["privacy"]
    assert [d["releases"] for d in privacy["devices"]] == [3, 3, 1, 3, 3]
    received = {(r["message"], r["value"]): r for r in privacy["server_receives"]}
    print("server receives:", [(m, v, r["replies"], r["status"]) for (m, v), r in received.items()])
    assert received["train", "arrays"]["status"] == "guarantee" and received["train", "arrays"]["replies"] == 13
    assert received["query", "num-examples"]["replies"] == NUM_DEVICES
    for value in ("train-loss-sum", "train-correct", "test-loss-sum", "test-correct"):
        assert received["evaluate", value]["status"] == "outside"
        assert value in privacy["released_outside_the_guarantee"]
    assert received["evaluate", "train-loss-sum"]["replies"] == 5 + 4 + 4
    assert all(r["what"] != "not described here" for r in privacy["server_receives"])
