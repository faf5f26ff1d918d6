"""The short abstract base of every federated algorithm (one small class per algorithm, Flower-strategy style).

A base algorithm says what a sampled device minimises and how the server turns the released local models
into the next global model. The local objective handed to the solver is always

    F_i(w) + mu/2 ||w - w_global||^2 + <n_i, w>

with ``mu`` = :attr:`Algorithm.proximal_mu` and ``n_i`` = :meth:`Algorithm.linear_term` (SCAFFOLD's
correction, FedDyn's lagged gradient) plus, for private runs, the objective-perturbation noise (the two add).
An algorithm whose local problem is not of this form (pFedMe) overrides :meth:`Algorithm.local_solve`.
Per-device and server state lives in the algorithm object and is saved with the checkpoint as a
``dict[str, Tensor]`` (:meth:`state_dict`). The simulation loop (:mod:`upfl.engine.simulation`) calls only these hooks.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from .. import names
from .updates import average, size_weights

if TYPE_CHECKING:
    import torch


@dataclass
class ClientRound:
    """What the devices of one training round work with (the simulation builds it; algorithms read it)."""

    chosen: list[int]
    """Indices (in data-set order) of the devices that train this round."""
    xs: list[torch.Tensor]
    ys: list[torch.Tensor]
    """Their features and one-hot labels."""
    plans: list[torch.Tensor]
    """Their batch plans, (steps_i, B) sample indices (:func:`upfl.draws.batch_plans.batch_plan`)."""
    sizes: torch.Tensor
    """Their numbers of training samples |D_i| (float, on the model's device)."""
    model: Any
    solve: Callable
    """The selected local solver (:func:`upfl.solvers.torch_backend.local_solve` contract)."""
    lr: float
    momentum: float
    generator: torch.Generator | None
    """The round's ``dropout`` stream for models that draw randomness."""
    pooled: Any = None
    """For a solver that ``reads_pooled_rows``: the devices as blocks of the run's pooled rows and their joined plans
    (:class:`upfl.solvers.selection.PooledRound`), else None."""
    weights: torch.Tensor | None = None
    """p_i = |D_i| / sum_j |D_j| over the round's devices (Algorithm 1 line 6):
    :func:`upfl.algorithms.updates.size_weights` of ``sizes`` unless given (the same numbers), made with the round
    (before the solve)."""

    def __post_init__(self) -> None:
        if self.weights is None:
            self.weights = size_weights(self.sizes)

    def solver_inputs(self) -> dict[str, Any]:
        """The keyword arguments the round adds to the solver's (``pooled`` where the simulation made it)."""
        return {} if self.pooled is None else {"pooled": self.pooled}

    @property
    def steps(self) -> list[int]:
        """tau_i: every device's number of local SGD steps this round (stragglers run fewer)."""
        return [int(p.shape[0]) for p in self.plans]


class Algorithm(ABC):
    """A base algorithm. Subclasses set :attr:`name` and override the hooks they change; :attr:`keys`,
    :attr:`uses_mu` and :attr:`privacy` are filled from :mod:`upfl.names` for that name (:meth:`__init_subclass__`).

    ``cfg`` is the run's :class:`upfl.config.AlgorithmConfig`; ``num_devices`` and ``num_params`` size the
    per-device state (allocated lazily, on the device of the first global model seen).
    """

    name: str
    keys: ClassVar[tuple[str, ...]] = ()
    """The ``algorithm.*`` keys this algorithm reads besides ``name`` (any other key set to a non-default value
    is a config error naming it); :data:`upfl.names.ALGORITHM_KEYS` holds them."""
    uses_mu: ClassVar[bool] = False
    """Whether ``algorithm.mu`` is this algorithm's proximal coefficient (then ``lam`` of an upcycled run reads
    mu/(mu+lambda)); else ``mu`` must be 0."""
    privacy: ClassVar[dict[str, str | None]] = {"output": None, "objective": None}
    """Per privacy mechanism: None where the paper's analysis applies, else the reason it does not."""
    solver_entry: ClassVar[str] = "local_solve"
    """The selected solver's entry point this algorithm's devices train with: ``local_solve``, or ``personal_solve``
    (pFedMe's bi-level solve, which the selected solver carries); a compiled solver loads only that kernel."""
    extra_metrics: tuple[str, ...] = ()
    """Metric columns this algorithm adds to metrics.csv (:meth:`evaluate_extra`)."""
    server_lr_default: ClassVar[float] = 1.0
    runs_on_arrays: bool = False
    """Whether every hook also works with the global and local models as float32 arrays (no torch), so that a run
    on the compiled solver holds them as arrays and never imports torch (:mod:`upfl.engine.simulation`): true of
    an algorithm whose server takes the weighted average (:func:`upfl.algorithms.updates.average`) and keeps no
    state."""
    device_state: tuple[str, ...] = ()
    """The :meth:`state_dict` entries computed from the devices' own, un-noised local models (per-device state and
    server state made from it): a private run never writes them in its run folder
    (:mod:`upfl.engine.checkpoints`). State computed from the released (noisy) models only is not listed."""

    def __init_subclass__(cls, **kwargs) -> None:
        """A class naming a base algorithm of :data:`upfl.names.BASE_ALGORITHMS` reads its keys, whether it uses mu
        and its privacy refusals from :mod:`upfl.names`, the one place they are decided."""
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if name in names.BASE_ALGORITHMS:
            cls.keys = names.ALGORITHM_KEYS[name]
            cls.uses_mu = names.uses_mu(name)
            cls.privacy = names.privacy_refusals(name)

    def __init__(self, cfg, num_devices: int, num_params: int) -> None:
        self.cfg = cfg
        self.num_devices = num_devices
        self.num_params = num_params
        self.server_lr = self.server_lr_default if cfg.server_lr is None else float(cfg.server_lr)

    @property
    def proximal_mu(self) -> float:
        """mu of the local objective (0 unless the algorithm has a proximal term)."""
        return float(self.cfg.mu) if self.uses_mu else 0.0

    @property
    def extrapolation_mu(self) -> float:
        """The mu of mu/(mu+lambda) when upcycled (the proximal coefficient; FedDyn's alpha)."""
        return names.extrapolation_mu(names.base_name(self.name), self.cfg.mu, self.cfg.alpha)

    def trains(self, t: int) -> bool:
        """Whether iteration t is a training iteration (every t for a base algorithm, odd t upcycled)."""
        return names.is_training_iteration(self.name, t)

    def linear_term(self, w: torch.Tensor, rnd: ClientRound) -> torch.Tensor | None:
        """n_i of the local objective, (k, P) for the round's devices, or None."""
        return None

    def local_solve(self, w: torch.Tensor, rnd: ClientRound, linear: torch.Tensor | None) -> tuple[torch.Tensor, int]:
        """Algorithm 1 line 4: every device's local model from ``w``; returns ((k, P) models, total SGD steps)."""
        return rnd.solve(
            rnd.model,
            w,
            rnd.xs,
            rnd.ys,
            rnd.plans,
            self.proximal_mu,
            rnd.lr,
            rnd.momentum,
            linear_term=linear,
            generator=rnd.generator,
            **rnd.solver_inputs(),
        )

    def client_update(  # noqa: B027 - a hook that keeps no state unless a base algorithm overrides it
        self, w: torch.Tensor, local: torch.Tensor, rnd: ClientRound
    ) -> None:
        """Update per-device state from the devices' own (not yet released) local models."""

    def server_update(self, w: torch.Tensor, released: torch.Tensor, rnd: ClientRound) -> torch.Tensor:
        """The next global model from the released local models (default: the weighted average)."""
        assert rnd.weights is not None  # filled from the sizes when the round is made
        return average(released, rnd.weights)

    def evaluate_extra(self, sim, w: torch.Tensor) -> dict[str, float]:
        """Values of :attr:`extra_metrics` for the current global model."""
        return {}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Per-device and server state as plain CPU tensors (checkpoint key ``algorithm_state``)."""
        return {k: v.detach().cpu().clone() for k, v in self._state().items() if v is not None}

    def split_state(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """:meth:`state_dict` as (public state, :attr:`device_state`)."""
        state = self.state_dict()
        return (
            {k: v for k, v in state.items() if k not in self.device_state},
            {k: v for k, v in state.items() if k in self.device_state},
        )

    def load_state_dict(self, state: dict[str, torch.Tensor], device: torch.device) -> None:
        for k, v in state.items():
            if not hasattr(self, k):
                raise KeyError(f"algorithm_state: {self.name} has no state {k!r}")
            setattr(self, k, v.to(device))

    def _state(self) -> dict[str, torch.Tensor | None]:
        """The tensors :meth:`state_dict` saves (attribute name -> tensor); none by default."""
        return {}

    def zeros(self, like: torch.Tensor, rows: int | None = None) -> torch.Tensor:
        """A zero (P,) vector or (rows, P) matrix on ``like``'s device and dtype."""
        import torch

        shape = (self.num_params,) if rows is None else (rows, self.num_params)
        return torch.zeros(shape, dtype=like.dtype, device=like.device)
