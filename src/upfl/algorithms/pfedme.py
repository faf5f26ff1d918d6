"""pFedMe (T. Dinh et al. 2020): personalisation with Moreau envelopes.

Device i keeps a personal model theta_i near its local copy of the global model: at every local step it takes
K gradient steps (personal lr) on f_i(theta; batch) + lambda/2 ||theta - w_i||^2, then moves
w_i <- w_i - eta lambda (w_i - theta). The server mixes w^{t+1} = (1 - beta) w^t + beta sum_i p_i w_i
(beta = ``server_lr``). Both the global model (the usual metrics) and the personal models (each evaluated on
its own device's data: ``personal_train_acc``, ``personal_test_acc``) are reported.
"""

from __future__ import annotations

import torch

from ..solvers.torch_backend import pad_devices
from .base import Algorithm
from .updates import average


def personal_solve(model, w_global, xs, ys, plans, lr, personal_lambda, personal_lr, personal_steps, generator=None):
    """pFedMe's local solve (Dinh et al. 2020, Algorithm 1 lines 5-8), all devices batched as in
    :func:`upfl.solvers.torch_backend.local_solve`: from w_i = theta_i = ``w_global``, per batch row ``personal_steps``
    times {theta_i -= personal_lr (grad f_i(theta_i; batch) + lambda (theta_i - w_i))}, then
    w_i -= lr lambda (w_i - theta_i). Returns ((k, P) local models, (k, P) personal models, total SGD steps
    times ``personal_steps``) in input device order."""
    extra = {"generator": generator} if getattr(model, "needs_generator", False) else {}
    dev = w_global.device
    x_pad, y_pad, idx, mask, order, inverse, sorted_steps = pad_devices(xs, ys, plans, dev)
    k = len(xs)
    local = w_global.expand(k, -1).clone()
    theta = local.clone()
    rows = torch.arange(k, device=dev).view(k, 1)
    active = k
    for s in range(sorted_steps[0]):
        while sorted_steps[active - 1] <= s:
            active -= 1
        xb, yb = x_pad[rows[:active], idx[:active, s]], y_pad[rows[:active], idx[:active, s]]
        mb = mask[:active, s]
        mb = mb / mb.sum(-1, keepdim=True).clamp_min(1)
        la, ta = local[:active], theta[:active]
        for _ in range(personal_steps):
            g = model.loss_and_grad(ta, xb, yb, mb, **extra)
            g.add_(ta - la, alpha=personal_lambda)
            ta.sub_(g, alpha=personal_lr)
        la.sub_(la - ta, alpha=lr * personal_lambda)
    back = inverse.to(dev)
    return local[back], theta[back], sum(sorted_steps) * personal_steps


class PFedMe(Algorithm):
    """Its own local solve (the bi-level problem is not the solver's objective); plain SGD steps (the paper's),
    so ``solver.momentum`` is not used."""

    name = "pfedme"
    solver_entry = "personal_solve"
    device_state = ("personal", "trained")
    extra_metrics = ("personal_train_acc", "personal_test_acc")

    def __init__(self, cfg, num_devices: int, num_params: int) -> None:
        super().__init__(cfg, num_devices, num_params)
        self.personal: torch.Tensor | None = None
        self.trained: torch.Tensor | None = None
        self._eval_sets: list[tuple] | None = None

    def local_solve(self, w, rnd, linear):
        """The compiled solve the selected solver carries (``rnd.solve.personal_solve``: logreg models on the
        CPU), else :func:`personal_solve`; keeps every sampled device's personal model."""
        a = self.cfg
        if self.personal is None:
            self.personal = self.zeros(w, self.num_devices)
            self.trained = torch.zeros(self.num_devices, dtype=w.dtype, device=w.device)
        solve = getattr(rnd.solve, "personal_solve", personal_solve)
        local, theta, steps = solve(
            rnd.model,
            w,
            rnd.xs,
            rnd.ys,
            rnd.plans,
            rnd.lr,
            a.personal_lambda,
            a.personal_lr,
            a.personal_steps,
            generator=rnd.generator,
            **rnd.solver_inputs(),
        )
        self.personal[rnd.chosen] = theta
        self.trained[rnd.chosen] = 1.0
        return local, steps

    def server_update(self, w, released, rnd):
        return w + self.server_lr * (average(released, rnd.weights) - w)

    def evaluate_extra(self, sim, w):
        """Accuracy of every device's personal model on its own train and test data (the current global model
        for devices that have not trained yet), pooled over devices."""
        if self._eval_sets is None:
            ds = sim.data
            self._eval_sets = [
                (
                    sim.xs[i],
                    torch.as_tensor(ds.train_y[u]).to(sim.device),
                    sim._x(ds.test_x[u]) if len(ds.test_y[u]) else None,
                    torch.as_tensor(ds.test_y[u]).to(sim.device),
                )
                for i, u in enumerate(sim.devices)
            ]
        correct, count = {"train": 0, "test": 0}, {"train": 0, "test": 0}
        for i, (xtr, ytr, xte, yte) in enumerate(self._eval_sets):
            model_i = self.personal[i] if self.trained is not None and self.trained[i] else w
            for name, x, y in (("train", xtr, ytr), ("test", xte, yte)):
                if x is not None and len(y):
                    correct[name] += sim.evaluate_model(model_i, x, y)[1]
                    count[name] += len(y)
        return {f"personal_{n}_acc": (correct[n] / count[n]) if count[n] else float("nan") for n in ("train", "test")}

    def _state(self):
        return {"personal": self.personal, "trained": self.trained}
