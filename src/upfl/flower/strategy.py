"""Upcycled-FL (Algorithm 2) as a Flower strategy wrapping a base strategy.

Flower numbers rounds t = 1, 2, ... like the paper's iterations. At odd t the base strategy samples
nodes, sends them the global arrays and aggregates their replies (Algorithm 1 lines 3-6, FedProx's
``proximal-mu`` included). At even t = 2m :class:`UpcycledFL` sends nothing, neither training nor
evaluation messages, and returns w^{2m} = w^{2m-1} + c_m (w^{2m-1} - w^{2m-2}) (Eq. 5), computed
with :func:`upfl.algorithms.upcycle_step`. Clients therefore release data-dependent models in the
odd rounds only: a private client (clipping and Gaussian noise before its reply) is released
ceil(T/2) times in T rounds instead of T times.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from logging import INFO
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy
from flwr.supercore import log

from ..algorithms import upcycle_coefficient, upcycle_step
from ..names import PREFIX, even_step_coefficient, is_training_iteration

DEVICE_KEY = "partition-id"
"""Metric of a training reply naming the device (the node's ``partition-id``) whose data it released."""


def is_upcycle_round(server_round: int) -> bool:
    """Algorithm 2: even rounds are server-only extrapolations."""
    return not is_training_iteration(PREFIX, server_round)


def training_round(server_round: int) -> int:
    """k, the number of training rounds among rounds 1..t (odd t only train): keys the clients' random draws."""
    return (server_round + 1) // 2


def record_number(record: Mapping[str, Any], key: str) -> float:
    """``record[key]`` of a Flower record (config or metrics) as a number; a ValueError naming the key otherwise."""
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"Flower record: {key!r} must be a number, got {value!r}")
    return value


class UpcycledFL(Strategy):
    """Every even round: no messages, global arrays w + c (w - w_prev); every odd round: ``base``.

    Parameters
    ----------
    base : Strategy
        The strategy of the training rounds, e.g. ``FedProx(proximal_mu=1.0)`` or ``FedAvg()``.
    lam : float, optional
        lambda of Eq. (5); the coefficient is c_1 = mu / (mu + lambda) with mu the base strategy's
        ``proximal_mu`` (0 for strategies without one).
    step : float, optional
        c_1 directly (the authors' code takes this tuned scalar); give ``lam`` or ``step``.
    schedule : str
        ``const`` (c_m = c_1), ``horizon`` (c_1 / sqrt(M), M = ceil(T/2) training rounds) or
        ``inv_sqrt`` (c_1 / sqrt(m)); see :func:`upfl.algorithms.upcycle_coefficient`.
    mu : float, optional
        The clients' proximal mu where the base strategy does not carry it (a FedProx objective on the clients
        under FedAdam, say); default: the base's ``proximal_mu``, 0 without one.

    The base strategy sees Flower's round numbers (1, 3, 5, ...). A base that keeps its own copy of the global
    arrays between rounds (FedAvgM's ``current_arrays``, the anchor of its pseudo-gradient) is handed the upcycled
    arrays before each training round, so that its step starts from w^{2m}, as the clients' training does.
    """

    def __init__(
        self,
        base: Strategy,
        *,
        lam: float | None = None,
        step: float | None = None,
        schedule: str = "const",
        mu: float | None = None,
    ) -> None:
        if (lam is None) == (step is None):
            raise ValueError("UpcycledFL: give exactly one of lam (c = mu/(mu+lam)) or step (c directly)")
        mu = float(getattr(base, "proximal_mu", 0.0)) if mu is None else float(mu)
        if step is not None and step < 0:
            raise ValueError(f"UpcycledFL: step must be >= 0, got {step!r}")
        if step is None and lam is not None and (lam < 0 or mu + lam <= 0):
            raise ValueError(f"UpcycledFL: need lam >= 0 and mu + lam > 0 (mu {mu}, lam {lam}); with mu = 0 give step")
        c1 = even_step_coefficient(mu, lam, step)
        upcycle_coefficient(c1, 1, schedule, 1)
        self.base, self.lam, self.step, self.schedule, self.c1 = base, lam, step, schedule, c1
        self.num_rounds = 0
        self.messages_sent: Counter[int] = Counter()
        """Messages (training and evaluation) this strategy handed to the grid, per round."""
        self._before_training: ArrayRecord | None = None
        self._upcycled: ArrayRecord | None = None

    def coefficient(self, server_round: int) -> float:
        """c_m of even round t = 2m."""
        return upcycle_coefficient(self.c1, server_round // 2, self.schedule, training_round(self.num_rounds))

    def releases(self, num_rounds: int) -> int:
        """Rounds in which a sampled client releases a data-dependent model: ceil(T/2) (the base: T)."""
        return training_round(num_rounds)

    def summary(self) -> None:
        log(INFO, "\t├──> Upcycled-FL: even rounds send no message; w + c (w - w_prev)")
        how = f"step {self.step}" if self.step is not None else f"mu/(mu+lambda), lambda {self.lam}"
        log(INFO, "\t│\t└── c_1 = %.6g (%s), schedule %s", self.c1, how, self.schedule)
        self.base.summary()

    def reset(self, num_rounds: int) -> None:
        """Forget the previous run's arrays; the schedule's horizon is ``num_rounds`` (called by :meth:`start`)."""
        self.num_rounds = num_rounds
        self._before_training = self._upcycled = None

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        self.reset(num_rounds)
        return super().start(grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if is_upcycle_round(server_round):
            if self._before_training is None:
                raise RuntimeError(f"UpcycledFL: round {server_round} has no preceding training round")
            w, w_prev = arrays.to_torch_state_dict(), self._before_training.to_torch_state_dict()
            c = self.coefficient(server_round)
            self._upcycled = ArrayRecord({k: upcycle_step(w[k], w_prev[k], c) for k in w})
            self.messages_sent[server_round] += 0
            return []
        self._before_training = arrays
        if isinstance(getattr(self.base, "current_arrays", None), ArrayRecord):
            self.base.current_arrays = arrays  # type: ignore[attr-defined]  # the FedOpt strategies' own state
        config["training-round"] = training_round(server_round)
        messages = list(self.base.configure_train(server_round, arrays, config, grid))
        self.messages_sent[server_round] += len(messages)
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if is_upcycle_round(server_round):
            upcycled, self._upcycled = self._upcycled, None
            return upcycled, None
        return self.base.aggregate_train(server_round, replies)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if is_upcycle_round(server_round):
            return []
        messages = list(self.base.configure_evaluate(server_round, arrays, config, grid))
        self.messages_sent[server_round] += len(messages)
        return messages

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        if is_upcycle_round(server_round):
            return None
        return self.base.aggregate_evaluate(server_round, replies)


class CountingGrid:
    """A Grid proxy that counts what actually goes out and comes back, per ``server-round`` of the messages' config.

    Pass it to ``strategy.start(grid=CountingGrid(grid), ...)``. ``sent[t]``: messages (training and evaluation)
    of round t (a round absent from ``sent`` sent none). ``train_sent[t]``, ``evaluate_sent[t]``: the training and
    the evaluation messages of round t. ``evaluated[t]``: the metrics of round t's evaluation replies (the clients'
    federated evaluation).
    ``released[i]``: the training replies that carried a model computed on device i's data (``device_key`` of the
    reply's metrics), i.e. device i's releases; a straggler's error reply releases nothing (``errors[t]`` counts
    them). These counts are observed, not replayed from a sampling rule.
    """

    def __init__(self, grid: Grid, configrecord_key: str = "config", device_key: str = DEVICE_KEY) -> None:
        self.grid, self.key, self.device_key = grid, configrecord_key, device_key
        self.sent: Counter[int] = Counter()
        self.train_sent: Counter[int] = Counter()
        self.evaluate_sent: Counter[int] = Counter()
        self.evaluated: dict[int, list[MetricRecord]] = {}
        self.errors: Counter[int] = Counter()
        self.released: Counter[int] = Counter()
        self.error_reasons: dict[int, list[str]] = {}
        """The reasons of round t's training error replies (a straggler dropped, a node the link found gone)."""
        self.replied: Counter[int] = Counter()
        """Training replies of round t that carried a model."""
        self.received: dict[str, Counter[str]] = {}
        """Per message type (``train``, ``evaluate``): how many replies carried each value (the metric names, and
        ``arrays`` for a model, ``error`` for an error reply): every value the server received."""

    def _count(self, messages: Iterable[Message]) -> list[Message]:
        messages = list(messages)
        for m in messages:
            t = int(record_number(m.content.config_records[self.key], "server-round"))
            self.sent[t] += 1
            self.train_sent[t] += m.metadata.message_type == MessageType.TRAIN
            self.evaluate_sent[t] += m.metadata.message_type == MessageType.EVALUATE
        return messages

    def _observe(self, messages: list[Message], replies: Iterable[Message]) -> list[Message]:
        """Count the training replies of one send: releases per device, error replies per round (a strategy sends
        one round per call; the link sets message ids on sending, so they are read after it)."""
        rounds = {
            m.metadata.message_id: int(record_number(m.content.config_records[self.key], "server-round"))
            for m in messages
        }
        only = next(iter(set(rounds.values()))) if len(set(rounds.values())) == 1 else 0
        replies = list(replies)
        for r in replies:
            seen = self.received.setdefault(str(r.metadata.message_type), Counter())
            if r.has_error():
                seen["error"] += 1
            else:
                seen.update(r.content.metric_records.get("metrics", MetricRecord()).keys())
                seen.update(["arrays"] * ("arrays" in r.content))
            if r.metadata.message_type == MessageType.EVALUATE and not r.has_error():
                t = rounds.get(r.metadata.reply_to_message_id, only)
                self.evaluated.setdefault(t, []).append(r.content.metric_records.get("metrics", MetricRecord()))
            if r.metadata.message_type != MessageType.TRAIN:
                continue
            if r.has_error():
                t = rounds.get(r.metadata.reply_to_message_id, only)
                self.errors[t] += 1
                self.error_reasons.setdefault(t, []).append(str(r.error.reason))
            elif "arrays" in r.content:
                metrics = r.content.metric_records.get("metrics")
                if metrics is None or self.device_key not in metrics:
                    raise ValueError(
                        f"CountingGrid: the training reply of node {r.metadata.src_node_id} carries a "
                        f"model but no {self.device_key!r} metric naming its device"
                    )
                self.released[int(record_number(metrics, self.device_key))] += 1
                self.replied[rounds.get(r.metadata.reply_to_message_id, only)] += 1
        return replies

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = self._count(messages)
        return self._observe(messages, self.grid.send_and_receive(messages, timeout=timeout))

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(self._count(messages))

    def __getattr__(self, name: str):
        return getattr(self.grid, name)


class NodesOnly:
    """A Grid proxy whose ``get_node_ids`` lists ``nodes`` only; everything else is the grid's."""

    def __init__(self, grid: Grid, nodes: list[int]) -> None:
        self.grid, self.nodes = grid, list(nodes)

    def get_node_ids(self) -> list[int]:
        return list(self.nodes)

    def __getattr__(self, name: str):
        return getattr(self.grid, name)


class SeedSampling(Strategy):
    """``inner`` (a base strategy or :class:`UpcycledFL`) with the nodes of every training round drawn by ``sample``.

    ``sample(t)`` gives the node ids round t trains (None: leave the choice to ``inner``); ``inner`` sees a grid
    listing those nodes only, so its own sampling (Flower's ``random.sample``) takes all of them. With
    :func:`upfl.draws.rounds.sample_clients` behind ``sample`` a Flower run trains ``upfl run``'s devices in every
    round. Evaluation messages go to the nodes ``inner`` samples from the whole grid.
    """

    def __init__(self, inner: Strategy, sample: Callable[[int], list[int] | None]) -> None:
        self.inner, self.sample = inner, sample
        self.sampled: dict[int, list[int]] = {}
        """The node ids drawn for each training round."""

    def summary(self) -> None:
        log(INFO, "\t├──> nodes of each training round drawn from the run seed's keyed stream")
        self.inner.summary()

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        if isinstance(self.inner, UpcycledFL):
            self.inner.reset(num_rounds)
        self.sampled = {}
        return super().start(grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        nodes = self.sample(server_round)
        if nodes is None:
            return self.inner.configure_train(server_round, arrays, config, grid)
        self.sampled[server_round] = list(nodes)
        return self.inner.configure_train(server_round, arrays, config, NodesOnly(grid, nodes))  # type: ignore[arg-type]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        return self.inner.aggregate_train(server_round, replies)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.inner.aggregate_evaluate(server_round, replies)


def unwrapped(strategy: Strategy) -> Strategy:
    """The strategy inside :class:`SeedSampling` (the strategy itself otherwise)."""
    return strategy.inner if isinstance(strategy, SeedSampling) else strategy


def as_flat(arrays: ArrayRecord, key: str = "params") -> torch.Tensor:
    """The flat parameter vector of an :mod:`upfl.models` model stored under ``key``, in the models' float32.

    Every array enters a model through here: a strategy whose server arithmetic runs in float64 (Flower's FedOpt
    family, FedAdam, FedYogi and FedAdagrad, keeps NumPy float64 moments) hands back float64 arrays."""
    return torch.from_numpy(arrays[key].numpy()).to(torch.float32, copy=True)
