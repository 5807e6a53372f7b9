"""PSIS k-hat and VSBC (guides.checks) on conjugate Bayesian linear regression.

The posterior of ``tests.guides._models.regression_model`` is Gaussian and known in closed
form, so a guide can be set to it exactly, or to it with its scale shrunk (too narrow) or
its mean shifted (biased). What each check can detect:

- PSIS k-hat: any q far enough from the posterior that its importance ratios are
  heavy-tailed (too narrow, biased). An exact guide gives k-hat < 0.5, a guide at 0.3 of
  the posterior's scale > 0.7 (its ratios' tail index is 1 - 0.3^2 = 0.91 per coordinate).
- VSBC symmetry (Yao et al. 2018): a biased q only; a centred, too narrow q gives U-shaped
  p-values that are symmetric and pass it.
- VSBC uniformity (KS against the uniform): both the biased and the too narrow q.

Every threshold below comes from the fixed seeds: the values they gave are in the comments.
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer.autoguide import AutoNormal
from pyro.nn import PyroModule, PyroSample

from guides.checks import pareto_smooth, psis_khat, vsbc
from tests.guides._models import ALPHA, D_LR, SIGMA, regression, regression_model

R = 100  # VSBC replications


def posterior(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact posterior mean and covariance of the regression weights (float64)."""
    x, y = x.double(), y.double()
    cov = torch.linalg.inv(ALPHA * torch.eye(D_LR, dtype=x.dtype) + x.T @ x / SIGMA**2)
    return cov @ x.T @ y / SIGMA**2, cov


class Gaussian:
    """A plain Pyro guide ``w ~ N(loc, L L^T)`` with ``loc_scale`` (closed-form VSBC)."""

    def __init__(self, loc: torch.Tensor, scale_tril: torch.Tensor) -> None:
        self.loc, self.scale_tril = loc, scale_tril

    def __call__(self, x: torch.Tensor, y: torch.Tensor | None = None) -> dict:
        d = dist.MultivariateNormal(self.loc, scale_tril=self.scale_tril)
        return {"w": pyro.sample("w", d)}

    def loc_scale(self, site: str) -> tuple[torch.Tensor, torch.Tensor]:
        return self.loc, self.scale_tril.pow(2).sum(-1).sqrt()


def exact_guide(x, y, *, scale=1.0, shift=0.0, dtype=torch.float32) -> Gaussian:
    """The posterior as a guide, its scale times ``scale``, its mean moved by ``shift``
    posterior standard deviations."""
    mean, cov = posterior(x, y)
    tril = torch.linalg.cholesky(cov)
    return Gaussian((mean + shift * cov.diag().sqrt()).to(dtype), (scale * tril).to(dtype))


def analytic_refit(*, scale=1.0, shift=0.0, x):
    """A VSBC ``refit``: the guide set to the posterior of the simulated data."""
    return lambda model, y_star: exact_guide(x, y_star["y"], scale=scale, shift=shift)


@pytest.fixture(scope="module")
def data64():
    x, y, _, _ = regression()
    return x.double(), y.double()


def test_exact_guide_has_a_small_khat_and_a_narrow_one_a_large_khat(data64):
    x, y = data64
    exact = psis_khat(regression_model, exact_guide(x, y, dtype=x.dtype), x, y, seed=0)
    assert exact.khat == -np.inf  # the ratios are log p(y) up to rounding: no tail
    assert np.ptp(exact.log_ratios) < 1e-9
    wide = psis_khat(regression_model, exact_guide(x, y, scale=1.2, dtype=x.dtype), x, y, seed=0)
    assert wide.khat < 0.5  # -0.35: bounded weights
    narrow = psis_khat(regression_model, exact_guide(x, y, scale=0.3, dtype=x.dtype), x, y, seed=0)
    assert narrow.khat > 0.7  # 0.98
    assert narrow.log_weights.shape == (400,)
    np.testing.assert_allclose(np.logaddexp.reduce(narrow.log_weights), 0.0, atol=1e-9)


def test_psis_draws_are_seeded_and_leave_the_global_generator_alone(data64):
    x, y = data64
    guide = exact_guide(x, y, scale=0.5, dtype=x.dtype)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    a = psis_khat(regression_model, guide, x, y, num_samples=50, seed=3)
    assert torch.equal(torch.get_rng_state(), before)
    b = psis_khat(regression_model, guide, x, y, num_samples=50, seed=3)
    np.testing.assert_array_equal(a.log_ratios, b.log_ratios)
    with pytest.raises(ValueError, match="at least 5"):
        psis_khat(regression_model, guide, x, y, num_samples=4)


def test_equal_ratios_have_no_tail_to_fit():
    khat, lw = pareto_smooth(np.full(100, -3.0))
    assert khat == -np.inf
    np.testing.assert_allclose(lw, np.full(100, -np.log(100)))
    assert np.isnan(pareto_smooth(np.r_[np.nan, np.arange(99.0)])[0])
    # rounding noise is no tail either (ArviZ 0.8 fitted it, 1.x gave NaN)
    khat, _ = pareto_smooth(-120.0 + 1e-12 * np.random.default_rng(0).normal(size=100))
    assert khat == -np.inf


def _vsbc(refit_kwargs, x, **kwargs):
    return vsbc(
        regression_model,
        analytic_refit(x=x, **refit_kwargs),
        x,
        None,
        observed=["y"],
        replications=R,
        seed=0,
        **kwargs,
    )


def test_vsbc_of_the_exact_posterior_is_uniform_and_symmetric():
    x = regression()[0]
    res = _vsbc({}, x)
    assert res.pvalues["w"].shape == (R, D_LR)
    assert (res.uniformity()["w"] > 0.05).all()  # 0.39, 0.75, 0.12
    assert (res.symmetry()["w"] > 0.05).all()  # 0.37, 0.97, 0.47


def test_vsbc_uniformity_catches_a_too_narrow_guide_that_symmetry_cannot():
    res = _vsbc({"scale": 0.3}, regression()[0])
    assert (res.uniformity()["w"] < 1e-3).all()  # U-shaped: 4e-5, 1e-7, 4e-13
    # p -> Phi(Phi^-1(p) / 0.3) keeps p and 1 - p exchangeable: the symmetry test's values
    # are exactly those of the exact guide (0.37, 0.97, 0.47), whatever the scale
    assert (res.symmetry()["w"] > 0.05).all()


def test_vsbc_symmetry_and_uniformity_catch_a_biased_guide():
    res = _vsbc({"shift": 1.0}, regression()[0])
    assert (res.symmetry()["w"] < 1e-3).all()  # ~1e-23
    assert (res.uniformity()["w"] < 1e-3).all()  # ~1e-15


def test_vsbc_empirical_cdf_of_a_guide_without_loc_scale_matches_the_closed_form():
    x = regression()[0]

    def plain(model, y_star):  # a guide function: VSBC falls back to guide draws
        g = exact_guide(x, y_star["y"])

        def guide(x, y=None):
            return g(x, y)

        return guide

    common = {"observed": ["y"], "replications": 8, "seed": 0}
    closed = vsbc(regression_model, analytic_refit(x=x), x, None, **common)
    drawn = vsbc(regression_model, plain, x, None, num_samples=400, **common)
    assert np.abs(drawn.pvalues["w"] - closed.pvalues["w"]).max() < 0.08


def test_vsbc_restores_the_param_store_and_names_unknown_sites():
    x = regression()[0]
    pyro.param("kept", torch.tensor(2.0))

    def refit(model, y_star):
        assert "kept" not in pyro.get_param_store()  # every refit starts from a clear store
        pyro.param("scratch", torch.tensor(1.0))
        return exact_guide(x, y_star["y"])

    vsbc(regression_model, refit, x, None, observed=["y"], replications=2)
    assert set(pyro.get_param_store().keys()) == {"kept"}
    with pytest.raises(ValueError, match=r"observed sites \['obs'\] are not sites"):
        vsbc(regression_model, refit, x, None, observed=["obs"], replications=2)


def test_vectorized_draws_give_the_loops_ratios(data64):
    """The draws made at once in a plate (the default on this model) and one at a time:
    with q the posterior both give log p(y) at every draw (the densities' sums agree to
    rounding); with q its scale times c, log r = log p(y) + d log c - (c^2 - 1) |z|^2 / 2,
    |z|^2 ~ chi-square(d), and both means agree with that to 4.5 standard errors."""
    x, y = data64
    exact = exact_guide(x, y, dtype=x.dtype)
    at_once = psis_khat(regression_model, exact, x, y, seed=0, vectorize=True)
    one_by_one = psis_khat(regression_model, exact, x, y, num_samples=20, seed=0, vectorize=False)
    log_py = one_by_one.log_ratios[0]
    np.testing.assert_allclose(at_once.log_ratios, log_py, rtol=1e-10)
    assert at_once.khat == -np.inf
    c, n = 0.5, 400
    want = log_py + D_LR * np.log(c) - 0.5 * (c**2 - 1) * D_LR
    se = 0.5 * abs(c**2 - 1) * np.sqrt(2 * D_LR / n)
    for vectorize in (True, False):
        r = psis_khat(
            regression_model,
            exact_guide(x, y, scale=c, dtype=x.dtype),
            x,
            y,
            seed=1,
            vectorize=vectorize,
        )
        assert abs(r.log_ratios.mean() - want) < 4.5 * se, (vectorize, r.log_ratios.mean(), want)


def test_a_pyromodule_network_falls_back_to_one_draw_at_a_time():
    """nn.Linear's weights cannot carry a batch of draws: the default loops (the ratios
    those of vectorize=False, digit for digit), vectorize=True says why it cannot."""

    class Net(PyroModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = PyroModule[torch.nn.Linear](2, 3)
            self.fc.weight = PyroSample(dist.Normal(0.0, 1.0).expand([3, 2]).to_event(2))
            self.fc.bias = PyroSample(dist.Normal(0.0, 1.0).expand([3]).to_event(1))

        def forward(self, x, y=None):
            mean = self.fc(x).sum(-1)  # the weights sampled outside the data plate
            with pyro.plate("data", x.shape[0]):
                pyro.sample("obs", dist.Normal(mean, 1.0), obs=y)

    pyro.clear_param_store()
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(20, 2, generator=gen), torch.randn(20, generator=gen)
    net = Net()
    guide = AutoNormal(net)
    guide(x, y)
    default = psis_khat(net, guide, x, y, num_samples=30, seed=0)
    loop = psis_khat(net, guide, x, y, num_samples=30, seed=0, vectorize=False)
    np.testing.assert_array_equal(default.log_ratios, loop.log_ratios)
    with pytest.raises(Exception):  # noqa: B017 - torch's shape error, whatever its type
        psis_khat(net, guide, x, y, num_samples=30, seed=0, vectorize=True)
