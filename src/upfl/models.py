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
``nn.Module`` s run through :class:`TorchModel`, which keeps the flat-parameter contract.

``model.softmax_before_loss`` (off by default) makes the multinomial models' loss the cross-entropy of the
softmax of the logits, as the authors' released models compute it (``forward`` ends in a softmax and
``nn.CrossEntropyLoss`` applies a second one); the binary model has a single logit and no such variant.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from .errors import ConfigError

INIT_STD = 0.01
"""Standard deviation of the ``normal`` initialisation (the authors' code: weights N(0, 0.01^2), biases 0)."""

BIAS_FEATURE_SCALE = 1.0 / math.sqrt(2.0)
""":class:`BinaryLogisticRegression` with a bias uses features ``[x, 1] / sqrt(2)``: norm <= 1 when ||x|| <= 1."""

EVAL_CHUNK = 1024
"""Samples per forward pass in :meth:`TorchModel.evaluate` (memory bound only)."""


def softmax_first_residual(z: torch.Tensor, y_onehot: torch.Tensor) -> torch.Tensor:
    """d/dz CE(softmax(z), y) = p * (g - <p, g>) with p = softmax(z), g = softmax(p) - y.

    The loss of the authors' released models, whose ``forward`` ends in a softmax that
    ``nn.CrossEntropyLoss`` then softmaxes again (``model.softmax_before_loss``).
    """
    p = torch.softmax(z, dim=-1)
    g = torch.softmax(p, dim=-1) - y_onehot
    return p * (g - (p * g).sum(-1, keepdim=True))


def class_scores(z: torch.Tensor, softmax_before_loss: bool) -> torch.Tensor:
    """What the cross-entropy reads: the logits, or their softmax under ``model.softmax_before_loss``."""
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

    def init_params(self, generator: torch.Generator) -> torch.Tensor:
        w = torch.randn(self.dim * self.num_classes, generator=generator) * 0.01
        return torch.cat([w, torch.zeros(self.num_classes)])

    def split(self, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = params.shape[:-1]
        dc = self.dim * self.num_classes
        return params[..., :dc].reshape(*k, self.dim, self.num_classes), params[..., dc:]

    def logits(self, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
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
        z = self.logits(params, x)
        if self.softmax_before_loss:
            resid = softmax_first_residual(z, y_onehot) * weights.unsqueeze(-1)
        else:
            resid = (torch.softmax(z, dim=-1) - y_onehot) * weights.unsqueeze(-1)
        grad_w = torch.bmm(x.transpose(1, 2), resid)
        grad_b = resid.sum(1)
        return torch.cat([grad_w.flatten(1), grad_b], dim=1)

    @torch.no_grad()
    def evaluate(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
        """Summed cross-entropy (of the softmax under ``softmax_before_loss``) and number of correct predictions."""
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

    def init_params(self, generator: torch.Generator) -> torch.Tensor:
        w = torch.randn(self.dim, generator=generator) * INIT_STD
        return torch.cat([w, torch.zeros(int(self.bias))])

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """x~: ``x`` itself, or ``[x, 1] / sqrt(2)`` with a bias."""
        if not self.bias:
            return x
        return torch.cat([x, torch.ones_like(x[..., :1])], dim=-1) * BIAS_FEATURE_SCALE

    def loss_and_grad(
        self, params: torch.Tensor, x: torch.Tensor, y_onehot: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """Gradient (k, P) of sum_b weights[:, b] * log(1 + exp(-y_b z_b)): sum_b w_b (-y_b sigma(-y_b z_b)) x~_b."""
        xt = self.features(x)
        sign = 2.0 * y_onehot[..., 1:].sum(-1) - 1.0
        z = torch.bmm(xt, params.unsqueeze(-1)).squeeze(-1)
        coef = -sign * torch.sigmoid(-sign * z) * weights
        return torch.bmm(coef.unsqueeze(1), xt).squeeze(1)

    @torch.no_grad()
    def evaluate(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
        """Summed log loss and number of correct predictions (label 1 when z > 0) on (x, y)."""
        z = self.features(x) @ params
        sign = 2.0 * y.to(z.dtype) - 1.0
        loss = F.softplus(-sign * z).sum()
        return float(loss), int(((z > 0).long() == y).sum())


def torch_default_bound(module: nn.Module, name: str) -> float:
    """PyTorch's ``reset_parameters`` bound b of the parameter ``name``: it draws U(-b, b).

    ``nn.Linear`` / ``nn.Conv2d`` (weight and bias): b = 1 / sqrt(fan_in), fan_in = in_features
    times the kernel size; ``nn.LSTM`` (every weight and bias): b = 1 / sqrt(hidden_size).
    """
    owner = module.get_submodule(name.rpartition(".")[0])
    if isinstance(owner, nn.LSTM):
        return 1.0 / math.sqrt(owner.hidden_size)
    if isinstance(owner, (nn.Linear, nn.Conv2d)):
        return 1.0 / math.sqrt(owner.weight.shape[1:].numel())
    raise TypeError(f"{name}: no default initialisation for {type(owner).__name__}")


def init_tensor(
    module: nn.Module, name: str, shape: torch.Size, scheme: str, generator: torch.Generator
) -> torch.Tensor:
    """One parameter's initial value, drawn from ``generator`` only.

    ``torch``: PyTorch's default U(-b, b) (:func:`torch_default_bound`); ``normal``: weights
    N(0, 0.01^2) and biases 0 (the authors' initialisation).
    """
    if scheme == "normal":
        if name.rpartition(".")[2].startswith("bias"):
            return torch.zeros(shape)
        return torch.randn(shape, generator=generator) * INIT_STD
    bound = torch_default_bound(module, name)
    return (torch.rand(shape, generator=generator) * 2.0 - 1.0) * bound


def dropout_masks(
    generator: torch.Generator,
    leading: tuple[int, ...],
    shapes: tuple[tuple[int, ...], ...],
    rate: float,
    device: torch.device,
) -> tuple[torch.Tensor, ...]:
    """Inverted-dropout masks, one per site: 0 with probability ``rate``, else 1 / (1 - rate).

    Drawn on the generator's device in site order, then moved to ``device``: the same generator
    state gives the same masks on any device. No draw (empty tuple) when ``rate`` is 0.
    """
    if rate == 0.0:
        return ()
    return tuple(
        (
            (torch.rand(leading + tuple(s), generator=generator, device=generator.device) >= rate).to(torch.float32)
            / (1.0 - rate)
        ).to(device)
        for s in shapes
    )


def weighted_cross_entropy(z: torch.Tensor, y_onehot: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_b weights_b * CE(z_b, y_b) for one device's (B, C) logits and one-hot labels."""
    return -(weights * (y_onehot * torch.log_softmax(z, dim=-1)).sum(-1)).sum()


class TorchModel:
    """An ``nn.Module`` as a function of one flat parameter vector.

    ``module`` lives on the meta device: it holds no values and its construction draws nothing from
    the global RNG. Each call passes the parameters, views into the flat vector in
    ``module.named_parameters()`` order, through ``torch.func.functional_call``. ``buffers`` are
    frozen tensors (Sent140's GloVe matrix): not in the flat vector, copied to the input's device on
    first use. The module's ``forward(x, masks)`` takes one dropout mask per entry of its
    ``mask_shapes`` (per sample), or ``()`` for no dropout (evaluation).

    Per-device gradients: ``vmap(grad(loss))`` over the k devices, or a loop of k autograd passes;
    ``batching: auto`` takes the module's measured faster one (``module.batching``, a dict by device
    type; benchmarks/real_data.py). Dropout masks are drawn from the solver's generator before either
    runs, so both see the same masks and the result depends only on the generator's state.
    """

    glm_constants = None

    def __init__(
        self,
        module: DeviceNet,
        buffers: dict[str, torch.Tensor] | None = None,
        dropout: float = 0.0,
        init: str = "torch",
        batching: str = "auto",
        softmax_before_loss: bool = False,
    ):
        self.module, self.dropout, self.init, self.batching = module, dropout, init, batching
        self.softmax_before_loss = softmax_before_loss
        self.buffers = dict(buffers or {})
        self.names = [n for n, _ in module.named_parameters()]
        self.shapes = [p.shape for _, p in module.named_parameters()]
        self.sizes = [s.numel() for s in self.shapes]
        self.num_params = sum(self.sizes)
        self.needs_generator = dropout > 0.0
        self._device_buffers: dict[torch.device, dict[str, torch.Tensor]] = {}

    def init_params(self, generator: torch.Generator) -> torch.Tensor:
        """The ``init`` scheme (:func:`init_tensor`) for every parameter in flat order, from ``generator`` only."""
        return torch.cat(
            [
                init_tensor(self.module, n, s, self.init, generator).flatten()
                for n, s in zip(self.names, self.shapes, strict=True)
            ]
        )

    def unflatten(self, params: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of ``params`` (``(..., P)``) shaped like each parameter (with the leading dims)."""
        lead = params.shape[:-1]
        parts = torch.split(params, self.sizes, dim=-1)
        return {n: p.view(*lead, *s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)}

    def buffers_on(self, device: torch.device) -> dict[str, torch.Tensor]:
        if device not in self._device_buffers:
            self._device_buffers[device] = {n: b.to(device) for n, b in self.buffers.items()}
        return self._device_buffers[device]

    def logits(self, params: torch.Tensor, x: torch.Tensor, masks: tuple[torch.Tensor, ...] = ()) -> torch.Tensor:
        """One model's (B, C) logits on one batch ``x`` (B, ...)."""
        state = {**self.unflatten(params), **self.buffers_on(x.device)}
        return functional_call(self.module, state, (x, masks))

    def batch_loss(
        self,
        params: torch.Tensor,
        x: torch.Tensor,
        y_onehot: torch.Tensor,
        weights: torch.Tensor,
        masks: tuple[torch.Tensor, ...],
    ) -> torch.Tensor:
        """sum_b weights_b * CE_b of one device (the function whose gradient the solver needs)."""
        z = class_scores(self.logits(params, x, masks), self.softmax_before_loss)
        return weighted_cross_entropy(z, y_onehot, weights)

    def strategy(self, device: torch.device) -> str:
        """``vmap`` or ``loop``: the configured one, or with ``auto`` the module's choice for the device type."""
        if self.batching != "auto":
            return self.batching
        return self.module.batching.get(device.type, "vmap")

    def loss_and_grad(
        self,
        params: torch.Tensor,
        x: torch.Tensor,
        y_onehot: torch.Tensor,
        weights: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Gradient (k, P) of each device's sum_b weights[:, b] * CE_b (dropout masks from ``generator``)."""
        masks = self.draw_masks(generator, params.shape[0], x.shape[1], x.device)
        if self.strategy(params.device) == "vmap":
            return self.grad_vmap(params, x, y_onehot, weights, masks)
        return self.grad_loop(params, x, y_onehot, weights, masks)

    def draw_masks(
        self, generator: torch.Generator | None, k: int, batch: int, device: torch.device
    ) -> tuple[torch.Tensor, ...]:
        if not self.needs_generator:
            return ()
        if generator is None:
            raise ValueError("this model uses dropout: loss_and_grad needs the round's dropout generator")
        return dropout_masks(generator, (k, batch), self.module.mask_shapes, self.dropout, device)

    def grad_vmap(self, params, x, y_onehot, weights, masks) -> torch.Tensor:
        """All k per-device gradients in one ``vmap(grad(...))`` pass."""
        return vmap(grad(self.batch_loss))(params, x, y_onehot, weights, masks)

    def grad_loop(self, params, x, y_onehot, weights, masks) -> torch.Tensor:
        """The k per-device gradients, one autograd pass each."""
        out = torch.empty_like(params)
        with torch.enable_grad():
            for i in range(params.shape[0]):
                p = params[i].detach().requires_grad_(True)
                loss = self.batch_loss(p, x[i], y_onehot[i], weights[i], tuple(m[i] for m in masks))
                out[i] = torch.autograd.grad(loss, p)[0]
        return out

    @torch.no_grad()
    def evaluate(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
        """Summed cross-entropy and correct predictions of one model on (x, y), no dropout, in chunks."""
        loss = torch.zeros((), dtype=torch.float64, device=x.device)
        correct = torch.zeros((), dtype=torch.long, device=x.device)
        for i in range(0, x.shape[0], EVAL_CHUNK):
            z = class_scores(self.logits(params, x[i : i + EVAL_CHUNK]), self.softmax_before_loss)
            yc = y[i : i + EVAL_CHUNK]
            loss += F.cross_entropy(z, yc, reduction="sum").double()
            correct += (z.argmax(1) == yc).sum()
        return float(loss), int(correct)

    def module_from(self, params: torch.Tensor) -> nn.Module:
        """A plain CPU ``nn.Module`` holding ``params`` (P,) and the buffers (tests, export)."""
        net = copy.deepcopy(self.module)
        values = {**self.unflatten(params.detach().cpu()), **self.buffers}
        for name, value in values.items():
            owner, _, leaf = name.rpartition(".")
            sub = net.get_submodule(owner)
            setattr(sub, leaf, nn.Parameter(value.clone()) if name in self.names else value.clone())
        return net


class DeviceNet(nn.Module):
    """A network :class:`TorchModel` trains: its batching per device type and the per-sample dropout mask shapes."""

    batching: ClassVar[dict[str, str]]
    mask_shapes: tuple[tuple[int, ...], ...]


class MLPNet(DeviceNet):
    """FEMNIST MLP (Appendix H.2): "a two layer network with hidden dimension 14*14".

    784 -> ``hidden`` (196) -> ReLU -> dropout -> classes, as the authors' released ``Twolayer``
    (which also adds a softmax before the loss: ``model.softmax_before_loss``; by default the logits go to the
    cross-entropy).
    """

    batching = {"cpu": "vmap", "cuda": "vmap"}

    def __init__(self, in_features: int, hidden: int, num_classes: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.mask_shapes = ((hidden,),)

    def forward(self, x: torch.Tensor, masks: tuple[torch.Tensor, ...] = ()) -> torch.Tensor:
        h = torch.relu(self.fc1(x.reshape(x.shape[0], -1)))
        if masks:
            h = h * masks[0]
        return self.fc2(h)


class CNNNet(DeviceNet):
    """FEMNIST CNN (Appendix H.2): "a 3*3 convolutional layer with 3 channels ... following by two
    linear layers (followed by activation and dropout) with dimension 1000 and 100".

    Fixed choices where the paper is silent: the 784 features are a 1 x 28 x 28 image; the
    convolution has padding 1 (same size), stride 1, a bias, and a ReLU; no pooling; flatten
    (3 * 28 * 28 = 2352) -> 1000 -> ReLU -> dropout -> 100 -> ReLU -> dropout -> classes.
    On the CPU a per-device loop is faster than vmap (benchmarks/real_data.py: 0.21 s against 0.25 s
    per solver step of 15 devices, 2 threads), so ``auto`` picks it there.
    """

    batching = {"cpu": "loop", "cuda": "vmap"}

    def __init__(self, side: int, channels: int, hidden: tuple[int, ...], num_classes: int):
        super().__init__()
        self.side = side
        self.conv = nn.Conv2d(1, channels, kernel_size=3, padding=1)
        widths = (channels * side * side,) + tuple(hidden)
        self.fcs = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))
        self.out = nn.Linear(widths[-1], num_classes)
        self.mask_shapes = tuple((h,) for h in hidden)

    def forward(self, x: torch.Tensor, masks: tuple[torch.Tensor, ...] = ()) -> torch.Tensor:
        h = torch.relu(self.conv(x.reshape(x.shape[0], 1, self.side, self.side))).flatten(1)
        for i, fc in enumerate(self.fcs):
            h = torch.relu(fc(h))
            if masks:
                h = h * masks[i]
        return self.out(h)


class StackedLSTMNet(DeviceNet):
    """Sent140 stacked LSTM (Appendix H.2): "2 layers with 128 dimension", 300d word embeddings.

    Token ids (B, T) -> frozen GloVe rows (the buffer ``embedding``, row ``len(vocab)`` is the zero
    pad/unknown row) -> ``layers`` x ``hidden`` LSTM (batch first, zero initial state) -> the top
    layer's output at the last time step (LEAF pads at the end and its reference model reads the last
    step too) -> optional dropout -> linear -> classes.
    """

    batching = {"cpu": "loop", "cuda": "loop"}
    embedding: torch.Tensor

    def __init__(self, rows: int, dim: int, hidden: int, layers: int, num_classes: int):
        super().__init__()
        self.register_buffer("embedding", torch.empty(rows, dim))
        self.lstm = nn.LSTM(dim, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, num_classes)
        self.mask_shapes = ((hidden,),)

    def forward(self, x: torch.Tensor, masks: tuple[torch.Tensor, ...] = ()) -> torch.Tensor:
        seq, _ = self.lstm(F.embedding(x, self.embedding))
        h = seq[:, -1]
        if masks:
            h = h * masks[0]
        return self.out(h)


def check_options(model: str, options: dict | None, defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` updated by ``options``; an unknown key is a :class:`ConfigError` naming it."""
    options = dict(options or {})
    for key in options:
        if key not in defaults:
            raise ConfigError(f"model.options.{key}: {model} has no option {key!r}; its options: {', '.join(defaults)}")
    return {**defaults, **options}


def positive_int(opts: dict, key: str) -> int:
    v = opts[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"model.options.{key}: expected a positive integer, got {v!r}")
    return v


def positive_ints(opts: dict, key: str) -> tuple[int, ...]:
    v = opts[key]
    if (
        not isinstance(v, (list, tuple))
        or not v
        or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in v)
    ):
        raise ConfigError(f"model.options.{key}: expected a non-empty list of positive integers, got {v!r}")
    return tuple(v)


def unit_rate(opts: dict, key: str) -> float:
    v = opts[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
        raise ConfigError(f"model.options.{key}: expected a number in [0, 1), got {v!r}")
    return float(v)


def choice(opts: dict, key: str, allowed: tuple[str, ...]) -> str:
    if opts[key] not in allowed:
        raise ConfigError(f"model.options.{key}: must be one of {', '.join(allowed)}; got {opts[key]!r}")
    return opts[key]


def flag(opts: dict, key: str) -> bool:
    if not isinstance(opts[key], bool):
        raise ConfigError(f"model.options.{key}: expected true or false, got {opts[key]!r}")
    return opts[key]


INIT_SCHEMES = ("torch", "normal")
BATCHING = ("auto", "vmap", "loop")


def on_meta(factory: Callable[[], DeviceNet]) -> DeviceNet:
    """Build a module on the meta device (no memory, no draw from the global RNG)."""
    with torch.device("meta"):
        return factory()


def flat_features(name: str, dataset) -> int:
    shape = tuple(dataset.feature_shape)
    if len(shape) != 1:
        raise ConfigError(f"model.name: {name} needs flat feature vectors; data set has x rows of shape {shape}")
    return int(shape[0])


def image_side(dataset) -> int:
    """The side s of the square s x s greyscale images the CNN reads (784 features -> 28)."""
    shape = tuple(dataset.feature_shape)
    n = math.prod(shape)
    side = math.isqrt(n)
    if (len(shape) == 2 and shape[0] != shape[1]) or len(shape) > 2 or side * side != n:
        raise ConfigError(
            f"model.name: cnn needs square greyscale images (e.g. 784 = 28 x 28 features); "
            f"data set has x rows of shape {shape}"
        )
    return side


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


def build_mlp(dataset, options: dict | None, softmax_before_loss: bool = False) -> TorchModel:
    """``mlp`` options: ``hidden`` (196 = 14*14), ``dropout`` (0.5, the authors' code), ``init`` (normal),
    ``batching``."""
    opts = check_options("mlp", options, {"hidden": 196, "dropout": 0.5, "init": "normal", "batching": "auto"})
    d, hidden = math.prod(dataset.feature_shape), positive_int(opts, "hidden")
    dropout, init, batching = (
        unit_rate(opts, "dropout"),
        choice(opts, "init", INIT_SCHEMES),
        choice(opts, "batching", BATCHING),
    )
    module = on_meta(lambda: MLPNet(d, hidden, dataset.num_classes))
    return TorchModel(module, dropout=dropout, init=init, batching=batching, softmax_before_loss=softmax_before_loss)


def build_cnn(dataset, options: dict | None, softmax_before_loss: bool = False) -> TorchModel:
    """``cnn`` options: ``channels`` (3), ``hidden`` ([1000, 100]), ``dropout`` (0.5), ``init`` (torch),
    ``batching``."""
    opts = check_options(
        "cnn", options, {"channels": 3, "hidden": [1000, 100], "dropout": 0.5, "init": "torch", "batching": "auto"}
    )
    side, channels, hidden = image_side(dataset), positive_int(opts, "channels"), positive_ints(opts, "hidden")
    dropout, init, batching = (
        unit_rate(opts, "dropout"),
        choice(opts, "init", INIT_SCHEMES),
        choice(opts, "batching", BATCHING),
    )
    module = on_meta(lambda: CNNNet(side, channels, hidden, dataset.num_classes))
    return TorchModel(module, dropout=dropout, init=init, batching=batching, softmax_before_loss=softmax_before_loss)


def sent140_embeddings(dataset) -> torch.Tensor:
    """The frozen (len(vocab) + 1, 300) GloVe matrix of a Sent140 folder; token ids must index it."""
    from .data.glove import load_embeddings
    from .data.leaf import DatasetError

    if not dataset.path:
        raise ConfigError("model.name: lstm reads the GloVe matrix from the data set folder; this data set has no path")
    _, matrix = load_embeddings(dataset.path, dataset.meta)
    ids = [x for xs in (dataset.train_x, dataset.test_x) for x in xs.values() if x.size]
    if any(x.dtype.kind not in "iu" for x in ids):
        raise DatasetError(f"{dataset.path}: lstm needs token ids (meta.json x_dtype int64)")
    top = max((int(x.max()) for x in ids), default=0)
    low = min((int(x.min()) for x in ids), default=0)
    if low < 0 or top >= matrix.shape[0]:
        raise DatasetError(
            f"{dataset.path}: token ids span {low}..{top} but the embedding matrix has {matrix.shape[0]} rows"
        )
    return torch.as_tensor(matrix, dtype=torch.float32)


def build_lstm(dataset, options: dict | None, softmax_before_loss: bool = False) -> TorchModel:
    """``lstm`` options: ``hidden`` (128), ``layers`` (2), ``dropout`` (0.0, on the last hidden state),
    ``init`` (torch), ``batching``. The embeddings come from the folder (:func:`upfl.data.glove.load_embeddings`)."""
    opts = check_options(
        "lstm", options, {"hidden": 128, "layers": 2, "dropout": 0.0, "init": "torch", "batching": "auto"}
    )
    if len(dataset.feature_shape) != 1:
        raise ConfigError(
            f"model.name: lstm needs token-id sequences; data set has x rows of shape {dataset.feature_shape}"
        )
    hidden, layers = positive_int(opts, "hidden"), positive_int(opts, "layers")
    dropout, init, batching = (
        unit_rate(opts, "dropout"),
        choice(opts, "init", INIT_SCHEMES),
        choice(opts, "batching", BATCHING),
    )
    matrix = sent140_embeddings(dataset)
    module = on_meta(lambda: StackedLSTMNet(matrix.shape[0], matrix.shape[1], hidden, layers, dataset.num_classes))
    return TorchModel(
        module,
        buffers={"embedding": matrix},
        dropout=dropout,
        init=init,
        batching=batching,
        softmax_before_loss=softmax_before_loss,
    )


BUILDERS: dict[str, Callable[[Any, dict | None, bool], Any]] = {
    "logreg": build_logreg,
    "binary_logreg": build_binary_logreg,
    "mlp": build_mlp,
    "cnn": build_cnn,
    "lstm": build_lstm,
}


def build_model(name: str, dataset, options: dict | None = None, softmax_before_loss: bool = False):
    """The model ``name`` for a :class:`upfl.data.leaf.FederatedDataset` (its feature shape, classes, side files);
    ``softmax_before_loss`` as ``model.softmax_before_loss`` (the authors' loss, see the module)."""
    if name not in BUILDERS:
        raise ConfigError(f"model.name: unknown model {name!r}; available: {', '.join(BUILDERS)}")
    return BUILDERS[name](dataset, options, softmax_before_loss)
