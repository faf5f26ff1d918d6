"""Models as functions of one flat parameter vector (``(P,)``, or ``(k, P)`` for k devices)."""

from __future__ import annotations

import torch


class LogisticRegression:
    """Multinomial logistic regression, logits ``x W + b`` with W of shape (d, C); analytic gradient.

    Parameters are flattened as ``[W.ravel(), b]``. Initialisation: W ~ N(0, 0.01^2), b = 0.
    """

    def __init__(self, dim: int, num_classes: int):
        self.dim, self.num_classes = dim, num_classes
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

    def loss_and_grad(self, params: torch.Tensor, x: torch.Tensor, y_onehot: torch.Tensor,
                      weights: torch.Tensor) -> torch.Tensor:
        """Gradient (k, P) of the weighted cross-entropy sum_b weights[:, b] * CE_b.

        ``x`` (k, B, d), ``y_onehot`` (k, B, C), ``weights`` (k, B): 1/(batch size) for real samples, 0 for
        padding, so the result is the gradient of each device's mean batch loss.
        """
        z = self.logits(params, x)
        resid = (torch.softmax(z, dim=-1) - y_onehot) * weights.unsqueeze(-1)
        grad_w = torch.bmm(x.transpose(1, 2), resid)
        grad_b = resid.sum(1)
        return torch.cat([grad_w.flatten(1), grad_b], dim=1)

    @torch.no_grad()
    def evaluate(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
        """Summed cross-entropy and number of correct predictions of one model on (x, y)."""
        z = self.logits(params, x)
        loss = torch.nn.functional.cross_entropy(z, y, reduction="sum")
        return float(loss), int((z.argmax(1) == y).sum())


def build_model(name: str, dataset, options: dict | None = None) -> LogisticRegression:
    """The model ``name`` for a :class:`upfl.data.leaf.FederatedDataset` (its feature shape, classes, side files)."""
    if options:
        raise ValueError(f"model.options: {name} takes no options, got {sorted(options)}")
    if name == "logreg":
        return LogisticRegression(int(dataset.feature_shape[0]), dataset.num_classes)
    raise ValueError(f"model.name: unknown model {name!r}; available: logreg")
