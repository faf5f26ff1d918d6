"""A Flower ClientApp and ServerApp for :mod:`upfl.models` with ``upfl run``'s semantics.

Both apps read the flat run config of a Flower app (``[tool.flwr.app.config]`` in its pyproject,
``flwr run --run-config`` overrides) through :data:`RUN_CONFIG_KEYS` into a validated
:class:`upfl.config.RunConfig`. Node ``partition-id`` i trains device i of the LEAF data set
(``data-path``; its train users in data-set order). The global model travels as one flat float32
array ``params`` (the parameter layout of :mod:`upfl.models`).

A client's local update is ``upfl run``'s, reusing its code (:class:`upfl.engine.simulation.Simulation`,
:func:`upfl.solvers.torch_backend.batch_plan` and the selected local solver): SGD with momentum on
F_i(w) + mu/2 ||w - w_global||^2 (mu is the message's ``proximal-mu``), E epochs of mini-batches,
stragglers' partial work (``straggler``: a straggler runs 1..E-1 epochs; policy ``drop`` replies an
error instead, which FedAvg skips), objective or output perturbation before the reply.

The privacy noise comes from the operating system's entropy (:func:`entropy_generator`): the server, which
knows the run config and its ``seed``, cannot regenerate and subtract it. ``privacy-noise-source =
"seed-keyed-server-can-remove"`` draws it from ``upfl run``'s stream keyed (seed, training round, device)
instead, for simulation studies only: it gives **no privacy against the server**. Every other random draw
comes from ``upfl run``'s keyed streams, so with every node sampled (and seed-keyed noise, or no privacy) a
Flower run reproduces ``upfl run``. Node sampling is Flower's (``random.sample``): with ``fraction-train`` < 1
the devices of a round differ from ``upfl run``'s, and the privacy block counts the releases the server
observed (:class:`upfl.flower.strategy.CountingGrid`), not ``upfl run``'s draws.
"""

from __future__ import annotations

import functools
import json
import math
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, FedProx, Strategy
from logging import INFO

from flwr.supercore import log

from .. import config as cfgmod
from ..data import load_leaf
from ..engine.draws import draw_stragglers, resolve_straggler_policy, sample_clients
from ..files import provenance, write_json, write_text
from ..names import base_name, is_upcycled
from ..privacy.accounting import privacy_report
from ..privacy.mechanisms import (objective_noise_draws, output_perturbation, scale_objective_noise,
                                  standard_normal_rows)
from ..rng import generator
from ..engine.simulation import TRAIN_METRICS_COLUMN, Simulation, resolve_device, train_metrics_status
from ..solvers.torch_backend import batch_plan
from .strategy import DEVICE_KEY, CountingGrid, UpcycledFL, as_flat, is_upcycle_round

PARAMS_KEY = "params"

RUN_CONFIG_KEYS = {
    "num-server-rounds": "rounds",
    "seed": "seed",
    "device": "device",
    "threads": "threads",
    "data-path": "data.path",
    "feature-scaling": "data.feature_scaling",
    "model": "model.name",
    "algorithm": "algorithm.name",
    "mu": "algorithm.mu",
    "lam": "algorithm.lam",
    "step": "algorithm.step",
    "schedule": "algorithm.schedule",
    "fraction-train": "devices.frac",
    "straggler": "devices.straggler",
    "straggler-policy": "devices.straggler_policy",
    "local-epochs": "solver.epochs",
    "batch-size": "solver.batch_size",
    "lr": "solver.lr",
    "momentum": "solver.momentum",
    "solver-backend": "solver.backend",
    "privacy-mechanism": "privacy.mechanism",
    "privacy-sigma": "privacy.sigma",
    "privacy-tau": "privacy.tau",
    "privacy-alpha": "privacy.alpha",
    "privacy-delta": "privacy.delta",
}
"""Flower run-config key -> :class:`upfl.config.RunConfig` key (``docs/run-config.md`` documents the latter)."""

OS_ENTROPY = "os-entropy"
SEED_KEYED = "seed-keyed-server-can-remove"
NOISE_SOURCES = (OS_ENTROPY, SEED_KEYED)
"""``privacy-noise-source`` values: the default draws the clients' privacy noise from the operating system's
entropy; the other, only when named explicitly, from the run seed's keyed stream (no privacy against the
server, which knows the seed: it regenerates the noise and subtracts it)."""

FLOWER_ALGORITHMS = ("fedavg", "fedprox", "upcycled", "upcycled_fedavg")
"""The ``algorithm`` values the apps run with ``upfl run``'s semantics (FedAvg or FedProx training rounds, upcycled
or not). Every other algorithm of the engine is refused by name: its server state (momentum, moments, control
variates, FedNova's normalisation, FedDyn's regulariser) has no counterpart here."""

APP_KEYS = {"out-dir": "folder for metrics.csv and summary.json (ServerApp; empty: none)",
            "fraction-evaluate": "fraction of nodes in federated evaluation after each training round (default 0)",
            "privacy-noise-source": f"{OS_ENTROPY!r} (default) or {SEED_KEYED!r} (reproducible, no privacy "
                                    "against the server)"}
"""Run-config keys of the apps themselves."""


def noise_source(run_config: dict[str, Any]) -> str:
    """The run config's ``privacy-noise-source`` (default :data:`OS_ENTROPY`); another value is an error naming it."""
    source = run_config.get("privacy-noise-source", OS_ENTROPY)
    if source not in NOISE_SOURCES:
        raise cfgmod.ConfigError(f"run config 'privacy-noise-source': must be {OS_ENTROPY!r} (the default) or "
                                 f"{SEED_KEYED!r} (reproducible noise, no privacy against the server); got {source!r}")
    return source


def entropy_generator() -> torch.Generator:
    """A CPU generator seeded with 63 bits from the operating system's entropy (:mod:`secrets`): draws nobody
    can regenerate from the run config."""
    g = torch.Generator()
    g.manual_seed(secrets.randbits(63))
    return g


def run_config_to_upfl(run_config: dict[str, Any]) -> cfgmod.RunConfig:
    """The validated :class:`upfl.config.RunConfig` of a Flower run config; unknown keys are errors naming them."""
    doc: dict[str, Any] = {"checkpoint": {"every": 0}, "evaluation": {"every": 1}}
    for key, value in run_config.items():
        if key in APP_KEYS:
            continue
        if key not in RUN_CONFIG_KEYS:
            raise cfgmod.ConfigError(f"run config key {key!r} is unknown; known keys: "
                                     f"{', '.join(sorted([*RUN_CONFIG_KEYS, *APP_KEYS]))}")
        cfgmod.set_key(doc, RUN_CONFIG_KEYS[key], value)
    try:
        cfg = cfgmod.from_dict(doc)
    except cfgmod.ConfigError as e:
        inverse = {v: k for k, v in RUN_CONFIG_KEYS.items()}
        text = str(e)
        for dotted in sorted(inverse, key=len, reverse=True):
            if text.startswith(dotted + ":"):
                raise cfgmod.ConfigError(f"run config {inverse[dotted]!r} ({text})") from None
        raise
    check_flower_algorithm(cfg.algorithm.name)
    noise_source(run_config)
    return cfg


def check_flower_algorithm(name: str) -> None:
    """Refuse, by name, an algorithm outside :data:`FLOWER_ALGORITHMS` (no silent fallback to FedAvg or FedProx)."""
    if name not in FLOWER_ALGORITHMS:
        raise cfgmod.ConfigError(f"run config 'algorithm': {name!r} does not run in Flower (its server state has no "
                                 f"Flower counterpart here); choose one of {', '.join(FLOWER_ALGORITHMS)}")


@functools.lru_cache(maxsize=4)
def _simulation(run_config_json: str) -> Simulation:
    """One :class:`Simulation` (data, model, solver) per process and run config: reused across messages.

    Each ClientApp process (a Ray actor in simulation) loads the whole data set once and trains the device of
    the node it serves: simple and exact for simulation; a deployment would load one device's data per node.
    """
    cfg = run_config_to_upfl(json.loads(run_config_json))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return Simulation(cfg, load_leaf(cfg.data.path), resolve_device(cfg.device))


def simulation_for(run_config: dict[str, Any]) -> Simulation:
    return _simulation(json.dumps(dict(run_config), sort_keys=True))


def local_update(sim: Simulation, w: torch.Tensor, device_index: int, round_k: int, mu: float,
                 noise: torch.Generator | None = None) -> tuple[torch.Tensor | None, int]:
    """Device i's model after training round k from ``w`` (Algorithm 1 line 4), as ``upfl run`` computes it.

    ``noise`` is the generator of the privacy noise (Section 5: objective n_i, or output N(0, sigma_i^2 I)); None
    takes ``upfl run``'s stream keyed (seed, k, i), which anyone knowing the seed regenerates. Returns (model, SGD
    steps); the model is None for a straggler that ``straggler_policy: drop`` removes.
    """
    c = sim.cfg
    n = len(sim.devices)
    flags, epochs = draw_stragglers(c.seed, round_k, n, c.devices.straggler, c.solver.epochs)
    if flags[device_index] and resolve_straggler_policy(c.devices.straggler_policy, c.algorithm.name) == "drop":
        return None, 0
    x, y = sim.xs[device_index], sim.ys[device_index]
    plans = batch_plan([x.shape[0]], [epochs[device_index]], c.solver.batch_size,
                       [generator(c.seed, "batches", round_k, device_index)])
    linear = None
    if sim.alphas is not None:
        linear = (sim.objective_noise(round_k, [device_index]) if noise is None else
                  scale_objective_noise(*objective_noise_draws(1, sim.model.num_params, noise),
                                        sim.alphas[device_index]).to(x.device))
    local, steps = sim.local_solve(sim.model, w.to(x.device), [x], [y], plans, mu, c.solver.lr, c.solver.momentum,
                                   linear_term=linear, generator=generator(c.seed, "dropout", round_k))
    if sim.sigmas is not None:
        if noise is None:
            local = sim.output_noise(local, round_k, [device_index])
        else:
            W = local.cpu()
            local = output_perturbation(W, c.privacy.tau, sim.sigmas[device_index],
                                        noise=standard_normal_rows(W.shape[1:], [noise], W.dtype))
    return local[0].cpu(), steps


def _reply(arrays: ArrayRecord | None, metrics: dict[str, float], msg: Message) -> Message:
    content = RecordDict({"metrics": MetricRecord(metrics)})
    if arrays is not None:
        content["arrays"] = arrays
    return Message(content=content, reply_to=msg)


def _merged(context: Context, run_config: dict[str, Any] | None) -> dict[str, Any]:
    return {**dict(context.run_config), **(run_config or {})}


def make_client_app(run_config: dict[str, Any] | None = None) -> ClientApp:
    """A ClientApp whose node ``partition-id`` i trains (and evaluates on) device i of ``data-path``.

    ``run_config`` entries override the context's run config (``flwr.simulation.run_simulation`` has no
    run-config argument; ``flwr run`` passes the app's).
    """
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        sim = simulation_for(_merged(context, run_config))
        i = int(context.node_config["partition-id"])
        config = msg.content["config"]
        round_k = int(config.get("training-round", config["server-round"]))
        w = as_flat(msg.content["arrays"], PARAMS_KEY)
        noise = None if noise_source(_merged(context, run_config)) == SEED_KEYED else entropy_generator()
        local, steps = local_update(sim, w, i, round_k, float(config.get("proximal-mu", 0.0)), noise)
        if local is None:
            return Message(Error(code=0, reason=f"device {i} is a straggler in training round {round_k} "
                                                "and straggler-policy is drop"), reply_to=msg)
        arrays = ArrayRecord({PARAMS_KEY: Array(local.numpy())})
        return _reply(arrays, {"num-examples": int(sim.sizes[i]), "local-steps": steps, DEVICE_KEY: i}, msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        sim = simulation_for(_merged(context, run_config))
        i = int(context.node_config["partition-id"])
        user = sim.devices[i]
        w = as_flat(msg.content["arrays"], PARAMS_KEY).to(sim.device)
        x, y = sim.data.test_x[user], sim.data.test_y[user]
        if len(y) == 0:
            return _reply(None, {"num-examples": 0, "test-loss": 0.0, "test-acc": 0.0}, msg)
        loss, correct = sim.model.evaluate(w, sim._x(x), torch.as_tensor(y).to(sim.device))
        return _reply(None, {"num-examples": len(y), "test-loss": loss / len(y), "test-acc": correct / len(y)}, msg)

    return app


def strategy_for(cfg: cfgmod.RunConfig, num_nodes: int, fraction_evaluate: float = 0.0) -> Strategy:
    """The Flower strategy of a run config: FedAvg, FedProx (``proximal-mu`` to clients; FedAvg when mu = 0), or
    UpcycledFL on either for ``upcycled`` (FedProx base) and ``upcycled_fedavg``. Any other algorithm is refused by
    name (:data:`FLOWER_ALGORITHMS`). Each training round samples max(floor(frac N), 1) nodes, ``upfl run``'s count."""
    a = cfg.algorithm
    check_flower_algorithm(a.name)
    per_round = len(sample_clients(cfg.seed, 1, num_nodes, cfg.devices.frac))
    common = dict(fraction_train=cfg.devices.frac, min_train_nodes=per_round, min_available_nodes=num_nodes,
                  fraction_evaluate=fraction_evaluate, min_evaluate_nodes=1 if fraction_evaluate else 0)
    proximal = base_name(a.name) == "fedprox" and a.mu > 0
    base = FedProx(proximal_mu=a.mu, **common) if proximal else FedAvg(**common)
    if not is_upcycled(a.name):
        return base
    return UpcycledFL(base, lam=a.lam if a.step is None else None, step=a.step, schedule=a.schedule)


def make_server_app(run_config: dict[str, Any] | None = None,
                    on_round: Callable[[int, torch.Tensor], None] | None = None) -> ServerApp:
    """A ServerApp running :func:`strategy_for` from ``upfl run``'s initial model, evaluating the global model
    on the pooled train and test sets after every round (``upfl run``'s metrics) and writing ``out-dir``.

    ``run_config`` entries override the context's run config. ``on_round(t, w)`` is called with every round's global flat model (t = 0 is the initial model).
    """
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_config_ = _merged(context, run_config)
        sim = simulation_for(run_config_)
        cfg = sim.cfg
        num_nodes = len(sim.devices)
        strategy = strategy_for(cfg, num_nodes, float(run_config_.get("fraction-evaluate", 0.0)))
        counting = CountingGrid(grid)
        w0 = sim.model.init_params(generator(cfg.seed, "init"))
        rows: list[dict[str, Any]] = []
        clock = {"t": time.perf_counter()}

        def evaluate(t: int, arrays: ArrayRecord) -> MetricRecord:
            w = as_flat(arrays, PARAMS_KEY)
            wall = time.perf_counter() - clock["t"]
            if on_round is not None:
                on_round(t, w)
            metrics = sim.evaluate(w.to(sim.device))
            kind = "init" if t == 0 else ("upcycle" if isinstance(strategy, UpcycledFL) and is_upcycle_round(t) else "train")
            rows.append({"iteration": t, "kind": kind, **metrics, "messages": counting.sent[t],
                         "wall_s": 0.0 if t == 0 else wall})
            log(INFO, "round %d %s: test_acc %.4f, %d messages", t, kind, metrics["test_acc"], counting.sent[t])
            clock["t"] = time.perf_counter()
            return MetricRecord({k: float(v) for k, v in metrics.items() if v is not None})

        result = strategy.start(grid=counting, initial_arrays=ArrayRecord({PARAMS_KEY: Array(w0.numpy())}),
                                num_rounds=cfg.rounds, train_config=ConfigRecord(), evaluate_fn=evaluate)
        out = run_config_.get("out-dir", "")
        if out:
            write_outputs(Path(out), cfg, sim, rows, counting, noise_source(run_config_))
        del result

    return app


def _cell(value: Any) -> str:
    """A metrics.csv cell: floats as their shortest round trip, None (a metric not computed) empty."""
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


OBSERVED_RELEASES = ("observed: per device, the training replies carrying a model that the Flower server "
                     "received (messages sent to the nodes Flower sampled, less stragglers' error replies)")
"""``releases_source`` of a Flower run's privacy block."""


def write_outputs(out: Path, cfg: cfgmod.RunConfig, sim: Simulation, rows: list[dict[str, Any]],
                  counting: CountingGrid, noise: str = OS_ENTROPY) -> None:
    """OUT/metrics.csv (one row per round, with the messages sent) and OUT/summary.json, atomically.

    The privacy block counts each device's releases from what ``counting`` saw (:data:`OBSERVED_RELEASES`)."""
    status = train_metrics_status(cfg.privacy)
    columns = ["iteration", "kind", "train_loss", "train_acc", "test_loss", "test_acc", "messages", "wall_s"]
    marked = columns + ([TRAIN_METRICS_COLUMN] if status else [])
    rows = [{**r, TRAIN_METRICS_COLUMN: status} for r in rows]
    lines = [",".join(marked)] + [",".join(_cell(r[c]) for c in marked) for r in rows]
    training = [r for r in rows if r["kind"] == "train"]
    final = rows[-1]
    releases = [counting.released[i] for i in range(len(sim.devices))]
    privacy = privacy_report(cfg, sim.data, sim.model, releases=releases, releases_source=OBSERVED_RELEASES)
    if cfg.privacy.mechanism != "none":
        privacy["noise_source"] = noise + (": no privacy against the server, which knows the seed" if noise == SEED_KEYED
                                           else ": operating-system entropy, not reproducible")
    summary = {
        "engine": "flower", "final": {k: final[k] for k in columns[:6]},
        "messages": {"total": sum(r["messages"] for r in rows),
                     "even_rounds": sum(r["messages"] for r in rows if r["iteration"] and r["iteration"] % 2 == 0)},
        "seconds_per_training_round": (sum(r["wall_s"] for r in training) / len(training)) if training else math.nan,
        "training_messages": {str(t): n for t, n in sorted(counting.train_sent.items())},
        "straggler_errors": {str(t): n for t, n in sorted(counting.errors.items())},
        "config": cfgmod.to_dict(cfg), "config_hash": cfgmod.config_hash(cfg), "seed": cfg.seed, **provenance(),
        "privacy": privacy,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "metrics.csv", "\n".join(lines) + "\n")
    write_json(out / "summary.json", summary)
