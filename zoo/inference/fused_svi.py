r"""One SVI step of a mean-field guide on a Bayesian MLP in plain torch, without Pyro's traces.

For :class:`~guides.AutoMeanField` and :class:`~guides.AutoFixedVarianceNormal` on a
:class:`~zoo.models.mlp.BayesianMLP` with a fixed-scale likelihood, ``TraceMeanField_ELBO``
with one particle computes

.. math::

    \mathrm{ELBO} = \frac{N}{B} \sum_{n \in \text{batch}} \log p(y_n \mid x_n, w)
    - \beta \sum_{\text{sites } s} \mathrm{KL}\big(\mathcal{N}(\mu_s, \sigma_s^2) \,\|\,
    \mathcal{N}(m_s, \tau_s^2)\big), \qquad w_s = \mu_s + \sigma_s \varepsilon_s,

(the KL in closed form, :math:`\beta` the KL weight), at the cost of two Pyro traces, a
replay, per-site distribution objects and messengers per step: on the default spec's
network most of a step. :class:`FusedMeanFieldStep` computes the same estimate with the
same tensor operations in the same order (the guide's draws ``torch.empty(shape).normal_()``
site by site in model order, ``F.linear`` layers, the likelihood's log-density scaled by
``N / B``, torch's Normal-Normal KL summed per site, the ELBO accumulated as Pyro does), so
loss and gradients equal Pyro's bit for bit and the random stream is unchanged; then it
applies the same Pyro optimizer to the same parameters. ``tests/zoo/inference/test_fused_svi.py``
checks the equality; docs/notes/guides.md has the timings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.infer.autoguide import AutoGuide
from pyro.infer.util import zero_grads
from torch.distributions import transform_to

from guides import AutoFixedVarianceNormal, AutoMeanField
from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP

__all__ = ["FusedMeanFieldStep", "fused_step_applies"]


def fused_step_applies(
    model: Any, guide: AutoGuide, *, particles: int, closed_form_kl: bool, local_reparam: bool
) -> bool:
    """Whether :class:`FusedMeanFieldStep` computes ``model`` and ``guide``'s SVI step.

    True for a :class:`~zoo.models.mlp.BayesianMLP` with a Bernoulli, categorical or
    fixed-noise Gaussian likelihood (no latent site but the weights and biases), an
    :class:`~guides.AutoMeanField` or :class:`~guides.AutoFixedVarianceNormal` guide (exactly
    those classes), one particle, the closed-form KL and no local reparameterization. Any
    other case keeps Pyro's step.
    """
    lik = getattr(model, "likelihood", None)
    fixed_lik = isinstance(lik, BernoulliLikelihood | CategoricalLikelihood) or (
        isinstance(lik, GaussianLikelihood) and lik.noise is not None
    )
    return (
        type(model) is BayesianMLP
        and fixed_lik
        and type(guide) in (AutoMeanField, AutoFixedVarianceNormal)
        and particles == 1
        and closed_form_kl
        and not local_reparam
    )


class FusedMeanFieldStep:
    """SVI steps of a mean-field guide on a Bayesian MLP, equal to Pyro's to the bit.

    Parameters
    ----------
    model : BayesianMLP
        The model (see :func:`fused_step_applies`).
    guide : AutoMeanField or AutoFixedVarianceNormal
        Its guide; set up on the first step, with the first step's arguments, as Pyro's
        ``SVI.step`` would (same draws of torch's generator).
    optim : callable
        The Pyro optimizer that ``SVI`` would use (``optim(params)`` steps the parameters
        from their ``.grad``), e.g. ``pyro.optim.ClippedAdam``.
    """

    def __init__(self, model: BayesianMLP, guide: AutoGuide, optim: Callable) -> None:
        self.model, self.guide, self.optim = model, guide, optim
        self._sites: list[tuple[str, torch.Tensor, torch.Tensor | None, Any, float | None]] = []
        self._params: list[torch.Tensor] = []

    def _setup(self, *args: Any) -> None:
        guide = self.guide
        if guide.prototype_trace is None:
            guide._setup_prototype(*args)
        # One call registers the parameters in Pyro's param store as SVI's first step does
        # (per-parameter optimizer settings and readers of the store find them there); its
        # draws are made on a forked generator, so the random stream is left as it was.
        first = args[0]
        devices = [first.device] if first.is_cuda else []
        with torch.random.fork_rng(devices=devices), poutine.block(), torch.no_grad():
            guide(*args)
        fixed = isinstance(guide, AutoFixedVarianceNormal)
        params = dict(guide.named_parameters())
        for name in guide.latent_sites:
            loc = params[f"locs.{name}_unconstrained"]
            if fixed:
                self._sites.append((name, loc, None, None, guide.site_scale(name)))
                continue
            rho = params[f"scales.{name}_unconstrained"]
            # the map PyroModule applies to the stored raw parameter
            self._sites.append((name, loc, rho, transform_to(guide.scale_constraint), None))
        self._params = [p for _, loc, rho, _, _ in self._sites for p in (loc, rho) if p is not None]

    def _elbo(self, x: torch.Tensor, y: torch.Tensor, n_total: int, kl_weight: float):
        model = self.model
        values: dict[str, torch.Tensor] = {}
        kls: list[torch.Tensor] = []
        for name, loc, rho, transform, fixed in self._sites:
            # the guide: Normal(loc, scale).rsample() = loc + eps * scale, eps drawn here
            scale = transform(rho) if fixed is None else loc.new_tensor(fixed).expand(loc.shape)
            eps = torch.empty(loc.shape, dtype=loc.dtype, device=loc.device).normal_()
            values[name] = loc + eps * scale
            # torch's kl_normal_normal against the site's prior, summed over the site
            layer, attr = name.rsplit(".", 1)
            mod = getattr(model, layer)
            p_loc = getattr(mod, f"{attr}_prior_loc").expand(loc.shape)
            p_scale = getattr(mod, f"{attr}_prior_scale").expand(loc.shape)
            var_ratio = (scale / p_scale).pow(2)
            t1 = ((loc - p_loc) / p_scale).pow(2)
            kl = (0.5 * (var_ratio + t1 - 1 - var_ratio.log())).sum()
            if kl_weight != 1.0:
                kl = kl * kl_weight
            kls.append(kl)
        h = x
        for i, (w_site, b_site) in enumerate(model.layer_sites()):
            h = F.linear(h, values[w_site], values[b_site])
            if i < model.depth:
                h = model.act(h)
        log_p = model.likelihood.log_prob(h, y, values)
        if n_total != x.shape[0]:
            log_p = log_p * (1.0 * n_total / x.shape[0])
        elbo = 0
        for kl in kls:
            elbo = elbo - kl
        return elbo + log_p.sum()

    def step(self, x: torch.Tensor, y: torch.Tensor, n_total: int, kl_weight: float = 1.0) -> float:
        """One step: the ELBO's gradients, then the optimizer; returns the loss (-ELBO)."""
        if not self._sites:
            self._setup(x, y, n_total)
        elbo = self._elbo(x, y, n_total, kl_weight)
        loss = -elbo.item()
        (-elbo).backward()
        self.optim(self._params)
        zero_grads(self._params)
        return loss
