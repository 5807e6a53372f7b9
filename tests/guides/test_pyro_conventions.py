"""Pyro's calling conventions and the cases of Pyro's own autoguide tests that our guides
failed (``tests/infer/test_autoguide.py`` with our guides swapped in): the joint
``get_posterior()``, quantiles, sites in plates that are not subsampled under
``AutoFullRankNormal(blocks="global")``, Pyro's mixture-model pattern, and the error for a
model without latent sites.
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO, TraceEnum_ELBO, config_enumerate
from pyro.infer.autoguide import init_to_mean, init_to_median
from pyro.optim import Adam
from torch.distributions import MultivariateNormal, kl_divergence

from guides import (
    AutoFixedVarianceNormal,
    AutoFullRankNormal,
    AutoKTiedNormal,
    AutoMatrixNormal,
    AutoMeanField,
)
from guides._base import PerSiteGuide
from guides.distributions import FullRankNormal
from tests.guides.test_conformance import CASES

GUIDES = [name for name in CASES if name != "delta_map"]  # Pyro's AutoDelta: no posterior


def _perturb(guide: PerSiteGuide, sd: float = 0.3) -> None:
    """Move every optimised tensor by N(0, sd^2) noise, so that q is not the initial one."""
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in guide.parameters():
            p.add_(sd * torch.randn(p.shape, generator=gen))


def real_model(x: torch.Tensor) -> None:
    """Real-supported sites only: a matrix, a vector, a plate that is not subsampled, a scalar."""
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2, 3]).to_event(2))
    b = pyro.sample("b", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with pyro.plate("groups", 3):
        g = pyro.sample("g", dist.Normal(0.0, 1.0))
    s = pyro.sample("s", dist.Normal(0.0, 1.0))
    mean = (x @ w.mT + b).sum(-1) + g.sum(-1, keepdim=True) + s.unsqueeze(-1)
    pyro.sample("obs", dist.Normal(mean, 1.0), obs=torch.zeros(x.shape[0]))


@pytest.mark.parametrize("name", GUIDES)
def test_get_posterior_is_the_joint_of_the_flat_unconstrained_latent(name):
    # Pyro calls guide.get_posterior() with no argument or with the model's arguments; it
    # is the distribution of all unconstrained sites flattened and concatenated in model
    # order. Its density at a draw of the guide is the guide's own density of that draw
    # (every site is real here, so no Jacobian enters).
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    guide = CASES[name].make(real_model)
    guide(x)
    _perturb(guide)
    joint = guide.get_posterior()
    with_args = guide.get_posterior(x)  # the model's arguments: no KeyError naming a tensor
    assert torch.equal(joint.mean, with_args.mean)
    loc_scales = guide.loc_scales()
    assert list(loc_scales) == ["w", "b", "g", "s"]
    expected_loc = torch.cat([loc.reshape(-1) for loc, _ in loc_scales.values()])
    expected_sd = torch.cat([scale.reshape(-1) for _, scale in loc_scales.values()])
    assert joint.event_shape == (6 + 2 + 3 + 1,)
    assert torch.allclose(joint.mean, expected_loc)
    assert torch.allclose(joint.variance.sqrt(), expected_sd, rtol=1e-5)
    for _ in range(3):
        trace = poutine.trace(guide).get_trace(x)
        trace.compute_log_prob()
        values = [trace.nodes[site]["value"].reshape(-1) for site in loc_scales]
        guide_log_q = sum(trace.nodes[site]["log_prob_sum"] for site in loc_scales)
        assert torch.allclose(joint.log_prob(torch.cat(values)), guide_log_q, atol=1e-4)


def quantiles_model() -> None:
    """The model of Pyro's test_quantiles: positive, unit-interval and real sites."""
    pyro.sample("y", dist.LogNormal(0.0, 1.0))
    pyro.sample("z", dist.Beta(2.0, 2.0).expand([2]).to_event(1))
    pyro.sample("x", dist.Normal(0.0, 1.0))


@pytest.mark.parametrize("name", GUIDES)
def test_quantiles_match_the_joint_posterior_as_pyro_checks_them(name):
    # Pyro's test_quantiles: the scale of the last coordinate of get_posterior() is half
    # the distance between the 15.87% and 84.13% quantiles of the (real) last site.
    guide = CASES[name].make(quantiles_model)
    guide()
    _perturb(guide)
    posterior_scale = guide.get_posterior().variance[-1].sqrt()
    q = guide.quantiles([0.158655, 0.8413447])
    assert torch.allclose(0.5 * (q["x"][1] - q["x"][0]), posterior_scale, rtol=1e-4)
    quantiles = guide.quantiles([0.1, 0.5, 0.9])
    median = guide.median()
    for site, shape in {"x": (), "y": (), "z": (2,)}.items():
        assert not median[site].requires_grad and not quantiles[site].requires_grad
        assert quantiles[site].shape == (3, *shape)
        assert torch.equal(median[site], quantiles[site][1])
        assert torch.all(quantiles[site][0] < quantiles[site][2])
    assert torch.all(quantiles["y"] > 0)
    assert torch.all((quantiles["z"] > 0) & (quantiles["z"] < 1))


@pytest.mark.parametrize("name", ["mean_field", "full_rank_site", "full_rank_global"])
def test_quantiles_after_fitting_pyro_test_quantiles(name):
    # Pyro's test_quantiles end to end (100 steps of 100 particles): the fitted quantiles
    # are ordered and spread as under the prior.
    guide = CASES[name].make(quantiles_model)
    elbo = Trace_ELBO(num_particles=100, vectorize_particles=True)
    svi = SVI(quantiles_model, guide, Adam({"lr": 0.05, "betas": (0.8, 0.99)}), elbo)
    for _ in range(100):
        svi.step()
    q = guide.quantiles([0.1, 0.5, 0.9])
    assert -3.0 < q["x"][0] and q["x"][0] + 1.0 < q["x"][1] and q["x"][1] + 1.0 < q["x"][2] < 3.0
    assert 0.01 < q["y"][0] and q["y"][0] * 2.0 < q["y"][1] and q["y"][1] * 2.0 < q["y"][2] < 100.0
    assert torch.all((0.01 < q["z"][0]) & (q["z"][0] + 0.1 < q["z"][1]))
    assert torch.all((q["z"][1] + 0.1 < q["z"][2]) & (q["z"][2] < 0.99))


def test_get_posterior_errors_name_the_per_site_form():
    x = torch.randn(4, 3)
    guide = AutoMeanField(real_model)
    with pytest.raises(RuntimeError, match="call the guide once"):
        guide.get_posterior()
    guide(x)
    assert isinstance(guide.get_posterior("w"), dist.Independent)  # the per-site form
    with pytest.raises(ValueError, match=r"no latent site 'v'; latent sites are \['w', 'b'"):
        guide.get_posterior("v")

    pyro.clear_param_store()
    matrix = AutoMatrixNormal(real_model, "full", "full")
    matrix(x)
    assert isinstance(matrix.get_posterior(), dist.MultivariateNormal)
    matrix.max_joint_dim = 10  # 12 coordinates
    with pytest.raises(ValueError, match=r"dense 12 x 12 .*\.get_posterior\(name\) for name"):
        matrix.get_posterior()

    class NoJoint(PerSiteGuide):
        std_params = frozenset()

        def _init_site_params(self, info, init_loc):
            pass

    pyro.clear_param_store()
    other = NoJoint(real_model, init_loc_fn=lambda site: site["fn"].sample())
    other._setup_prototype(x)
    with pytest.raises(
        NotImplementedError, match=r"no joint posterior .*\.get_posterior\(name\) for name"
    ):
        other.get_posterior()


def empty_model() -> None:
    pyro.sample("obs", dist.Normal(0.0, 1.0), obs=torch.tensor(0.0))


def test_a_model_without_latent_sites_gives_pyros_error():
    # AutoContinuous: "<Guide> found no latent variables; Use an empty guide instead".
    guide = AutoFullRankNormal(empty_model, "global")
    for _ in range(2):  # the failed setup leaves nothing half built behind
        with pytest.raises(RuntimeError, match="found no latent variables; Use an empty guide"):
            guide()
    per_site = AutoMeanField(empty_model)
    assert per_site() == {}  # as Pyro's AutoNormal
    with pytest.raises(RuntimeError, match="found no latent variables"):
        per_site.get_posterior()


def tree_model(data: torch.Tensor) -> None:
    """Pyro's test_exact_tree model: a global x and a local y per point (plate not subsampled)."""
    x = pyro.sample("x", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(data)):
        y = pyro.sample("y", dist.Normal(x, 1.0))
        pyro.sample("obs", dist.Normal(y, 1.0), obs=data)


def test_global_block_with_a_plate_is_exact_at_the_posterior():
    # The joint of (x, y_1, y_2) given the data is Gaussian. With q equal to it, log p(data,
    # x, y) - log q(x, y) = log p(data) for every draw: the Trace_ELBO loss is constant. The
    # guide samples y inside the plate, one batch element per point, correlated with x and
    # with each other, and its per-element densities sum to the joint density.
    data = torch.tensor([0.7, -1.3])
    precision = torch.tensor([[3.0, -1.0, -1.0], [-1.0, 2.0, 0.0], [-1.0, 0.0, 2.0]])
    cov = torch.linalg.inv(precision)
    mean = cov @ torch.cat([torch.zeros(1), data])  # info vector (0, data_1, data_2)
    marginal = MultivariateNormal(torch.zeros(2), torch.eye(2) * 2.0 + torch.ones(2, 2))
    log_evidence = float(marginal.log_prob(data))

    guide = AutoFullRankNormal(tree_model, "global")
    guide(data)
    tril = torch.linalg.cholesky(cov)
    scale = tril.diagonal()
    guide.load_state_dict(
        {
            "loc_unconstrained": mean,
            "scale_unconstrained": scale.expm1().log(),
            "scale_tril_unconstrained": tril / scale.unsqueeze(-1),
        }
    )
    trace = poutine.trace(guide).get_trace(data)
    assert trace.nodes["y"]["fn"].batch_shape == (2,)
    assert trace.nodes["y"]["cond_indep_stack"][0].name == "data"
    losses = torch.tensor([Trace_ELBO().loss(tree_model, guide, data) for _ in range(5)])
    assert torch.allclose(losses, torch.full_like(losses, -log_evidence), rtol=1e-5)
    vectorized = Trace_ELBO(num_particles=7, vectorize_particles=True, max_plate_nesting=1)
    assert math.isclose(vectorized.loss(tree_model, guide, data), -log_evidence, rel_tol=1e-5)


def plated_prior() -> None:
    with pyro.plate("groups", 3):
        pyro.sample("a", dist.Normal(0.0, 2.0).expand([2]).to_event(1))
    pyro.sample("s", dist.Normal(1.0, 0.5))
    with pyro.plate("more", 2, dim=-1):
        pyro.sample("c", dist.Normal(-1.0, 1.5))


def test_global_block_conditional_kls_are_the_joint_kl():
    # TraceMeanField_ELBO adds the closed-form KL of each site given the draws of the
    # earlier sites; their sum estimates KL(q || p) of the joint without bias. A site in a
    # plate splits its KL over the plate's elements (chain rule), so the first site's KL
    # is exact: that of its marginal.
    guide = AutoFullRankNormal(plated_prior, "global")
    guide()
    _perturb(guide)
    loc, tril = guide.loc.detach(), guide._global_tril.detach()
    prior_loc = torch.tensor([0.0] * 6 + [1.0] + [-1.0] * 2)
    prior_sd = torch.tensor([2.0] * 6 + [0.5] + [1.5] * 2)
    exact = kl_divergence(
        MultivariateNormal(loc, scale_tril=tril),
        MultivariateNormal(prior_loc, scale_tril=torch.diag(prior_sd)),
    )
    draws = 20_000
    with torch.no_grad(), pyro.plate("draws", draws, dim=-2):
        guide_trace = poutine.trace(guide).get_trace()
        model_trace = poutine.trace(poutine.replay(plated_prior, guide_trace)).get_trace()
    kls = {
        site: kl_divergence(guide_trace.nodes[site]["fn"], model_trace.nodes[site]["fn"])
        for site in ("a", "s", "c")
    }
    assert kls["a"].shape == (draws, 3) and kls["c"].shape == (draws, 2)
    first = kl_divergence(
        MultivariateNormal(loc[:6], scale_tril=torch.linalg.cholesky(tril[:6] @ tril[:6].T)),
        MultivariateNormal(prior_loc[:6], scale_tril=torch.diag(prior_sd[:6])),
    )
    assert torch.allclose(kls["a"][0].sum(), first, rtol=1e-5)  # no draw enters it
    total = sum(kl.reshape(draws, -1).sum(-1) for kl in kls.values())
    # the per-draw totals vary only with the earlier draws; 5 standard errors
    tolerance = 5 * total.std() / math.sqrt(draws)
    assert abs(total.mean() - exact) < tolerance, (total.mean(), exact, tolerance)
    assert tolerance < 0.02 * exact  # the check is tight enough to see a missing term


def test_full_rank_normal_coupled_dims_split_the_joint_by_the_chain_rule():
    gen = torch.Generator().manual_seed(0)
    loc = torch.randn(6, generator=gen)
    tril = torch.randn(6, 6, generator=gen).tril(-1) * 0.5 + torch.diag(torch.rand(6) + 0.5)
    q = FullRankNormal(loc, tril, event_shape=(2,), coupled_shape=(3,))
    joint = MultivariateNormal(loc, scale_tril=tril)
    assert q.batch_shape == (3,) and q.event_shape == (2,)
    value = q.rsample((4,))
    assert value.shape == (4, 3, 2)
    parts = q.log_prob(value)
    assert parts.shape == (4, 3)
    assert torch.allclose(parts.sum(-1), joint.log_prob(value.reshape(4, 6)), atol=1e-5)
    # element 0 is the marginal of the first two coordinates
    first = MultivariateNormal(loc[:2], scale_tril=tril[:2, :2])
    assert torch.allclose(parts[:, 0], first.log_prob(value[:, 0]), atol=1e-5)
    assert torch.allclose(q.entropy().sum(), joint.entropy())
    prior = dist.Normal(torch.zeros(3, 2), 2.0).to_event(1)
    assert kl_divergence(q, prior).shape == (3,)
    expected = kl_divergence(joint, MultivariateNormal(torch.zeros(6), 4.0 * torch.eye(6)))
    assert torch.allclose(kl_divergence(q, prior).sum(), expected, rtol=1e-5)
    expanded = q.expand((5, 3))
    assert expanded.rsample().shape == (5, 3, 2)
    with pytest.raises(ValueError, match="coupled dims must stay the rightmost"):
        q.expand((3, 1))


K_MIX = 2


@config_enumerate
def mixture_model(data: torch.Tensor) -> None:
    """Pyro's Gaussian mixture pattern (tutorial "gmm"): component locations in a plate."""
    weights = pyro.sample("weights", dist.Dirichlet(0.5 * torch.ones(K_MIX)))
    scale = pyro.sample("scale", dist.LogNormal(0.0, 2.0))
    with pyro.plate("components", K_MIX):
        locs = pyro.sample("locs", dist.Normal(0.0, 10.0))
    with pyro.plate("data", len(data)):
        assignment = pyro.sample("assignment", dist.Categorical(weights))
        pyro.sample("obs", dist.Normal(locs[assignment], scale), obs=data)


def test_global_block_runs_pyros_mixture_model_pattern():
    # The tutorial's recipe: a guide of the model with the discrete site hidden, the
    # assignments enumerated by TraceEnum_ELBO, and the component locations started at
    # data points (here through init_loc_fn).
    data = torch.tensor([0.0, 1.0, 10.0, 11.0, 12.0])

    def init_loc_fn(site: dict) -> torch.Tensor:
        return data[[0, 2]] if site["name"] == "locs" else init_to_median(site)

    guide = AutoFullRankNormal(
        poutine.block(mixture_model, hide=["assignment"]), "global", init_loc_fn=init_loc_fn
    )
    svi = SVI(mixture_model, guide, Adam({"lr": 0.1}), TraceEnum_ELBO(max_plate_nesting=1))
    losses = [svi.step(data) for _ in range(60)]
    assert all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-20:]) < sum(losses[:20])
    assert guide.latent_sites["locs"].frames[0].name == "components"
    trace = poutine.trace(guide).get_trace(data)
    assert trace.nodes["locs"]["fn"].batch_shape == (K_MIX,)
    median = guide.median(data)
    assert median["weights"].shape == (K_MIX,)
    # the components sit at the two clusters, 0.5 and 11
    assert torch.allclose(median["locs"], torch.tensor([0.5, 11.0]), atol=0.5), median["locs"]


@pytest.mark.parametrize(
    "make",
    [
        lambda m: AutoKTiedNormal(m, init_to_mean),
        lambda m: AutoMatrixNormal(m, init_to_mean),
        lambda m: AutoFullRankNormal(m, init_to_mean),
        lambda m: AutoFixedVarianceNormal(m, init_to_mean),
    ],
    ids=["k_tied", "matrix_normal", "full_rank", "fixed_variance"],
)
def test_pyros_positional_init_loc_fn_is_refused_with_the_keyword_form(make):
    # Pyro's AutoNormal(model, init_to_mean): here the second argument is structural.
    with pytest.raises(ValueError, match=r"structural.* pass init_loc_fn=\.\.\. by keyword"):
        make(real_model)
    with pytest.raises(TypeError):
        AutoMeanField(real_model, init_to_mean)  # every setting is keyword-only
