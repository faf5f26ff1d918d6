"""Batched local solver: k devices run SGD with momentum on F_i(w) + mu/2 ||w - w_global||^2 (+ <n_i, w>) together.

Devices are sorted by their number of SGD steps, so at step s the active devices are a prefix and
finished devices cost nothing. Batch orders are drawn up front (one permutation per epoch per device).
"""

from __future__ import annotations

import torch

CHUNK_STEPS = 64


def pad_devices(xs: list[torch.Tensor], ys: list[torch.Tensor], plans: list[torch.Tensor], dev: torch.device):
    """Devices sorted by steps (descending) into padded tensors: x (k, n_max+1, ...), y (k, n_max+1, C),
    batch indices (k, s_max, B) into them (padding points at the zero row n_max), the float mask of real
    samples, the order, its inverse and the sorted step counts."""
    k = len(xs)
    steps = torch.tensor([p.shape[0] for p in plans])
    order = torch.argsort(steps, descending=True, stable=True)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(k)
    n_max = max(x.shape[0] for x in xs)
    x_pad = torch.zeros((k, n_max + 1) + tuple(xs[0].shape[1:]), dtype=xs[0].dtype, device=dev)
    y_pad = torch.zeros((k, n_max + 1, ys[0].shape[1]), dtype=ys[0].dtype, device=dev)
    s_max = int(steps.max())
    b = plans[0].shape[1]
    idx = torch.full((k, s_max, b), -1, dtype=torch.long)
    for j, i in enumerate(order.tolist()):
        n = xs[i].shape[0]
        x_pad[j, :n], y_pad[j, :n] = xs[i], ys[i]
        idx[j, : plans[i].shape[0]] = plans[i]
    mask_all = (idx >= 0).to(y_pad.dtype).to(dev)
    idx = torch.where(idx >= 0, idx, n_max).to(dev)
    return x_pad, y_pad, idx, mask_all, order, inverse, steps[order].tolist()


def local_solve(
    model,
    w_global: torch.Tensor,
    xs: list[torch.Tensor],
    ys: list[torch.Tensor],
    plans: list[torch.Tensor],
    mu: float,
    lr: float,
    momentum: float,
    linear_term: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, int]:
    """Run every device's plan from ``w_global``; return the (k, P) local models and the total SGD steps.

    ``ys`` are one-hot (n_i, C) float tensors; ``linear_term`` (k, P) adds n_i to each gradient.
    ``generator`` (the round's ``dropout`` stream) is passed to models that draw randomness
    (``model.needs_generator``).
    """
    extra = {"generator": generator} if getattr(model, "needs_generator", False) else {}
    k = len(xs)
    dev = w_global.device
    x_pad, y_pad, idx, mask_all, order, inverse, sorted_steps = pad_devices(xs, ys, plans, dev)
    s_max = sorted_steps[0]
    w = w_global.expand(k, -1).clone()
    buf = torch.zeros_like(w)
    lin = None if linear_term is None else linear_term[order.to(linear_term.device)]
    rows = torch.arange(k, device=dev).view(k, 1, 1)
    active = k
    for s0 in range(0, s_max, CHUNK_STEPS):
        s1 = min(s0 + CHUNK_STEPS, s_max)
        while sorted_steps[active - 1] <= s0:
            active -= 1
        # Only the devices still training gather their batches (the sizes' long tail leaves one or two).
        rc, ic = rows[:active], idx[:active, s0:s1]
        xc, yc, mc = x_pad[rc, ic], y_pad[rc, ic], mask_all[:active, s0:s1]
        mc = mc / mc.sum(-1, keepdim=True).clamp_min(1)
        for s in range(s0, s1):
            while sorted_steps[active - 1] <= s:
                active -= 1
            j = s - s0
            wa, ba = w[:active], buf[:active]
            g = model.loss_and_grad(wa, xc[:active, j], yc[:active, j], mc[:active, j], **extra)
            if mu:
                g.add_(wa - w_global, alpha=mu)
            if lin is not None:
                g.add_(lin[:active])
            ba.mul_(momentum).add_(g)
            wa.sub_(ba, alpha=lr)
    return w[inverse.to(dev)], sum(sorted_steps)
