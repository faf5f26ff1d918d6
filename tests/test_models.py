"""Model tests: the Appendix H.2 networks through the flat-parameter adapter, and binary log loss.

Batched solver vs a plain torch.optim.SGD loop on the nn.Module, gradients vs autograd, deterministic
init, reproducible dropout, named option errors, and a short run of each model.
"""

import csv
import math

import numpy as np
import pytest
import torch

from upfl import config as cfgmod
from upfl.data import DatasetError, load_leaf, write_leaf
from upfl.data.glove import embedding_matrix, save_npy, save_vocab
from upfl.data.publish import write_dataset
from upfl.draws.batch_plans import batch_plan
from upfl.engine.simulation import run
from upfl.models import BinaryLogisticRegression, LogisticRegression, build_model, dropout_masks
from upfl.solvers.torch_backend import local_solve

SIZES = [3, 11, 7, 20]
VMAP_LSTM_FALLBACK = pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")
TINY = {
    "mlp": {"hidden": 5, "dropout": 0.0},
    "cnn": {"channels": 2, "hidden": [6, 4], "dropout": 0.0},
    "lstm": {"hidden": 4, "layers": 2},
}


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread avoids OpenMP contention on a busy machine (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def image_split(rng, sizes, classes=3, side=4):
    xs = {f"u{i}": rng.random((n, side * side)).astype(np.float32) for i, n in enumerate(sizes)}
    ys = {f"u{i}": rng.integers(0, classes, n) for i, n in enumerate(sizes)}
    return xs, ys


def token_split(rng, sizes, rows, length=5):
    xs = {f"u{i}": rng.integers(0, rows, (n, length)) for i, n in enumerate(sizes)}
    ys = {f"u{i}": rng.integers(0, 2, n) for i, n in enumerate(sizes)}
    return xs, ys


@pytest.fixture(scope="module")
def image_data(tmp_path_factory):
    """A FEMNIST-shaped (4 x 4 images, 3 classes) LEAF folder with uneven devices."""
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("img") / "femnist"
    users = [f"u{i}" for i in range(len(SIZES))]
    write_leaf(root, users, image_split(rng, SIZES), image_split(rng, [2, 3, 2, 4]), {"num_classes": 3})
    return str(root)


@pytest.fixture(scope="module")
def text_data(tmp_path_factory):
    """A Sent140-shaped LEAF folder: token ids of length 5, a 12-word vocabulary, 6-d embeddings."""
    rng = np.random.default_rng(1)
    root = tmp_path_factory.mktemp("txt") / "sent140"
    vocab = [f"w{i}" for i in range(12)]
    vectors = rng.standard_normal((len(vocab), 6)).astype(np.float32)
    users = [f"u{i}" for i in range(len(SIZES))]
    rows = len(vocab) + 1
    meta = {
        "num_classes": 2,
        "x_dtype": "int64",
        "embeddings": {
            "file": "embeddings.npy",
            "vocab_file": "vocab.txt",
            "dim": 6,
            "vocab_size": len(vocab),
            "pad_id": len(vocab),
            "unk_id": len(vocab),
            "rows": rows,
        },
    }
    write_dataset(
        root,
        users,
        token_split(rng, SIZES, rows),
        token_split(rng, [2, 3, 2, 4], rows),
        meta,
        extras={
            "embeddings.npy": lambda p: save_npy(p, embedding_matrix(vectors)),
            "vocab.txt": lambda p: save_vocab(p, vocab),
        },
    )
    return str(root)


def dataset_for(name, image_data, text_data):
    return load_leaf(text_data if name == "lstm" else image_data)


def device_tensors(ds):
    xs = [torch.as_tensor(ds.train_x[u]) for u in ds.train_users]
    labels = [torch.as_tensor(ds.train_y[u]) for u in ds.train_users]
    return xs, labels


def reference_local_solve(model, w0, x, labels, plan, mu, lr, momentum):
    """Plain per-device torch.optim.SGD(momentum) loop on the nn.Module, proximal term by autograd."""
    net = model.module_from(w0)
    start = [p.detach().clone() for p in net.parameters()]
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    for batch in plan:
        idx = batch[batch >= 0]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x[idx]), labels[idx])
        loss = loss + mu / 2 * sum((p - s).pow(2).sum() for p, s in zip(net.parameters(), start, strict=True))
        loss.backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in net.parameters()])


@pytest.mark.parametrize("batching", ["vmap", "loop"])
@pytest.mark.parametrize("name", ["mlp", "cnn", "lstm"])
@VMAP_LSTM_FALLBACK
def test_batched_solver_matches_plain_sgd_loop(name, batching, image_data, text_data):
    ds = dataset_for(name, image_data, text_data)
    model = build_model(name, ds, {**TINY[name], "batching": batching})
    xs, labels = device_tensors(ds)
    eye = torch.eye(ds.num_classes)
    w0 = model.init_params(torch.Generator().manual_seed(3))
    epochs = [2, 3, 1, 2]
    plans = batch_plan([len(y) for y in labels], epochs, 4, [torch.Generator().manual_seed(i) for i in range(4)])
    local, steps = local_solve(model, w0, xs, [eye[y] for y in labels], plans, mu=0.3, lr=0.05, momentum=0.5)
    assert steps == sum(p.shape[0] for p in plans)
    for i in range(len(xs)):
        ref = reference_local_solve(model, w0, xs[i], labels[i], plans[i], 0.3, 0.05, 0.5)
        torch.testing.assert_close(local[i], ref, rtol=0, atol=1e-5)


def solver_masks(model, plans, batch, seed):
    """The masks local_solve draws: step s, the active devices (sorted by steps, descending, stable)."""
    steps = [p.shape[0] for p in plans]
    order = sorted(range(len(plans)), key=lambda i: -steps[i])
    g = torch.Generator().manual_seed(seed)
    per_device = {i: [] for i in order}
    for s in range(max(steps)):
        active = sum(1 for n in steps if n > s)
        masks = dropout_masks(g, (active, batch), model.module.mask_shapes, model.dropout, torch.device("cpu"))
        for j in range(active):
            per_device[order[j]].append(tuple(m[j] for m in masks))
    return per_device


def test_solver_with_dropout_matches_plain_loop_with_the_same_masks(image_data):
    ds = load_leaf(image_data)
    model = build_model("mlp", ds, {"hidden": 5, "dropout": 0.5})
    assert model.needs_generator
    xs, labels = device_tensors(ds)
    eye = torch.eye(3)
    w0 = model.init_params(torch.Generator().manual_seed(0))
    plans = batch_plan(SIZES, [2, 1, 3, 1], 4, [torch.Generator().manual_seed(10 + i) for i in range(4)])
    local, _ = local_solve(
        model,
        w0,
        xs,
        [eye[y] for y in labels],
        plans,
        mu=0.1,
        lr=0.1,
        momentum=0.5,
        generator=torch.Generator().manual_seed(42),
    )
    masks = solver_masks(model, plans, 4, 42)
    for i in range(4):
        net = model.module_from(w0)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.5)
        start = [p.detach().clone() for p in net.parameters()]
        for batch, m in zip(plans[i], masks[i], strict=True):
            keep = batch >= 0
            opt.zero_grad()
            z = net(xs[i][batch[keep]], tuple(mm[keep] for mm in m))
            loss = torch.nn.functional.cross_entropy(z, labels[i][batch[keep]])
            (loss + 0.05 * sum((p - s).pow(2).sum() for p, s in zip(net.parameters(), start, strict=True))).backward()
            opt.step()
        ref = torch.cat([p.detach().flatten() for p in net.parameters()])
        torch.testing.assert_close(local[i], ref, rtol=0, atol=1e-5)


def random_batch(model, ds, k, batch, seed):
    g = torch.Generator().manual_seed(seed)
    params = torch.stack([model.init_params(torch.Generator().manual_seed(seed + i)) for i in range(k)])
    params = params + 0.05 * torch.randn(params.shape, generator=g)
    xs, labels = device_tensors(ds)
    x = torch.stack([xs[3][torch.randint(0, len(labels[3]), (batch,), generator=g)] for _ in range(k)])
    y = torch.randint(0, ds.num_classes, (k, batch), generator=g)
    w = torch.full((k, batch), 1.0 / (batch - 2))
    w[:, -2:] = 0.0
    return params, x, y, w


@pytest.mark.parametrize("batching", ["vmap", "loop"])
@pytest.mark.parametrize("name", ["mlp", "cnn", "lstm"])
@VMAP_LSTM_FALLBACK
def test_gradients_match_autograd_on_the_plain_module(name, batching, image_data, text_data):
    ds = dataset_for(name, image_data, text_data)
    opts = {**TINY[name], "dropout": 0.5, "batching": batching}
    model = build_model(name, ds, opts)
    params, x, y, w = random_batch(model, ds, 3, 6, seed=7)
    got = model.loss_and_grad(params, x, torch.eye(ds.num_classes)[y], w, generator=torch.Generator().manual_seed(9))
    masks = dropout_masks(torch.Generator().manual_seed(9), (3, 6), model.module.mask_shapes, 0.5, torch.device("cpu"))
    for i in range(3):
        net = model.module_from(params[i])
        z = net(x[i], tuple(m[i] for m in masks))
        (w[i] * torch.nn.functional.cross_entropy(z, y[i], reduction="none")).sum().backward()
        ref = torch.cat([p.grad.flatten() for p in net.parameters()])
        torch.testing.assert_close(got[i], ref, rtol=1e-4, atol=1e-6)


def test_the_mlps_own_backward_pass_matches_autograd_and_the_plain_sgd_loop(image_data, text_data):
    """``batching: bmm`` (MLPNet.batched_grads): the same gradients with dropout and padding rows, the same local
    models as per-device torch.optim.SGD."""
    test_gradients_match_autograd_on_the_plain_module("mlp", "bmm", image_data, text_data)
    test_batched_solver_matches_plain_sgd_loop("mlp", "bmm", image_data, text_data)


def test_bmm_is_refused_where_the_module_has_no_backward_pass_of_its_own(image_data, text_data):
    with pytest.raises(cfgmod.ConfigError, match="model.options.batching: bmm is the CNNNet's own backward pass"):
        build_model("cnn", load_leaf(image_data), {**TINY["cnn"], "batching": "bmm"})
    with pytest.raises(cfgmod.ConfigError, match="not with model.softmax_before_loss"):
        build_model("mlp", load_leaf(image_data), {**TINY["mlp"], "batching": "bmm"}, softmax_before_loss=True)


def test_auto_takes_the_batching_measured_on_this_machine(image_data, tmp_path, monkeypatch):
    from upfl.measured import save_machine_costs

    monkeypatch.setenv("UPFL_ROUND_COSTS", str(tmp_path / "costs.json"))
    model = build_model("mlp", load_leaf(image_data), TINY["mlp"])
    cpu = torch.device("cpu")
    assert model.strategy(cpu) == "vmap"  # nothing measured: the module's default
    save_machine_costs(tmp_path / "costs.json", {}, {"mlp": "bmm", "cnn": "vmap"})
    assert model.strategy(cpu) == "bmm"
    authors = build_model("mlp", load_leaf(image_data), TINY["mlp"], softmax_before_loss=True)
    assert authors.strategy(cpu) == "vmap"  # bmm does not apply to the authors' loss


def test_lstm_reads_the_frozen_embeddings_and_the_last_step(text_data):
    ds = load_leaf(text_data)
    model = build_model("lstm", ds, TINY["lstm"])
    matrix = np.load(f"{text_data}/embeddings.npy")
    assert torch.equal(model.buffers["embedding"], torch.as_tensor(matrix))
    assert model.num_params == sum(p.numel() for p in model.module.parameters())
    assert "embedding" not in model.names and not model.needs_generator and model.glm_constants is None
    w = model.init_params(torch.Generator().manual_seed(0))
    x = torch.as_tensor(ds.train_x["u1"][:4])
    p = model.unflatten(w)
    h = torch.as_tensor(matrix)[x]
    for layer in range(2):
        hs, hid, c = [], torch.zeros(4, 4), torch.zeros(4, 4)
        for t in range(x.shape[1]):
            gates = h[:, t] @ p[f"lstm.weight_ih_l{layer}"].T + hid @ p[f"lstm.weight_hh_l{layer}"].T
            gi, gf, gg, go = (gates + p[f"lstm.bias_ih_l{layer}"] + p[f"lstm.bias_hh_l{layer}"]).chunk(4, -1)
            c = torch.sigmoid(gf) * c + torch.sigmoid(gi) * torch.tanh(gg)
            hid = torch.sigmoid(go) * torch.tanh(c)
            hs.append(hid)
        h = torch.stack(hs, 1)
    expected = h[:, -1] @ p["out.weight"].T + p["out.bias"]
    torch.testing.assert_close(model.logits(w, x), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["mlp", "cnn", "lstm"])
def test_init_is_deterministic_and_leaves_the_global_rng_alone(name, image_data, text_data):
    ds = dataset_for(name, image_data, text_data)
    state = torch.get_rng_state()
    model = build_model(name, ds, TINY[name])
    a = model.init_params(torch.Generator().manual_seed(5))
    b = model.init_params(torch.Generator().manual_seed(5))
    c = model.init_params(torch.Generator().manual_seed(6))
    assert torch.equal(torch.get_rng_state(), state)
    assert a.shape == (model.num_params,) and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_init_schemes_follow_pytorch_defaults_and_the_authors_normal(image_data):
    ds = load_leaf(image_data)
    cnn = build_model("cnn", ds, TINY["cnn"])
    p = cnn.unflatten(cnn.init_params(torch.Generator().manual_seed(0)))
    for name, fan_in in (
        ("conv.weight", 9),
        ("conv.bias", 9),
        ("fcs.0.weight", 32),
        ("fcs.1.bias", 6),
        ("out.weight", 4),
    ):
        assert p[name].abs().max() <= 1 / math.sqrt(fan_in) and p[name].abs().max() > 0.5 / math.sqrt(fan_in)
    mlp = build_model("mlp", ds, TINY["mlp"])
    q = mlp.unflatten(mlp.init_params(torch.Generator().manual_seed(0)))
    assert torch.equal(q["fc1.bias"], torch.zeros(5)) and torch.equal(q["fc2.bias"], torch.zeros(3))
    assert 0.005 < float(q["fc1.weight"].std()) < 0.02


@pytest.mark.parametrize("name", ["mlp", "cnn", "lstm"])
@VMAP_LSTM_FALLBACK
def test_dropout_draws_are_reproducible(name, image_data, text_data):
    ds = dataset_for(name, image_data, text_data)
    model = build_model(name, ds, {**TINY[name], "dropout": 0.5})
    params, x, y, w = random_batch(model, ds, 3, 6, seed=1)
    yo = torch.eye(ds.num_classes)[y]
    a = model.loss_and_grad(params, x, yo, w, generator=torch.Generator().manual_seed(1))
    b = model.loss_and_grad(params, x, yo, w, generator=torch.Generator().manual_seed(1))
    c = model.loss_and_grad(params, x, yo, w, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    g = torch.Generator().manual_seed(1)
    first = model.loss_and_grad(params, x, yo, w, generator=g)
    assert torch.equal(first, a) and not torch.equal(model.loss_and_grad(params, x, yo, w, generator=g), a)
    model.batching = "loop" if model.strategy(params.device) == "vmap" else "vmap"
    torch.testing.assert_close(
        model.loss_and_grad(params, x, yo, w, generator=torch.Generator().manual_seed(1)), a, rtol=1e-4, atol=1e-6
    )
    with pytest.raises(ValueError, match="dropout generator"):
        model.loss_and_grad(params, x, yo, w)


def test_evaluate_sums_cross_entropy_in_chunks(image_data, monkeypatch):
    ds = load_leaf(image_data)
    model = build_model("mlp", ds, TINY["mlp"] | {"dropout": 0.5})
    w = model.init_params(torch.Generator().manual_seed(0)) * 30
    x = torch.as_tensor(ds.train_x["u3"])
    y = torch.as_tensor(ds.train_y["u3"])
    with torch.no_grad():
        z = model.module_from(w)(x)
    monkeypatch.setattr("upfl.models.networks.EVAL_CHUNK", 3)
    loss, correct = model.evaluate(w, x, y)
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(z, y, reduction="sum")), rel=1e-6)
    assert correct == int((z.argmax(1) == y).sum())


def binary_data(seed, k=3, batch=5, dim=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(k, batch, dim, generator=g)
    x = x / x.norm(dim=-1, keepdim=True).clamp_min(1.0)
    labels = torch.randint(0, 2, (k, batch), generator=g)
    w = torch.full((k, batch), 1.0 / (batch - 1))
    w[:, -1] = 0.0
    return x, labels, w, torch.randn(k, dim + 1, generator=g)


def test_binary_logreg_gradient_matches_autograd_and_hand_formula():
    model = BinaryLogisticRegression(4, bias=True)
    assert model.num_params == 5 and model.glm_constants == (1.0, 0.25) and not model.needs_generator
    x, labels, w, params = binary_data(0)
    got = model.loss_and_grad(params, x, torch.eye(2)[labels], w)
    sign = 2.0 * labels - 1.0
    for i in range(3):
        p = params[i].clone().requires_grad_(True)
        xt = torch.cat([x[i], torch.ones(5, 1)], 1) / math.sqrt(2)
        assert float(xt.norm(dim=1).max()) <= 1 + 1e-6
        z = xt @ p
        (w[i] * torch.log1p(torch.exp(-sign[i] * z))).sum().backward()
        torch.testing.assert_close(got[i], p.grad, rtol=1e-5, atol=1e-7)
        hand = sum(
            w[i, b] * (-sign[i, b]) / (1 + math.exp(float(sign[i, b] * z[b].detach()))) * xt[b] for b in range(5)
        )
        torch.testing.assert_close(got[i], hand.detach(), rtol=1e-5, atol=1e-7)
    nobias = BinaryLogisticRegression(4, bias=False)
    g2 = nobias.loss_and_grad(params[:, :4], x, torch.eye(2)[labels], w)
    z = torch.einsum("kbd,kd->kb", x, params[:, :4])
    torch.testing.assert_close(g2, torch.einsum("kb,kbd->kd", -w * sign * torch.sigmoid(-sign * z), x))


def test_binary_logreg_evaluate_and_class_check(image_data, tmp_path):
    model = BinaryLogisticRegression(4, bias=False)
    x, labels, _, params = binary_data(1)
    loss, correct = model.evaluate(params[0, :4], x[0], labels[0])
    z = x[0] @ params[0, :4]
    assert loss == pytest.approx(float(torch.log1p(torch.exp(-(2.0 * labels[0] - 1) * z)).sum()), rel=1e-6)
    assert correct == int(((z > 0).long() == labels[0]).sum())
    with pytest.raises(cfgmod.ConfigError, match="binary_logreg is a two-class model.*3 classes"):
        build_model("binary_logreg", load_leaf(image_data))
    rng = np.random.default_rng(0)
    xs = {"a": rng.random((6, 4)).astype(np.float32)}
    write_leaf(
        tmp_path / "bin",
        ["a"],
        (xs, {"a": rng.integers(0, 2, 6)}),
        (xs, {"a": rng.integers(0, 2, 6)}),
        {"num_classes": 2},
    )
    built = build_model("binary_logreg", load_leaf(tmp_path / "bin"), {"bias": False})
    assert built.num_params == 4 and built.glm_constants == (1.0, 0.25)
    w0 = built.init_params(torch.Generator().manual_seed(0))
    assert torch.equal(w0, built.init_params(torch.Generator().manual_seed(0)))


def test_glm_constants_bound_the_binary_log_loss_and_other_models_get_no_objective_guarantee(image_data, text_data):
    """Theorem C.2's (u1, u2) are the least bounds of |L'(z)| and L''(z): measured on the model's own gradients
    (one feature of value 1, so the gradient is L'(z)) over z in [-40, 40]. A model without them is named as no
    generalized linear model by the objective-perturbation check."""
    from types import SimpleNamespace

    from upfl.privacy.accounting import objective_assumptions

    model = BinaryLogisticRegression(1, bias=False)
    u1, u2 = model.glm_constants
    z = torch.linspace(-40.0, 40.0, 8001, dtype=torch.float64)
    h = 1e-4
    for label in (0, 1):
        onehot = torch.eye(2, dtype=torch.float64)[torch.full((len(z), 1), label)]
        x, w = torch.ones(len(z), 1, 1, dtype=torch.float64), torch.ones(len(z), 1, dtype=torch.float64)
        first = model.loss_and_grad(z[:, None], x, onehot, w)[:, 0]
        second = (
            model.loss_and_grad((z + h)[:, None], x, onehot, w) - model.loss_and_grad((z - h)[:, None], x, onehot, w)
        )[:, 0] / (2 * h)
        assert float(first.abs().max()) <= u1 + 1e-9 and float(first.abs().max()) > 0.999 * u1
        assert float(second.max()) <= u2 + 1e-6 and float(second.max()) > 0.999 * u2
    for name in ("logreg", "mlp", "cnn", "lstm"):
        built = build_model(name, dataset_for(name, image_data, text_data), TINY.get(name))
        cfg = SimpleNamespace(algorithm=SimpleNamespace(name="fedprox", mu=1.0), model=SimpleNamespace(name=name))
        stated = objective_assumptions(cfg, None, built, [100])
        assert not stated["holds"] and "not a generalized linear model" in stated["reason"], (name, stated)


def test_build_model_errors_name_the_option(image_data, text_data, tmp_path):
    ds = load_leaf(image_data)
    with pytest.raises(
        cfgmod.ConfigError, match="model.name: unknown model 'rnn'; available: logreg, binary_logreg, mlp, cnn, lstm"
    ):
        build_model("rnn", ds)
    with pytest.raises(
        cfgmod.ConfigError, match=r"model.options.width: mlp has no option 'width'; its options: hidden"
    ):
        build_model("mlp", ds, {"width": 3})
    with pytest.raises(cfgmod.ConfigError, match="model.options.hidden: expected a positive integer"):
        build_model("mlp", ds, {"hidden": 0})
    with pytest.raises(cfgmod.ConfigError, match="model.options.hidden: expected a non-empty list"):
        build_model("cnn", ds, {"hidden": 5})
    with pytest.raises(cfgmod.ConfigError, match=r"model.options.dropout: expected a number in \[0, 1\)"):
        build_model("cnn", ds, {"dropout": 1.0})
    with pytest.raises(cfgmod.ConfigError, match="model.options.init: must be one of torch, normal"):
        build_model("lstm", load_leaf(text_data), {"init": "xavier"})
    with pytest.raises(cfgmod.ConfigError, match="model.options.batching: must be one of auto, vmap, loop, bmm"):
        build_model("mlp", ds, {"batching": "fast"})
    with pytest.raises(cfgmod.ConfigError, match="model.options.bias: expected true or false"):
        build_model("binary_logreg", ds, {"bias": 1})
    with pytest.raises(cfgmod.ConfigError, match="model.options: logreg takes no options"):
        build_model("logreg", ds, {"hidden": 3})
    rng = np.random.default_rng(0)
    xs = {"a": rng.random((4, 5)).astype(np.float32)}
    write_leaf(tmp_path / "odd", ["a"], (xs, {"a": np.array([0, 1, 0, 1])}), (xs, {"a": np.array([1, 0, 1, 0])}), {})
    with pytest.raises(cfgmod.ConfigError, match="cnn needs square greyscale images"):
        build_model("cnn", load_leaf(tmp_path / "odd"))
    with pytest.raises(DatasetError, match="no 'embeddings' entry"):
        build_model("lstm", ds)


def tiny_config(data, out, name, options, algorithm="upcycled"):
    alg = {"name": algorithm, "mu": 0.1, "lam": 0.04} if algorithm == "upcycled" else {"name": algorithm}
    return cfgmod.from_dict(
        {
            "data": {"path": data},
            "rounds": 3,
            "seed": 1,
            "device": "cpu",
            "model": {"name": name, "options": options},
            "algorithm": alg,
            "devices": {"frac": 0.5, "straggler": 0.5},
            "solver": {"epochs": 2, "batch_size": 4, "lr": 0.05, "momentum": 0.5},
            "checkpoint": {"every": 0, "dir": str(out / "ck")},
        }
    )


@pytest.mark.parametrize(
    "name,options",
    [("mlp", {"hidden": 5}), ("cnn", {"channels": 2, "hidden": [6, 4]}), ("lstm", {"hidden": 4, "dropout": 0.2})],
)
def test_short_run_with_each_model_writes_metrics(name, options, image_data, text_data, tmp_path):
    data = text_data if name == "lstm" else image_data
    cfg = tiny_config(data, tmp_path, name, options)
    summary = run(cfg, tmp_path / "a", log=lambda s: None)
    rows = list(csv.DictReader((tmp_path / "a" / "metrics.csv").open()))
    assert [r["kind"] for r in rows] == ["init", "train", "upcycle", "train"]
    assert all(math.isfinite(float(r["train_loss"])) and math.isfinite(float(r["test_loss"])) for r in rows)
    assert int(rows[1]["local_steps"]) > 0
    again = run(cfg, tmp_path / "b", log=lambda s: None)
    assert again["final"] == summary["final"]


def test_short_binary_logreg_run_learns_a_linear_rule(tmp_path):
    """Labels from a linear rule: FedProx with the binary model starts at the log-loss of a near-zero model
    (ln 2) and drives it below half of that, with train and test accuracy near 1."""
    rng = np.random.default_rng(2)
    users = ["a", "b", "c"]
    rule = np.array([1.0, -2.0, 0.5], dtype=np.float32)

    def split(n):
        xs = {u: rng.standard_normal((n, 3)).astype(np.float32) for u in users}
        return xs, {u: (xs[u] @ rule > 0).astype(np.int64) for u in users}

    write_leaf(tmp_path / "bin", users, split(40), split(20), {"num_classes": 2})
    doc = cfgmod.to_dict(tiny_config(str(tmp_path / "bin"), tmp_path, "binary_logreg", {}, "fedprox"))
    doc["data"]["feature_scaling"] = "unit_norm"
    doc["algorithm"]["mu"] = 0.01
    doc["rounds"], doc["devices"]["straggler"], doc["solver"]["lr"] = 20, 0.0, 0.5
    summary = run(cfgmod.from_dict(doc), tmp_path / "r", log=lambda s: None)
    rows = list(csv.DictReader((tmp_path / "r" / "metrics.csv").open()))
    init, final = rows[0], summary["final"]
    assert init["kind"] == "init" and abs(float(init["train_loss"]) - math.log(2)) < 0.01
    assert final["train_loss"] < 0.5 * math.log(2) and final["train_acc"] > 0.9 and final["test_acc"] > 0.85


@pytest.mark.parametrize("seed", [0, 1, 2, 77])
def test_linear_models_draw_their_initial_model_without_torch(seed):
    """``init_array`` is ``init_params`` of a fresh generator, bit for bit, where the models draw without torch."""
    from upfl.draws.streams import derive_seed, generator
    from upfl.models import draws_without_torch

    derived = derive_seed(seed, "init")
    for model in (
        LogisticRegression(60, 10),
        LogisticRegression(20, 2),
        BinaryLogisticRegression(60, bias=True),
        BinaryLogisticRegression(17, bias=False),
    ):
        same = np.array_equal(model.init_array(derived), model.init_params(generator(seed, "init")).numpy())
        assert draws_without_torch(model) == same
    assert not draws_without_torch(BinaryLogisticRegression(15)), "torch draws fewer than 16 values otherwise"


def test_binary_features_of_arrays_are_those_of_tensors():
    x = torch.randn(50, 7, generator=torch.Generator().manual_seed(0))
    for bias in (True, False):
        model = BinaryLogisticRegression(7, bias=bias)
        assert np.array_equal(model.features_array(x.numpy()), model.features(x).numpy())
