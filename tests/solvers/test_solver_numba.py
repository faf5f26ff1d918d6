"""The compiled (numba) local solver: agreement with the torch solver and a plain SGD loop, runs, errors."""

import math
import sys

import numpy as np
import pytest
import torch

from fixtures_runs import metrics_without_time
from upfl import config as cfgmod
from upfl.algorithms.pfedme import personal_solve
from upfl.data import generate_synthetic
from upfl.draws.batch_plans import batch_plan
from upfl.engine.simulation import run
from upfl.models import BinaryLogisticRegression, LogisticRegression
from upfl.solvers import numba_backend as solver_numba
from upfl.solvers.numba_backend import arithmetic, evaluation, layout, plans, training, vectors
from upfl.solvers.selection import select_local_solver
from upfl.solvers.torch_backend import local_solve


def reference_local_solve(x, labels, w0, plan, mu, lr, momentum, lin, num_classes):
    """Plain torch.optim.SGD(momentum) on CE + mu/2 ||w - w0||^2 + <lin, w>, one batch row at a time."""
    w = w0.clone().requires_grad_(True)
    opt = torch.optim.SGD([w], lr=lr, momentum=momentum)
    for batch in plan:
        idx = batch[batch >= 0]
        opt.zero_grad()
        W, b = w[:-num_classes].view(-1, num_classes), w[-num_classes:]
        loss = torch.nn.functional.cross_entropy(x[idx] @ W + b, labels[idx]) + mu / 2 * (w - w0).pow(2).sum() + lin @ w
        loss.backward()
        opt.step()
    return w.detach()


def small_problem(num_classes, batch_size=8):
    g = torch.Generator().manual_seed(4)
    model = LogisticRegression(5, num_classes)
    sizes, epochs = [3, 40, 17, 65, 9], [2, 5, 1, 3, 4]
    xs = [torch.randn(n, 5, generator=g) for n in sizes]
    labels = [torch.randint(0, num_classes, (n,), generator=g) for n in sizes]
    ys = [torch.eye(num_classes)[y] for y in labels]
    w0 = torch.randn(model.num_params, generator=g) * 0.1
    lin = torch.randn(len(sizes), model.num_params, generator=g) * 0.05
    plans = batch_plan(sizes, epochs, batch_size, [torch.Generator().manual_seed(i) for i in range(len(sizes))])
    return model, w0, xs, labels, ys, plans, lin


@pytest.mark.parametrize("num_classes", [2, 3])
def test_numba_matches_torch_solver_and_sgd_loop(num_classes):
    model, w0, xs, labels, ys, plans, lin = small_problem(num_classes)
    fast, steps = solver_numba.local_solve(model, w0, xs, ys, plans, 0.3, 0.05, 0.5, linear_term=lin)
    batched, batched_steps = local_solve(model, w0, xs, ys, plans, 0.3, 0.05, 0.5, linear_term=lin)
    assert steps == batched_steps == sum(p.shape[0] for p in plans)
    assert fast.dtype == torch.float32 and fast.shape == (len(xs), model.num_params)
    torch.testing.assert_close(fast, batched, rtol=0, atol=1e-6)
    for i in range(len(xs)):
        ref = reference_local_solve(xs[i], labels[i], w0, plans[i], 0.3, 0.05, 0.5, lin[i], num_classes)
        torch.testing.assert_close(fast[i], ref, rtol=0, atol=1e-6)


def reference_binary_solve(x, labels, w0, plan, mu, lr, momentum, lin):
    """torch.optim.SGD(momentum) on the mean log(1 + exp(-s <theta, [x, 1]/sqrt 2>)) + prox + <lin, theta>."""
    w = w0.clone().requires_grad_(True)
    opt = torch.optim.SGD([w], lr=lr, momentum=momentum)
    xt = torch.cat([x, torch.ones(len(x), 1)], 1) / 2**0.5
    sign = 2.0 * labels - 1.0
    for batch in plan:
        idx = batch[batch >= 0]
        opt.zero_grad()
        loss = (
            torch.nn.functional.softplus(-sign[idx] * (xt[idx] @ w)).mean() + mu / 2 * (w - w0).pow(2).sum() + lin @ w
        )
        loss.backward()
        opt.step()
    return w.detach()


def test_numba_binary_logreg_matches_torch_solver_and_sgd_loop():
    _, _, xs, labels, ys, plans, _ = small_problem(2)
    model = BinaryLogisticRegression(5)
    g = torch.Generator().manual_seed(9)
    w0 = torch.randn(model.num_params, generator=g) * 0.1
    lin = torch.randn(len(xs), model.num_params, generator=g) * 0.05
    fast, steps = solver_numba.local_solve(model, w0, xs, ys, plans, 0.3, 0.05, 0.5, linear_term=lin)
    batched, batched_steps = local_solve(model, w0, xs, ys, plans, 0.3, 0.05, 0.5, linear_term=lin)
    assert steps == batched_steps and fast.shape == (len(xs), model.num_params)
    torch.testing.assert_close(fast, batched, rtol=0, atol=1e-6)
    for i in range(len(xs)):
        ref = reference_binary_solve(xs[i], labels[i].float(), w0, plans[i], 0.3, 0.05, 0.5, lin[i])
        torch.testing.assert_close(fast[i], ref, rtol=0, atol=1e-6)
    plain, _ = solver_numba.local_solve(model, w0, xs, ys, plans, 0.0, 0.1, 0.9)
    torch.testing.assert_close(plain, local_solve(model, w0, xs, ys, plans, 0.0, 0.1, 0.9)[0], rtol=0, atol=1e-6)


def test_numba_without_prox_or_linear_term_matches_torch_solver():
    model, w0, xs, _, ys, plans, _ = small_problem(2)
    fast, _ = solver_numba.local_solve(model, w0, xs, ys, plans, 0.0, 0.1, 0.9)
    batched, _ = local_solve(model, w0, xs, ys, plans, 0.0, 0.1, 0.9)
    torch.testing.assert_close(fast, batched, rtol=0, atol=1e-6)


def test_numba_result_does_not_depend_on_thread_count(monkeypatch):
    """One thread runs the single-threaded kernel (the parallel one is never called), two the parallel one:
    the same numbers bit for bit."""
    model, w0, xs, _, ys, plans, lin = small_problem(3)
    many, _ = solver_numba.local_solve(model, w0, xs, ys, plans, 0.3, 0.05, 0.5, linear_term=lin, threads=2)
    for name in ("solve_devices", "personal_devices"):
        monkeypatch.setattr(solver_numba.solver, name, None)
    one, _ = solver_numba.local_solve(model, w0, xs, ys, plans, 0.3, 0.05, 0.5, linear_term=lin, threads=1)
    assert torch.equal(one, many)
    solver_numba.personal_solve(model, w0, xs, ys, plans, 0.05, 5.0, 0.02, 3, threads=1)
    with pytest.raises(TypeError):
        solver_numba.local_solve(model, w0, xs, ys, plans, 0.3, 0.05, 0.5, linear_term=lin, threads=2)


@pytest.mark.parametrize("classes", [2, 3, "binary"])
def test_numba_pfedme_matches_the_torch_pfedme_loop_at_any_thread_count(classes):
    """Devices of 3-65 samples and 1-5 epochs (9-45 steps), K = 3 inner steps, local and personal models."""
    model, w0, xs, _, ys, plans, _ = small_problem(2 if classes == "binary" else classes)
    if classes == "binary":
        model = BinaryLogisticRegression(5)
        w0 = torch.randn(model.num_params, generator=torch.Generator().manual_seed(9)) * 0.1
    args = (model, w0, xs, ys, plans, 0.05, 5.0, 0.02, 3)
    local, theta, steps = solver_numba.personal_solve(*args)
    ref_local, ref_theta, ref_steps = personal_solve(*args)
    assert steps == ref_steps == 3 * sum(p.shape[0] for p in plans)
    assert local.dtype == theta.dtype == torch.float32 and local.shape == theta.shape == (len(xs), model.num_params)
    torch.testing.assert_close(local, ref_local, rtol=0, atol=1e-6)
    torch.testing.assert_close(theta, ref_theta, rtol=0, atol=1e-6)
    assert not torch.equal(local, theta)
    one_local, one_theta, _ = solver_numba.personal_solve(*args, threads=1)
    two_local, two_theta, _ = solver_numba.personal_solve(*args, threads=2)
    assert torch.equal(one_local, local) and torch.equal(one_theta, theta)
    assert torch.equal(two_local, local) and torch.equal(two_theta, theta)


def test_kept_device_rows_give_the_same_solve_and_an_in_place_change_is_seen(monkeypatch):
    """The rows of a device set are concatenated once and kept (:class:`solver_numba.KeptArrays`); a solve from
    kept rows equals one from fresh rows, also with the devices in another order (full participation samples every
    device in a new order each round), and data changed in place is never read from the old entry."""
    model, w0, xs, _, ys, plans, lin = small_problem(3)
    rows = solver_numba.KeptArrays(size=2)
    monkeypatch.setattr(solver_numba.solver, "DEVICE_ROWS", rows)

    def solve(order, **kw):
        return solver_numba.local_solve(
            model,
            w0,
            [xs[i] for i in order],
            [ys[i] for i in order],
            [plans[i] for i in order],
            0.3,
            0.05,
            0.5,
            linear_term=lin[order],
            threads=1,
            **kw,
        )[0]

    first = solve([0, 1, 2, 3, 4])
    kept = solve([0, 1, 2, 3, 4])
    shuffled = solve([3, 0, 4, 2, 1])
    assert len(rows.kept.entries) == 1 and torch.equal(first, kept)
    assert torch.equal(shuffled, first[[3, 0, 4, 2, 1]])
    xs[1].mul_(-2.0)
    changed = solve([0, 1, 2, 3, 4])
    monkeypatch.setattr(solver_numba.solver, "DEVICE_ROWS", solver_numba.KeptArrays(max_bytes=0))  # nothing kept
    fresh = solve([0, 1, 2, 3, 4])
    assert torch.equal(changed, fresh) and not torch.equal(changed, first)
    monkeypatch.setattr(solver_numba.solver, "DEVICE_ROWS", rows)
    for subset in ([0, 1], [2, 3], [1, 4]):  # more sets than it keeps: the oldest goes
        solve(subset)
    assert len(rows.kept.entries) == 2 and all(len(key) == 1 + 2 for key in rows.kept.entries)


def test_balance_covers_every_device_once():
    order, offsets = plans.balance([5, 9, 1, 9, 3], 2)
    assert sorted(order.tolist()) == [0, 1, 2, 3, 4]
    assert offsets.tolist()[0] == 0 and offsets.tolist()[-1] == 5
    loads = [sum([5, 9, 1, 9, 3][i] for i in order[offsets[t] : offsets[t + 1]]) for t in range(2)]
    assert sorted(loads) == [13, 14]


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return str(generate_synthetic("synthetic_1_1", root / "s11", data_seed=3, num_devices=8))


def make_cfg(data, backend, **over):
    doc = {
        "data": {"path": data},
        "rounds": 8,
        "device": "cpu",
        "algorithm": {"name": "upcycled", "mu": 1.0, "lam": 0.43},
        "devices": {"frac": 0.5, "straggler": 0.5},
        "solver": {"epochs": 4, "backend": backend},
        "checkpoint": {"every": 0},
    }
    for key, value in over.items():
        cfgmod.set_key(doc, key, value)
    return cfgmod.from_dict(doc)


def test_full_run_numba_matches_torch_and_repeats_bit_identically(small_data, tmp_path):
    def quiet(m):
        return None

    a = run(make_cfg(small_data, "numba"), tmp_path / "a", log=quiet)
    run(make_cfg(small_data, "numba"), tmp_path / "b", log=quiet)
    run(make_cfg(small_data, "numba", threads=1), tmp_path / "c", log=quiet)
    t = run(make_cfg(small_data, "torch"), tmp_path / "t", log=quiet)
    assert (
        metrics_without_time(tmp_path / "a")
        == metrics_without_time(tmp_path / "b")
        == metrics_without_time(tmp_path / "c")
    )
    for key in ("train_loss", "train_acc", "test_loss", "test_acc"):
        assert a["final"][key] == pytest.approx(t["final"][key], abs=1e-5)


def test_private_binary_runs_numba_match_torch(small_data, tmp_path):
    """The privacy experiments' model (binary_logreg on unit-norm features) with both mechanisms."""

    def quiet(m):
        return None

    for mechanism in ({"mechanism": "objective", "alpha": 10.0}, {"mechanism": "output", "tau": 1.0, "sigma": 0.1}):
        over = {
            "model.name": "binary_logreg",
            "data.feature_scaling": "unit_norm",
            "algorithm.mu": 1.0,
            "privacy": mechanism,
        }
        name = mechanism["mechanism"]
        a = run(make_cfg(small_data, "numba", **over), tmp_path / f"{name}_numba", log=quiet)
        t = run(make_cfg(small_data, "torch", **over), tmp_path / f"{name}_torch", log=quiet)
        assert a["privacy"] == t["privacy"]
        for key in ("train_loss", "train_acc", "test_loss", "test_acc"):
            assert a["final"][key] == pytest.approx(t["final"][key], abs=1e-5)


def test_full_pfedme_run_numba_matches_torch_at_any_thread_count(small_data, tmp_path):
    def quiet(m):
        return None

    over = {"algorithm": {"name": "pfedme", "personal_steps": 3}}
    a = run(make_cfg(small_data, "numba", **over), tmp_path / "a", log=quiet)
    run(make_cfg(small_data, "numba", threads=1, **over), tmp_path / "c", log=quiet)
    run(make_cfg(small_data, "numba", threads=2, **over), tmp_path / "d", log=quiet)
    t = run(make_cfg(small_data, "torch", **over), tmp_path / "t", log=quiet)
    assert (
        metrics_without_time(tmp_path / "a")
        == metrics_without_time(tmp_path / "c")
        == metrics_without_time(tmp_path / "d")
    )
    for key in ("train_loss", "train_acc", "test_loss", "test_acc", "personal_train_acc", "personal_test_acc"):
        assert a["final"][key] == pytest.approx(t["final"][key], abs=1e-5)


class NotLogReg:
    num_params = 3


def test_select_local_solver_auto_and_named_errors(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    logreg = LogisticRegression(3, 2)
    assert select_local_solver("torch", logreg, cpu) is local_solve
    assert select_local_solver("auto", logreg, cpu).solve is solver_numba.local_solve
    assert select_local_solver("numba", logreg, cpu).solve is solver_numba.local_solve
    assert select_local_solver("numba", logreg, cpu, threads=1).solve.keywords == {"threads": 1}
    assert select_local_solver("auto", logreg, cpu).personal_solve is solver_numba.personal_solve
    assert select_local_solver("numba", logreg, cpu, threads=1).personal_solve.keywords == {"threads": 1}
    assert not hasattr(select_local_solver("torch", logreg, cpu), "personal_solve")
    assert select_local_solver("auto", NotLogReg(), cpu) is local_solve
    assert select_local_solver("auto", logreg, cuda) is local_solve
    assert select_local_solver("auto", BinaryLogisticRegression(3), cpu).solve is solver_numba.local_solve
    with pytest.raises(cfgmod.ConfigError, match="solver.backend: numba supports only the logreg and binary_logreg"):
        select_local_solver("numba", NotLogReg(), cpu)
    with pytest.raises(cfgmod.ConfigError, match="solver.backend: numba runs on the CPU only"):
        select_local_solver("numba", logreg, cuda)
    with pytest.raises(cfgmod.ConfigError, match="solver.backend: unknown backend"):
        select_local_solver("jax", logreg, cpu)
    monkeypatch.setitem(sys.modules, "upfl.solvers.numba_backend", None)
    monkeypatch.delattr("upfl.solvers.numba_backend", raising=False)
    assert select_local_solver("auto", logreg, cpu) is local_solve
    with pytest.raises(cfgmod.ConfigError, match="solver.backend: numba requested but numba is not installed"):
        select_local_solver("numba", logreg, cpu)


def test_numba_uses_its_sleeping_workqueue_pool_unless_the_user_names_a_layer():
    """OpenMP's idle workers spin after each solve and take the core of a concurrent job (two bundles on two cores)."""
    import os
    import subprocess

    code = (
        "import numba, torch; from upfl.solvers import numba_backend; numba_backend.warm_up(); "
        "print(numba.threading_layer())"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    default = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert default.stdout.strip() == "workqueue"
    named = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "NUMBA_THREADING_LAYER": "omp"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert named.stdout.strip() == "omp"  # the user's choice is left alone


@pytest.mark.parametrize("kind", ["logreg2", "logreg3", "binary", "binary_nobias"])
def test_compiled_evaluation_equals_the_models_torch_evaluation(kind):
    g = torch.Generator().manual_seed(11)
    if kind.startswith("logreg"):
        model = LogisticRegression(6, int(kind[-1]))
        y = torch.randint(0, model.num_classes, (500,), generator=g)
    else:
        model = BinaryLogisticRegression(6, bias=kind == "binary")
        y = torch.randint(0, 2, (500,), generator=g)
    x = torch.randn(500, 6, generator=g)
    w = torch.randn(model.num_params, generator=g)
    loss, correct = solver_numba.evaluate(model, w, x, y)
    ref_loss, ref_correct = model.evaluate(w, x, y)
    assert correct == ref_correct and 0 < correct < 500
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    assert select_local_solver("numba", model, torch.device("cpu"), threads=1).evaluate is solver_numba.evaluate


def reference_gradient(wt, x, y, rows, binary):
    """The batch-mean gradient in float64 numpy, row by row over the real rows: softmax cross-entropy in
    ``[W^T | b]`` (C, d + 1), or the log loss log(1 + exp(-s <theta, x~>)) in theta (1, P)."""
    real = rows[rows >= 0]
    xs, ys, w = x[real].astype(np.float64), y[real].astype(np.float64), wt.astype(np.float64)
    if binary:
        sign = 2 * ys[:, 1] - 1
        coef = -sign / (1 + np.exp(sign * (xs @ w[0])))
        return (coef @ xs)[None, :] / max(len(real), 1)
    z = xs @ w[:, :-1].T + w[:, -1]
    p = np.exp(z - z.max(1, keepdims=True))
    resid = p / p.sum(1, keepdims=True) - ys
    return np.concatenate([resid.T @ xs, resid.sum(0)[:, None]], 1) / max(len(real), 1)


@pytest.mark.parametrize("binary", [False, True])
def test_padded_layout_gradients_equal_a_float64_row_by_row_reference(binary):
    """The training kernels in the padded layout (rows [x, 1, 0 ...] of a multiple of 16 floats, vector dot products
    and row sums) against float64 numpy: any width (one or several vectors per row), classes, batch size (the row
    sums take four rows at a time), padding (-1) anywhere or none (a full batch) and the binary model's signed rows;
    the padding columns of the gradient stay 0."""
    rng = np.random.default_rng(5 if binary else 6)
    for _ in range(150):
        n, d, batch = rng.integers(1, 120), rng.integers(1, 40), rng.integers(1, 40)
        classes = 1 if binary else rng.integers(2, 6)
        x = rng.standard_normal((n, d)).astype(np.float32)
        y = np.zeros((n, 2 if binary else classes), np.float32)
        y[np.arange(n), rng.integers(0, y.shape[1], n)] = 1
        rows = rng.integers(-1, n, batch).astype(np.int32)
        wt = rng.standard_normal((classes, d if binary else d + 1)).astype(np.float32)
        if rng.integers(0, 2):
            rows = np.abs(rows)  # a full batch: its rows and weights 1 / B are read as they are
        xp = layout.signed_rows(x, y) if binary else layout.padded_rows(x, True)
        assert xp.shape[1] % 16 == 0 and xp.shape[1] >= wt.shape[1]
        wp = layout.padded(wt, xp.shape[1])
        gp = np.full_like(wp, np.nan)
        buffers = training.batch_buffers(classes, batch)
        safe, weight = training.batch_reads(rows, buffers)
        assert weight.sum() == pytest.approx(1.0, rel=1e-5) and (weight[rows < 0] == 0).all()
        if binary:
            training.binary_batch_gradient(wp, xp, safe, weight, gp, buffers)
        else:
            training.batch_gradient(wp, xp, y, safe, weight, gp, buffers, False)
        np.testing.assert_allclose(
            gp[:, : wt.shape[1]], reference_gradient(wt, x, y, rows, binary), rtol=1e-4, atol=2e-6
        )
        assert not gp[:, wt.shape[1] :].any()


def reference_rows(wt, x, labels, binary, scale):
    """evaluate_rows in plain Python floats (float64), row by row: the reference for exactly representable logits."""
    loss, correct = 0.0, 0
    for r in range(x.shape[0]):
        if binary:
            t = sum(float(wt[0, j]) * float(x[r, j]) * scale for j in range(x.shape[1]))
            t += float(wt[0, x.shape[1]]) * scale if wt.shape[1] > x.shape[1] else 0.0
            m = -(2.0 * labels[r] - 1.0) * t
            loss += max(m, 0.0) + math.log1p(math.exp(-abs(m)))
            correct += (t > 0) == (labels[r] == 1)
        else:
            z = [
                float(wt[c, -1]) + sum(float(wt[c, j]) * float(x[r, j]) for j in range(x.shape[1]))
                for c in range(wt.shape[0])
            ]
            best = max(range(len(z)), key=lambda c: (z[c], -c))
            loss += z[best] + math.log(sum(math.exp(v - z[best]) for v in z)) - z[labels[r]]
            correct += best == labels[r]
    return loss, correct


@pytest.mark.parametrize("classes", [1, 2, 5])
@pytest.mark.parametrize("rows", [1, 4, 7, 30, 64, 130])
def test_compiled_evaluation_of_exact_logits_equals_a_row_by_row_reference(classes, rows):
    """Small integer weights and features (logits exact in float32, so no rounding order matters); ties go to the
    first largest logit. The row losses are float32: the sum agrees to float32's tolerance."""
    g = np.random.default_rng(classes * 100 + rows)
    binary = classes == 1
    x = g.integers(-3, 4, (rows, 6)).astype(np.float32)
    wt = g.integers(-2, 3, (classes, 7)).astype(np.float32)
    labels = g.integers(0, 2 if binary else classes, rows).astype(np.int64)
    loss, correct = evaluation.evaluate_rows(wt, np.ascontiguousarray(x.T), labels, binary, 1.0, False)
    ref_loss, ref_correct = reference_rows(wt, x, labels, binary, 1.0)
    assert correct == ref_correct
    assert loss == pytest.approx(ref_loss, rel=1e-6, abs=1e-7)


def test_compiled_evaluation_of_overflowing_logits_is_not_finite():
    x = np.full((5, 2), 3e38, dtype=np.float32)
    wt = np.array([[10.0, 10.0, 0.0], [1.0, 1.0, 0.0]], dtype=np.float32)  # logits inf, finite
    loss, _ = evaluation.evaluate_rows(wt, np.ascontiguousarray(x.T), np.array([0, 1, 0, 1, 1]), False, 1.0, False)
    assert not math.isfinite(loss)


@pytest.mark.parametrize("classes", [1, 3, 10])
def test_compiled_evaluation_equals_a_row_by_row_float32_loop_bit_for_bit(classes):
    """Logits of 64 rows at a time (rows the vector lanes; classes in pairs, an odd last one alone) are the row-by-row
    feature-order sums of fused multiply-adds exactly (here each one as a float64 multiply-add, whose product is exact,
    rounded to float32), the losses use the same float32 exp and log (:func:`arithmetic.exp32`,
    :func:`arithmetic.log32`) and row r's loss goes to partial sum r mod 64, so loss and accuracy equal a row loop's to
    the last bit (random weights and features: every rounding counts)."""
    import numba

    f32 = np.float32

    @numba.njit(fastmath={"contract"}, error_model="numpy")
    def row_by_row(wt, x, labels, binary, scale):
        partial = np.zeros(64)
        correct = 0
        d = x.shape[1]
        w = wt * f32(scale) if binary else wt
        z = np.empty(w.shape[0], np.float32)
        for r in range(x.shape[0]):
            for c in range(w.shape[0]):
                v = w[c, d] if w.shape[1] > d else f32(0)
                for j in range(d):
                    v = f32(np.float64(w[c, j]) * np.float64(x[r, j]) + np.float64(v))
                z[c] = v
            if binary:
                s = z[0] if labels[r] == 0 else -z[0]
                partial[r % 64] += np.float64(max(s, f32(0)) + arithmetic.log1p32(arithmetic.exp32(-abs(s))))
                correct += (z[0] > 0) == (labels[r] == 1)
            else:
                best = np.argmax(z)
                total = f32(0)
                for c in range(z.shape[0]):
                    total += arithmetic.exp32(z[c] - z[best])
                partial[r % 64] += np.float64((z[best] - z[labels[r]]) + arithmetic.log32(total))
                correct += best == labels[r]
        loss = 0.0
        for k in range(64):
            loss += partial[k]
        return loss, correct

    g = np.random.default_rng(classes)
    binary = classes == 1
    for n in (3, 64, 200):
        x = g.standard_normal((n, 20)).astype(np.float32)
        wt = g.standard_normal((classes, 21)).astype(np.float32)
        labels = g.integers(0, 2 if binary else classes, n).astype(np.int64)
        scale = 0.7071 if binary else 1.0
        fast = evaluation.evaluate_rows(wt, np.ascontiguousarray(x.T), labels, binary, scale, False)
        assert fast == row_by_row(wt, x, labels, binary, scale)


def test_vectorisable_exp_is_within_two_units_in_the_last_place_of_float32_exp():
    """:func:`arithmetic.exp32` (the multinomial kernel's softmax) against float64 exp rounded to float32, over the
    softmax's range (z - max <= 0) and beyond, with its edges: 0 below -87, inf above 88, NaN kept."""
    import numba

    @numba.njit
    def exp_all(v):
        out = np.empty_like(v)
        for i in range(v.shape[0]):
            out[i] = arithmetic.exp32(v[i])
        return out

    v = np.concatenate([np.linspace(-87.0, 88.0, 200_001), np.random.default_rng(0).uniform(-20, 0, 100_000)])
    v = v.astype(np.float32)
    fast = exp_all(v)
    exact = np.exp(v.astype(np.float64)).astype(np.float32)
    ulps = np.abs(fast.view(np.int32).astype(np.int64) - exact.view(np.int32).astype(np.int64))
    assert ulps.max() <= 2
    edges = exp_all(np.array([-87.5, -1e30, 88.5, np.inf, -np.inf, np.nan, 0.0], np.float32))
    assert edges[0] == edges[1] == edges[4] == 0 and edges[2] == edges[3] == np.inf
    assert np.isnan(edges[5]) and edges[6] == 1


def test_vectorisable_float32_log_and_log1p_are_within_one_unit_in_the_last_place():
    """The evaluation's :func:`arithmetic.log32` and :func:`arithmetic.log1p32` against float64 log and log1p
    rounded to float32, over float32's normal range and the losses' ranges, with their edges (inf and NaN kept,
    log 1 = 0, log1p 0 = 0, log1p of a tiny u = u)."""
    import numba

    @numba.njit(fastmath={"contract"}, error_model="numpy")
    def apply(v, which):
        out = np.empty_like(v)
        for i in range(v.shape[0]):
            out[i] = arithmetic.log32(v[i]) if which == 0 else arithmetic.log1p32(v[i])
        return out

    rng = np.random.default_rng(3)
    for which, v, reference in (
        (0, rng.uniform(1, 100, 200_000), np.log),
        (0, rng.uniform(0.5, 2, 200_000), np.log),
        (0, 10 ** rng.uniform(-37, 38, 200_000), np.log),
        (1, rng.uniform(0, 1, 200_000), np.log1p),
        (1, 10 ** rng.uniform(-30, 0, 200_000), np.log1p),
    ):
        v = v.astype(np.float32)
        exact = reference(v.astype(np.float64)).astype(np.float32).view(np.int32).astype(np.int64)
        assert np.abs(apply(v, which).view(np.int32).astype(np.int64) - exact).max() <= 1
    logs = apply(np.array([np.inf, np.nan, 1.0], np.float32), 0)
    assert logs[0] == np.inf and np.isnan(logs[1]) and logs[2] == 0
    assert list(apply(np.array([0.0, 1e-30], np.float32), 1)) == [0, np.float32(1e-30)]


def test_logits_of_a_block_of_samples_equal_the_logits_one_sample_at_a_time_bit_for_bit():
    """:func:`vectors.block_dots` (16 samples' dot products halved together) against
    :func:`vectors.row_dot` (one sample): the same additions in the same order, so the same bits."""
    import numba

    @numba.njit
    def both(w, x, rows, z):
        one = np.empty_like(z)
        for c in range(w.shape[0]):
            for q in range(0, rows.shape[0] - rows.shape[0] % 16, 16):
                vectors.block_dots(w, c, x, rows, q, z)
            for b in range(rows.shape[0]):
                one[c, b] = vectors.row_dot(w, c, x, rows[b])
        return one

    rng = np.random.default_rng(8)
    for width, classes, count in ((16, 1, 16), (32, 2, 32), (64, 10, 48), (48, 3, 16)):
        x = rng.standard_normal((90, width)).astype(np.float32)
        w = rng.standard_normal((classes, width)).astype(np.float32)
        rows = rng.integers(0, 90, count).astype(np.int64)
        z = np.empty((classes, count), np.float32)
        assert np.array_equal(both(w, x, rows, z), z)


def test_momentum_step_rounds_each_operation_as_torch_even_inside_a_fused_kernel():
    """:func:`training.momentum_step` called from a kernel that allows fused multiply-adds still rounds every
    multiply and add on its own (torch.optim.SGD's order), bit for bit against float32 numpy, with and without the
    proximal and linear terms, over 16 entries at a time and the entries past the last multiple of 16."""
    import numba

    @numba.njit(fastmath={"contract"})
    def fused_caller(w, buf, g, wg, lin, has_lin, mu, lr, momentum):
        training.momentum_step(w, buf, g, wg, lin, has_lin, mu, lr, momentum)

    rng = np.random.default_rng(9)
    for mu, has_lin in ((0.7, True), (0.7, False), (0.0, True), (0.0, False)):
        w, buf, g, wg, lin = (rng.standard_normal(1000).astype(np.float32) for _ in range(5))  # 62 vectors and 8
        mu, lr, momentum = np.float32(mu), np.float32(0.05), np.float32(0.5)
        grad = g + mu * (w - wg) if mu != 0 else g.copy()
        grad = grad + lin if has_lin else grad
        expected_buf = momentum * buf + grad
        expected_w = w - lr * expected_buf
        fused_caller(w, buf, g, wg, lin, has_lin, mu, lr, momentum)
        assert np.array_equal(buf, expected_buf) and np.array_equal(w, expected_w)


def test_block_log1p_exp_equals_the_compiled_scalar_expression_bit_for_bit():
    """:func:`vectors.block_log1p_exp` (the binary loss of 64 rows, written as vector code) against the scalar
    ``base + log1p32(exp32(t))`` compiled under the kernels' fast-math flags, over the losses' range and its edges
    (below exp32's range, 0, -inf, NaN); a model with non-finite logits gets a non-finite binary loss."""
    import numba

    @numba.njit(fastmath={"contract"}, error_model="numpy")
    def scalar(t, base):
        out = np.empty_like(t)
        for k in range(t.shape[0]):
            out[k] = base[k] + arithmetic.log1p32(arithmetic.exp32(t[k]))
        return out

    @numba.njit
    def blocks(t, base):
        out = np.empty_like(t)
        for b in range(0, t.shape[0], 64):
            vectors.block_log1p_exp(t[b : b + 64], base[b : b + 64], out[b : b + 64])
        return out

    rng = np.random.default_rng(9)
    t = -np.abs(rng.standard_normal(64 * 200) * 10).astype(np.float32)
    t[:6] = [-90.0, -87.0, 0.0, -np.inf, np.nan, -1e-30]
    base = np.abs(rng.standard_normal(t.shape[0])).astype(np.float32)
    base[:6] = 0
    fast, reference = blocks(t, base), scalar(t, base)
    assert fast.tobytes() == reference.tobytes()
    assert list(fast[:4]) == [0, np.float32(np.log1p(np.exp(np.float32(-87.0)))), np.float32(np.log(2.0)), 0]
    assert np.isnan(fast[4])
    x = np.ones((3, 2), np.float32)
    for bad in (np.nan, np.inf):
        loss, _ = evaluation.evaluate_rows(
            np.array([[bad, 1.0]], np.float32), np.ascontiguousarray(x.T), np.array([0, 1, 1]), True, 1.0, False
        )
        assert not math.isfinite(loss)
