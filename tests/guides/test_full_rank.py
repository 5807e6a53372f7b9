"""Tests of FullRankNormal and its KLs (guides.distributions), and AutoFullRankNormal."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO
from pyro.optim import Adam
from torch.distributions import MultivariateNormal, kl_divergence

from guides.distributions import FullRankNormal
from guides.full_rank import AutoFullRankNormal


def _random_tril(d: int, gen: torch.Generator, batch: tuple[int, ...] = ()) -> torch.Tensor:
    a = torch.randn(*batch, d, d, generator=gen).tril(-1) * 0.3
    return a + torch.diag_embed(torch.rand(*batch, d, generator=gen) + 0.5)


def test_full_rank_normal_matches_multivariate_normal():
    gen = torch.Generator().manual_seed(0)
    loc, tril = torch.randn(4, 6, generator=gen), _random_tril(6, gen, (4,))
    q = FullRankNormal(loc, tril, (2, 3))
    mvn = MultivariateNormal(loc, scale_tril=tril)
    assert q.batch_shape == (4,) and q.event_shape == (2, 3)
    value = q.rsample((5,))
    assert value.shape == (5, 4, 2, 3)
    assert torch.allclose(q.log_prob(value), mvn.log_prob(value.reshape(5, 4, 6)))
    assert torch.allclose(q.entropy(), mvn.entropy())
    assert torch.allclose(q.variance, mvn.variance.reshape(4, 2, 3))
    assert q.expand((3, 4)).rsample().shape == (3, 4, 2, 3)
    with pytest.raises(ValueError, match="event_shape"):
        FullRankNormal(loc, tril, (2, 2))


def test_closed_form_kls_equal_mvn_kls():
    gen = torch.Generator().manual_seed(1)
    loc, tril = torch.randn(6, generator=gen), _random_tril(6, gen)
    q = FullRankNormal(loc, tril, (2, 3))
    p_loc, p_scale = torch.randn(2, 3, generator=gen), torch.rand(2, 3, generator=gen) + 0.5
    expected = kl_divergence(
        MultivariateNormal(loc, scale_tril=tril),
        MultivariateNormal(p_loc.reshape(6), scale_tril=torch.diag(p_scale.reshape(6))),
    )
    for prior in (
        dist.Normal(p_loc, p_scale).to_event(2),
        dist.Normal(p_loc, p_scale).to_event(1).to_event(1),
    ):
        assert torch.allclose(kl_divergence(q, prior), expected, rtol=1e-5)
    # prior event dims a suffix of q's (the "global" block of a site with batch dims)
    assert torch.allclose(kl_divergence(q, dist.Normal(p_loc, p_scale)), expected, rtol=1e-5)
    scalar = FullRankNormal(loc[:1], tril[:1, :1], ())
    assert torch.allclose(
        kl_divergence(scalar, dist.Normal(p_loc[0, 0], p_scale[0, 0])),
        kl_divergence(dist.Normal(loc[0], tril[0, 0]), dist.Normal(p_loc[0, 0], p_scale[0, 0])),
    )


def model_with_plate(x: torch.Tensor, y: torch.Tensor | None = None) -> None:
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2, 3]).to_event(2))
    sigma = pyro.sample("sigma", dist.LogNormal(0.0, 1.0))
    with pyro.plate("data", x.shape[0], subsample_size=4) as i:
        z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        mean = (x[i] @ w.transpose(-1, -2) + z).sum(-1)
        pyro.sample("y", dist.Normal(mean, sigma), obs=None if y is None else y[i])


def test_site_blocks_shapes_kl_and_local_latents():
    x, y = torch.randn(10, 3), torch.randn(10)
    guide = AutoFullRankNormal(model_with_plate, init_scale=0.2)
    svi = SVI(model_with_plate, guide, Adam({"lr": 0.01}), TraceMeanField_ELBO())
    assert all(math.isfinite(svi.step(x, y)) for _ in range(3))
    loc, tril = guide._site_params("w")
    assert loc.shape == (6,) and tril.shape == (6, 6)
    assert guide._site_params("z")[1].shape == (10, 2, 2)  # one block per data point
    trace = poutine.trace(guide).get_trace(x, y)
    assert isinstance(trace.nodes["w"]["fn"], FullRankNormal)
    assert trace.nodes["z"]["fn"].batch_shape == (4,)
    assert trace.nodes["z"]["value"].shape == (4, 2)
    # init: L = init_scale * I
    fresh = AutoFullRankNormal(model_with_plate, init_scale=0.2)
    pyro.clear_param_store()
    fresh(x, y)
    assert torch.allclose(fresh._site_params("w")[1], 0.2 * torch.eye(6))

    # the KL part of TraceMeanField_ELBO is closed form: a model without data has a
    # zero-variance loss
    def prior_only():
        pyro.sample("w", dist.Normal(0.0, 1.0).expand([2, 3]).to_event(2))

    pyro.clear_param_store()
    g = AutoFullRankNormal(prior_only)
    g()
    losses = {round(TraceMeanField_ELBO().loss(prior_only, g), 6) for _ in range(3)}
    assert len(losses) == 1


def test_global_conditionals_give_the_joint_density():
    def model():
        pyro.sample("a", dist.Normal(0.0, 1.0).expand([2, 2]).to_event(2))
        pyro.sample("s", dist.LogNormal(0.0, 1.0))
        pyro.sample("b", dist.Normal(torch.zeros(3), 1.0).to_event(1))

    guide = AutoFullRankNormal(model, "global")
    guide()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        guide.loc.copy_(torch.randn(8, generator=gen))
        guide.scale_tril_unconstrained.copy_(torch.randn(8, 8, generator=gen) * 0.3)
        guide.scale_unconstrained.copy_(torch.randn(8, generator=gen))
    tril = guide.scale.unsqueeze(-1) * guide.scale_tril  # L = diag(s) C
    assert torch.allclose(tril.diagonal(), guide.scale)
    joint = MultivariateNormal(guide.loc, scale_tril=tril)
    for _ in range(3):
        trace = poutine.trace(guide).get_trace()
        trace.compute_log_prob()
        a, s, b = (trace.nodes[k]["value"] for k in "asb")
        u = torch.cat([a.reshape(-1), s.log().reshape(1), b])
        # log q(a) + log q(s | a) + log q(b | a, s), the Jacobian of exp included in s
        total = sum(trace.nodes[k]["log_prob_sum"] for k in "asb")
        assert torch.allclose(total, joint.log_prob(u) - s.log(), atol=1e-4)
    # marginals: median/quantiles use the rows of L
    sd = tril.pow(2).sum(-1).sqrt()
    q = guide.quantiles([0.5, 0.8413447])
    assert torch.allclose(q["b"][1], guide.loc[5:] + sd[5:], atol=1e-4)
    assert torch.allclose(
        guide.get_posterior("b").covariance_matrix, joint.covariance_matrix[5:, 5:]
    )
    assert guide.num_variational_params == 8 + 36
    assert all(math.isfinite(Trace_ELBO().loss(model, guide)) for _ in range(2))


def test_errors_name_the_site_and_the_fix():
    x, y = torch.randn(10, 3), torch.randn(10)
    with pytest.raises(
        ValueError,
        match=r"cannot sample site 'z': .* subsampled plate\(s\) 'data' \(size 10, subsample",
    ):
        AutoFullRankNormal(model_with_plate, "global")(x, y)
    pyro.clear_param_store()
    with pytest.raises(ValueError, match="block of 'w' has D = 6 .* AutoMatrixNormal"):
        AutoFullRankNormal(model_with_plate, max_block_dim=5)(x, y)
    for kwargs, match in [
        ({"blocks": "layer"}, "blocks must be 'site' or 'global'"),
        ({"init_scale": 0.0}, "init_scale must be a finite number > 0"),
        ({"max_block_dim": 1.5}, "max_block_dim must be an int"),
    ]:
        with pytest.raises(ValueError, match=match):
            AutoFullRankNormal(model_with_plate, **kwargs)
