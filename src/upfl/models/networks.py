"""The neural networks (Appendix H.2): a two-layer MLP (:class:`MLPNet`) and a CNN (:class:`CNNNet`) on FEMNIST, a
stacked LSTM on Sent140 (:class:`StackedLSTMNet`), each an ``nn.Module`` run through :class:`TorchModel`, which keeps
the flat-parameter contract."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable
from typing import ClassVar, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from ..errors import ConfigError
from .linear import INIT_STD, class_scores
from .options import check_options, choice, positive_int, positive_ints, unit_rate

EVAL_CHUNK = 1024
"""Samples per forward pass in :meth:`TorchModel.evaluate` (memory bound only)."""


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
        if batching == "bmm" and not self.has_bmm():
            raise ConfigError(
                f"model.options.batching: bmm is the {type(module).__name__}'s own backward pass, "
                + (
                    "logits to the loss (not with model.softmax_before_loss)"
                    if softmax_before_loss
                    else "which it lacks"
                )
                + "; use auto, vmap or loop"
            )
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

    def has_bmm(self) -> bool:
        """Whether the ``bmm`` batching applies: the module has its own backward pass, and the loss reads the logits."""
        return hasattr(self.module, "batched_grads") and not self.softmax_before_loss

    def strategy(self, device: torch.device) -> str:
        """``vmap``, ``loop`` or ``bmm``: the configured one, or with ``auto`` on the CPU the faster one measured on
        this machine (:func:`upfl.measured.measured_batching`, ``benchmarks/real_data.py --paper-sized``), else the
        module's default for the device type."""
        if self.batching != "auto":
            return self.batching
        if device.type == "cpu":
            from ..measured import measured_batching

            measured = measured_batching(self.module.model_name)
            if measured in ("vmap", "loop") or (measured == "bmm" and self.has_bmm()):
                return measured
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
        strategy = self.strategy(params.device)
        if strategy == "vmap":
            return self.grad_vmap(params, x, y_onehot, weights, masks)
        if strategy == "bmm":
            return self.grad_bmm(params, x, y_onehot, weights, masks)
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

    def grad_bmm(self, params, x, y_onehot, weights, masks) -> torch.Tensor:
        """All k per-device gradients from the module's own backward pass in batched matrix products
        (``module.batched_grads``), written into one (k, P) tensor in flat order."""
        out = torch.empty_like(params)
        batched_grads = cast(Callable[..., dict[str, torch.Tensor]], self.module.batched_grads)
        grads = batched_grads(self.unflatten(params), x, y_onehot, weights, masks)
        for name, view in self.unflatten(out).items():
            view.copy_(grads[name])
        return out

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
    model_name: ClassVar[str]
    mask_shapes: tuple[tuple[int, ...], ...]


class MLPNet(DeviceNet):
    """FEMNIST MLP (Appendix H.2): "a two layer network with hidden dimension 14*14".

    784 -> ``hidden`` (196) -> ReLU -> dropout -> classes, as the authors' released ``Twolayer``
    (which also adds a softmax before the loss: ``model.softmax_before_loss``; by default the logits go to the
    cross-entropy).
    """

    batching = {"cpu": "vmap", "cuda": "vmap"}
    model_name = "mlp"

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

    @staticmethod
    def batched_grads(
        p: dict[str, torch.Tensor],
        x: torch.Tensor,
        y_onehot: torch.Tensor,
        weights: torch.Tensor,
        masks: tuple[torch.Tensor, ...],
    ) -> dict[str, torch.Tensor]:
        """The gradients of k devices' sum_b weights_b * CE_b (logits to the loss) by hand, in batched products.

        a = x W1^T + b1, h = relu(a) * mask, z = h W2^T + b2; dz = weights_b (softmax(z) sum_c y_bc - y_b),
        dW2 = dz^T h, dh = dz W2, da = dh * mask * [a > 0], dW1 = da^T x (the biases: the sums over b).
        """
        xk = x.reshape(x.shape[0], x.shape[1], -1)
        a = torch.baddbmm(p["fc1.bias"].unsqueeze(1), xk, p["fc1.weight"].transpose(1, 2))
        h = torch.relu(a)
        if masks:
            h = h * masks[0]
        z = torch.baddbmm(p["fc2.bias"].unsqueeze(1), h, p["fc2.weight"].transpose(1, 2))
        dz = (torch.softmax(z, dim=-1) * y_onehot.sum(-1, keepdim=True) - y_onehot) * weights.unsqueeze(-1)
        da = torch.bmm(dz, p["fc2.weight"]) * (a > 0)
        if masks:
            da = da * masks[0]
        return {
            "fc1.weight": torch.bmm(da.transpose(1, 2), xk),
            "fc1.bias": da.sum(1),
            "fc2.weight": torch.bmm(dz.transpose(1, 2), h),
            "fc2.bias": dz.sum(1),
        }


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
    model_name = "cnn"

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
    model_name = "lstm"
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


INIT_SCHEMES = ("torch", "normal")
BATCHING = ("auto", "vmap", "loop", "bmm")
"""``model.options.batching``: ``auto`` (this machine's measured choice, else the module's default), ``vmap``,
``loop``, or ``bmm`` (the module's own backward pass in batched matrix products: the MLP's, logits to the loss)."""


def on_meta(factory: Callable[[], DeviceNet]) -> DeviceNet:
    """Build a module on the meta device (no memory, no draw from the global RNG)."""
    with torch.device("meta"):
        return factory()


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
    from ..data.glove import load_embeddings
    from ..data.leaf import DatasetError

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
