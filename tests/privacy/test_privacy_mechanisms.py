import pytest
import torch
from scipy import stats

from upfl.privacy import (
    clip_to_norm,
    gaussian_output_noise,
    objective_noise_draws,
    output_perturbation,
    sample_objective_noise,
    scale_objective_noise,
    standard_normal_rows,
)


def test_clipping_bounds_norms_and_keeps_inside_rows():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(200, 41, generator=g) * torch.linspace(0.01, 5, 200).view(-1, 1)
    C = clip_to_norm(W, 3.0)
    assert (C.norm(dim=1) <= 3.0).all()
    inside = W.norm(dim=1) <= 3.0
    assert torch.equal(C[inside], W[inside])
    torch.testing.assert_close(C[~inside].norm(dim=1), torch.full(((~inside).sum(),), 3.0), rtol=0, atol=1e-4)


def test_output_noise_std_is_sigma_not_sigma_squared():
    W = torch.zeros(50, 2000)
    noisy = gaussian_output_noise(W, 0.5, torch.Generator().manual_seed(1))
    assert abs(float(noisy.std()) - 0.5) < 0.005
    per_dev = gaussian_output_noise(torch.zeros(2, 100000), torch.tensor([0.2, 2.0]), torch.Generator().manual_seed(2))
    assert abs(float(per_dev[0].std()) - 0.2) < 0.005 and abs(float(per_dev[1].std()) - 2.0) < 0.05
    a = output_perturbation(torch.ones(3, 10), 1.0, 0.1, torch.Generator().manual_seed(3))
    b = output_perturbation(torch.ones(3, 10), 1.0, 0.1, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_one_generator_per_row_draws_each_row_as_its_own_release():
    W = torch.randn(4, 30, generator=torch.Generator().manual_seed(5)) * 3
    sigmas = torch.tensor([0.5, 1.0, 2.0, 0.1])
    together = output_perturbation(W, 2.0, sigmas, [torch.Generator().manual_seed(10 + i) for i in range(4)])
    for i in range(4):
        alone = output_perturbation(W[i : i + 1], 2.0, float(sigmas[i]), torch.Generator().manual_seed(10 + i))
        assert torch.equal(together[i : i + 1], alone)
    with pytest.raises(ValueError, match="generator: one per row"):
        gaussian_output_noise(W, 1.0, [torch.Generator()])
    drawn = standard_normal_rows(W.shape[1:], [torch.Generator().manual_seed(10 + i) for i in range(4)])
    assert torch.equal(output_perturbation(W, 2.0, sigmas, noise=drawn), together)  # draws made once, reused
    with pytest.raises(ValueError, match="noise: shape"):
        output_perturbation(W, 2.0, sigmas, noise=drawn[:3])


def test_objective_noise_is_alpha_free_draws_scaled_by_alpha():
    """A bundle reuses the draws of (seed, round, device) for every alpha: scaling them must give exactly the noise
    drawn with that alpha, row by row."""
    P, alphas = 21, [5.0, 10.0, 40.0]
    rows = [objective_noise_draws(1, P, torch.Generator().manual_seed(20 + i)) for i in range(3)]
    gamma, direction = torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows])
    together = scale_objective_noise(gamma, direction, alphas)
    for i, a in enumerate(alphas):
        assert torch.equal(together[i : i + 1], sample_objective_noise(1, P, a, torch.Generator().manual_seed(20 + i)))
    torch.testing.assert_close(
        together.double().norm(dim=1), (gamma / torch.tensor(alphas).double().view(-1, 1)).view(-1)
    )


def test_objective_noise_radius_is_gamma_and_direction_isotropic():
    P, alpha = 21, 10.0
    n = sample_objective_noise(4000, P, alpha, torch.Generator().manual_seed(4))
    radius = n.double().norm(dim=1).numpy()
    assert stats.kstest(radius, stats.gamma(a=P, scale=1 / alpha).cdf).pvalue > 0.01
    unit = n.double() / n.double().norm(dim=1, keepdim=True)
    assert float(unit.mean(0).abs().max()) < 0.05
    assert stats.kstest(unit[:, 0].numpy() ** 2, stats.beta(0.5, (P - 1) / 2).cdf).pvalue > 0.01


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: gaussian_output_noise(torch.zeros(1, 2), -1.0, torch.Generator()), "sigma"),
        (lambda: clip_to_norm(torch.zeros(1, 2), 0.0), "tau"),
        (lambda: sample_objective_noise(1, 2, 0.0, torch.Generator()), "alpha"),
    ],
)
def test_bad_parameters_are_named(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_cpu_numpy_path_gives_torch_bits():
    """On the CPU the mechanisms compute in numpy; a tensor in autograd takes the torch formulas. Same bits, for
    float32 and float64, scalar and per-row sigma, clipped, unclipped and zero rows."""
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        dtype = (torch.float32, torch.float64)[trial % 2]
        k, P = int(torch.randint(1, 30, (1,), generator=g)), int(torch.randint(1, 2000, (1,), generator=g))
        W = torch.randn(k, P, generator=g, dtype=dtype) * float(torch.rand(1, generator=g) * 5)
        W[0] = 0.0
        tau = float(torch.rand(1, generator=g) * 50 + 0.01)
        sigma = (torch.rand(k, generator=g, dtype=torch.float64) + 0.1) if trial % 3 else 0.7
        noise = torch.randn(k, P, generator=g, dtype=dtype)
        fast = output_perturbation(W, tau, sigma, noise=noise)
        reference = output_perturbation(W.clone().requires_grad_(), tau, sigma, noise=noise).detach()
        assert fast.dtype == reference.dtype == dtype
        assert torch.equal(fast, reference)
        assert torch.equal(clip_to_norm(W, tau), clip_to_norm(W.clone().requires_grad_(), tau).detach())


def test_cpu_numpy_path_checks_its_inputs():
    W = torch.ones(2, 3)
    with pytest.raises(ValueError, match="sigma must be > 0"):
        gaussian_output_noise(W, torch.tensor([1.0, float("nan")]), noise=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="tau must be > 0"):
        clip_to_norm(W, 0.0)
    with pytest.raises(ValueError, match="noise: shape"):
        gaussian_output_noise(W, 1.0, noise=torch.zeros(3, 2))


def test_noise_scales_that_vanish_or_overflow_in_float32_are_refused_at_config_time(tmp_path):
    """The noise is drawn and scaled in float32: a sigma that rounds to 0 there would release the clipped model with
    no noise, an alpha that overflows would make the objective noise 0. Both are config errors naming the key."""
    from upfl import config as cfgmod
    from upfl.config import ConfigError
    from upfl.privacy.mechanisms import float32_scale_problem

    assert float32_scale_problem(0.5) is None and float32_scale_problem(1e-30) is None
    assert "rounds to 0 in float32" in float32_scale_problem(1e-50)
    assert "rounds to a subnormal number" in float32_scale_problem(1e-40)
    assert "overflows float32" in float32_scale_problem(1e39)
    doc = {"data": {"path": str(tmp_path)}, "algorithm": {"name": "fedprox", "mu": 0.1}}
    with pytest.raises(ConfigError, match="privacy.sigma: 1e-45 rounds to"):
        cfgmod.from_dict({**doc, "privacy": {"mechanism": "output", "tau": 1.0, "sigma": 1e-45}})
    with pytest.raises(ConfigError, match="privacy.sigma: 1e-50 rounds to 0 in float32"):
        cfgmod.from_dict({**doc, "privacy": {"mechanism": "output", "tau": 1.0, "sigma": [0.5, 1e-50]}})
    with pytest.raises(ConfigError, match="privacy.alpha: 1e\\+39 overflows float32"):
        cfgmod.from_dict({**doc, "privacy": {"mechanism": "objective", "alpha": 1e39}})
    with pytest.raises(ConfigError, match="privacy.sigma: 1e-30 is below the smallest sigma .* 1.19209e-07"):
        cfgmod.from_dict({**doc, "privacy": {"mechanism": "output", "tau": 1.0, "sigma": 1e-30}})


def test_a_sigma_whose_noise_float32_rounds_away_is_refused_with_the_smallest_meaningful_sigma(tmp_path):
    """Below tau 2^-23 the noise leaves the released float32 model (clipped to tau) nearly or wholly unchanged: sigma
    1e-12 with tau 1 changes only the few coordinates within about 1e-5 of 0 (0.2% of a 5000-parameter model),
    while the smallest meaningful sigma changes nearly all. Such a sigma is refused by the config (so by ``upfl
    run``, ``upfl privacy`` and the Flower apps), naming the smallest meaningful sigma, and its epsilon is infinite,
    never a number."""
    import math

    import torch

    from upfl import config as cfgmod
    from upfl.config import ConfigError
    from upfl.privacy.accounting import output_epsilons
    from upfl.privacy.mechanisms import clip_to_norm, output_perturbation, smallest_meaningful_sigma

    tau = 1.0
    W = torch.randn((1, 5000), generator=torch.Generator().manual_seed(0))
    clipped = clip_to_norm(W, tau)
    changed = {}
    for sigma in (1e-12, smallest_meaningful_sigma(tau)):
        released = output_perturbation(W, tau, sigma, torch.Generator().manual_seed(1))
        changed[sigma] = float((released != clipped).float().mean())
    print("fraction of coordinates the noise changes:", changed)
    assert changed[1e-12] < 0.01
    assert changed[smallest_meaningful_sigma(tau)] > 0.9
    assert smallest_meaningful_sigma(2.0) == 2.0 * 2.0**-23
    doc = {"data": {"path": str(tmp_path)}, "algorithm": {"name": "fedprox", "mu": 0.1}}
    with pytest.raises(ConfigError, match=r"privacy.sigma: 1e-12 is below .* 2.38419e-07 \(tau 2\^-23 with tau 2.0"):
        cfgmod.from_dict({**doc, "privacy": {"mechanism": "output", "tau": 2.0, "sigma": [0.5, 1e-12]}})
    cfgmod.from_dict({**doc, "privacy": {"mechanism": "output", "tau": 2.0, "sigma": 2.4e-7}})
    eps = output_epsilons(3, 1e-20, 1.0, 100, 1e-3, ("rdp",))
    assert eps and all(v == math.inf for v in eps.values()), eps
    assert all(math.isfinite(v) for v in output_epsilons(3, 1.0, 1.0, 100, 1e-3).values())
