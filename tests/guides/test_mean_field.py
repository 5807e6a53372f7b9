"""Tests of guides.AutoMeanField on plain Pyro models (no zoo import)."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, Predictive, Trace_ELBO, TraceMeanField_ELBO
from pyro.infer.autoguide import AutoDelta, AutoGuideList, init_to_feasible
from pyro.optim import Adam
from torch.distributions import Independent, Normal, TransformedDistribution

from guides import AutoMeanField
from tests.guides._models import (
    diag_normal_kl,
    fit_and_average,
    regression,
    regression_model,
    train_and_save,
)

# --------------------------------------------------------------------------------------
# 1. Conjugate Bayesian linear regression: the KL-optimal mean-field q is known exactly.
# --------------------------------------------------------------------------------------


def test_conjugate_regression_recovers_kl_optimal_mean_field():
    x, y, post_mean, post_cov = regression()  # m, S
    precision = torch.linalg.inv(post_cov)  # S^-1
    # argmin_q KL(q || N(m, S)) over diagonal Gaussians: mean m, variances 1 / (S^-1)_ii.
    mf_scale = precision.diagonal().rsqrt()
    # The design is correlated enough that the marginal posterior sd sqrt(S_ii) is far
    # from the mean-field sd: a guide converging to the marginals would fail below.
    assert (post_cov.diagonal().sqrt() / mf_scale).min() > 2.0

    guide = AutoMeanField(regression_model)

    # 2000 steps, lr 0.05 -> 1e-3; Polyak-Ruppert average of the last 500 iterates
    def loc_scale(guide: AutoMeanField) -> tuple[torch.Tensor, torch.Tensor]:
        return guide._get_loc_and_scale("w")

    loc, scale = fit_and_average(regression_model, guide, (x, y), loc_scale, 2000, 500, 0.05, 1e-3)

    # Tolerance. The KL term is closed form, so the gradient is stochastic only through
    # the reparameterised likelihood term. For coordinate i (Hessian H = S^-1, target sd
    # s = H_ii^-1/2) its noise has sd g ~ H_ii s / sqrt(P), P = 16 particles. Near the
    # optimum Adam steps by lr * gradient / g, an AR(1) process with stationary sd
    # sqrt(lr g / (2 H_ii)) = sqrt(lr s / (2 sqrt(P))) and correlation time
    # s / (lr sqrt(P)) steps. Here s ~ 0.065 and lr falls from 2.7e-3 to 1e-3 over the
    # window: per-iterate sd ~ 0.05 s (measured: 0.035-0.05 s), correlation time ~ 10-25
    # steps, so the 500-iterate average has sd ~ 0.01 s. The scales behave alike (measured
    # jitter ~ 0.01 s). Over 6 seeds the worst errors were 0.016 s (loc) and 2.4 % (scale).
    # Tolerance 0.05 s for the locs and 5 % for the scales: ~4-5 standard errors, while the
    # marginal-variance answer would be off by > 100 %.
    assert torch.all((loc - post_mean).abs() <= 0.05 * mf_scale), (loc, post_mean, mf_scale)
    assert torch.allclose(scale, mf_scale, rtol=0.05, atol=0.0), (scale, mf_scale)


# --------------------------------------------------------------------------------------
# 2. Several sites, constrained supports, a subsampled plate with a local latent.
# --------------------------------------------------------------------------------------

N_SUB, B_SUB = 30, 10


def _subsample_data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(N_SUB, 2, generator=gen)
    y = x @ torch.tensor([0.5, -1.0]) + 0.3 * torch.randn(N_SUB, generator=gen)
    return x, y


def hierarchical_model(
    x: torch.Tensor, y: torch.Tensor | None = None, idx: torch.Tensor | None = None
) -> None:
    """Global noise scale (HalfNormal), simplex site, weight vector; local z per point.

    Without ``idx`` the data plate draws its own minibatch of ``B_SUB`` points.
    """
    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    pyro.sample("probs", dist.Dirichlet(torch.ones(3)))  # rank-changing bijection
    w = pyro.sample("w", dist.Normal(torch.zeros(2), 1.0).to_event(1))
    subsample_size = B_SUB if idx is None else None
    with pyro.plate("data", N_SUB, subsample_size=subsample_size, subsample=idx) as i:
        z = pyro.sample("z", dist.Normal(0.0, 0.5))
        obs = None if y is None else y[i]
        pyro.sample("y", dist.Normal((x[i] * w).sum(-1) + z, sigma), obs=obs)


@pytest.mark.parametrize(
    "elbo",
    [
        Trace_ELBO(),
        TraceMeanField_ELBO(),
        TraceMeanField_ELBO(num_particles=3, vectorize_particles=True, max_plate_nesting=1),
    ],
    ids=["Trace_ELBO", "TraceMeanField_ELBO", "TraceMeanField_ELBO-vectorized"],
)
def test_svi_runs_on_model_with_plates_and_constraints(elbo):
    x, y = _subsample_data()
    guide = AutoMeanField(hierarchical_model)
    svi = SVI(hierarchical_model, guide, Adam({"lr": 0.01}), elbo)
    losses = [svi.step(x, y) for _ in range(5)]
    assert all(math.isfinite(loss) for loss in losses)

    # Local z has full-size parameters, indexed by the minibatch in each call.
    assert guide.locs.z.shape == (N_SUB,)
    trace = poutine.trace(guide).get_trace(x, y)
    assert trace.nodes["z"]["value"].shape == (B_SUB,)
    assert trace.nodes["z"]["scale"] == pytest.approx(N_SUB / B_SUB)
    # Every site is sampled from a real distribution object, not a Delta.
    assert isinstance(trace.nodes["z"]["fn"], Normal)
    assert isinstance(trace.nodes["w"]["fn"], Independent)
    assert isinstance(trace.nodes["w"]["fn"].base_dist, Normal)
    assert isinstance(trace.nodes["sigma"]["fn"], TransformedDistribution)
    assert trace.nodes["probs"]["value"].shape == (3,)
    # subsample plate's minibatch is the one the guide picked
    idx = trace.nodes["data"]["value"]
    loc_z = guide._get_loc_and_scale("z")[0]
    assert torch.equal(trace.nodes["z"]["fn"].loc, loc_z[idx])


def test_median_quantiles_posterior_and_predictive():
    x, y = _subsample_data()
    guide = AutoMeanField(hierarchical_model)
    svi = SVI(hierarchical_model, guide, Adam({"lr": 0.01}), TraceMeanField_ELBO())
    for _ in range(3):
        svi.step(x, y)

    shapes = {"sigma": (), "probs": (3,), "w": (2,), "z": (N_SUB,)}
    median = guide.median(x, y)
    assert {k: tuple(v.shape) for k, v in median.items()} == shapes
    assert median["sigma"] > 0
    assert torch.allclose(median["probs"].sum(), torch.tensor(1.0))
    assert not median["w"].requires_grad

    qs = guide.quantiles([0.05, 0.5, 0.95], x, y)
    assert {k: tuple(v.shape) for k, v in qs.items()} == {k: (3,) + s for k, s in shapes.items()}
    assert torch.all(qs["sigma"] > 0)
    assert torch.all(qs["sigma"][0] < qs["sigma"][2])
    assert torch.allclose(qs["probs"].sum(-1), torch.ones(3))
    assert torch.allclose(qs["w"][1], median["w"])
    with pytest.raises(ValueError, match=r"quantiles must lie in \[0, 1\]"):
        guide.quantiles([0.5, 1.5])

    post = guide.get_posterior("sigma")
    assert isinstance(post, TransformedDistribution)
    assert post.sample((100,)).min() > 0
    assert guide.get_posterior("z").batch_shape == (N_SUB,)
    with pytest.raises(ValueError, match="no latent site 'nope'; latent sites are"):
        guide.get_posterior("nope")

    # Automatic plates: shapes follow the minibatch.
    pred = Predictive(hierarchical_model, guide=guide, num_samples=7)(x)
    assert pred["y"].shape == (7, B_SUB)
    assert pred["w"].shape == (7, 1, 2)


def test_create_plates_shares_indices_with_model_for_predictive():
    x, y = _subsample_data()

    def create_plates(x, y=None, idx=None):
        return pyro.plate("data", N_SUB, subsample=idx)

    guide = AutoMeanField(hierarchical_model, create_plates=create_plates)
    svi = SVI(hierarchical_model, guide, Adam({"lr": 0.01}), TraceMeanField_ELBO())
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        svi.step(x, y, idx=torch.randperm(N_SUB, generator=gen)[:B_SUB])
    assert guide.locs.z.shape == (N_SUB,)
    full = torch.arange(N_SUB)
    pred = Predictive(hierarchical_model, guide=guide, num_samples=5)(x, idx=full)
    assert pred["z"].shape == (5, N_SUB)
    assert pred["y"].shape == (5, N_SUB)


def test_state_dict_round_trip(tmp_path):
    x, y = _subsample_data()
    guide = AutoMeanField(hierarchical_model)
    path = tmp_path / "guide.pt"
    train_and_save(hierarchical_model, guide, (x, y), path)
    expected = guide.median()

    # A fresh instance has no parameters until it has traced the model once; all
    # instances share the Pyro name "AutoMeanField", so clear the store first or the
    # setup call would pick up the old parameters from it.
    pyro.clear_param_store()
    fresh = AutoMeanField(hierarchical_model)
    with pytest.raises(RuntimeError, match="call the guide once"):
        fresh.median()
    fresh(x, y)
    assert not torch.equal(fresh.median()["w"], expected["w"])
    fresh.load_state_dict(torch.load(path, weights_only=True))
    got = fresh.median()
    assert got.keys() == expected.keys()
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
    # and the loaded values are the ones the guide samples with
    trace = poutine.trace(fresh).get_trace(x, y)
    assert torch.equal(trace.nodes["w"]["fn"].base_dist.loc, expected["w"])


def test_works_inside_auto_guide_list():
    x, y = _subsample_data()
    guide = AutoGuideList(hierarchical_model)
    guide.append(AutoDelta(poutine.block(hierarchical_model, expose=["sigma"])))
    guide.append(AutoMeanField(poutine.block(hierarchical_model, hide=["sigma"])))
    svi = SVI(hierarchical_model, guide, Adam({"lr": 0.01}), Trace_ELBO())
    assert all(math.isfinite(svi.step(x, y)) for _ in range(3))
    assert set(guide.median()) == {"sigma", "probs", "w", "z"}


# --------------------------------------------------------------------------------------
# 3. TraceMeanField_ELBO uses the closed-form KL.
# --------------------------------------------------------------------------------------


def test_trace_mean_field_elbo_is_analytic_kl():
    def model():
        pyro.sample("w", dist.Normal(0.0, 1.0).expand([4]).to_event(1))

    guide = AutoMeanField(model, init_scale=0.3)
    guide()
    loc, scale = (t.detach() for t in guide._get_loc_and_scale("w"))
    kl = diag_normal_kl(loc, scale)
    mf_losses = [TraceMeanField_ELBO().loss(model, guide) for _ in range(5)]
    assert mf_losses == [pytest.approx(kl, rel=1e-6)] * 5  # exact, zero variance
    mc_losses = [Trace_ELBO().loss(model, guide) for _ in range(5)]
    assert torch.tensor(mc_losses).std() > 0.1


def test_closed_form_kl_is_scaled_for_subsampled_local_sites():
    n, b = 100, 10

    def model():
        with pyro.plate("data", n, subsample_size=b):
            pyro.sample("z", dist.Normal(0.0, 2.0))

    # init_to_feasible puts every loc at 0, so each point contributes the same KL.
    guide = AutoMeanField(model, init_loc_fn=init_to_feasible, init_scale=0.5)
    guide()
    expected = n * diag_normal_kl(torch.zeros(1), torch.full((1,), 0.5), prior_scale=2.0)
    assert TraceMeanField_ELBO().loss(model, guide) == pytest.approx(expected, rel=1e-6)


def test_constrained_sites_closed_form_only_when_registered():
    def lognormal_model():
        pyro.sample("s", dist.LogNormal(0.0, 1.0))
        pyro.sample("v", dist.LogNormal(torch.zeros(3), 1.0).to_event(1))

    def halfnormal_model():
        pyro.sample("s", dist.HalfNormal(1.0))

    # LogNormal prior: the guide uses the same exp bijection, so torch's KL between
    # TransformedDistributions with equal transforms applies (also under to_event) and
    # reduces to the KL of the base Normals.
    guide = AutoMeanField(lognormal_model, init_scale=0.4)
    guide()
    kl = sum(diag_normal_kl(*(t.detach() for t in guide._get_loc_and_scale(name))) for name in "sv")
    losses = [TraceMeanField_ELBO().loss(lognormal_model, guide) for _ in range(3)]
    assert losses == [pytest.approx(kl, rel=1e-6)] * 3

    # HalfNormal prior: no registered KL, TraceMeanField_ELBO silently falls back to the
    # single-draw Monte Carlo estimate log q(s) - log p(s) (with the Jacobian in log q).
    pyro.clear_param_store()
    guide = AutoMeanField(halfnormal_model, init_scale=0.4)
    guide()
    n = 400
    losses = torch.tensor([TraceMeanField_ELBO().loss(halfnormal_model, guide) for _ in range(n)])
    assert losses.std() > 1e-3
    with torch.no_grad():
        q = guide.get_posterior("s")
        draws = q.sample((100_000,))
        kl = float((q.log_prob(draws) - dist.HalfNormal(1.0).log_prob(draws)).mean())
    # unbiased: the mean of n losses is within 5 standard errors of the (precise) KL
    assert abs(float(losses.mean()) - kl) < 5 * float(losses.std()) / math.sqrt(n)
    assert kl > 0


# --------------------------------------------------------------------------------------
# 4. Scale parametrisation and argument checks.
# --------------------------------------------------------------------------------------


def _small_model() -> None:
    pyro.sample("a", dist.Normal(torch.zeros(2, 3), 1.0).to_event(2))
    pyro.sample("layer.bias", dist.Normal(torch.zeros(3), 1.0).to_event(1))
    pyro.sample("noise", dist.LogNormal(0.0, 1.0))


@pytest.mark.parametrize("scale_transform", ["softplus", "exp"])
def test_initial_scale_equals_init_scale(scale_transform):
    guide = AutoMeanField(_small_model, init_scale=0.25, scale_transform=scale_transform)
    guide()
    for name in ["a", "layer.bias", "noise"]:
        _, scale = guide._get_loc_and_scale(name)
        assert torch.allclose(scale, torch.full_like(scale, 0.25), rtol=1e-6), name
    raw = dict(guide.named_parameters())["scales.a_unconstrained"].detach()
    if scale_transform == "softplus":
        expected_raw = math.log(math.expm1(0.25))
    else:
        expected_raw = math.log(0.25)
    assert torch.allclose(raw, torch.full_like(raw, expected_raw), rtol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"init_scale": 0.0}, "init_scale must be a finite number > 0"),
        ({"init_scale": -1.0}, "init_scale must be a finite number > 0"),
        ({"init_scale": float("inf")}, "init_scale must be a finite number > 0"),
        ({"init_scale": "0.1"}, "init_scale must be a finite number > 0"),
        ({"scale_transform": "relu"}, r"scale_transform must be one of \['exp', 'softplus'\]"),
        ({"init_loc_fn": 0.5}, "init_loc_fn must be callable"),
        ({"create_plates": "data"}, "create_plates must be callable or None"),
    ],
)
def test_invalid_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AutoMeanField(_small_model, **kwargs)


def test_integer_init_scale_is_accepted():
    assert AutoMeanField(_small_model, init_scale=1).init_scale == 1.0


# --------------------------------------------------------------------------------------
# 5. Parameter count and names.
# --------------------------------------------------------------------------------------


def test_num_variational_params_and_names():
    guide = AutoMeanField(_small_model)
    with pytest.raises(RuntimeError, match="call the guide once"):
        _ = guide.num_variational_params
    guide()
    latent_numel = 2 * 3 + 3 + 1
    assert guide.num_variational_params == 2 * latent_numel
    assert set(pyro.get_param_store().keys()) == {
        f"AutoMeanField.{kind}.{site}"
        for kind in ("locs", "scales")
        for site in ("a", "layer.bias", "noise")
    }
    assert list(guide.latent_sites) == ["a", "layer.bias", "noise"]
    assert guide.latent_sites["noise"].is_constrained
    assert not guide.latent_sites["layer.bias"].is_constrained
