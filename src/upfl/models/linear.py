"""The two logistic-regression models (Appendix H.2): multinomial on Synthetic and the binary log-loss model of
objective perturbation, as functions of one flat parameter vector. Importing this module imports no torch: a run
on the compiled solver (:mod:`upfl.solvers.numba_backend`) holds its parameters as float32 arrays and draws its
initial model with :func:`init_array`, torch's numbers without torch (:mod:`upfl.draws.normal`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..draws.normal import BLOCK, emulates_torch, standard_normal
from ..errors import ConfigError
from .options import check_options, flag, flat_features

if TYPE_CHECKING:
    import torch


INIT_STD = 0.01
"""Standard deviation of the ``normal`` initialisation (the authors' code: weights N(0, 0.01^2), biases 0)."""

BIAS_FEATURE_SCALE = 1.0 / math.sqrt(2.0)
""":class:`BinaryLogisticRegression` with a bias uses features ``[x, 1] / sqrt(2)``: norm <= 1 when ||x|| <= 1."""


def softmax_first_residual(z: torch.Tensor, y_onehot: torch.Tensor) -> torch.Tensor:
    """d/dz CE(softmax(z), y) = p * (g - <p, g>) with p = softmax(z), g = softmax(p) - y.

    The loss of the authors' released models, whose ``forward`` ends in a softmax that
    ``nn.CrossEntropyLoss`` then softmaxes again (``model.softmax_before_loss``).
    """
    import torch

    p = torch.softmax(z, dim=-1)
    g = torch.softmax(p, dim=-1) - y_onehot
    return p * (g - (p * g).sum(-1, keepdim=True))


def class_scores(z: torch.Tensor, softmax_before_loss: bool) -> torch.Tensor:
    """What the cross-entropy reads: the logits, or their softmax under ``model.softmax_before_loss``."""
    import torch

    return torch.softmax(z, dim=-1) if softmax_before_loss else z


class LogisticRegression:
    """Multinomial logistic regression, logits ``x W + b`` with W of shape (d, C); analytic gradient.

    Parameters are flattened as ``[W.ravel(), b]``. Initialisation: W ~ N(0, 0.01^2), b = 0.
    ``softmax_before_loss``: the loss is CE(softmax(z), y), the authors' model (:func:`softmax_first_residual`);
    predictions are unchanged (the softmax keeps the order of the logits).
    """

    needs_generator = False
    glm_constants = None

    def __init__(self, dim: int, num_classes: int, softmax_before_loss: bool = False):
        self.dim, self.num_classes = dim, num_classes
        self.softmax_before_loss = softmax_before_loss
        self.num_params = dim * num_classes + num_classes
        self.gaussian_draws = dim * num_classes
        """How many standard normals the initial model draws (the weights; the biases start at 0)."""

    def init_params(self, generator: torch.Generator) -> torch.Tensor:
        import torch

        w = torch.randn(self.gaussian_draws, generator=generator) * INIT_STD
        return torch.cat([w, torch.zeros(self.num_classes)])

    def init_array(self, seed: int) -> np.ndarray:
        """:meth:`init_params` of a CPU generator fresh from ``manual_seed(seed)``, as a float32 array, drawn
        without torch (where :func:`draws_without_torch`)."""
        w = standard_normal(seed, self.gaussian_draws) * np.float32(INIT_STD)
        return np.concatenate([w, np.zeros(self.num_classes, np.float32)])

    def split(self, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = params.shape[:-1]
        dc = self.dim * self.num_classes
        return params[..., :dc].reshape(*k, self.dim, self.num_classes), params[..., dc:]

    def logits(self, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        import torch

        w, b = self.split(params)
        if params.dim() == 1:
            return x @ w + b
        return torch.baddbmm(b.unsqueeze(1), x, w)

    def loss_and_grad(
        self, params: torch.Tensor, x: torch.Tensor, y_onehot: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """Gradient (k, P) of the weighted cross-entropy sum_b weights[:, b] * CE_b.

        ``x`` (k, B, d), ``y_onehot`` (k, B, C), ``weights`` (k, B): 1/(batch size) for real samples, 0 for
        padding, so the result is the gradient of each device's mean batch loss.
        """
        import torch

        z = self.logits(params, x)
        if self.softmax_before_loss:
            resid = softmax_first_residual(z, y_onehot) * weights.unsqueeze(-1)
        else:
            resid = (torch.softmax(z, dim=-1) - y_onehot) * weights.unsqueeze(-1)
        grad_w = torch.bmm(x.transpose(1, 2), resid)
        grad_b = resid.sum(1)
        return torch.cat([grad_w.flatten(1), grad_b], dim=1)

    def evaluate(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
        """Summed cross-entropy (of the softmax under ``softmax_before_loss``) and number of correct predictions."""
        import torch

        with torch.no_grad():
            z = self.logits(params, x)
            loss = torch.nn.functional.cross_entropy(class_scores(z, self.softmax_before_loss), y, reduction="sum")
            return float(loss), int((z.argmax(1) == y).sum())


class BinaryLogisticRegression:
    """Single-logit logistic regression with the log loss L(z) = log(1 + exp(-y z)), y in {-1, +1}.

    Appendix H.2 / Theorem C.2: objective perturbation needs a generalized linear model with
    |L'| <= u1 = 1 and L'' <= u2 = 1/4 on features of norm <= 1; ``glm_constants = (1.0, 0.25)``.
    Labels 0/1 map to y = -1/+1 (label 1 is the positive class). ``z = <theta, x~>``: without a bias
    x~ = x and theta holds d weights; with ``bias`` the constant is folded into the features,
    x~ = [x, 1] / sqrt(2) (norm <= 1 whenever ||x|| <= 1, e.g. with ``data.feature_scaling:
    unit_norm``) and theta holds d weights then the bias. Initialisation: weights N(0, 0.01^2), bias 0.
    Prediction: label 1 when z > 0.
    """

    needs_generator = False
    glm_constants = (1.0, 0.25)

    def __init__(self, dim: int, bias: bool = True):
        self.dim, self.bias = dim, bias
        self.num_params = dim + int(bias)
        self.gaussian_draws = dim
        """How many standard normals the initial model draws (the weights; the bias starts at 0)."""

    def init_params(self, generator: torch.Generator) -> torch.Tensor:
        import torch

        w = torch.randn(self.gaussian_draws, generator=generator) * INIT_STD
        return torch.cat([w, torch.zeros(int(self.bias))])

    def init_array(self, seed: int) -> np.ndarray:
        """:meth:`init_params` of a CPU generator fresh from ``manual_seed(seed)``, as a float32 array, drawn
        without torch (where :func:`draws_without_torch`)."""
        w = standard_normal(seed, self.gaussian_draws) * np.float32(INIT_STD)
        return np.concatenate([w, np.zeros(int(self.bias), np.float32)])

    def features_array(self, x: np.ndarray) -> np.ndarray:
        """:meth:`features` of a float32 array: ``x``, or ``[x, 1] / sqrt(2)`` (the same float32 products)."""
        if not self.bias:
            return x
        return np.concatenate([x, np.ones_like(x[..., :1])], axis=-1) * np.float32(BIAS_FEATURE_SCALE)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """x~: ``x`` itself, or ``[x, 1] / sqrt(2)`` with a bias."""
        import torch

        if not self.bias:
            return x
        return torch.cat([x, torch.ones_like(x[..., :1])], dim=-1) * BIAS_FEATURE_SCALE

    def loss_and_grad(
        self, params: torch.Tensor, x: torch.Tensor, y_onehot: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """Gradient (k, P) of sum_b weights[:, b] * log(1 + exp(-y_b z_b)): sum_b w_b (-y_b sigma(-y_b z_b)) x~_b."""
        import torch

        xt = self.features(x)
        sign = 2.0 * y_onehot[..., 1:].sum(-1) - 1.0
        z = torch.bmm(xt, params.unsqueeze(-1)).squeeze(-1)
        coef = -sign * torch.sigmoid(-sign * z) * weights
        return torch.bmm(coef.unsqueeze(1), xt).squeeze(1)

    def evaluate(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
        """Summed log loss and number of correct predictions (label 1 when z > 0) on (x, y)."""
        import torch

        with torch.no_grad():
            z = self.features(x) @ params
            sign = 2.0 * y.to(z.dtype) - 1.0
            loss = torch.nn.functional.softplus(-sign * z).sum()
            return float(loss), int(((z > 0).long() == y).sum())


def build_logreg(dataset, options: dict | None, softmax_before_loss: bool = False) -> LogisticRegression:
    if options:
        raise ConfigError(f"model.options: logreg takes no options, got {sorted(options)}")
    return LogisticRegression(flat_features("logreg", dataset), dataset.num_classes, softmax_before_loss)


def build_binary_logreg(dataset, options: dict | None, softmax_before_loss: bool = False) -> BinaryLogisticRegression:
    """``binary_logreg`` options: ``bias`` (true: fold the bias into the features, see the class)."""
    if softmax_before_loss:
        raise ConfigError(
            "model.softmax_before_loss: binary_logreg has a single logit (log loss); the switch "
            "applies to the multinomial models (logreg, mlp, cnn, lstm)"
        )
    opts = check_options("binary_logreg", options, {"bias": True})
    bias = flag(opts, "bias")
    if dataset.num_classes > 2:
        raise ConfigError(
            f"model.name: binary_logreg is a two-class model (labels 0 and 1); data set "
            f"{dataset.path or ''} has {dataset.num_classes} classes"
        )
    return BinaryLogisticRegression(flat_features("binary_logreg", dataset), bias)


LINEAR_MODELS = (LogisticRegression, BinaryLogisticRegression)


def draws_without_torch(model) -> bool:
    """Whether ``model.init_array`` draws torch's initial model on this machine: a logistic-regression model whose
    Gaussian draw has at least 16 values, where :func:`upfl.draws.normal.emulates_torch`."""
    return type(model) in LINEAR_MODELS and model.gaussian_draws >= BLOCK and emulates_torch()
