"""Tests of guides.AutoFixedVarianceNormal: only the means are learned."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, TraceMeanField_ELBO
from pyro.optim import Adam

from guides.fixed_variance import AutoFixedVarianceNormal


def model(x: torch.Tensor, y: torch.Tensor | None = None) -> None:
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2, 3]).to_event(2))
    sigma = pyro.sample("sigma", dist.LogNormal(0.0, 1.0))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal((x @ w.transpose(-1, -2)).sum(-1), sigma), obs=y)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(20, 3, generator=gen), torch.randn(20, generator=gen)


def test_scales_stay_fixed_and_only_means_are_parameters():
    x, y = _data()
    guide = AutoFixedVarianceNormal(model, 0.3)
    svi = SVI(model, guide, Adam({"lr": 0.05}), TraceMeanField_ELBO())
    guide(x, y)
    before = guide.median()
    assert all(math.isfinite(svi.step(x, y)) for _ in range(10))
    after = guide.median()
    assert not torch.equal(before["w"], after["w"])  # the means moved
    for name in ("w", "sigma"):
        loc, scale = guide._get_loc_and_scale(name)
        assert torch.equal(scale, torch.full_like(loc, 0.3))
    assert set(pyro.get_param_store()) == {
        "AutoFixedVarianceNormal.locs.w",
        "AutoFixedVarianceNormal.locs.sigma",
    }
    assert guide.num_variational_params == 6 + 1
    trace = poutine.trace(guide).get_trace(x, y)
    assert torch.equal(trace.nodes["w"]["fn"].base_dist.scale, torch.full((2, 3), 0.3))


def test_per_site_scales_and_closed_form_kl():
    def prior_only():
        pyro.sample("w", dist.Normal(0.0, 1.0).expand([2, 3]).to_event(2))
        pyro.sample("b", dist.Normal(0.0, 2.0).expand([3]).to_event(1))

    guide = AutoFixedVarianceNormal(prior_only, {"w": 0.5, "b": 0.1})
    guide()
    assert guide.site_scale("b") == 0.1
    qs = guide.quantiles([0.5, 0.8413447])
    assert torch.allclose(qs["b"][1] - qs["b"][0], torch.full((3,), 0.1), atol=1e-5)

    def kl(loc, s, p):
        return float((math.log(p / s) + (s**2 + loc**2) / (2 * p**2) - 0.5).sum())

    expected = kl(guide.locs.w.detach(), 0.5, 1.0) + kl(guide.locs.b.detach(), 0.1, 2.0)
    losses = [TraceMeanField_ELBO().loss(prior_only, guide) for _ in range(3)]
    assert losses == [pytest.approx(expected, rel=1e-5)] * 3


def test_invalid_scales_raise():
    x, y = _data()
    for scale, match in [
        (0.0, "scale must be a finite number > 0"),
        (float("nan"), "scale must be a finite number > 0"),
        (True, "scale must be a finite number > 0"),
        ({"w": -1.0}, r"scale\['w'\] must be a finite number > 0"),
    ]:
        with pytest.raises(ValueError, match=match):
            AutoFixedVarianceNormal(model, scale)
    guide = AutoFixedVarianceNormal(model, {"w": 0.1, "bias": 0.2})
    with pytest.raises(ValueError, match=r"missing \['sigma'\], unknown \['bias'\]"):
        guide(x, y)
