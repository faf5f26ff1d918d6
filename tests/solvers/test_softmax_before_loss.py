"""``model.softmax_before_loss``: the authors' loss CE(softmax(softmax(z)), y) in both solvers and the evaluation."""

import json

import pytest
import torch

from upfl import config as cfgmod
from upfl.config import ConfigError
from upfl.data import generate_synthetic, load_leaf
from upfl.draws.batch_plans import batch_plan
from upfl.engine.simulation import run
from upfl.models import LogisticRegression, build_model
from upfl.solvers import numba_backend as solver_numba
from upfl.solvers.torch_backend import local_solve


def authors_loss(params, model, x, y_onehot, weights):
    """sum_b weights_b * nn.CrossEntropyLoss(softmax(logits_b), y_b), by autograd (the authors' model)."""
    probs = torch.softmax(model.logits(params, x), dim=-1)
    return -(weights * (y_onehot * torch.log_softmax(probs, dim=-1)).sum(-1)).sum()


def problem(num_classes, seed=5):
    g = torch.Generator().manual_seed(seed)
    sizes, epochs = [4, 37, 19, 60], [3, 2, 4, 1]
    xs = [torch.randn(n, 6, generator=g) * 2 for n in sizes]
    labels = [torch.randint(0, num_classes, (n,), generator=g) for n in sizes]
    ys = [torch.eye(num_classes)[y] for y in labels]
    plans = batch_plan(sizes, epochs, 8, [torch.Generator().manual_seed(i) for i in range(len(sizes))])
    return xs, labels, ys, plans


@pytest.mark.parametrize("num_classes", [2, 4])
def test_gradient_equals_autograd_of_the_authors_loss(num_classes):
    model = LogisticRegression(6, num_classes, softmax_before_loss=True)
    g = torch.Generator().manual_seed(1)
    params = torch.randn(3, model.num_params, generator=g)
    x = torch.randn(3, 10, 6, generator=g) * 3
    y = torch.eye(num_classes)[torch.randint(0, num_classes, (3, 10), generator=g)]
    weights = torch.rand(3, 10, generator=g)
    grads = model.loss_and_grad(params, x, y, weights)
    for i in range(3):
        p = params[i].clone().requires_grad_(True)
        authors_loss(p, model, x[i], y[i], weights[i]).backward()
        torch.testing.assert_close(grads[i], p.grad, rtol=1e-5, atol=1e-6)
    plain = LogisticRegression(6, num_classes).loss_and_grad(params, x, y, weights)
    assert not torch.allclose(grads, plain, atol=1e-3)


@pytest.mark.parametrize("num_classes", [2, 3])
def test_numba_solver_matches_torch_solver_and_an_sgd_loop(num_classes):
    model = LogisticRegression(6, num_classes, softmax_before_loss=True)
    xs, labels, ys, plans = problem(num_classes)
    w0 = torch.randn(model.num_params, generator=torch.Generator().manual_seed(2)) * 0.5
    lin = torch.randn(len(xs), model.num_params, generator=torch.Generator().manual_seed(3)) * 0.05
    fast, steps = solver_numba.local_solve(model, w0, xs, ys, plans, 0.7, 0.3, 0.5, linear_term=lin)
    batched, batched_steps = local_solve(model, w0, xs, ys, plans, 0.7, 0.3, 0.5, linear_term=lin)
    assert steps == batched_steps
    torch.testing.assert_close(fast, batched, rtol=0, atol=2e-6)
    one, _ = solver_numba.local_solve(model, w0, xs, ys, plans, 0.7, 0.3, 0.5, linear_term=lin, threads=1)
    assert torch.equal(one, fast)
    for i, plan in enumerate(plans):
        w = w0.clone().requires_grad_(True)
        opt = torch.optim.SGD([w], lr=0.3, momentum=0.5)
        for batch in plan:
            idx = batch[batch >= 0].long()
            opt.zero_grad()
            weights = torch.full((len(idx),), 1.0 / len(idx))
            loss = authors_loss(w, model, xs[i][idx], ys[i][idx], weights) + 0.35 * (w - w0).pow(2).sum() + lin[i] @ w
            loss.backward()
            opt.step()
        torch.testing.assert_close(fast[i], w.detach(), rtol=0, atol=2e-6)
    plain, _ = solver_numba.local_solve(
        LogisticRegression(6, num_classes), w0, xs, ys, plans, 0.7, 0.3, 0.5, linear_term=lin
    )
    assert (plain - fast).abs().max() > 1e-3


@pytest.mark.parametrize("num_classes", [2, 5])
def test_evaluation_is_the_cross_entropy_of_the_softmax_in_both_paths(num_classes):
    g = torch.Generator().manual_seed(7)
    model = LogisticRegression(6, num_classes, softmax_before_loss=True)
    x, y = torch.randn(300, 6, generator=g), torch.randint(0, num_classes, (300,), generator=g)
    w = torch.randn(model.num_params, generator=g) * 2
    loss, correct = model.evaluate(w, x, y)
    fast_loss, fast_correct = solver_numba.evaluate(model, w, x, y)
    z = model.logits(w, x)
    expected = torch.nn.functional.cross_entropy(torch.softmax(z, -1), y, reduction="sum")
    assert loss == pytest.approx(float(expected), rel=1e-6) and fast_loss == pytest.approx(loss, rel=1e-6)
    assert correct == fast_correct == int((z.argmax(1) == y).sum())
    assert LogisticRegression(6, num_classes).evaluate(w, x, y)[1] == correct
    floor = 300 * torch.log(1 + (num_classes - 1) * torch.exp(torch.tensor(-1.0)))
    assert loss >= float(floor) - 1e-3


def test_mlp_switch_softmaxes_the_logits_before_the_cross_entropy(tmp_path):
    root = generate_synthetic("synthetic_1_1", tmp_path / "d", data_seed=1, num_devices=3)
    ds = load_leaf(root)
    on = build_model("mlp", ds, {"hidden": 4, "dropout": 0.0}, softmax_before_loss=True)
    off = build_model("mlp", ds, {"hidden": 4, "dropout": 0.0})
    params = on.init_params(torch.Generator().manual_seed(0)) * 50
    x, y = torch.as_tensor(ds.train_x[ds.train_users[0]]), torch.as_tensor(ds.train_y[ds.train_users[0]])
    z = off.logits(params, x)
    assert on.evaluate(params, x, y)[0] == pytest.approx(
        float(torch.nn.functional.cross_entropy(torch.softmax(z, -1), y, reduction="sum")), rel=1e-5
    )
    assert on.evaluate(params, x, y)[1] == off.evaluate(params, x, y)[1]


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    return str(generate_synthetic("synthetic_1_1", tmp_path_factory.mktemp("d") / "s11", data_seed=3, num_devices=8))


def run_cfg(data, backend, **settings):
    doc = {
        "data": {"path": data},
        "rounds": 6,
        "device": "cpu",
        "algorithm": {"name": "upcycled", "mu": 1.0, "step": 0.7},
        "devices": {"frac": 0.5, "straggler": 0.5},
        "solver": {"epochs": 3, "backend": backend},
        "checkpoint": {"every": 0},
    }
    for key, value in settings.items():
        cfgmod.set_key(doc, key, value)
    return cfgmod.from_dict(doc)


def test_runs_record_the_switch_and_agree_across_solvers(small_data, tmp_path):
    def quiet(m):
        return None

    on = {
        b: run(run_cfg(small_data, b, **{"model.softmax_before_loss": True}), tmp_path / b, log=quiet)
        for b in ("numba", "torch")
    }
    off = run(run_cfg(small_data, "numba"), tmp_path / "off", log=quiet)
    summary = json.loads((tmp_path / "numba" / "summary.json").read_text())
    assert summary["config"]["model"]["softmax_before_loss"] is True
    assert off["config"]["model"]["softmax_before_loss"] is False
    for key in ("train_loss", "train_acc", "test_loss", "test_acc"):
        assert on["numba"]["final"][key] == pytest.approx(on["torch"]["final"][key], abs=1e-5)
    assert on["numba"]["final"]["train_loss"] != pytest.approx(off["final"]["train_loss"], abs=1e-3)


def test_the_switch_changes_the_hash_only_when_on_and_is_refused_for_the_binary_model(small_data):
    default = run_cfg(small_data, "numba")
    switched = run_cfg(small_data, "numba", **{"model.softmax_before_loss": True})
    assert cfgmod.hashed_document(default)["model"] == {"name": "logreg", "options": {}}
    assert cfgmod.hashed_document(switched)["model"]["softmax_before_loss"] is True
    assert cfgmod.config_hash(switched) != cfgmod.config_hash(default)
    with pytest.raises(ConfigError, match="model.softmax_before_loss: expected true or false"):
        run_cfg(small_data, "numba", **{"model.softmax_before_loss": "yes"})
    with pytest.raises(ConfigError, match="model.softmax_before_loss: binary_logreg has a single logit"):
        build_model("binary_logreg", load_leaf(small_data), {}, softmax_before_loss=True)


def protocol_config(protocol=None):
    exp = {
        "groups": [
            {
                "datasets": ["s11"],
                "runs": [
                    {"algorithm": "fedprox", "rounds": 4, "mu": 1},
                    {"algorithm": "upcycled", "rounds": 8, "mu": 1, "lam": 0.43},
                ],
            }
        ]
    }
    authors = {**exp, **({"protocol": protocol} if protocol else {})}
    return {
        "seeds": [0],
        "datasets": {"s11": {"source": "synthetic", "setting": "synthetic_1_1"}},
        "experiments": {"faithful": exp, "authors": authors},
    }


def test_authors_protocol_sets_the_switch_and_the_scalar_step_in_their_own_folders():
    from upfl.pipeline.plan import build_plan

    plan = build_plan(protocol_config("authors"))
    faithful = [plan.runs[r] for r in plan.experiments["faithful"]]
    authors = [plan.runs[r] for r in plan.experiments["authors"]]
    assert [r.doc["algorithm"] for r in faithful] == [
        {"name": "fedprox", "mu": 1},
        {"name": "upcycled", "mu": 1, "lam": 0.43},
    ]
    assert [r.doc["algorithm"] for r in authors] == [
        {"name": "fedprox", "mu": 1},
        {"name": "upcycled", "mu": 1, "step": 0.7},
    ]
    assert all(r.doc["model"]["softmax_before_loss"] is True for r in authors)
    assert all("softmax_before_loss" not in r.doc["model"] for r in faithful)
    assert [r.run_id for r in authors] == [
        "s11/logreg_softmax_before_loss/fedprox/mu1/s0_f0.3/T4/seed0",
        "s11/logreg_softmax_before_loss/upcycled/mu1_step0.7/s0_f0.3/T8/seed0",
    ]
    assert not set(plan.experiments["faithful"]) & set(plan.experiments["authors"])
    assert build_plan(protocol_config("paper")).experiments["authors"] == plan.experiments["faithful"]
    config = protocol_config()
    config["experiments"]["faithful"]["groups"].append(
        {**config["experiments"]["faithful"]["groups"][0], "protocol": "authors"}
    )
    both = build_plan(config).experiments["faithful"]
    assert both == plan.experiments["faithful"] + plan.experiments["authors"]


def test_an_unknown_protocol_is_an_error_naming_the_experiment():
    from upfl.pipeline.plan import ExperimentError, build_plan

    with pytest.raises(
        ExperimentError, match=r"experiments.authors.groups\[0\]: protocol 'theirs'; known: paper, authors"
    ):
        build_plan(protocol_config("theirs"))
