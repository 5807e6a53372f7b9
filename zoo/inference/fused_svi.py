r"""One SVI step of a mean-field guide on a Bayesian MLP in plain torch, without Pyro's traces.

For :class:`~guides.AutoMeanField`, :class:`~guides.AutoFixedVarianceNormal` and
:class:`~guides.AutoKTiedNormal` (diagonal Gaussians whose KL to the Normal prior has a
closed form) on a :class:`~zoo.models.mlp.BayesianMLP` with a Bernoulli, categorical or
Gaussian likelihood, ``TraceMeanField_ELBO`` with one particle computes

.. math::

    \mathrm{ELBO} = \frac{N}{B} \sum_{n \in \text{batch}} \log p(y_n \mid x_n, w)
    - \beta \sum_{\text{sites } s} \mathrm{KL}\big(\mathcal{N}(\mu_s, \sigma_s^2) \,\|\,
    \mathcal{N}(m_s, \tau_s^2)\big), \qquad w_s = \mu_s + \sigma_s \varepsilon_s,

(the KL in closed form, :math:`\beta` the KL weight; :math:`\sigma_s = U V^\top` at a
k-tied matrix site; a learned Gaussian noise adds its sampled term, and local
reparameterization samples each layer's outputs instead of its weights: both in
:mod:`zoo.inference.fused_local`), at the cost of two Pyro traces, a replay, per-site
distribution objects and messengers per step: on the default spec's network most of a step.
:class:`FusedMeanFieldStep` computes the same estimate with the same tensor operations in
the same order (the guide's draws site by site in model order, ``F.linear`` layers, the
likelihood's log-density scaled by ``N / B``, the Normal-Normal KL summed per site as torch's
and the guides' KL functions compute it, the ELBO accumulated as Pyro does), so loss and
gradients equal Pyro's bit for bit and the random stream is unchanged; then it applies the
same Pyro optimizer to the same parameters. ``tests/zoo/inference/test_fused_svi.py`` checks
the equality; docs/notes/guides.md has the timings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.infer.autoguide import AutoGuide
from pyro.infer.util import zero_grads
from pyro.optim import PyroOptim
from pyro.optim.clipped_adam import ClippedAdam as _ClippedAdam
from torch.distributions import ExpTransform, transform_to

from guides import AutoFixedVarianceNormal, AutoKTiedNormal, AutoMeanField
from guides.k_tied import is_matrix_site
from guides.local_reparam import sample_linear
from zoo.inference.fused_local import NoiseSite
from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP

__all__ = ["FusedMeanFieldStep", "fused_step_applies"]


def fused_step_applies(
    model: Any, guide: AutoGuide, *, particles: int, closed_form_kl: bool, local_reparam: bool
) -> bool:
    """Whether :class:`FusedMeanFieldStep` computes ``model`` and ``guide``'s SVI step.

    True for a :class:`~zoo.models.mlp.BayesianMLP` with a Bernoulli, categorical or
    Gaussian likelihood (exactly those classes: no latent site but the weights, the biases
    and a Gaussian's learned ``noise``, and the log-density the model's ``obs`` site
    computes), an :class:`~guides.AutoMeanField`, :class:`~guides.AutoFixedVarianceNormal`
    or :class:`~guides.AutoKTiedNormal` guide (exactly those classes: independent Gaussian
    weight entries, so local reparameterization applies), one particle and the closed-form
    KL, with or without local reparameterization. Any other case keeps Pyro's step.
    """
    lik = getattr(model, "likelihood", None)
    return (
        type(model) is BayesianMLP
        and type(lik) in (BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood)
        and type(guide) in (AutoMeanField, AutoFixedVarianceNormal, AutoKTiedNormal)
        and particles == 1
        and closed_form_kl
    )  # local_reparam either way: the step replays it (FusedMeanFieldStep(local_reparam=))


class _Site(NamedTuple):
    """One latent site: its parameters, the map to its scale, its prior (all cached)."""

    name: str
    loc: torch.Tensor
    rho: torch.Tensor | None  # raw scale parameter (None: fixed scale)
    transform: Any  # rho -> scale, as PyroModule applies it
    fixed_scale: torch.Tensor | None
    prior_loc: torch.Tensor | None  # None: the learned noise (HalfNormal prior)
    prior_scale: torch.Tensor | None
    log_u: torch.Tensor | None = None  # k-tied matrix site: log U, log V
    log_v: torch.Tensor | None = None
    fixed_var: torch.Tensor | None = None  # fixed_scale ** 2 (local reparameterization)


class FusedMeanFieldStep:
    """SVI steps of a mean-field guide on a Bayesian MLP, equal to Pyro's to the bit.

    Parameters
    ----------
    model : BayesianMLP
        The model (see :func:`fused_step_applies`).
    guide : AutoMeanField or AutoFixedVarianceNormal or AutoKTiedNormal
        Its guide; set up on the first step, with the first step's arguments, as Pyro's
        ``SVI.step`` would (same draws of torch's generator).
    optim : callable
        The Pyro optimizer that ``SVI`` would use (``optim(params)`` steps the parameters
        from their ``.grad``), e.g. ``pyro.optim.ClippedAdam``. A plain Pyro ``ClippedAdam``
        (no gradient clipping of Pyro's own, no weight decay, no centered variance) takes
        its steps after the first with torch's ``_foreach`` kernels on the same state and
        the same elementwise arithmetic (:func:`_clipped_adam_foreach`); any other optimizer
        is called as ``SVI`` calls it.
    local_reparam : bool, default False
        Sample every layer's pre-activations instead of its weights, as Pyro's step does
        inside :class:`guides.local_reparam.LocalReparameterization`
        (:func:`guides.local_reparam.sample_linear`). The step needs no such
        context around it.
    """

    def __init__(
        self, model: BayesianMLP, guide: AutoGuide, optim: Callable, *, local_reparam: bool = False
    ) -> None:
        self.model, self.guide, self.optim = model, guide, optim
        self.local_reparam = bool(local_reparam)
        self._sites: list[_Site] = []
        self._params: list[torch.Tensor] = []
        self._layers: list[tuple[str, str]] = []
        self._weights: frozenset[str] = frozenset()
        self._noise: NoiseSite | None = None
        self._steps = 0

    def _setup(self, *args: Any) -> None:
        guide, model = self.guide, self.model
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
        ktied = isinstance(guide, AutoKTiedNormal)
        params = dict(guide.named_parameters())
        buffers = dict(model.named_buffers())
        lik = model.likelihood
        for name, info in guide.latent_sites.items():
            loc = params[f"locs.{name}_unconstrained"]
            if name == "noise" and isinstance(lik, GaussianLikelihood) and lik.noise is None:
                if info.transform != ExpTransform():
                    raise RuntimeError(f"the guide's noise site has the transform {info.transform}")
                prior_scale = torch.tensor(lik.prior_scale, device=loc.device)
                self._noise = NoiseSite(prior_scale)
                p_loc = p_scale = None
            else:
                p_loc = buffers[f"{name}_prior_loc"].expand(loc.shape)
                p_scale = buffers[f"{name}_prior_scale"].expand(loc.shape)
            if fixed:
                scale = loc.new_tensor(guide.site_scale(name)).expand(loc.shape)
                site = _Site(name, loc, None, None, scale, p_loc, p_scale, fixed_var=scale.pow(2))
            elif ktied and is_matrix_site(info):
                log_u, log_v = (
                    params[f"log_u.{name}_unconstrained"],
                    params[f"log_v.{name}_unconstrained"],
                )
                site = _Site(name, loc, None, None, None, p_loc, p_scale, log_u, log_v)
            else:
                rho = params[f"scales.{name}_unconstrained"]
                transform = transform_to(guide.scale_constraint)
                site = _Site(name, loc, rho, transform, None, p_loc, p_scale)
            self._sites.append(site)
        self._params = [
            p for s in self._sites for p in (s.loc, s.rho, s.log_u, s.log_v) if p is not None
        ]
        self._layers = model.layer_sites()
        self._weights = frozenset(w for w, _ in self._layers) if self.local_reparam else frozenset()

    def _elbo(
        self, x: torch.Tensor, y: torch.Tensor, n_total: int, kl_weight: float
    ) -> torch.Tensor:
        """The ELBO estimate, op for op as Pyro's TraceMeanField_ELBO computes it."""
        model = self.model
        values: dict[str, torch.Tensor] = {}
        moments: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        kls: list[torch.Tensor] = []
        noise = None
        for site in self._sites:
            loc = site.loc
            if site.log_u is not None:
                kls.append(self._ktied_site(site, values, moments, kl_weight))
                continue
            # the guide: Normal(loc, scale).rsample() = loc + eps * scale, eps drawn here
            scale = site.fixed_scale if site.rho is None else site.transform(site.rho)
            if site.prior_loc is None:  # the learned noise: exp of a Normal draw
                noise = NoiseSite.draw(loc, scale)
                values[site.name] = noise.sigma
                continue
            eps = torch.empty(loc.shape, dtype=loc.dtype, device=loc.device).normal_()
            if site.name in self._weights:
                # local reparameterization: the draw advances the generator, its value is
                # not used; the layer needs the entries' means and variances
                var = site.fixed_var if site.rho is None else scale.pow(2)
                moments[site.name] = (loc, var)
            else:
                values[site.name] = loc + eps * scale
            # torch's kl_normal_normal against the site's prior, summed over the site
            var_ratio = (scale / site.prior_scale).pow(2)
            t1 = ((loc - site.prior_loc) / site.prior_scale).pow(2)
            kl = (0.5 * (var_ratio + t1 - 1 - var_ratio.log())).sum()
            if kl_weight != 1.0:
                kl = kl * kl_weight
            kls.append(kl)
        h, act, depth = x, model.act, model.depth
        for i, (w_site, b_site) in enumerate(self._layers):
            if w_site in moments:
                h = sample_linear(h, *moments[w_site], values[b_site])
            else:
                h = F.linear(h, values[w_site], values[b_site])
            if i < depth:
                h = act(h)
        # the model's log-densities in its site order (noise, then obs), then the guide's
        log_prior = None if noise is None else self._noise.log_prior(noise, kl_weight)
        log_p = model.likelihood.log_prob(h, y, values)
        if n_total != x.shape[0]:
            log_p = log_p * (1.0 * n_total / x.shape[0])
        log_p = log_p.sum()
        log_q = None if noise is None else NoiseSite.log_q(noise, kl_weight)
        elbo = 0
        for kl in kls:
            elbo = elbo - kl
        if noise is not None:
            elbo = elbo + log_prior - log_q
        return elbo + log_p

    def _ktied_site(
        self,
        site: _Site,
        values: dict[str, torch.Tensor],
        moments: dict[str, tuple[torch.Tensor, torch.Tensor]],
        kl_weight: float,
    ) -> torch.Tensor:
        """A k-tied matrix site, as ``KTiedNormal.rsample`` and its KL to a Normal prior do."""
        loc = site.loc
        u, v = site.log_u.exp(), site.log_v.exp()
        eps = torch.randn(loc.shape, dtype=loc.dtype, device=loc.device)
        if site.name in self._weights:  # KTiedNormal.variance, as local_reparam reads it
            moments[site.name] = (loc, (u @ v.mT).reshape(loc.shape).pow(2))
        else:
            values[site.name] = loc + eps * (u @ v.mT).reshape(loc.shape)
        scale = (u @ v.mT).reshape(loc.shape)  # KTiedNormal.stddev, computed again for the KL
        var_ratio = (scale / site.prior_scale) ** 2
        term = ((loc - site.prior_loc) / site.prior_scale) ** 2
        kl = 0.5 * (var_ratio + term - 1 - var_ratio.log())
        kl = kl.sum(tuple(range(-loc.dim(), 0)))
        return kl * kl_weight if kl_weight != 1.0 else kl

    def step(self, x: torch.Tensor, y: torch.Tensor, n_total: int, kl_weight: float = 1.0) -> float:
        """One step: the ELBO's gradients, then the optimizer; returns the loss (-ELBO)."""
        if not self._sites:
            self._setup(x, y, n_total)
        elbo = self._elbo(x, y, n_total, kl_weight)
        loss = -elbo.item()
        (-elbo).backward()
        if not (self._steps and _clipped_adam_foreach(self.optim, self._params)):
            self.optim(self._params)
        zero_grads(self._params)
        self._steps += 1
        return loss


def _clipped_adam_foreach(optim: Any, params: list[torch.Tensor]) -> bool:
    """Step Pyro's per-parameter ``ClippedAdam`` optimizers with ``_foreach`` kernels.

    The same state (``optim.optim_objs[p].state[p]``), learning-rate decay and elementwise
    operations as :meth:`pyro.optim.clipped_adam.ClippedAdam.step`, one kernel call for all
    parameters instead of one Python loop per parameter (on the CPU, torch's ``_foreach``
    ops run the same per-tensor kernels). Returns False, doing nothing, unless the
    parameters are on the CPU and ``optim`` is a plain Pyro ``ClippedAdam`` that has
    stepped every parameter once, without Pyro's gradient clipping, weight decay or
    centered variance and with one ``clip_norm``, ``betas`` and ``eps`` for all parameters.
    """
    if type(optim) is not PyroOptim or optim.pt_optim_constructor is not _ClippedAdam:
        return False
    if any(p.device.type != "cpu" for p in params):
        return False  # other devices' fused _foreach kernels may round differently
    objs = [optim.optim_objs.get(p) for p in params]
    if any(
        o is None or optim.grad_clip.get(p) is not None for o, p in zip(objs, params, strict=True)
    ):
        return False
    groups = [o.param_groups[0] for o in objs]
    first = groups[0]
    keys = ("clip_norm", "betas", "eps")
    if any(
        g["weight_decay"] != 0 or g["centered_variance"] or any(g[k] != first[k] for k in keys)
        for g in groups
    ) or any(p.grad is None for p in params):
        return False
    beta1, beta2 = first["betas"]
    grads = [p.grad.data for p in params]
    states = [o.state[p] for o, p in zip(objs, params, strict=True)]
    exp_avgs = [st["exp_avg"] for st in states]
    exp_avg_sqs = [st["exp_avg_sq"] for st in states]
    step_sizes = []
    for g, st in zip(groups, states, strict=True):
        g["lr"] *= g["lrd"]
        st["step"] += 1
        bias_correction1 = 1 - beta1 ** st["step"]
        bias_correction2 = 1 - beta2 ** st["step"]
        step_sizes.append(-(g["lr"] * math.sqrt(bias_correction2) / bias_correction1))
    with torch.no_grad():
        torch._foreach_clamp_min_(grads, -first["clip_norm"])
        torch._foreach_clamp_max_(grads, first["clip_norm"])
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        denoms = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denoms, first["eps"])
        torch._foreach_addcdiv_([p.data for p in params], exp_avgs, denoms, step_sizes)
    return True
