"""upfl.flower: the UpcycledFL strategy on a grid double, and Flower's simulation engine (Ray) against ``upfl run``.

Needs the ``flower`` extra (``pip install -e ".[flower]"``; ``.ci/run`` installs it); without flwr the
module is skipped as a whole. The engine tests start Ray (about 40 s of start-up on two busy cores each).
"""

import csv

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")

from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp.strategy import FedAvg, FedProx  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from upfl import config as cfgmod  # noqa: E402
from upfl.config import ConfigError  # noqa: E402
from upfl.data import generate_synthetic, load_leaf  # noqa: E402
from upfl.engine import simulation  # noqa: E402
from upfl.flower import CountingGrid, UpcycledFL, make_client_app, make_server_app, run_config_to_upfl  # noqa: E402
from upfl.flower.apps import RUN_CONFIG_KEYS  # noqa: E402

NUM_DEVICES = 5


class ReplyGrid:
    """A grid double: node j (device j - 1) answers a training message with 0.5 w + j and num-examples j."""

    def __init__(self, nodes=(1, 2, 3)):
        self.nodes = list(nodes)
        self.calls = []

    def get_node_ids(self):
        return self.nodes

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        self.calls.append([(m.metadata.message_type, int(m.content["config"]["server-round"])) for m in messages])
        replies = []
        for m in messages:
            j = m.metadata.dst_node_id
            metrics = MetricRecord({"num-examples": j, "partition-id": j - 1})
            content = RecordDict({"metrics": metrics})
            if m.metadata.message_type == "train":
                w = m.content["arrays"]["params"].numpy()
                content["arrays"] = ArrayRecord({"params": Array((0.5 * w + j).astype(np.float32))})
            replies.append(Message(content, reply_to=m))
        return replies


@pytest.fixture
def task_identity(monkeypatch):
    """Flower stamps messages with the running task's identity; a grid double runs outside any task."""
    for name in ("_task_id", "_run_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def expected_fedprox_rounds(w0, rounds, c):
    """The hand computation for ReplyGrid: training averages 0.5 w + j with weights j = 1, 2, 3; even rounds Eq. (5)."""
    bias = (1 * 1 + 2 * 2 + 3 * 3) / 6
    ws, prev = [w0], w0
    for t in range(1, rounds + 1):
        w = ws[-1]
        if t % 2:
            prev, new = w, 0.5 * w + bias
        else:
            new = w + c * (w - prev)
        ws.append(new)
    return ws


def test_upcycled_strategy_sends_nothing_in_even_rounds_and_extrapolates(task_identity):
    grid = ReplyGrid()
    counting = CountingGrid(grid)
    strategy = UpcycledFL(FedProx(proximal_mu=1.0, fraction_evaluate=1.0, min_evaluate_nodes=1), lam=0.43)
    seen = {}
    w0 = np.array([0.25, -1.0, 2.0], dtype=np.float32)
    strategy.start(
        counting,
        ArrayRecord({"params": Array(w0)}),
        num_rounds=6,
        evaluate_fn=lambda t, arrays: seen.__setitem__(t, arrays["params"].numpy().copy()),
    )
    want = expected_fedprox_rounds(w0.astype(np.float64), 6, 1.0 / 1.43)
    for t in range(7):
        np.testing.assert_allclose(seen[t], want[t], rtol=0, atol=1e-5)
    # Six rounds: two calls each (train, evaluate); the even rounds' calls carry no message at all.
    sent = [len(c) for c in grid.calls]
    assert sent == [3, 3, 0, 0, 3, 3, 0, 0, 3, 3, 0, 0]
    assert {t for call in grid.calls for _, t in call} == {1, 3, 5}
    assert dict(counting.sent) == {1: 6, 3: 6, 5: 6}
    assert [strategy.messages_sent[t] for t in range(1, 7)] == [6, 0, 6, 0, 6, 0]
    # FedProx's proximal-mu and the training-round key reach the clients of training rounds.
    assert strategy.releases(6) == 3


def test_upcycled_strategy_on_fedavg_with_a_step_and_schedule(task_identity):
    strategy = UpcycledFL(FedAvg(fraction_evaluate=0.0), step=0.7, schedule="inv_sqrt")
    seen = {}
    w0 = np.zeros(2, dtype=np.float32)
    strategy.start(
        ReplyGrid(),
        ArrayRecord({"params": Array(w0)}),
        num_rounds=4,
        evaluate_fn=lambda t, a: seen.__setitem__(t, a["params"].numpy().copy()),
    )
    w1 = np.full(2, 14 / 6)
    w2 = w1 + 0.7 * (w1 - 0)
    w3 = 0.5 * w2 + 14 / 6
    w4 = w3 + 0.7 / np.sqrt(2) * (w3 - w2)
    np.testing.assert_allclose(seen[4], w4, rtol=0, atol=1e-5)
    assert strategy.coefficient(4) == pytest.approx(0.7 / np.sqrt(2))


def test_upcycled_strategy_rejects_bad_coefficients():
    with pytest.raises(ValueError, match="exactly one of lam"):
        UpcycledFL(FedAvg(), lam=0.5, step=0.5)
    with pytest.raises(ValueError, match="with mu = 0 give step"):
        UpcycledFL(FedAvg(), lam=0.0)
    with pytest.raises(ValueError, match="unknown schedule"):
        UpcycledFL(FedAvg(), step=0.5, schedule="sometimes")


def test_run_config_maps_to_a_validated_upfl_config(tmp_path):
    cfg = run_config_to_upfl(
        {"data-path": str(tmp_path), "algorithm": "upcycled", "mu": 1.0, "lam": 0.43, "local-epochs": 3, "out-dir": "x"}
    )
    assert (cfg.algorithm.mu, cfg.algorithm.lam, cfg.solver.epochs, cfg.checkpoint.every) == (1.0, 0.43, 3, 0)
    with pytest.raises(ConfigError, match="'local_epochs' is unknown"):
        run_config_to_upfl({"data-path": "d", "local_epochs": 3})
    with pytest.raises(ConfigError, match="run config 'fraction-train'"):
        run_config_to_upfl({"data-path": "d", "algorithm": "fedavg", "fraction-train": 1.5})
    for dotted in RUN_CONFIG_KEYS.values():  # every Flower key names a real RunConfig key
        cfgmod.get_key(cfgmod.RunConfig(), dotted)


@pytest.fixture(scope="module")
def flower_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("flower")
    return str(generate_synthetic("synthetic_1_1", root / "s11", data_seed=5, num_devices=NUM_DEVICES))


def upfl_run_models(run_config, tmp_path, monkeypatch):
    """``upfl run`` (:func:`upfl.engine.simulation.run`) of the same config; the global model of every iteration, read
    where run evaluates it (every iteration, ``evaluation.every: 1``)."""
    seen = []
    evaluate = simulation.Simulation.evaluate

    def recording(self, w):
        seen.append(torch.tensor(w) if isinstance(w, np.ndarray) else w.detach().cpu().clone())
        return evaluate(self, w)

    cfg = run_config_to_upfl(run_config)
    with monkeypatch.context() as m:
        m.setattr(simulation.Simulation, "evaluate", recording)
        simulation.run(cfgmod.validate(cfg), tmp_path / "upfl", log=lambda *_: None)
    return seen


class ServerCutOff:
    """Makes the clients' training files impossible to open in this process (where the ServerApp runs; the
    ClientApps run in Ray worker processes): ``open``, ``io.open`` and ``os.open`` of any path under the data set's
    ``train/`` raise PermissionError, and every attempt is recorded."""

    def __init__(self, data_path):
        import os
        from pathlib import Path

        self.train = Path(os.path.realpath(Path(data_path) / "train"))
        self.attempts = []

    def _guard(self, real):
        import os
        from pathlib import Path

        def guarded(file, *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)):
                path = Path(os.path.realpath(os.fsdecode(file)))
                if path == self.train or self.train in path.parents:
                    self.attempts.append(str(path))
                    raise PermissionError(f"{path}: the server may not read the clients' training files")
            return real(file, *args, **kwargs)

        return guarded

    def install(self, monkeypatch):
        import builtins
        import io
        import os

        for module, name in ((builtins, "open"), (io, "open"), (os, "open")):
            monkeypatch.setattr(module, name, self._guard(getattr(module, name)))
        return self


def server_folder(data_path, root):
    """What the server owns: the data set's meta.json and its test split, no train/ at all."""
    import shutil
    from pathlib import Path

    server = Path(root) / "server-data"
    if not server.exists():
        server.mkdir(parents=True)
        shutil.copy(Path(data_path) / "meta.json", server / "meta.json")
        shutil.copytree(Path(data_path) / "test", server / "test")
    return str(server)


def flower_run(run_config, tmp_path, client_app=None, monkeypatch=None):
    """Flower's simulation engine (Ray) on ``run_config``, with the server cut off from the clients' training files:
    its ``data-path`` holds only meta.json and test/, and opening anything under the clients' train/ fails in its
    process. Returns (global model per round, metrics.csv rows)."""
    from flwr.simulation import run_simulation

    run_config = {**run_config, "out-dir": str(tmp_path / "flower")}
    server_config = {**run_config, "data-path": server_folder(run_config["data-path"], tmp_path)}
    models = {}
    with pytest.MonkeyPatch.context() as m:
        cut = ServerCutOff(run_config["data-path"]).install(m)
        run_simulation(
            server_app=make_server_app(server_config, on_round=lambda t, w: models.__setitem__(t, w.clone())),
            client_app=client_app or make_client_app(run_config),
            num_supernodes=NUM_DEVICES,
            backend_config={
                "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                "init_args": {"num_cpus": 2, "num_gpus": 0},
            },
        )
    assert cut.attempts == [], cut.attempts
    with open(tmp_path / "flower" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return models, rows


def assert_same_rounds(flower_models, upfl_models, rounds):
    assert sorted(flower_models) == list(range(rounds + 1))
    assert len(upfl_models) == rounds + 1
    diffs = [float((flower_models[t] - upfl_models[t]).abs().max()) for t in range(rounds + 1)]
    print("max |flower - upfl run| per round:", [f"{d:.2e}" for d in diffs])
    assert max(diffs) <= 1e-5, diffs
    return max(diffs)


def test_flower_simulation_equals_upfl_run_and_even_rounds_send_nothing(flower_data, tmp_path, monkeypatch):
    """FedProx-based Upcycled-FL, every node sampled, no stragglers, full-batch steps: the same global model
    after every round as ``upfl run``; even rounds send zero messages."""
    rounds = 6
    run_config = {
        "num-server-rounds": rounds,
        "data-path": flower_data,
        "algorithm": "upcycled",
        "mu": 1.0,
        "lam": 0.43,
        "fraction-train": 1.0,
        "straggler": 0.0,
        "local-epochs": 3,
        "batch-size": 10_000,
        "lr": 0.05,
        "seed": 2,
    }
    flower_models, rows = flower_run(run_config, tmp_path)
    assert_same_rounds(flower_models, upfl_run_models(run_config, tmp_path, monkeypatch), rounds)
    messages = {int(r["iteration"]): int(r["messages"]) for r in rows}
    # odd rounds: a training and an evaluation message per node (federated evaluation); even rounds: none
    assert messages == {0: 0, 1: 2 * NUM_DEVICES, 2: 0, 3: 2 * NUM_DEVICES, 4: 0, 5: 2 * NUM_DEVICES, 6: 0}
    assert [r["kind"] for r in rows] == ["init"] + ["train", "upcycle"] * 3
    assert not torch.equal(flower_models[2], flower_models[1])
    assert_same_metrics(rows, tmp_path)


def assert_same_metrics(rows, tmp_path):
    """The server's test metrics (its held-out set) every round, and the clients' federated training metrics after
    every training round, equal ``upfl run``'s pooled metrics; even rounds and iteration 0 have no training
    metrics (no message was sent)."""
    import pandas as pd

    upfl = pd.read_csv(tmp_path / "upfl" / "metrics.csv").set_index("iteration")
    for r in rows:
        t = int(r["iteration"])
        for key in ("test_loss", "test_acc"):
            assert float(r[key]) == pytest.approx(float(upfl.loc[t, key]), abs=1e-5), (t, key)
        for key in ("train_loss", "train_acc"):
            if r["kind"] == "train":
                assert float(r[key]) == pytest.approx(float(upfl.loc[t, key]), abs=1e-5), (t, key)
            else:
                assert r[key] == "", (t, key, r[key])
    print(
        "train_acc per round, Flower (federated) and upfl run:",
        [(r["iteration"], r["train_acc"], round(float(upfl.loc[int(r["iteration"]), "train_acc"]), 6)) for r in rows],
    )


def test_flower_private_stragglers_minibatches_equal_upfl_run(flower_data, tmp_path, monkeypatch):
    """Output perturbation on the client (clip, Gaussian noise), stragglers' partial work and mini-batches, FedAvg
    base with a given step: with the reproducible-noise switch (no privacy against the server) Flower reproduces
    ``upfl run`` bit for bit up to float rounding, since every draw is keyed (seed, round, device)."""
    rounds = 4
    run_config = {
        "num-server-rounds": rounds,
        "data-path": flower_data,
        "algorithm": "upcycled",
        "step": 0.6,
        "fraction-train": 1.0,
        "straggler": 0.5,
        "local-epochs": 3,
        "batch-size": 8,
        "seed": 1,
        "privacy-mechanism": "output",
        "privacy-tau": 1.0,
        "privacy-sigma": 0.05,
        "privacy-noise-source": "seed-keyed-server-can-remove",
    }
    flower_models, rows = flower_run(run_config, tmp_path)
    assert_same_rounds(flower_models, upfl_run_models(run_config, tmp_path, monkeypatch), rounds)
    assert [int(r["messages"]) for r in rows] == [0, 2 * NUM_DEVICES, 0, 2 * NUM_DEVICES, 0]
    assert_same_metrics(rows, tmp_path)
    assert {r["train_metrics"] for r in rows} == {"outside_privacy_guarantee"}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.workflow
def test_example_app_runs_with_flwr_run(tmp_path):
    """examples/flower as its README runs it (`flwr run . --stream ...`), on a 6-device set and 4 rounds.

    `flwr run` starts a local SuperLink in the background unless one answers on its port, and gives it 15 s,
    too little on a busy two-core machine; the test starts that SuperLink itself (the command line Flower would
    use), so that it owns the process and stops it afterwards.
    """
    import os
    import shutil
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    app = tmp_path / "app"
    shutil.copytree(root / "examples" / "flower", app, ignore=shutil.ignore_patterns("data", "runs"))
    data = generate_synthetic("synthetic_1_1", tmp_path / "data", data_seed=0, num_devices=6)
    port, control = free_port(), free_port()
    bindir = Path(sys.executable).parent
    env = {
        **os.environ,
        "FLWR_HOME": str(tmp_path / "flwr"),
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(port),
        "FLWR_LOCAL_CONTROL_API_PORT": str(control),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    out = tmp_path / "runs"
    superlink = subprocess.Popen(
        [
            str(bindir / "flower-superlink"),
            "--insecure",
            "--simulation",
            "--isolation",
            "subprocess",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert superlink.poll() is None, "flower-superlink exited"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "flower-superlink did not answer within 180 s"
                time.sleep(0.5)
        cmd = [
            "flwr",
            "run",
            ".",
            "--stream",
            "--federation-config",
            "num-supernodes=6",
            "--run-config",
            f"num-server-rounds=4 local-epochs=2 data-path='{data}' out-dir='{out}'",
        ]
        proc = subprocess.run(cmd, cwd=app, env=env, capture_output=True, text=True, timeout=900)
    finally:
        superlink.terminate()
        superlink.wait(timeout=60)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["messages"]) for r in rows] == [0, 1, 0, 1, 0]  # max(floor(0.3 * 6), 1) = 1 node per training round
    assert [r["kind"] for r in rows] == ["init", "train", "upcycle", "train", "upcycle"]


# ---------------------------------------------------------------------------------------------
# Privacy where it is deployed: noise the server cannot regenerate, releases counted from the replies.


def client_release(app, run_config, w, device_index, training_round):
    """The model node ``device_index`` replies to a training message of ``training_round`` (ClientApp called as
    Flower calls it)."""
    from flwr.app import ConfigRecord, Context

    content = RecordDict(
        {
            "arrays": ArrayRecord({"params": Array(w.numpy())}),
            "config": ConfigRecord({"server-round": 2 * training_round - 1, "training-round": training_round}),
        }
    )
    msg = Message(content, dst_node_id=device_index + 1, message_type="train")
    context = Context(
        run_id=1,
        node_id=device_index + 1,
        node_config={"partition-id": device_index},
        state=RecordDict(),
        run_config=dict(run_config),
    )
    reply = app(msg, context)
    assert int(reply.content["metrics"]["partition-id"]) == device_index
    return torch.from_numpy(reply.content["arrays"]["params"].numpy().copy())


def regeneration_attack_residuals(run_config, device_index=1, training_round=1):
    """The server's attack: regenerate the client's noise from the run seed (upfl run's keyed stream), subtract
    it from the released model; the L2 distance to the client's clipped model is what the noise still hides."""
    from upfl.draws.streams import generator
    from upfl.flower.apps import simulation_for
    from upfl.privacy.mechanisms import clip_to_norm, standard_normal_rows

    sim = simulation_for(run_config)
    w = sim.model.init_params(generator(sim.cfg.seed, "init"))
    plain = client_release(
        make_client_app({**run_config, "privacy-mechanism": "none"}), {}, w, device_index, training_round
    )
    clipped = clip_to_norm(plain.view(1, -1), run_config["privacy-tau"])[0]
    sigma, seed = run_config["privacy-sigma"], run_config["seed"]
    regenerated = sigma * standard_normal_rows(w.shape, [generator(seed, "noise", training_round, device_index)])[0]
    app = make_client_app(run_config)
    releases = [client_release(app, {}, w, device_index, training_round) for _ in range(2)]
    return [float((r - regenerated - clipped).norm()) for r in releases], releases, sim.model.num_params


def test_default_noise_resists_the_servers_regeneration_attack(flower_data, task_identity):
    sigma = 0.05
    run_config = {
        "num-server-rounds": 2,
        "data-path": flower_data,
        "algorithm": "upcycled",
        "step": 0.6,
        "local-epochs": 2,
        "batch-size": 8,
        "seed": 4,
        "privacy-mechanism": "output",
        "privacy-tau": 1.0,
        "privacy-sigma": sigma,
    }
    residuals, releases, params = regeneration_attack_residuals(run_config)
    # Two independent N(0, sigma^2 I) draws apart: norm about sigma sqrt(2 P), nothing like float rounding.
    expected = sigma * np.sqrt(2 * params)
    print(f"regeneration attack residual, OS-entropy noise: {residuals} (sigma sqrt(2P) = {expected:.4g})")
    assert all(0.5 * expected < r < 1.5 * expected for r in residuals), residuals
    assert not torch.equal(releases[0], releases[1])


def test_seed_keyed_noise_is_reproducible_and_removable_by_the_server(flower_data, task_identity):
    run_config = {
        "num-server-rounds": 2,
        "data-path": flower_data,
        "algorithm": "upcycled",
        "step": 0.6,
        "local-epochs": 2,
        "batch-size": 8,
        "seed": 4,
        "privacy-mechanism": "output",
        "privacy-tau": 1.0,
        "privacy-sigma": 0.05,
        "privacy-noise-source": "seed-keyed-server-can-remove",
    }
    residuals, releases, _ = regeneration_attack_residuals(run_config)
    print(f"regeneration attack residual, seed-keyed noise: {residuals}")
    assert max(residuals) < 1e-5, residuals
    assert torch.equal(releases[0], releases[1])


def test_unknown_noise_source_and_unsupported_algorithms_are_refused_by_name(tmp_path):
    from upfl.flower.apps import FLOWER_ALGORITHMS
    from upfl.names import algorithm_names

    with pytest.raises(ConfigError, match="'privacy-noise-source'.*'seeded'"):
        run_config_to_upfl({"data-path": str(tmp_path), "algorithm": "fedavg", "privacy-noise-source": "seeded"})
    refused = [name for name in algorithm_names() if name not in FLOWER_ALGORITHMS]
    assert "upcycled_fedavgm" in refused and "fedavgm" in refused
    for name in refused:
        with pytest.raises(ConfigError, match=f"'algorithm': '{name}' does not run in Flower"):
            extra = {"step": 0.5} if name.startswith("upcycled") else {}
            run_config_to_upfl({"data-path": str(tmp_path), "algorithm": name, **extra})


@pytest.mark.parametrize(
    "name, extra, base", [("upcycled", {"mu": 1.0, "lam": 0.43}, FedProx), ("upcycled_fedavg", {"step": 0.5}, FedAvg)]
)
def test_every_upcycled_base_of_flower_sends_nothing_in_even_rounds(name, extra, base, tmp_path, task_identity):
    from upfl.flower import strategy_for

    cfg = run_config_to_upfl({"data-path": str(tmp_path), "algorithm": name, "fraction-train": 1.0, **extra})
    strategy = strategy_for(cfg, 3)
    assert isinstance(strategy, UpcycledFL) and type(strategy.base) is base
    counting = CountingGrid(ReplyGrid())
    strategy.start(counting, ArrayRecord({"params": Array(np.zeros(2, dtype=np.float32))}), num_rounds=6)
    per_round = [counting.sent[t] for t in range(1, 7)]
    print(f"{name}: messages per round {per_round}")
    assert per_round == [3, 0, 3, 0, 3, 0]
    assert dict(counting.released) == {0: 3, 1: 3, 2: 3}


def logging_client_app(run_config, log_path):
    """The ClientApp of ``run_config``, writing one line per training message it answers: its device and whether
    the reply carried a model (a release) or a straggler's error."""
    from flwr.clientapp import ClientApp

    inner = make_client_app(run_config)
    app = ClientApp()

    @app.train()
    def train(msg, context):
        reply = inner(msg, context)
        released = reply.has_content() and "arrays" in reply.content
        with open(log_path, "a") as f:
            f.write(f"{int(context.node_config['partition-id'])},{int(released)}\n")
        return reply

    @app.query()
    def query(msg, context):
        return inner(msg, context)

    @app.evaluate()
    def evaluate(msg, context):
        return inner(msg, context)

    return app


def test_flower_release_counts_are_the_replies_received(flower_data, tmp_path):
    """fraction-train 0.5 (Flower samples 2 of 5 nodes), stragglers dropped, default (OS-entropy) noise: each
    device's M_i in the privacy block is the number of training messages it answered with a model, as the clients
    themselves logged them; the total is the training messages sent less the stragglers' error replies."""
    import json

    rounds = 8
    run_config = {
        "num-server-rounds": rounds,
        "data-path": flower_data,
        "algorithm": "upcycled_fedavg",
        "step": 0.5,
        "fraction-train": 0.5,
        "straggler": 0.3,
        "straggler-policy": "drop",
        "local-epochs": 2,
        "batch-size": 8,
        "seed": 3,
        "privacy-mechanism": "output",
        "privacy-tau": 1.0,
        "privacy-sigma": 0.5,
        "privacy-release-train-metrics": False,
        "strategy": "FedAvgM",
        "strategy-args": '{"server_momentum": 0.5}',
    }
    log_path = tmp_path / "client-log.csv"
    _, rows = flower_run(run_config, tmp_path, logging_client_app(run_config, log_path))
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    messages = [int(r["messages"]) for r in rows]
    assert messages == [0, 2, 0, 2, 0, 2, 0, 2, 0]  # training rounds only: no evaluation without train metrics
    answered = [tuple(map(int, line.split(","))) for line in log_path.read_text().split()]
    assert len(answered) == sum(summary["training_messages"].values()) == 8
    logged = [sum(released for device, released in answered if device == i) for i in range(NUM_DEVICES)]
    privacy = summary["privacy"]
    releases = [d["releases"] for d in privacy["devices"]]
    errors = sum(summary["straggler_errors"].values())
    print(
        "messages per round",
        messages,
        "releases",
        releases,
        "logged by the clients",
        logged,
        "straggler errors",
        errors,
    )
    assert releases == logged
    assert all(int(t) % 2 == 1 for t in summary["straggler_errors"])  # errors of training (odd) rounds only
    assert sum(releases) == 8 - errors == sum(released for _, released in answered)
    assert privacy["releases_source"].startswith("observed")
    assert privacy["noise_source"].startswith("os-entropy")
    assert not any("share their noise" in note for note in privacy["notes"])  # OS entropy: no run shares it
    assert {r["train_metrics"] for r in rows} == {"not_computed"}
    assert all(r["train_loss"] == r["train_acc"] == "" for r in rows)
    assert summary["algorithm"] == privacy["algorithm"] == summary["flower_strategy"]["name"] == "UpcycledFL(FedAvgM)"
    assert summary["flower_strategy"]["args"] == {"server_momentum": 0.5}
    assert [d["device"] for d in privacy["devices"]] == load_leaf(flower_data).train_users
    assert [d["n_train"] for d in privacy["devices"]] == [
        len(load_leaf(flower_data).train_y[u]) for u in load_leaf(flower_data).train_users
    ]


# ---------------------------------------------------------------------------------------------
# Upcycled-FL over any Flower strategy


WEIGHTS = np.array([1.0, 2.0, 3.0])
"""ReplyGrid: node j answers 0.5 w + j with num-examples j."""


def reference_step(name, args):
    """The strategy's own server step on ReplyGrid's replies, written out from Flower's update rules (Reddi et al.
    2021 for the FedOpt family, with Flower's bias correction for FedAdam), starting from whatever w it is given:
    under UpcycledFL that is w^{2m}, the upcycled model the clients trained from. Returns step(t, w) -> w'."""
    state = {"m": None, "v": None, "velocity": None}
    replies = lambda w: np.stack([0.5 * w + j for j in (1.0, 2.0, 3.0)])  # noqa: E731
    average = lambda w: WEIGHTS @ replies(w) / WEIGHTS.sum()  # noqa: E731

    def opt(t, w, second):
        beta1, beta2 = args.get("beta_1", 0.9), args.get("beta_2", 0.99)
        if name == "FedAdagrad":
            beta1 = 0.0
        delta = average(w) - w
        state["m"] = (1 - beta1) * delta if state["m"] is None else beta1 * state["m"] + (1 - beta1) * delta
        v = np.zeros_like(w) if state["v"] is None else state["v"]
        state["v"] = second(v, delta, beta2)
        return state["m"], state["v"], beta1, beta2

    def step(t, w):
        if name in ("FedAvg", "FedProx"):
            return average(w)
        if name in ("FedMedian", "FedTrimmedAvg"):
            return np.median(replies(w), axis=0) if name == "FedMedian" else replies(w).mean(0)
        if name == "FedAvgM":
            g = w - average(w)
            beta = args.get("server_momentum", 0.0)
            state["velocity"] = g if state["velocity"] is None else beta * state["velocity"] + g
            return w - args.get("server_learning_rate", 1.0) * state["velocity"]
        tau = args.get("tau", 1e-3)
        if name == "FedAdam":
            m, v, b1, b2 = opt(t, w, lambda v, d, b2: b2 * v + (1 - b2) * d**2)
            eta = args.get("eta", 0.1) * np.sqrt(1 - b2 ** (t + 1.0)) / (1 - b1 ** (t + 1.0))
            return w + eta * m / (np.sqrt(v) + tau)
        if name == "FedYogi":
            m, v, _, _ = opt(t, w, lambda v, d, b2: v - (1 - b2) * d**2 * np.sign(v - d**2))
            return w + args.get("eta", 0.01) * m / (np.sqrt(v) + tau)
        if name == "FedAdagrad":
            m, v, _, _ = opt(t, w, lambda v, d, b2: v + d**2)
            return w + args.get("eta", 0.1) * m / (np.sqrt(v) + tau)
        raise AssertionError(name)

    return step


STRATEGY_ARGS = {
    "FedAvg": {},
    "FedProx": {},
    "FedAvgM": {"server_momentum": 0.7, "server_learning_rate": 0.8},
    "FedAdam": {"eta": 0.05},
    "FedYogi": {"eta": 0.05},
    "FedAdagrad": {"eta": 0.05},
    "FedMedian": {},
    "FedTrimmedAvg": {},
}


@pytest.mark.parametrize("name", sorted(STRATEGY_ARGS))
def test_upcycled_over_every_flower_strategy(name, tmp_path, task_identity):
    """Messages per round [n, 0, n, 0, ...] (training and evaluation), the even rounds exactly Eq. (5) on the
    strategy's parameters, the odd rounds the strategy's own step from the upcycled model, and the releases the
    server observed (one per node per training round)."""
    import json

    from upfl.flower import strategy_for
    from upfl.flower.apps import FLOWER_STRATEGIES, strategy_choice, strategy_record

    assert name in FLOWER_STRATEGIES
    args = STRATEGY_ARGS[name]
    run_config = {
        "data-path": str(tmp_path),
        "algorithm": "upcycled_fedavg",
        "step": 0.6,
        "schedule": "inv_sqrt",
        "fraction-train": 1.0,
        "strategy": name,
        "strategy-args": json.dumps(args),
    }
    cfg = run_config_to_upfl(run_config)
    strategy = strategy_for(cfg, 3, 1.0, *strategy_choice(run_config))
    assert isinstance(strategy, UpcycledFL) and type(strategy.base).__name__ == name
    assert strategy_record(strategy, args)["name"] == f"UpcycledFL({name})"
    rounds = 6
    counting = CountingGrid(ReplyGrid())
    seen = {}
    w0 = np.array([0.25, -1.0, 2.0], dtype=np.float32)
    strategy.start(
        counting,
        ArrayRecord({"params": Array(w0)}),
        num_rounds=rounds,
        evaluate_fn=lambda t, a: seen.__setitem__(t, a["params"].numpy().astype(np.float64)),
    )
    per_round = [counting.sent[t] for t in range(1, rounds + 1)]
    training = [counting.train_sent[t] for t in range(1, rounds + 1)]
    print(f"UpcycledFL({name}): messages per round {per_round} (training {training})")
    assert per_round == [6, 0, 6, 0, 6, 0]
    assert training == [3, 0, 3, 0, 3, 0]
    assert dict(counting.released) == {0: 3, 1: 3, 2: 3}
    step = reference_step(name, args)
    for t in range(1, rounds + 1):
        if t % 2 == 0:
            c = 0.6 / np.sqrt(t // 2)
            np.testing.assert_allclose(seen[t], seen[t - 1] + c * (seen[t - 1] - seen[t - 2]), rtol=0, atol=1e-6)
        else:
            np.testing.assert_allclose(seen[t], step(t, seen[t - 1]), rtol=0, atol=2e-5, err_msg=f"round {t}")


def test_upcycled_fedadam_epsilons_follow_the_observed_counts(tmp_path, task_identity):
    """The privacy block of a wrapped strategy counts the replies the server received: here a grid whose node 3
    answers its second training message with a straggler's error."""
    from upfl.flower import strategy_for
    from upfl.flower.apps import strategy_choice
    from upfl.privacy.accounting import output_epsilons, privacy_report

    class DroppingGrid(ReplyGrid):
        def send_and_receive(self, messages, *, timeout=None):
            replies = super().send_and_receive(messages, timeout=timeout)
            out = []
            for m, r in zip(list(messages), replies, strict=True):
                if (
                    m.metadata.dst_node_id == 3
                    and int(m.content["config"]["server-round"]) == 3
                    and m.metadata.message_type == "train"
                ):
                    from flwr.app import Error

                    r = Message(Error(code=0, reason="straggler"), reply_to=m)
                out.append(r)
            return out

    run_config = {
        "data-path": str(tmp_path),
        "algorithm": "upcycled_fedavg",
        "step": 0.5,
        "fraction-train": 1.0,
        "strategy": "FedAdam",
        "privacy-mechanism": "output",
        "privacy-tau": 1.0,
        "privacy-sigma": 0.8,
    }
    cfg = run_config_to_upfl(run_config)
    strategy = strategy_for(cfg, 3, 0.0, *strategy_choice(run_config))
    counting = CountingGrid(DroppingGrid())
    strategy.start(counting, ArrayRecord({"params": Array(np.zeros(2, dtype=np.float32))}), num_rounds=6)
    releases = [counting.released[i] for i in range(3)]
    assert releases == [3, 3, 2] and dict(counting.errors) == {3: 1}

    class Sized:
        train_users = ["a", "b", "c"]
        train_y = {"a": range(10), "b": range(20), "c": range(30)}

    class Model:
        num_params = 2

    report = privacy_report(cfg, Sized(), Model(), releases=releases)
    for device, m, n in zip(report["devices"], releases, (10, 20, 30), strict=True):
        assert device["releases"] == m
        assert device["sound"] == pytest.approx(output_epsilons(m, 0.8, 1.0, n, cfg.privacy.delta)["sound"], rel=1e-12)
    assert report["worst_device"]["sound"]["device"] in ("a", "b")


def test_strategy_keys_are_checked_by_name(tmp_path):
    with pytest.raises(ConfigError, match="'strategy': 'FedFancy' is not one of"):
        run_config_to_upfl({"data-path": str(tmp_path), "algorithm": "fedavg", "strategy": "FedFancy"})
    with pytest.raises(ConfigError, match="'strategy-args': FedAdam does not take lr_server"):
        run_config_to_upfl(
            {
                "data-path": str(tmp_path),
                "algorithm": "fedavg",
                "strategy": "FedAdam",
                "strategy-args": '{"lr_server": 1}',
            }
        )
    with pytest.raises(ConfigError, match="'strategy-args': FedAvgM does not take fraction_train"):
        run_config_to_upfl(
            {
                "data-path": str(tmp_path),
                "algorithm": "fedavg",
                "strategy": "FedAvgM",
                "strategy-args": '{"fraction_train": 0.5}',
            }
        )
    with pytest.raises(ConfigError, match="'strategy-args': not JSON"):
        run_config_to_upfl(
            {
                "data-path": str(tmp_path),
                "algorithm": "fedavg",
                "strategy": "FedAvgM",
                "strategy-args": "{server_momentum: 1}",
            }
        )
    with pytest.raises(ConfigError, match="given without 'strategy'"):
        run_config_to_upfl({"data-path": str(tmp_path), "algorithm": "fedavg", "strategy-args": '{"eta": 1}'})


def test_train_metrics_release_key_and_vanishing_sigma_are_checked_at_config_time(tmp_path):
    base = {
        "data-path": str(tmp_path),
        "algorithm": "upcycled",
        "mu": 1.0,
        "lam": 0.4,
        "privacy-mechanism": "output",
        "privacy-tau": 1.0,
    }
    cfg = run_config_to_upfl({**base, "privacy-sigma": 0.5, "privacy-release-train-metrics": False})
    assert cfg.privacy.release_train_metrics is False
    with pytest.raises(ConfigError, match="run config 'privacy-sigma'.*rounds to 0 in float32"):
        run_config_to_upfl({**base, "privacy-sigma": 1e-50})
    with pytest.raises(ConfigError, match="run config 'privacy-sigma'.*1e-12 is below the smallest sigma.*1.19209e-07"):
        run_config_to_upfl({**base, "privacy-sigma": 1e-12})


def call_client(app, run_config, message_type, device_index, content):
    """A ClientApp's reply to one message, called as Flower calls it."""
    from flwr.app import Context

    msg = Message(RecordDict(content), dst_node_id=device_index + 1, message_type=message_type)
    context = Context(
        run_id=1,
        node_id=device_index + 1,
        node_config={"partition-id": device_index},
        state=RecordDict(),
        run_config=dict(run_config),
    )
    return app(msg, context)


def test_client_replies_to_the_servers_query_and_evaluation(flower_data, task_identity):
    """The query reply: device name, |D_i| and (objective perturbation) the device's largest feature norm; the
    evaluation reply: sums on the device's own training rows only where the run releases training metrics."""
    from flwr.app import ConfigRecord

    from upfl.flower.apps import simulation_for
    from upfl.privacy.accounting import max_feature_norm

    ds = load_leaf(flower_data)
    base = {
        "num-server-rounds": 2,
        "data-path": flower_data,
        "algorithm": "upcycled",
        "mu": 0.5,
        "lam": 0.5,
        "local-epochs": 1,
    }
    objective = {**base, "privacy-mechanism": "objective", "privacy-alpha": 50.0}
    reply = call_client(make_client_app(objective), {}, "query", 2, {"config": ConfigRecord({"server-round": 0})})
    user = ds.train_users[2]
    metrics = reply.content["metrics"]
    assert reply.content["device"]["name"] == user and int(metrics["num-examples"]) == len(ds.train_y[user])
    sim = simulation_for(objective)
    one = type(ds)([user], {user: ds.train_x[user]}, {user: ds.train_y[user]}, {}, {})
    assert metrics["max-feature-norm"] == pytest.approx(max_feature_norm(sim.cfg, one, sim.model), rel=1e-12)
    assert (
        "max-feature-norm"
        not in call_client(
            make_client_app(base), {}, "query", 2, {"config": ConfigRecord({"server-round": 0})}
        ).content["metrics"]
    )
    w = sim.model.init_params(torch.Generator().manual_seed(0))
    content = {"arrays": ArrayRecord({"params": Array(w.numpy())}), "config": ConfigRecord({"server-round": 1})}
    private = {**base, "privacy-mechanism": "output", "privacy-tau": 1.0, "privacy-sigma": 0.5}
    released = call_client(make_client_app(private), {}, "evaluate", 2, content).content["metrics"]
    loss, correct = simulation_for(private).evaluate_model(w, sim.xs[2], torch.as_tensor(ds.train_y[user]))
    assert released["train-loss-sum"] == pytest.approx(loss, rel=1e-6) and released["train-correct"] == correct
    assert released["train-examples"] == len(ds.train_y[user])
    withheld = call_client(
        make_client_app({**private, "privacy-release-train-metrics": False}), {}, "evaluate", 2, content
    ).content["metrics"]
    assert not any(k.startswith("train-") for k in withheld)
    assert withheld["test-examples"] == len(ds.test_y[user])


def test_the_server_waits_for_nodes_still_registering():
    """Nodes that register after the ServerApp started are counted: the node list is read once it has been stable
    for the settle time (two Flower simulations at once, or a loaded machine, start nodes late)."""
    from upfl.flower.apps import connected_nodes

    class LateGrid:
        def __init__(self):
            self.calls = 0

        def get_node_ids(self):
            self.calls += 1
            return [] if self.calls < 3 else [11, 12] if self.calls < 6 else [11, 12, 13, 14, 15]

    assert connected_nodes(LateGrid(), settle_s=0.05, timeout=5.0, poll_s=0.01) == [11, 12, 13, 14, 15]

    class EmptyGrid:
        def get_node_ids(self):
            return []

    with pytest.raises(RuntimeError, match="no stable set of Flower nodes"):
        connected_nodes(EmptyGrid(), settle_s=0.05, timeout=0.2, poll_s=0.01)
