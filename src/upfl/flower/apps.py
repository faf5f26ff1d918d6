"""A Flower ClientApp and ServerApp for :mod:`upfl.models` with ``upfl run``'s semantics.

Both apps read the flat run config of a Flower app (``[tool.flwr.app.config]`` in its pyproject,
``flwr run --run-config`` overrides) through :data:`RUN_CONFIG_KEYS` into a validated
:class:`upfl.config.RunConfig`. Node ``partition-id`` i trains device i of the LEAF data set
(``data-path``; its train users in data-set order). The global model travels as one flat float32
array ``params`` (the parameter layout of :mod:`upfl.models`).

**The server never reads a client's data.** It reads ``data-path``'s ``meta.json`` (the class count) and its
``test/`` split, a held-out test set it owns (:func:`held_out_test_set`), never ``train/``. It learns each node's
device and |D_i| (public: the aggregation weights release it) from one query message per node before round 1
(not counted among the rounds' messages). Training metrics are federated: after each training round the nodes
that ``fraction-evaluate`` samples evaluate the global model on their own training rows and reply sums, under
``upfl run``'s ``release_train_metrics`` rule (a private run: computed by the client and marked outside the
guarantee, or, with ``privacy-release-train-metrics = false``, not computed). Even rounds of Upcycled-FL send no
message, so their training metrics are empty; test metrics are the server's, every round.

A client's local update is ``upfl run``'s, reusing its code (:class:`upfl.engine.simulation.Simulation`,
:func:`upfl.draws.batch_plans.batch_plan` and the selected local solver): SGD with momentum on
F_i(w) + mu/2 ||w - w_global||^2 (mu: the message's ``proximal-mu``, else the run config's ``mu``), E epochs of
mini-batches, stragglers' partial work (``straggler``: a straggler runs 1..E-1 epochs; policy ``drop`` replies
an error instead, which FedAvg skips), objective or output perturbation before the reply.

The privacy noise comes from the operating system's entropy (:func:`entropy_generator`): the server, which
knows the run config and its ``seed``, cannot regenerate and subtract it. ``privacy-noise-source =
"seed-keyed-server-can-remove"`` draws it from ``upfl run``'s stream keyed (seed, training round, device)
instead, for simulation studies only: it gives **no privacy against the server**. Every other random draw
comes from ``upfl run``'s keyed streams, so with every node sampled (and seed-keyed noise, or no privacy) a
Flower run reproduces ``upfl run``. So does node sampling: training round k trains the nodes of the devices
:func:`upfl.draws.rounds.sample_clients` draws from the stream keyed (seed, k), ``upfl run``'s devices
(:class:`upfl.flower.strategy.SeedSampling`), so with any ``fraction-train`` a Flower run gives ``upfl run``'s
model after every round. The privacy block counts the releases the server observed
(:class:`upfl.flower.strategy.CountingGrid`), not ``upfl run``'s draws: a node that does not answer releases
nothing.

``strategy`` picks the Flower strategy of the training rounds (:data:`FLOWER_STRATEGIES`: FedAvgM, FedAdam,
FedYogi, FedAdagrad, ...; ``strategy-args`` its keyword arguments as JSON); an upcycled ``algorithm`` wraps it in
:class:`upfl.flower.strategy.UpcycledFL`. The run's record names that Flower strategy.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import time
from collections import Counter
from collections.abc import Callable
from logging import INFO
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp import strategy as flower_strategies
from flwr.serverapp.strategy import Strategy
from flwr.supercore import log

from .. import config as cfgmod
from ..data import FederatedDataset, load_leaf
from ..data.leaf import META_FILE, _check_num_classes, _read_split, read_json
from ..draws.batch_plans import batch_plan
from ..draws.rounds import draw_stragglers, resolve_straggler_policy, sample_clients, training_rounds_before
from ..draws.streams import entropy_generator, generator
from ..engine.simulation import TRAIN_METRICS_COLUMN, Simulation, resolve_device, scaled_features, train_metrics_status
from ..files import atomic_path, provenance, write_json, write_text
from ..models import build_model
from ..names import base_name, is_upcycled
from ..privacy.accounting import OS_ENTROPY_NOISE, SEED_KEYED_NOISE, max_feature_norm, privacy_report
from ..privacy.mechanisms import objective_noise_draws, output_perturbation, scale_objective_noise, standard_normal_rows
from .strategy import (
    DEVICE_KEY,
    CountingGrid,
    SeedSampling,
    UpcycledFL,
    as_flat,
    is_upcycle_round,
    record_number,
    unwrapped,
)

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
    "privacy-release-train-metrics": "privacy.release_train_metrics",
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

FLOWER_STRATEGIES = ("FedAvg", "FedProx", "FedAvgM", "FedAdam", "FedYogi", "FedAdagrad", "FedMedian", "FedTrimmedAvg")
"""``strategy`` values: Flower's own strategies (``flwr.serverapp.strategy``) of the training rounds."""

APP_KEYS = {
    "out-dir": "folder for metrics.csv and summary.json (ServerApp; empty: none)",
    "fraction-evaluate": "fraction of nodes in federated evaluation (their training metrics) after each "
    "training round (default 1; 0 when a private run does not release them)",
    "privacy-noise-source": f"{OS_ENTROPY!r} (default) or {SEED_KEYED!r} (reproducible, no privacy against the server)",
    "strategy": f"the Flower strategy of the training rounds: {', '.join(FLOWER_STRATEGIES)} (default: "
    "FedProx for mu > 0, else FedAvg)",
    "strategy-args": "keyword arguments of that strategy as a JSON object, e.g. '{\"eta\": 0.1}' (default {})",
    "round-timeout": "seconds the server waits for a round's replies (default 3600); a node that has not replied "
    "by then releases nothing in that round (summary.json rounds_with_fewer_nodes)",
    "save-models": "true: also write OUT/models.npz, the global model after every round (w0, w1, ...)",
}
"""Run-config keys of the apps themselves."""


def noise_source(run_config: dict[str, Any]) -> str:
    """The run config's ``privacy-noise-source`` (default :data:`OS_ENTROPY`); another value is an error naming it."""
    source = run_config.get("privacy-noise-source", OS_ENTROPY)
    if source not in NOISE_SOURCES:
        raise cfgmod.ConfigError(
            f"run config 'privacy-noise-source': must be {OS_ENTROPY!r} (the default) or "
            f"{SEED_KEYED!r} (reproducible noise, no privacy against the server); got {source!r}"
        )
    return source


def run_config_to_upfl(run_config: dict[str, Any]) -> cfgmod.RunConfig:
    """The validated :class:`upfl.config.RunConfig` of a Flower run config; unknown keys are errors naming them."""
    doc: dict[str, Any] = {"checkpoint": {"every": 0}, "evaluation": {"every": 1}}
    for key, value in run_config.items():
        if key in APP_KEYS:
            continue
        if key not in RUN_CONFIG_KEYS:
            raise cfgmod.ConfigError(
                f"run config key {key!r} is unknown; known keys: {', '.join(sorted([*RUN_CONFIG_KEYS, *APP_KEYS]))}"
            )
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
    strategy_choice(run_config)
    return cfg


def strategy_choice(run_config: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(``strategy``, ``strategy-args``) of a run config; an unknown strategy, arguments that are not a JSON
    object, or arguments the strategy does not take are errors naming the key."""
    name = run_config.get("strategy") or None
    if name is not None and name not in FLOWER_STRATEGIES:
        raise cfgmod.ConfigError(f"run config 'strategy': {name!r} is not one of {', '.join(FLOWER_STRATEGIES)}")
    text = run_config.get("strategy-args", "") or "{}"
    try:
        args = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError as e:
        raise cfgmod.ConfigError(f"run config 'strategy-args': not JSON ({e.msg} at character {e.pos})") from None
    if not isinstance(args, dict):
        raise cfgmod.ConfigError(
            f"run config 'strategy-args': must be a JSON object of keyword arguments, got {text!r}"
        )
    if args and name is None:
        raise cfgmod.ConfigError("run config 'strategy-args': given without 'strategy'")
    if name is not None:
        taken = set(inspect.signature(getattr(flower_strategies, name)).parameters)
        reserved = {
            "fraction_train",
            "min_train_nodes",
            "min_available_nodes",
            "fraction_evaluate",
            "min_evaluate_nodes",
            "proximal_mu",
        }
        bad = sorted((set(args) - taken) | (set(args) & reserved))
        if bad:
            raise cfgmod.ConfigError(
                f"run config 'strategy-args': {name} does not take {', '.join(bad)} here "
                "(sampling comes from fraction-train and fraction-evaluate, proximal_mu from mu)"
            )
    return name, args


def check_flower_algorithm(name: str) -> None:
    """Refuse, by name, an algorithm outside :data:`FLOWER_ALGORITHMS` (no silent fallback to FedAvg or FedProx)."""
    if name not in FLOWER_ALGORITHMS:
        raise cfgmod.ConfigError(
            f"run config 'algorithm': {name!r} does not run in Flower (its server state has no "
            f"Flower counterpart here); choose one of {', '.join(FLOWER_ALGORITHMS)}"
        )


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


def local_update(
    sim: Simulation, w: torch.Tensor, device_index: int, round_k: int, mu: float, noise: torch.Generator | None = None
) -> tuple[torch.Tensor | None, int]:
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
    plans = batch_plan(
        [x.shape[0]], [epochs[device_index]], c.solver.batch_size, [generator(c.seed, "batches", round_k, device_index)]
    )
    linear = None
    if sim.alphas is not None:
        linear = (
            sim.objective_noise(round_k, [device_index])
            if noise is None
            else scale_objective_noise(
                *objective_noise_draws(1, sim.model.num_params, noise), sim.alphas[device_index]
            ).to(x.device)
        )
    local, steps = sim.local_solve(
        sim.model,
        w.to(x.device),
        [x],
        [y],
        plans,
        mu,
        c.solver.lr,
        c.solver.momentum,
        linear_term=linear,
        generator=generator(c.seed, "dropout", round_k),
    )
    if sim.sigmas is not None:
        if noise is None:
            local = sim.output_noise(local, round_k, [device_index])
        else:
            W = local.cpu()
            if c.privacy.tau is None:
                raise cfgmod.ConfigError("privacy.tau: output perturbation clips each released model to tau; give it")
            local = output_perturbation(
                W, c.privacy.tau, sim.sigmas[device_index], noise=standard_normal_rows(W.shape[1:], [noise], W.dtype)
            )
    return local[0].cpu(), steps


MetricValue = int | float | list[int] | list[float]
"""A value a Flower MetricRecord holds."""


def _reply(arrays: ArrayRecord | None, metrics: dict[str, MetricValue], msg: Message) -> Message:
    content = RecordDict({"metrics": MetricRecord(metrics)})
    if arrays is not None:
        content["arrays"] = arrays
    return Message(content=content, reply_to=msg)


def _merged(context: Context, run_config: dict[str, Any] | None) -> dict[str, Any]:
    return {**dict(context.run_config), **(run_config or {})}


def client_mu(cfg: cfgmod.RunConfig, config: ConfigRecord) -> float:
    """mu of a client's local objective: the message's ``proximal-mu`` (FedProx), else the run config's ``mu``
    (0 for FedAvg), so a strategy that sends none (FedAdam, ...) still trains ``algorithm``'s objective."""
    return record_number(config, "proximal-mu") if "proximal-mu" in config else float(cfg.algorithm.mu)


def own_metrics(sim: Simulation, w: torch.Tensor, i: int) -> dict[str, MetricValue]:
    """Device i's federated-evaluation reply: summed loss, correct predictions and rows of the global model ``w`` on
    its own training rows (only where ``upfl run`` computes training metrics: :func:`train_metrics_status`) and on
    its own test rows. Sums, so that the server's totals over all devices are ``upfl run``'s pooled metrics."""
    user = sim.devices[i]
    w = w.to(sim.device)
    out: dict[str, MetricValue] = {DEVICE_KEY: i}
    if train_metrics_status(sim.cfg.privacy) != "not_computed":
        loss, correct = sim.evaluate_model(w, sim.xs[i], torch.as_tensor(sim.data.train_y[user]).to(sim.device))
        out.update(
            {"train-loss-sum": float(loss), "train-correct": float(correct), "train-examples": sim.sizes[i].item()}
        )
    y = sim.data.test_y[user]
    if len(y):
        loss, correct = sim.evaluate_model(w, sim._x(sim.data.test_x[user]), torch.as_tensor(y).to(sim.device))
        out.update({"test-loss-sum": float(loss), "test-correct": float(correct), "test-examples": float(len(y))})
    out["num-examples"] = out.get("train-examples", out.get("test-examples", 0.0))
    return out


def make_client_app(run_config: dict[str, Any] | None = None) -> ClientApp:
    """A ClientApp whose node ``partition-id`` i trains (and evaluates on) device i of ``data-path``.

    ``run_config`` entries override the context's run config (``flwr.simulation.run_simulation`` has no
    run-config argument; ``flwr run`` passes the app's).
    """
    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        """The node's device and |D_i| (public: the aggregation weights release it); for objective perturbation
        also the largest feature norm the model sees (Theorem C.2's assumption; released outside the guarantee)."""
        sim = simulation_for(_merged(context, run_config))
        i = int(context.node_config["partition-id"])
        metrics: dict[str, MetricValue] = {DEVICE_KEY: i, "num-examples": int(sim.sizes[i])}
        if sim.cfg.privacy.mechanism == "objective":
            user = sim.devices[i]
            own = FederatedDataset([user], {user: sim.data.train_x[user]}, {user: sim.data.train_y[user]}, {}, {})
            metrics["max-feature-norm"] = max_feature_norm(sim.cfg, own, sim.model)
        content = RecordDict({"metrics": MetricRecord(metrics), "device": ConfigRecord({"name": sim.devices[i]})})
        return Message(content=content, reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        sim = simulation_for(_merged(context, run_config))
        i = int(context.node_config["partition-id"])
        config = msg.content.config_records["config"]
        round_k = int(record_number(config, "training-round" if "training-round" in config else "server-round"))
        w = as_flat(msg.content.array_records["arrays"], PARAMS_KEY)
        noise = None if noise_source(_merged(context, run_config)) == SEED_KEYED else entropy_generator()
        local, steps = local_update(sim, w, i, round_k, client_mu(sim.cfg, config), noise)
        if local is None:
            return Message(
                Error(
                    code=0, reason=f"device {i} is a straggler in training round {round_k} and straggler-policy is drop"
                ),
                reply_to=msg,
            )
        arrays = ArrayRecord({PARAMS_KEY: Array(local.numpy())})
        return _reply(arrays, {"num-examples": int(sim.sizes[i]), "local-steps": steps, DEVICE_KEY: i}, msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        sim = simulation_for(_merged(context, run_config))
        i = int(context.node_config["partition-id"])
        return _reply(None, own_metrics(sim, as_flat(msg.content.array_records["arrays"], PARAMS_KEY), i), msg)

    return app


def held_out_test_set(path: str | Path) -> FederatedDataset:
    """The server's data: ``meta.json`` and the ``test/`` split of a LEAF folder, never ``train/`` (no training
    rows, no training users). ``meta.json`` must give ``num_classes``: the server cannot read it off the labels."""
    root = Path(path)
    meta_file = root / META_FILE
    meta = read_json(meta_file) if meta_file.exists() else {}
    if not isinstance(meta, dict) or "num_classes" not in meta:
        raise cfgmod.ConfigError(
            f"run config 'data-path': {meta_file} must give num_classes (the Flower server "
            "reads no training file, so it cannot count the classes from the labels)"
        )
    _check_num_classes(meta_file, meta)
    users, xs, ys = _read_split(root / "test", meta.get("x_dtype", "float32"), {})
    if not users or sum(len(y) for y in ys.values()) == 0:
        raise cfgmod.ConfigError(f"run config 'data-path': {root / 'test'} holds no test rows for the server")
    ds = FederatedDataset(users, {}, {}, xs, ys, meta=meta, path=str(root))
    ds.check_labels()
    return ds


class ServerData:
    """What the ServerApp holds: the model (from ``meta.json`` and the test rows' shape) and the held-out test set."""

    def __init__(self, cfg: cfgmod.RunConfig) -> None:
        self.cfg, self.device = cfg, resolve_device(cfg.device)
        self.data = held_out_test_set(cfg.data.path)
        self.model = build_model(cfg.model.name, self.data, cfg.model.options, cfg.model.softmax_before_loss)
        users = [u for u in self.data.users if len(self.data.test_y[u])]
        self.test_x = torch.cat(
            [scaled_features(self.data.test_x[u], cfg.data.feature_scaling, self.device) for u in users]
        )
        self.test_y = torch.cat([torch.as_tensor(self.data.test_y[u]) for u in users]).to(self.device)

    def evaluate(self, w: torch.Tensor) -> dict[str, float]:
        """Loss and accuracy of ``w`` on the held-out test set, in chunks of ``evaluation.batch_size``."""
        bs, n = self.cfg.evaluation.batch_size, len(self.test_y)
        loss, correct = 0.0, 0
        for i in range(0, n, bs):
            batch = (self.test_x[i : i + bs], self.test_y[i : i + bs])
            batch_loss, batch_correct = self.model.evaluate(w.to(self.device), *batch)
            loss, correct = loss + float(batch_loss), correct + int(batch_correct)
        return {"test_loss": loss / n, "test_acc": correct / n}


def connected_nodes(grid: Grid, settle_s: float, timeout: float, poll_s: float = 0.1) -> list[int]:
    """The node ids once at least one node is connected and none has joined for ``settle_s`` seconds. Nodes register
    with the server as they start (in a simulation, while the ServerApp starts): a list read at once can miss some,
    and the devices' query, the privacy block and the strategy's node counts would then leave them out."""
    start = time.perf_counter()
    nodes = set(grid.get_node_ids())
    unchanged_since = start
    while time.perf_counter() - start < timeout:
        if nodes and time.perf_counter() - unchanged_since >= settle_s:
            return sorted(nodes)
        time.sleep(poll_s)
        now = set(grid.get_node_ids())
        if now != nodes:
            nodes, unchanged_since = now, time.perf_counter()
    raise RuntimeError(f"no stable set of Flower nodes within {timeout:g} s (connected: {sorted(nodes)})")


class Devices:
    """The devices the server learnt from its query (one message per node before round 1): name and |D_i| per
    ``partition-id``, and the largest feature norm they reported (objective perturbation only)."""

    def __init__(self, grid: Grid, timeout: float = 3600.0, settle_s: float = 1.5) -> None:
        nodes = connected_nodes(grid, settle_s, timeout)
        messages = [
            Message(RecordDict({"config": ConfigRecord({"server-round": 0})}), dst_node_id=node, message_type="query")
            for node in nodes
        ]
        self.names: dict[int, str] = {}
        self.sizes: dict[int, int] = {}
        self.nodes: dict[int, int] = {}
        """The node id of each device (``partition-id``)."""
        self.received: Counter[str] = Counter()
        """How many query replies carried each value."""
        norms = []
        for reply in grid.send_and_receive(messages, timeout=timeout):
            if reply.has_error():
                raise RuntimeError(
                    f"node {reply.metadata.src_node_id} did not answer the device query: {reply.error.reason}"
                )
            metrics = reply.content.metric_records["metrics"]
            self.received.update(metrics.keys())
            self.received.update(reply.content.config_records["device"].keys())
            i = int(record_number(metrics, DEVICE_KEY))
            name, size = reply.content.config_records["device"]["name"], record_number(metrics, "num-examples")
            self.names[i], self.sizes[i] = str(name), int(size)
            self.nodes[i] = int(reply.metadata.src_node_id)
            if "max-feature-norm" in metrics:
                norms.append(record_number(metrics, "max-feature-norm"))
        if sorted(self.names) != list(range(len(nodes))):
            raise RuntimeError(f"the nodes' partition-ids are {sorted(self.names)}, not 0..{len(nodes) - 1}")
        self.count = len(nodes)
        self.max_feature_norm = max(norms) if norms else None

    def public_dataset(self) -> FederatedDataset:
        """The devices as the privacy accounting reads them: names and |D_i| (their rows are not known here)."""
        names = [self.names[i] for i in range(self.count)]
        sizes = {self.names[i]: self.sizes[i] for i in range(self.count)}
        return FederatedDataset(names, {}, {n: range(sizes[n]) for n in names}, {}, {})


def flower_strategy(cfg: cfgmod.RunConfig, name: str | None, args: dict[str, Any], common: dict[str, Any]) -> Strategy:
    """The Flower strategy of the training rounds: ``name`` with ``args`` (FedProx gets ``proximal_mu`` = mu), or by
    default FedProx for a FedProx ``algorithm`` with mu > 0 and FedAvg otherwise."""
    a = cfg.algorithm
    if name is None:
        name = "FedProx" if base_name(a.name) == "fedprox" and a.mu > 0 else "FedAvg"
    extra = {"proximal_mu": a.mu} if name == "FedProx" else {}
    return getattr(flower_strategies, name)(**common, **extra, **args)


def strategy_for(
    cfg: cfgmod.RunConfig,
    num_nodes: int,
    fraction_evaluate: float = 0.0,
    strategy: str | None = None,
    strategy_args: dict[str, Any] | None = None,
) -> Strategy:
    """The Flower strategy of a run config: ``strategy`` (:data:`FLOWER_STRATEGIES`; default FedProx for mu > 0,
    else FedAvg), wrapped in UpcycledFL for ``upcycled`` and ``upcycled_fedavg``. Any other algorithm is refused
    by name (:data:`FLOWER_ALGORITHMS`). Each training round samples max(floor(frac N), 1) nodes, ``upfl run``'s
    count (which ones: :func:`seed_sampling`). The strategy waits for no more nodes than are connected: the
    server's device query waited for them all before round 1, and a node that leaves later leaves a round short
    (``rounds_with_fewer_nodes`` in summary.json), not a server that waits for it."""
    a = cfg.algorithm
    check_flower_algorithm(a.name)
    per_round = len(sample_clients(cfg.seed, 1, num_nodes, cfg.devices.frac))
    common = {
        "fraction_train": cfg.devices.frac,
        "min_train_nodes": per_round,
        "min_available_nodes": 1,
        "fraction_evaluate": fraction_evaluate,
        "min_evaluate_nodes": 1 if fraction_evaluate else 0,
    }
    base = flower_strategy(cfg, strategy, strategy_args or {}, common)
    if not is_upcycled(a.name):
        return base
    return UpcycledFL(
        base,
        lam=a.lam if a.step is None else None,
        step=a.step,
        schedule=a.schedule,
        mu=a.mu if strategy is not None else None,
    )


def seed_sampling(strategy: Strategy, cfg: cfgmod.RunConfig, nodes: dict[int, int]) -> SeedSampling:
    """``strategy`` training, in every training round k, the nodes of the devices ``upfl run`` samples in round k
    (:func:`upfl.draws.rounds.sample_clients`, the stream keyed (seed, k)); ``nodes`` maps device i to its node."""
    n = len(nodes)

    def sample(t: int) -> list[int] | None:
        if is_upcycled(cfg.algorithm.name) and is_upcycle_round(t):
            return None
        k = training_rounds_before(cfg.algorithm.name, t)
        return [nodes[i] for i in sample_clients(cfg.seed, k, n, cfg.devices.frac)]

    return SeedSampling(strategy, sample)


def strategy_record(strategy: Strategy, args: dict[str, Any]) -> dict[str, Any]:
    """The run record's ``flower_strategy``: the Flower class of the training rounds, its arguments, the wrapper."""
    strategy = unwrapped(strategy)
    upcycled = isinstance(strategy, UpcycledFL)
    base = strategy.base if isinstance(strategy, UpcycledFL) else strategy
    name = type(base).__name__
    return {
        "name": f"UpcycledFL({name})" if upcycled else name,
        "training_rounds": f"flwr.serverapp.strategy.{name}",
        "args": args,
        "upcycled": upcycled,
        **({"c1": strategy.c1, "schedule": strategy.schedule} if isinstance(strategy, UpcycledFL) else {}),
    }


def default_fraction_evaluate(cfg: cfgmod.RunConfig) -> float:
    """Federated evaluation of the training metrics on every node (1), or none (0) where a private run does not
    compute them (``privacy-release-train-metrics = false``)."""
    return 0.0 if train_metrics_status(cfg.privacy) == "not_computed" else 1.0


def make_server_app(
    run_config: dict[str, Any] | None = None, on_round: Callable[[int, torch.Tensor], None] | None = None
) -> ServerApp:
    """A ServerApp running :func:`strategy_for` from ``upfl run``'s initial model. It reads no training file: the
    model comes from ``meta.json`` and the test rows' shape; after every round it evaluates the global model on
    its held-out test set and adds the training metrics the clients reported (federated evaluation); it writes
    ``out-dir``.

    ``run_config`` entries override the context's run config. ``on_round(t, w)`` is called with every round's global
    flat model as the strategy holds it (float64 for the FedOpt family; t = 0 is the initial model).
    """
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_config_ = _merged(context, run_config)
        cfg = run_config_to_upfl(run_config_)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        server = ServerData(cfg)
        devices = Devices(grid)
        name, args = strategy_choice(run_config_)
        fraction_evaluate = float(run_config_.get("fraction-evaluate", default_fraction_evaluate(cfg)))
        strategy = seed_sampling(strategy_for(cfg, devices.count, fraction_evaluate, name, args), cfg, devices.nodes)
        counting = CountingGrid(grid)
        w0 = server.model.init_params(generator(cfg.seed, "init"))
        rows: list[dict[str, Any]] = []
        clock = {"t": time.perf_counter()}
        computed = train_metrics_status(cfg.privacy) != "not_computed"

        def evaluate(t: int, arrays: ArrayRecord) -> MetricRecord:
            w = as_flat(arrays, PARAMS_KEY)
            wall = time.perf_counter() - clock["t"]
            if on_round is not None:
                on_round(t, torch.from_numpy(arrays[PARAMS_KEY].numpy().copy()))
            if save_models:
                models[f"w{t}"] = arrays[PARAMS_KEY].numpy().copy()
            metrics = {**federated_train_metrics(counting.evaluated.get(t, []), computed), **server.evaluate(w)}
            kind = (
                "init"
                if t == 0
                else ("upcycle" if isinstance(unwrapped(strategy), UpcycledFL) and is_upcycle_round(t) else "train")
            )
            rows.append(
                {
                    "iteration": t,
                    "kind": kind,
                    **metrics,
                    "messages": counting.sent[t],
                    "wall_s": 0.0 if t == 0 else wall,
                }
            )
            log(INFO, "round %d %s: test_acc %.4f, %d messages", t, kind, metrics["test_acc"], counting.sent[t])
            clock["t"] = time.perf_counter()
            return MetricRecord({k: float(v) for k, v in metrics.items() if v is not None})

        # CountingGrid wraps the Grid: it counts the messages and forwards everything else (its __getattr__)
        models: dict[str, Any] = {}
        save_models = bool(run_config_.get("save-models", False))
        result = strategy.start(
            grid=counting,  # type: ignore[arg-type]
            initial_arrays=ArrayRecord({PARAMS_KEY: Array(w0.numpy())}),
            num_rounds=cfg.rounds,
            timeout=float(run_config_.get("round-timeout", 3600.0)),
            train_config=ConfigRecord(),
            evaluate_fn=evaluate,
        )
        out = run_config_.get("out-dir", "")
        if out:
            write_outputs(
                Path(out),
                cfg,
                server,
                devices,
                rows,
                counting,
                noise_source(run_config_),
                strategy_record(strategy, args),
            )
            if save_models:
                with atomic_path(Path(out) / "models.npz") as tmp, open(tmp, "wb") as f:
                    np.savez(f, **models)
        del result

    return app


def federated_train_metrics(replies: list[MetricRecord], computed: bool) -> dict[str, float | None]:
    """train_loss and train_acc from the sums the clients reported in one round's federated evaluation: their
    totals over the rows they evaluated (all devices' rows with ``fraction-evaluate = 1``: ``upfl run``'s pooled
    training metrics). None where not computed (a private run that does not release them) or not evaluated (no
    evaluation message this round: the even rounds of Upcycled-FL, iteration 0, ``fraction-evaluate = 0``)."""
    rows = sum(record_number(r, "train-examples") for r in replies if "train-examples" in r)
    if not computed or rows == 0:
        return {"train_loss": None, "train_acc": None}
    return {
        "train_loss": sum(record_number(r, "train-loss-sum") for r in replies if "train-loss-sum" in r) / rows,
        "train_acc": sum(record_number(r, "train-correct") for r in replies if "train-correct" in r) / rows,
    }


def _cell(value: Any) -> str:
    """A metrics.csv cell: floats as their shortest round trip, None (a metric not computed) empty."""
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


RECEIVED_VALUES = {
    "arrays": ("the device's model after local training, clipped and noised first in a private run", "guarantee"),
    "partition-id": ("the device's index", "public"),
    "name": ("the device's name", "public"),
    "num-examples": ("|D_i| (public under the replace-one neighbouring relation)", "public"),
    "local-steps": ("the SGD steps the device ran: |D_i|, the batch size and its straggler draw", "public"),
    "max-feature-norm": ("the largest feature norm of the device's rows (objective perturbation)", "outside"),
    "train-loss-sum": ("the global model's loss summed over the device's training rows", "outside"),
    "train-correct": ("the global model's correct predictions on the device's training rows", "outside"),
    "train-examples": ("the device's training rows, |D_i|", "public"),
    "test-loss-sum": ("the global model's loss summed over the device's own test rows", "outside"),
    "test-correct": ("the global model's correct predictions on the device's own test rows", "outside"),
    "test-examples": ("the device's test rows", "outside"),
    "error": ("a straggler's error reply: that the device straggled in the round", "public"),
}
"""Every value a node's reply can carry: (what it is, ``guarantee`` (the release the epsilons cover), ``public``
(known without the device's data under the neighbouring relation, or data-independent draws) or ``outside``
(computed on the device's data, released outside the guarantee))."""


def server_receives(devices: Devices, counting: CountingGrid) -> list[dict[str, Any]]:
    """The privacy block's ``server_receives``: every value the server received from the nodes, per message type,
    with how many replies carried it and whether the epsilons cover it (:data:`RECEIVED_VALUES`)."""
    observed = {"query": devices.received, **counting.received}
    out = []
    for message_type, values in observed.items():
        for value, count in sorted(values.items()):
            what, status = RECEIVED_VALUES.get(value, ("not described here", "outside"))
            out.append({"message": message_type, "value": value, "replies": count, "what": what, "status": status})
    return out


OBSERVED_RELEASES = (
    "observed: per device, the training replies carrying a model that the Flower server "
    "received (messages sent to the nodes Flower sampled, less stragglers' error replies)"
)
"""``releases_source`` of a Flower run's privacy block."""


def fewer_nodes(counting: CountingGrid) -> dict[str, dict[str, Any]]:
    """The training rounds in which fewer nodes replied with a model than were sent a training message (a node that
    left, a straggler dropped, a reply past the round's timeout): round -> sent, models received, the error replies'
    reasons (none for a reply that never came)."""
    return {
        str(t): {"sent": sent, "models": counting.replied[t], "errors": counting.error_reasons.get(t, [])}
        for t, sent in sorted(counting.train_sent.items())
        if counting.replied[t] < sent
    }


def write_outputs(
    out: Path,
    cfg: cfgmod.RunConfig,
    server: ServerData,
    devices: Devices,
    rows: list[dict[str, Any]],
    counting: CountingGrid,
    noise: str = OS_ENTROPY,
    strategy: dict[str, Any] | None = None,
) -> None:
    """OUT/metrics.csv (one row per round, with the messages sent) and OUT/summary.json, atomically.

    The privacy block counts each device's releases from what ``counting`` saw (:data:`OBSERVED_RELEASES`), with
    |D_i| as the devices reported it; the record names the Flower strategy (``strategy``), not an engine algorithm."""
    status = train_metrics_status(cfg.privacy)
    columns = ["iteration", "kind", "train_loss", "train_acc", "test_loss", "test_acc", "messages", "wall_s"]
    marked = columns + ([TRAIN_METRICS_COLUMN] if status else [])
    rows = [{**r, TRAIN_METRICS_COLUMN: status} for r in rows]
    lines = [",".join(marked)] + [",".join(_cell(r[c]) for c in marked) for r in rows]
    training = [r for r in rows if r["kind"] == "train"]
    final = rows[-1]
    releases = [counting.released[i] for i in range(devices.count)]
    source = (
        SEED_KEYED_NOISE + "; no privacy against the server, which knows the seed"
        if noise == SEED_KEYED
        else OS_ENTROPY_NOISE
    )
    privacy = privacy_report(
        cfg,
        devices.public_dataset(),
        server.model,
        releases=releases,
        releases_source=OBSERVED_RELEASES,
        noise_source=source,
        max_norm=devices.max_feature_norm,
    )
    name = (strategy or {}).get("name", cfg.algorithm.name)
    privacy["algorithm"] = name
    received = server_receives(devices, counting)
    privacy["server_receives"] = received
    if cfg.privacy.mechanism != "none":
        privacy["released_outside_the_guarantee"] = sorted(
            {r["value"] for r in received if r["status"] == "outside"} | set(privacy["released_outside_the_guarantee"])
        )
    summary = {
        "engine": "flower",
        "algorithm": name,
        "flower_strategy": strategy,
        "final": {k: final[k] for k in columns[:6]},
        "evaluation": {
            "train_metrics": "federated: the clients' sums on their own training rows, after each "
            "training round (fraction-evaluate of the nodes)",
            "test_metrics": "the server's held-out test set (data-path/test)",
            "evaluation_messages": {str(t): n for t, n in sorted(counting.evaluate_sent.items())},
        },
        "device_queries": devices.count,
        "messages": {
            "total": sum(r["messages"] for r in rows),
            "even_rounds": sum(r["messages"] for r in rows if r["iteration"] and r["iteration"] % 2 == 0),
        },
        "seconds_per_training_round": (sum(r["wall_s"] for r in training) / len(training)) if training else math.nan,
        "training_messages": {str(t): n for t, n in sorted(counting.train_sent.items())},
        "straggler_errors": {str(t): n for t, n in sorted(counting.errors.items())},
        "rounds_with_fewer_nodes": fewer_nodes(counting),
        "config": cfgmod.to_dict(cfg),
        "config_hash": cfgmod.config_hash(cfg),
        "seed": cfg.seed,
        **provenance(),
        "privacy": privacy,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "metrics.csv", "\n".join(lines) + "\n")
    write_json(out / "summary.json", summary)
