"""Models as functions of one flat parameter vector (``(P,)``, or ``(k, P)`` for k devices).

Every model has ``num_params``, ``needs_generator`` (the solver then passes the round's ``dropout``
stream generator), ``glm_constants`` (``(u1, u2)`` of Theorem C.2 for a generalized linear model,
else ``None``), ``init_params(generator) -> (P,)``, ``loss_and_grad(params (k, P), x (k, B, ...),
y_onehot (k, B, C), weights (k, B)) -> (k, P)`` (gradient of ``sum_b weights * loss_b``) and
``evaluate(params (P,), x, y) -> (summed loss, correct)``.

The paper's models (Appendix H.2): multinomial logistic regression on Synthetic
(:class:`LogisticRegression`), the binary log-loss model that objective perturbation needs
(:class:`BinaryLogisticRegression`), a two-layer MLP (:class:`MLPNet`) and a CNN (:class:`CNNNet`)
on FEMNIST, and a stacked LSTM on Sent140 (:class:`StackedLSTMNet`). The neural networks are
``nn.Module`` s run through :class:`TorchModel`, which keeps the flat-parameter contract. The two linear models
live in :mod:`upfl.models.linear` (importing it imports no torch), the networks in :mod:`upfl.models.networks`;
this package names every model and builds it (:func:`build_model`), importing the networks only when one is asked
for.

``model.softmax_before_loss`` (off by default) makes the multinomial models' loss the cross-entropy of the
softmax of the logits, as the authors' released models compute it (``forward`` ends in a softmax and
``nn.CrossEntropyLoss`` applies a second one); the binary model has a single logit and no such variant.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from .linear import (
    BIAS_FEATURE_SCALE,
    INIT_STD,
    LINEAR_MODELS,
    BinaryLogisticRegression,
    LogisticRegression,
    build_binary_logreg,
    build_logreg,
    class_scores,
    draws_without_torch,
    softmax_first_residual,
)

__all__ = [
    "BIAS_FEATURE_SCALE",
    "BUILDERS",
    "INIT_STD",
    "LINEAR_MODELS",
    "BinaryLogisticRegression",
    "LogisticRegression",
    "build_model",
    "class_scores",
    "draws_without_torch",
    "softmax_first_residual",
]


def network_builder(name: str) -> Callable[[Any, dict | None, bool], Any]:
    """The builder of network ``name`` from :mod:`upfl.models.networks`, which is imported (with torch) when the
    builder is first called."""

    def build(dataset, options: dict | None, softmax_before_loss: bool = False):
        return getattr(importlib.import_module(".networks", __name__), f"build_{name}")(
            dataset, options, softmax_before_loss
        )

    build.__name__ = f"build_{name}"
    return build


BUILDERS: dict[str, Callable[[Any, dict | None, bool], Any]] = {
    "logreg": build_logreg,
    "binary_logreg": build_binary_logreg,
    "mlp": network_builder("mlp"),
    "cnn": network_builder("cnn"),
    "lstm": network_builder("lstm"),
}


def build_model(name: str, dataset, options: dict | None = None, softmax_before_loss: bool = False):
    """The model ``name`` for a :class:`upfl.data.leaf.FederatedDataset` (its feature shape, classes, side files);
    ``softmax_before_loss`` as ``model.softmax_before_loss`` (the authors' loss, see the module)."""
    if name not in BUILDERS:
        raise ConfigError(f"model.name: unknown model {name!r}; available: {', '.join(BUILDERS)}")
    return BUILDERS[name](dataset, options, softmax_before_loss)


def __getattr__(name: str) -> Any:
    """The networks' names (:class:`TorchModel`, :class:`MLPNet`, ``EVAL_CHUNK``, ...) from
    :mod:`upfl.models.networks`, imported on first use."""
    networks = importlib.import_module(".networks", __name__)
    try:
        return getattr(networks, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
