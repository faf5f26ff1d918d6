"""The federated loop of Algorithm 1 and Algorithm 2, for every algorithm of :mod:`upfl.algorithms`.

Iterations t = 1..T. A base algorithm trains at every t; an upcycled one trains at odd t and applies Eq. (5)
at even t. What a device minimises and how the server aggregates are the algorithm's hooks; this loop
never branches on algorithm names. The draws of training round k (devices, stragglers) live in :mod:`upfl.draws.rounds`.
"""

from __future__ import annotations

import csv
import io
import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import config as cfgmod
from ..algorithms import ClientRound, algorithm_class, build_algorithm
from ..data import FederatedDataset, load_leaf
from ..draws.batch_plans import DRAW_CACHE, RoundPlans, seeded_batch_plan
from ..draws.rounds import round_participants, straggler_summary, training_rounds_before
from ..draws.streams import derive_seed, derive_seeds, entropy_generator, generator
from ..files import json_text, make_dirs, provenance, write_texts
from ..integrity import RECORD, record_text
from ..models import build_model, draws_without_torch
from ..privacy.accounting import engine_noise_source, per_device, privacy_report
from ..privacy.mechanisms import objective_noise_draws, output_perturbation, scale_objective_noise, standard_normal_rows
from ..progress import progress_text
from ..solvers.selection import CompiledSolver, PooledRound, device_type, select_local_solver
from ..torch_build import gpu_build
from .checkpoints import data_fingerprint, open_checkpoint
from .divergence import diverged_entry, loss_problem, weights_problem
from .runfolder import check_out

if TYPE_CHECKING:
    import torch

METRIC_COLUMNS = [
    "iteration",
    "kind",
    "train_loss",
    "train_acc",
    "test_loss",
    "test_acc",
    "devices",
    "local_steps",
    "data_accesses",
    "wall_s",
    "cum_wall_s",
]

TRAIN_METRICS_COLUMN = "train_metrics"
"""metrics.csv column of a private run: what its train_loss and train_acc are (:func:`train_metrics_status`)."""


def train_metrics_status(privacy) -> str | None:
    """None without privacy; else ``outside_privacy_guarantee`` (computed on the devices' private training data,
    a release no epsilon covers) or ``not_computed`` (``privacy.release_train_metrics: false``)."""
    if privacy.mechanism == "none":
        return None
    return "outside_privacy_guarantee" if privacy.release_train_metrics else "not_computed"


class InjectedStop(RuntimeError):
    """Raised by tests (``stop_after``) to simulate an interrupted run."""


LOG_INTERVAL_S = 1.0
"""An iteration's progress line (``iter t/T kind [metrics where evaluated]; t of T iterations done, ETA ...``) is logged
once this many seconds have passed since the run's start or the last line, and always at iteration T: a run of under a
second logs one, a long run one per iteration or second."""

PLAN_BLOCK_BYTES = 16 << 20
"""The batch plans a block of training rounds draws together at most (one round at least): the first round of a block
draws its rounds' devices and plans and makes their inputs in one go (:meth:`Simulation.draw_block`), the later ones
find them."""


def plan_batch_size(batch_size: int, device_sizes: list[int]) -> int:
    """The width of the batch plans: ``solver.batch_size``, or the largest device's sample count when the batch
    is larger (a batch larger than a device is a full batch of that device; plans never exceed the data)."""
    return max(1, min(batch_size, max(device_sizes, default=1)))


def scaled_features(arr, feature_scaling: str, device: torch.device) -> torch.Tensor:
    """A device's features as a tensor on ``device``; with ``unit_norm`` each row divided by max(||x||, 1)."""
    import torch

    x = torch.as_tensor(arr)
    if feature_scaling == "unit_norm":
        x = x / x.flatten(1).norm(dim=1).clamp_min(1.0).view(-1, *([1] * (x.dim() - 1)))
    return x.to(device)


POOLED: dict[int, tuple[weakref.ref, dict[tuple[str, str], tuple]]] = {}
"""Per data set object (by identity, while it lives): its pooled rows per (feature scaling, device)."""


def pooled_rows(ds: FederatedDataset, feature_scaling: str, device, arrays: bool = False) -> tuple:
    """(train_x, train_y, one-hot train labels, per-device x views, per-device one-hot views, test_x, test_y) of a
    data set: the training devices' rows one after the other, the test rows of every user with some (None without).
    Made once per data set object, scaling and device: the runs of a bundle share its data set, so they share
    these tensors (never written), and the solver's and the evaluation's arrays made from them
    (:data:`upfl.solvers.numba_backend.DEVICE_ROWS`, ``EVALUATION_ROWS``). With ``arrays``: the same rows as NumPy
    arrays (no scaling), for a run on arrays (:attr:`Simulation.arrays`)."""
    pooled = POOLED.get(id(ds))
    if pooled is None or pooled[0]() is not ds:
        ds_id = id(ds)
        pooled = POOLED[ds_id] = (weakref.ref(ds, lambda _: POOLED.pop(ds_id, None)), {})
    made = pooled[1]
    key = (feature_scaling, "arrays" if arrays else str(device))
    if key not in made and arrays:
        made[key] = pooled_arrays(ds)
    if key not in made:
        import torch

        users, sizes = ds.train_users, [len(ds.train_y[u]) for u in ds.train_users]
        train_x = torch.cat([scaled_features(ds.train_x[u], feature_scaling, device) for u in users])
        train_y = torch.cat([torch.as_tensor(ds.train_y[u]) for u in users]).to(device)
        onehot = torch.eye(ds.num_classes, device=device)[train_y]
        test = [u for u in ds.users if len(ds.test_y[u])]
        test_x = torch.cat([scaled_features(ds.test_x[u], feature_scaling, device) for u in test]) if test else None
        test_y = torch.cat([torch.as_tensor(ds.test_y[u]) for u in test]).to(device) if test else None
        made[key] = (
            train_x,
            train_y,
            onehot,
            list(torch.split(train_x, sizes)),
            list(torch.split(onehot, sizes)),
            test_x,
            test_y,
        )
    train_x, train_y, onehot, xs, ys, test_x, test_y = made[key]
    return train_x, train_y, onehot, list(xs), list(ys), test_x, test_y


def pooled_arrays(ds: FederatedDataset) -> tuple:
    """:func:`pooled_rows` as NumPy arrays (the features unscaled): the same numbers torch's tensors hold."""
    users, sizes = ds.train_users, [len(ds.train_y[u]) for u in ds.train_users]
    train_x = np.concatenate([np.asarray(ds.train_x[u]) for u in users])
    train_y = np.concatenate([np.asarray(ds.train_y[u]) for u in users])
    onehot = np.eye(ds.num_classes, dtype=np.float32)[train_y]
    ends = np.cumsum(sizes)[:-1]
    test = [u for u in ds.users if len(ds.test_y[u])]
    test_x = np.concatenate([np.asarray(ds.test_x[u]) for u in test]) if test else None
    test_y = np.concatenate([np.asarray(ds.test_y[u]) for u in test]) if test else None
    return train_x, train_y, onehot, np.split(train_x, ends), np.split(onehot, ends), test_x, test_y


@dataclass
class Simulation:
    cfg: cfgmod.RunConfig
    data: FederatedDataset
    device: Any
    """A ``torch.device``, or a device name (``"cpu"``, ``"cuda"``): the run's device."""
    allow_arrays: bool = False
    """Whether the run may hold its models as arrays and never import torch (:attr:`arrays`)."""
    model: Any = None
    devices: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        c = self.cfg
        ds = self.data
        self.devices = ds.train_users
        self.num_classes = ds.num_classes
        ds.check_labels()
        self.model = build_model(c.model.name, ds, c.model.options, c.model.softmax_before_loss)
        self.local_solve = select_local_solver(
            c.solver.backend, self.model, self.device, c.threads, (algorithm_class(c.algorithm.name).solver_entry,)
        )
        self.batch_plan = getattr(self.local_solve, "batch_plan", seeded_batch_plan)
        self.num_training_rounds = training_rounds_before(c.algorithm.name, c.rounds)
        self.algorithm = build_algorithm(c, len(ds.train_users), self.model.num_params, self.num_training_rounds)
        self.arrays = self.allow_arrays and on_arrays(c, self.model, self.local_solve, self.algorithm, self.device)
        """Whether the models are float32 arrays, and torch is never imported: a run on the compiled solver of an
        algorithm that :attr:`upfl.algorithms.base.Algorithm.runs_on_arrays`, without privacy or feature scaling, on
        a machine where the initial model is drawn without torch (:func:`on_arrays`)."""
        if not self.arrays:
            import torch

            self.device = torch.device(self.device)
            if c.threads:
                torch.set_num_threads(c.threads)
        p = c.privacy
        n = len(self.devices)
        self.sigmas = per_device(p.sigma, n, "privacy.sigma") if p.mechanism == "output" else None
        self.alphas = per_device(p.alpha, n, "privacy.alpha") if p.mechanism == "objective" else None
        self.noise_scales = np.asarray(self.sigmas or self.alphas or [], dtype=np.float32)
        """sigma_i (output perturbation) or alpha_i (objective perturbation) of every device, float32 (as torch
        takes them)."""
        self.device_sizes = [len(ds.train_y[u]) for u in self.devices]
        self.size_array = np.asarray(self.device_sizes, dtype=np.float32)
        self.sizes = self.as_model_kind(self.size_array, on_device=False)
        """|D_i| of every training device, float32, on the CPU (an array, or a tensor sharing its memory)."""
        self.batch_size = plan_batch_size(c.solver.batch_size, self.device_sizes)
        pooled = pooled_rows(ds, c.data.feature_scaling, self.device, arrays=self.arrays)
        self.train_x, self.train_y, self.train_onehot, self.xs, self.ys, self.test_x, self.test_y = pooled
        ends = np.cumsum(self.device_sizes, dtype=np.int64)
        self.row_ranges = np.stack([ends - np.asarray(self.device_sizes, dtype=np.int64), ends], axis=1)
        """(N, 2): device i's rows of the pooled training rows (``train_x``, ``train_onehot``)."""
        self.reads_pooled_rows = getattr(self.local_solve, "reads_pooled_rows", False)
        self.block: dict[int, ClientRound | None] = {}
        """The current block of training rounds: round k -> its inputs (:meth:`client_round`)."""
        self.draw_s = 0.0
        """Seconds spent making the rounds' draws (:meth:`draw_block`): each round's devices and stragglers and the
        devices' batch plans. They are the simulated environment's, the same for every algorithm of a seed, and a
        process makes them once per seed (the first run of a seed in a bundle; the later ones find them kept): the
        run loop keeps them out of the training time (``time.draw_s``)."""
        released_train = train_metrics_status(c.privacy) != "not_computed"
        self.evaluated = [
            (name, x, y, len(y))
            for name, x, y in (("train", self.train_x, self.train_y), ("test", self.test_x, self.test_y))
            if x is not None and (name == "test" or released_train)
        ]
        """The sets :meth:`evaluate` evaluates: (name, x, y, rows)."""
        compiled = getattr(self.local_solve, "evaluator", None)
        self.evaluate_sets = (
            compiled(self.model, [(x, y) for _, x, y, _ in self.evaluated])
            if compiled is not None
            else lambda w: [self.evaluate_model(w, x, y) for _, x, y, _ in self.evaluated]
        )
        """w -> (summed loss, correct predictions) on each of :attr:`evaluated`."""

    def as_model_kind(self, array: np.ndarray, on_device: bool = True):
        """``array`` as the run's models are held: itself on arrays (:attr:`arrays`), else a tensor sharing its memory,
        moved to the run's device unless ``on_device`` is false."""
        if self.arrays:
            return array
        import torch

        tensor = torch.from_numpy(array)
        return tensor.to(self.device) if on_device else tensor

    def initial_model(self):
        """w^0 from the ``init`` stream: ``model.init_params`` of its generator, or on arrays ``model.init_array`` of
        its seed (the same numbers, :func:`upfl.models.draws_without_torch`)."""
        if self.arrays:
            return self.model.init_array(derive_seed(self.cfg.seed, "init"))
        return self.model.init_params(generator(self.cfg.seed, "init")).to(self.device)

    def _x(self, arr) -> torch.Tensor:
        """:func:`scaled_features` of ``arr`` with this run's scaling and device."""
        return scaled_features(arr, self.cfg.data.feature_scaling, self.device)

    def evaluate(self, w: torch.Tensor) -> dict[str, float | None]:
        """Loss and accuracy on the pooled train and test sets; the train ones are None where a private run does not
        release them (:func:`train_metrics_status`), the test ones NaN without a test split."""
        train = None if train_metrics_status(self.cfg.privacy) == "not_computed" else float("nan")
        out: dict[str, float | None] = {
            "train_loss": train,
            "train_acc": train,
            "test_loss": float("nan"),
            "test_acc": float("nan"),
        }
        for (name, _, _, n), (loss, correct) in zip(self.evaluated, self.evaluate_sets(w), strict=True):
            out[f"{name}_loss"], out[f"{name}_acc"] = loss / n, correct / n
        return out

    def evaluate_model(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
        """Summed loss and correct predictions of model ``w`` on (x, y): the compiled solver's evaluation where it
        has one (logistic regression on the CPU), else ``model.evaluate`` in chunks of ``evaluation.batch_size``."""
        compiled = getattr(self.local_solve, "evaluate", None)
        if compiled is not None:
            return compiled(self.model, w, x, y)
        bs = self.cfg.evaluation.batch_size
        loss, correct = 0.0, 0
        for i in range(0, len(y), bs):
            batch_loss, batch_correct = self.model.evaluate(w, x[i : i + bs], y[i : i + bs])
            loss, correct = loss + batch_loss, correct + batch_correct
        return loss, correct

    def training_round(self, w: torch.Tensor, round_k: int) -> tuple[torch.Tensor, int, int]:
        """One training iteration: sample, local solve, aggregate. Returns (w_new, devices, steps)."""
        rnd = self.client_round(round_k)
        if rnd is None:
            return w, 0, 0
        alg, chosen = self.algorithm, rnd.chosen
        noise = self.objective_noise(round_k, chosen) if self.alphas is not None else None
        linear = add_terms(alg.linear_term(w, rnd), noise)
        local, steps = alg.local_solve(w, rnd, linear)
        alg.client_update(w, local, rnd)
        if self.sigmas is not None:
            local = self.output_noise(local, round_k, chosen)
        return alg.server_update(w, local, rnd), len(chosen), steps

    def client_round(self, round_k: int) -> ClientRound | None:
        """Training round k's :class:`upfl.algorithms.ClientRound` (None when no device trains). A round outside the
        current block starts a new one (:meth:`draw_block`), so that a round's draws and inputs cost a look-up."""
        if round_k not in self.block:
            self.block = self.draw_block(round_k)
        return self.block[round_k]

    def draw_block(self, first: int) -> dict[int, ClientRound | None]:
        """The :class:`upfl.algorithms.ClientRound` of the training rounds first, first + 1, ... whose batch plans fit
        in :data:`PLAN_BLOCK_BYTES` (at least round ``first``, at most the run's last): their devices
        (:func:`upfl.draws.rounds.round_participants`), their plans (through
        :data:`upfl.draws.batch_plans.DRAW_CACHE`, from the devices' ``batches`` seeds: those not kept in one
        call), sizes and weights."""
        c, n, width = self.cfg, len(self.devices), self.batch_size
        started = time.perf_counter()
        rounds: list[tuple[int, list[int], list[int], list[int]]] = []
        total = 0
        for k in range(first, max(first, self.num_training_rounds) + 1):
            chosen, epochs = round_participants(c, k, n)
            sizes, chosen_epochs = [self.device_sizes[i] for i in chosen], [epochs[i] for i in chosen]
            total += sum(-(-m // width) * e for m, e in zip(sizes, chosen_epochs, strict=True)) * width * 4
            if rounds and total > PLAN_BLOCK_BYTES:
                break
            rounds.append((k, chosen, sizes, chosen_epochs))
        drawn = [r for r in rounds if r[1]]
        plans = DRAW_CACHE.round_plans(
            c.seed, drawn, width, lambda keys: derive_seeds(c.seed, "batches", keys), self.batch_plan
        )
        self.draw_s += time.perf_counter() - started
        block: dict[int, ClientRound | None] = {k: None for k, *_ in rounds}
        block.update({k: self.round_inputs(k, chosen, p) for (k, chosen, _, _), p in zip(drawn, plans, strict=True)})
        return block

    def round_inputs(self, round_k: int, chosen: list[int], plans: RoundPlans) -> ClientRound:
        """The :class:`upfl.algorithms.ClientRound` of training round k's devices ``chosen`` and their plans."""
        c = self.cfg
        dropout = generator(c.seed, "dropout", round_k) if getattr(self.model, "needs_generator", False) else None
        sizes = self.size_array[chosen]
        total = sizes.sum()
        # size_weights' numbers: a float32 sum of integers is exact in any order while it stays below 2^24
        weights = self.as_model_kind(sizes / total) if total < 2**24 else None
        pooled = (
            PooledRound(self.train_x, self.train_onehot, self.row_ranges[chosen], plans)
            if self.reads_pooled_rows
            else None
        )
        return ClientRound(
            chosen,
            [self.xs[i] for i in chosen],
            [self.ys[i] for i in chosen],
            plans.plans,
            self.as_model_kind(sizes),
            self.model,
            self.local_solve,
            c.solver.lr,
            c.solver.momentum,
            dropout,
            pooled,
            weights,
        )

    def noise_generator(self, round_k: int, device_index: int) -> torch.Generator:
        """The generator of device i's privacy noise in training round k: the ``noise`` stream keyed (seed, k, i)
        (``privacy.noise_source: seeded``) or one seeded by the operating system's entropy (``os``)."""
        if self.cfg.privacy.noise_source == "os":
            return entropy_generator()
        return generator(self.cfg.seed, "noise", round_k, device_index)

    def noise_draws(self, key: tuple, draw: Callable[[], Any]) -> Any:
        """``draw()``'s noise, shared through :data:`DRAW_CACHE` under ``key`` by the runs of one seed (seeded noise);
        drawn afresh every time from the operating system's entropy (``privacy.noise_source: os``)."""
        if self.cfg.privacy.noise_source == "os":
            return draw()
        return DRAW_CACHE.get(key, draw)

    def objective_noise(self, round_k: int, chosen: list[int]) -> torch.Tensor:
        """Objective perturbation (Section 5): n_i ~ exp(-alpha_i ||n||) over the model's parameters, one per
        device and training round from the ``noise`` stream keyed (seed, round, device); added as <n_i, w>.

        The draws do not depend on alpha (:func:`upfl.privacy.mechanisms.objective_noise_draws`): runs of a
        process that share the seed and the round's devices reuse them (:data:`upfl.draws.batch_plans.DRAW_CACHE`)."""
        import torch

        c, P = self.cfg, self.model.num_params

        def draw():
            rows = [objective_noise_draws(1, P, self.noise_generator(round_k, i)) for i in chosen]
            return torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows])

        gamma, direction = self.noise_draws(("objective_noise", c.seed, round_k, tuple(chosen), P), draw)
        return scale_objective_noise(gamma, direction, torch.from_numpy(self.noise_scales[chosen])).to(self.device)

    def output_noise(self, local: torch.Tensor, round_k: int, chosen: list[int]) -> torch.Tensor:
        """Output perturbation (Section 5): clip each released model to norm tau, add N(0, sigma_i^2 I); the
        standard normal draws (``noise`` stream keyed (seed, round, device)) are shared like
        :meth:`objective_noise`'s."""
        c, W = self.cfg, local.cpu()

        def draw():
            return standard_normal_rows(W.shape[1:], [self.noise_generator(round_k, i) for i in chosen], W.dtype)

        noise = self.noise_draws(("output_noise", c.seed, round_k, tuple(chosen), tuple(W.shape[1:]), W.dtype), draw)
        if c.privacy.tau is None:
            raise cfgmod.ConfigError("privacy.tau: output perturbation clips each released model to tau; give it")
        return output_perturbation(W, c.privacy.tau, self.noise_scales[chosen], noise=noise).to(local.device)


def add_terms(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    """The sum of two optional linear terms n_i of the local objective (the algorithm's and the privacy noise)."""
    if a is None or b is None:
        return a if b is None else b
    return a + b


def on_arrays(cfg: cfgmod.RunConfig, model, local_solve, algorithm, device) -> bool:
    """Whether a run holds its models as float32 arrays and never imports torch (:attr:`Simulation.arrays`): it
    trains on the compiled solver, on the CPU, with an algorithm that :attr:`runs_on_arrays
    <upfl.algorithms.base.Algorithm.runs_on_arrays>`, without privacy (the noise mechanisms draw with torch) and
    without feature scaling, and its initial model is drawn without torch here
    (:func:`upfl.models.draws_without_torch`). Its numbers are those of the same run on tensors."""
    return (
        isinstance(local_solve, CompiledSolver)
        and device_type(device) == "cpu"
        and algorithm.runs_on_arrays
        and cfg.privacy.mechanism == "none"
        and cfg.data.feature_scaling == "none"
        and draws_without_torch(model)
    )


def device_name(name: str) -> str:
    """The name of the device ``device: name`` resolves to: ``"cpu"`` without importing torch where no GPU can be
    in use (``cpu``, or ``auto`` with a torch built for none), else :func:`resolve_device`'s."""
    if name == "cpu" or (name == "auto" and not gpu_build()):
        return "cpu"
    return str(resolve_device(name))


def resolve_device(name: str) -> torch.device:
    import torch

    if name == "cuda" and not torch.cuda.is_available():
        raise cfgmod.ConfigError("device: cuda requested but torch finds no CUDA device")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def _metrics_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """metrics.csv's text: a header of ``columns``, then a line per row (floats as ``repr``, a missing value empty)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows([repr(v) if isinstance(v, float) else v for v in map(r.get, columns, repeat(""))] for r in rows)
    return buf.getvalue()


def run(
    cfg: cfgmod.RunConfig,
    out: str | Path,
    log=print,
    stop_after: int | None = None,
    force: bool = False,
    data: FederatedDataset | None = None,
) -> dict[str, Any]:
    """Run one configuration; write OUT/metrics.csv and OUT/summary.json atomically; resume from a checkpoint.

    A non-finite weight vector or loss stops the run: its summary records ``diverged`` (see
    :mod:`upfl.engine.divergence`). OUT is checked before any work (:func:`upfl.engine.runfolder.check_out`).
    ``data``: the data set at ``cfg.data.path`` when the caller has loaded it already (``upfl run-many``
    loads each data set once per bundle); it is only read.
    """
    cfg = cfgmod.validate(cfg)
    out = check_out(out, cfgmod.config_hash(cfg), force)
    data = data if data is not None else load_leaf(cfg.data.path)
    sim = Simulation(cfg, data, device_name(cfg.device), allow_arrays=True)
    log(
        f"{cfg.data.path}: {sim.num_classes} classes ({data.num_classes_source}), "
        f"{len(sim.devices)} training devices, {data.test_samples} test samples"
    )
    if sim.test_x is None:
        log(f"warning: {cfg.data.path} has an empty test split; test metrics are null and no best iteration is chosen")
    privacy = privacy_report(cfg, data, sim.model, noise_source=engine_noise_source(cfg))
    ckpt = open_checkpoint(cfg, out, cfg.data.path) if checkpoints_on(cfg.checkpoint) else None
    if ckpt is not None:
        ckpt.acquire()
    try:
        return _run_loop(cfg, sim, data, out, ckpt, privacy, log, stop_after)
    finally:
        if ckpt is not None:
            ckpt.release()


def metrics_text(row: dict[str, Any]) -> str:
    """An evaluated iteration's metrics for its progress line: ``train_loss .. train_acc .. test_acc ..`` (the train
    ones where released)."""
    train = "" if row["train_loss"] is None else f"train_loss {row['train_loss']:.4f} train_acc {row['train_acc']:.4f} "
    return f"{train}test_acc {row['test_acc']:.4f}"


def is_evaluated(evaluation: cfgmod.EvaluationConfig, t: int, rounds: int) -> bool:
    """Whether iteration t of T is evaluated: every ``evaluation.every``-th among the last ``evaluation.last``
    (all when null), and always T. The other iterations' metrics.csv rows hold empty (NaN) metrics."""
    if t == rounds:
        return True
    recent = evaluation.last is None or t > rounds - evaluation.last
    return recent and t % evaluation.every == 0


def checkpoints_on(checkpoint: cfgmod.CheckpointConfig) -> bool:
    """Whether a run keeps checkpoints at all (``checkpoint.every: 0`` turns them off)."""
    return checkpoint.every != 0


def checkpoint_due(checkpoint: cfgmod.CheckpointConfig, round_k: int, since_last_s: float) -> bool:
    """Whether the training round ``round_k`` that just ended is followed by a checkpoint: ``checkpoint.seconds``
    have passed since the run started or since the last one, or ``round_k`` is a multiple of ``checkpoint.every``."""
    return since_last_s >= checkpoint.seconds or bool(checkpoint.every and round_k % checkpoint.every == 0)


def _run_loop(cfg, sim, data, out, ckpt, privacy, log, stop_after) -> dict[str, Any]:
    T, alg = cfg.rounds, sim.algorithm
    status = train_metrics_status(cfg.privacy)
    columns = METRIC_COLUMNS + list(alg.extra_metrics) + ([TRAIN_METRICS_COLUMN] if status else [])
    times = {"train_s": 0.0, "upcycle_s": 0.0, "eval_s": 0.0, "draw_s": 0.0}
    has_test = sim.test_x is not None
    diverged: dict[str, Any] | None = None
    state = None
    if ckpt is not None:
        ckpt.prune_stale(log)
        shape = (sim.model.num_params,)
        state = ckpt.load({"w": shape, "w_prev": shape}, T)
        if state is not None and ckpt.device_dir is not None and alg.device_state:
            saved = ckpt.load_device_state()
            if saved is None or saved[0] != state["t"]:
                log(
                    f"{ckpt.file}: this private run's device state ({', '.join(alg.device_state)}) is not at "
                    f"{ckpt.device_file} for iteration {state['t']}; starting over"
                )
                state = None
            else:
                state["algorithm_state"] = {**state.get("algorithm_state", {}), **saved[1]}
    if state is not None:
        t0, w, w_prev, rows, times = (
            state["t"],
            sim.as_model_kind(state["w"]),
            sim.as_model_kind(state["w_prev"]),
            state["rows"],
            state["times"],
        )
        alg.load_state_dict({k: sim.as_model_kind(v) for k, v in state.get("algorithm_state", {}).items()}, sim.device)
        log(f"resuming from {ckpt.file} at iteration {t0}")
        problem = weights_problem(w) or weights_problem(w_prev)
        if problem:
            diverged = diverged_entry(t0, rows[-1].get("kind", "train"), f"{problem} (in the checkpoint)")
    else:
        w = sim.initial_model()
        w_prev, t0 = w.copy() if sim.arrays else w.clone(), 0
        e0 = time.perf_counter()
        rows = [
            {
                "iteration": 0,
                "kind": "init",
                **sim.evaluate(w),
                **alg.evaluate_extra(sim, w),
                "devices": 0,
                "local_steps": 0,
                "data_accesses": 0,
                "wall_s": 0.0,
                "cum_wall_s": 0.0,
            }
        ]
        if status:
            rows[0][TRAIN_METRICS_COLUMN] = status
        times["eval_s"] += time.perf_counter() - e0
        problem = loss_problem(rows[0], has_test)
        if problem:
            diverged = diverged_entry(0, "init", problem)
    round_k = training_rounds_before(cfg.algorithm.name, t0)
    unevaluated = dict.fromkeys(("train_loss", "train_acc", "test_loss", "test_acc", *alg.extra_metrics), float("nan"))
    last_checkpoint = last_log = loop_start = time.perf_counter()
    for t in range(t0 + 1, T + 1):
        if diverged:
            break
        start, drawn_before = time.perf_counter(), sim.draw_s
        if alg.trains(t):
            round_k += 1
            w_new, ndev, steps = sim.training_round(w, round_k)
            kind, accesses = "train", ndev
        else:
            w_new = alg.extrapolate(w, w_prev, t)
            kind, ndev, steps, accesses = "upcycle", 0, 0, 0
        drawing = sim.draw_s - drawn_before
        wall = time.perf_counter() - start - drawing
        times["train_s" if kind == "train" else "upcycle_s"] += wall
        times["draw_s"] += drawing
        w_prev, w = w, w_new
        row = {
            "iteration": t,
            "kind": kind,
            "devices": ndev,
            "local_steps": steps,
            "data_accesses": accesses,
            TRAIN_METRICS_COLUMN: status,
        }
        problem = weights_problem(w)
        evaluated_now = bool(problem) or is_evaluated(cfg.evaluation, t, T)
        if evaluated_now:
            e0 = time.perf_counter()
            row.update(sim.evaluate(w))
            row.update(alg.evaluate_extra(sim, w))
            times["eval_s"] += time.perf_counter() - e0
            problem = problem or loss_problem(row, has_test)
        else:
            row.update(unevaluated)
        now = time.perf_counter()
        if t == T or now - last_log >= LOG_INTERVAL_S:
            done = progress_text(t - t0, T - t0, now - loop_start, "iterations")
            log(f"iter {t}/{T} {kind}{' ' + metrics_text(row) if evaluated_now else ''}; {done}")
            last_log = now
        row["wall_s"] = wall
        row["cum_wall_s"] = rows[-1]["cum_wall_s"] + wall
        rows.append({k: row[k] for k in columns})
        if problem:
            diverged = diverged_entry(t, kind, problem)
            log(f"diverged at iteration {t}: {problem}; stopping")
            break
        if (
            ckpt is not None
            and kind == "train"
            and t < T
            and checkpoint_due(cfg.checkpoint, round_k, time.perf_counter() - last_checkpoint)
        ):
            public, device_state = alg.split_state()
            if ckpt.device_dir is not None and alg.device_state:  # private: device state kept apart (owner-only)
                ckpt.save_device_state(device_state, t)
            else:
                public = {**public, **device_state}
            ckpt.save(
                {
                    "config_hash": cfgmod.config_hash(cfg),
                    "t": t,
                    "w": w,
                    "w_prev": w_prev,
                    "rows": rows,
                    "times": times,
                    "algorithm_state": public,
                }
            )
            last_checkpoint = time.perf_counter()
        if stop_after is not None and t >= stop_after:
            raise InjectedStop(f"stopped after iteration {t}")
    final = rows[-1]
    keys = ("iteration", "train_loss", "train_acc", "test_loss", "test_acc", *alg.extra_metrics)
    evaluated = [r for r in rows if math.isfinite(r["test_acc"])] if not diverged else []
    best = max(evaluated, key=lambda r: r["test_acc"]) if evaluated else None
    summary = {
        "diverged": diverged or False,
        "final": {k: final[k] for k in keys},
        "best": {k: best[k] for k in keys} if best else None,
        "config": cfgmod.to_dict(cfg),
        "config_hash": cfgmod.config_hash(cfg),
        "seed": cfg.seed,
        "data_digest": data_fingerprint(cfg.data.path),
        **provenance(),
        "device": str(sim.device),
        "num_classes": sim.num_classes,
        "num_classes_source": data.num_classes_source,
        "test_samples": data.test_samples,
        "time": {**times, "total_s": final["cum_wall_s"] + times["eval_s"] + times["draw_s"]},
        "training_rounds": sim.num_training_rounds,
        "stragglers": straggler_summary(cfg, len(sim.devices)),
        "privacy": privacy,
    }
    make_dirs(out)
    texts = {"metrics.csv": _metrics_csv(rows, columns), "summary.json": json_text(summary)}
    record = record_text(summary["config_hash"], {name: text.encode("utf-8") for name, text in texts.items()})
    write_texts(
        {out / "metrics.csv": texts["metrics.csv"], out / RECORD: record, out / "summary.json": texts["summary.json"]}
    )
    if ckpt is not None:
        ckpt.remove()
    return summary
