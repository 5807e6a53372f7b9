r"""Calibration checks of a variational fit, for any Pyro model and guide.

Two checks from Yao, Vehtari, Simpson & Gelman (2018), "Yes, but did it work?: Evaluating
variational inference" (ICML):

- :func:`psis_khat`, the Pareto k-hat of the importance ratios
  :math:`\log r_s = \log p(\theta_s, y) - \log q(\theta_s)`, :math:`\theta_s \sim q`
  (Vehtari, Simpson, Gelman, Yao & Gabry 2024, "Pareto smoothed importance sampling", JMLR
  25(72)). It asks of one fit whether q is close enough to the posterior for importance
  sampling to correct it. :math:`\hat k < 0.5`: the ratios have a finite variance and
  PSIS converges quickly; :math:`\hat k < 0.7`: PSIS is reliable and q is close enough to
  serve as an importance-sampling proposal; :math:`\hat k > 0.7`: it is not, and estimates
  from q can be far off in ways its own draws do not show. With :math:`S` draws the paper's
  sample-size bound is :math:`\min(1 - 1/\log_{10} S, 0.7)` (0.62 at 400 draws). For a
  high-dimensional posterior (a neural network's weights) a mean-field q gives
  :math:`\hat k > 0.7` almost always: the number says how far q is from the posterior, it is
  not a failure of the check. k-hat is computed by ``arviz_stats`` (its generalized Pareto
  fit of Zhang & Stephens 2009, as in the paper).
- :func:`vsbc`, variational simulation-based calibration: draw :math:`\theta^*` from the
  prior and data :math:`y^*` from the likelihood, refit the guide to :math:`y^*`, and take
  q's marginal CDF at :math:`\theta^*` per coordinate. If q were the exact posterior these
  p-values would be uniform (Cook, Gelman & Rubin 2006). The VSBC test of Yao et al.
  (:meth:`VSBCResult.symmetry`) compares the p-values with their reflection
  :math:`1 - p` by a two-sample Kolmogorov-Smirnov test: it detects a *biased* q (p-values
  piled on one side), but a q that is centred and too narrow gives p-values piled at 0
  *and* 1, a U shape that is symmetric and passes it. :meth:`VSBCResult.uniformity` (the
  Kolmogorov-Smirnov test against the uniform) detects both, and so says whether q is
  *calibrated*; neither says anything about one particular data set.

Both functions run in plain Pyro: ``psis_khat(model, guide, *args)`` and ``vsbc(model,
refit, *args, observed=["obs"])``. This module never imports ``zoo``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyro
import torch
from arviz_stats.base import array_stats
from pyro import poutine
from pyro.poutine.util import site_is_subsample
from scipy import stats
from torch.distributions import biject_to

__all__ = ["PSISResult", "VSBCResult", "pareto_smooth", "psis_khat", "vsbc"]


class PSISResult(NamedTuple):
    """Pareto-smoothed importance sampling of the posterior with q as the proposal.

    Attributes
    ----------
    khat : float
        Pareto k-hat of the importance ratios (see the module docstring); ``-inf`` when all
        ratios are equal (q is the posterior to working precision), NaN when a ratio is NaN.
    log_weights : np.ndarray
        The Pareto-smoothed log weights, normalized (``logsumexp == 0``), shape ``(S,)``.
    log_ratios : np.ndarray
        The raw :math:`\\log p(\\theta_s, y) - \\log q(\\theta_s)`, shape ``(S,)``.
    """

    khat: float
    log_weights: np.ndarray
    log_ratios: np.ndarray


def pareto_smooth(log_ratios: np.ndarray) -> tuple[float, np.ndarray]:
    """k-hat and Pareto-smoothed normalized log weights of independent draws' log ratios.

    ``arviz_stats``' PSIS (``array_stats.psislw``, relative efficiency 1: the draws of a
    guide are independent). Two cases are settled here, the same on both ArviZ lines (0.8
    and 1.x answer them differently: a k-hat of rounding noise or NaN, NaN or inf):
    ``log_ratios`` constant up to rounding (spread at most 1e-9 of their size: q is the
    posterior) have no tail to fit, so k-hat is ``-inf`` and the weights are uniform; a
    non-finite ratio gives a NaN k-hat and NaN weights.
    """
    lr = np.asarray(log_ratios, dtype=np.float64).ravel()
    if not np.isfinite(lr).all():
        return float("nan"), np.full(lr.size, np.nan)
    if np.ptp(lr) <= 1e-9 * max(1.0, float(np.abs(lr).max())):
        return float("-inf"), np.full(lr.size, -np.log(lr.size))
    # psislw takes log-likelihoods and weighs by their negative (the LOO ratio 1 / p(y_i|.));
    # its generalized Pareto fit divides by zero on far-off ratios (k-hat then says so)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_weights, khat = array_stats.psislw(-lr, r_eff=1.0)
    return float(khat), np.asarray(log_weights, dtype=np.float64)


def _density(name: str, site: Any) -> bool:
    """Sites whose log density counts: not a plate's subsample indices (as in Pyro's ELBOs)."""
    return not site_is_subsample(site)


#: The name of the plate of draws of the vectorized k-hat.
PARTICLES = "_psis_draws"


def _max_plate_nesting(model: Callable, guide: Callable, args: tuple, kwargs: dict) -> int:
    """How many plate dimensions the guide and the model use (one traced run of each)."""
    guide_tr = poutine.trace(guide).get_trace(*args, **kwargs)
    model_tr = poutine.trace(poutine.replay(model, trace=guide_tr)).get_trace(*args, **kwargs)
    return max(
        (
            -f.dim
            for tr in (guide_tr, model_tr)
            for site in tr.nodes.values()
            if site["type"] == "sample"
            for f in site["cond_indep_stack"]
            if f.vectorized
        ),
        default=0,
    )


def _draws_log_density(tr: Any, dim: int, n: int) -> torch.Tensor | None:
    """Per draw, the trace's log density (scaled, masked, subsample sites left out); None
    where a site's log density does not carry the draws' dimension ``dim`` of size ``n``."""
    tr.compute_log_prob(_density)
    total = torch.zeros(n, dtype=torch.float64, device="cpu")  # summed on the host
    for name, site in tr.nodes.items():
        if site["type"] != "sample" or not _density(name, site):
            continue
        lp = site["log_prob"]
        if not torch.is_tensor(lp) or lp.dim() < -dim or lp.shape[dim] != n:
            return None
        at = lp.dim() + dim
        total = total + lp.sum(dim=[d for d in range(lp.dim()) if d != at]).double().cpu()
    return total


def _vectorized_log_ratios(
    model: Callable, guide: Callable, args: tuple, kwargs: dict, n: int, strict: bool | None
) -> np.ndarray | None:
    """The ``n`` log ratios from one run of guide and model in a plate of draws; None (the
    caller loops) when the model does not broadcast over it, unless ``strict``."""
    try:
        dim = -_max_plate_nesting(model, guide, args, kwargs) - 1
        plate = pyro.plate(PARTICLES, n, dim=dim)
        guide_tr = poutine.trace(plate(guide)).get_trace(*args, **kwargs)
        model_tr = poutine.trace(poutine.replay(plate(model), trace=guide_tr)).get_trace(
            *args, **kwargs
        )
        g, m = _draws_log_density(guide_tr, dim, n), _draws_log_density(model_tr, dim, n)
    except Exception:  # any model that does not take a batch of draws: shapes, asserts
        if strict:
            raise
        return None
    if g is None or m is None:
        if strict:
            raise ValueError(
                "psis_khat(vectorize=True): a site's log density does not carry the draws' "
                "dimension; the model does not broadcast over a batch of draws "
                "(vectorize=None falls back to one draw at a time)"
            )
        return None
    return (m - g).numpy()


def _log_ratio(model: Callable, guide: Callable, args: tuple, kwargs: dict) -> float:
    guide_tr = poutine.trace(guide).get_trace(*args, **kwargs)
    model_tr = poutine.trace(poutine.replay(model, trace=guide_tr)).get_trace(*args, **kwargs)
    return float(model_tr.log_prob_sum(_density) - guide_tr.log_prob_sum(_density))


def psis_khat(
    model: Callable,
    guide: Callable,
    *args: Any,
    num_samples: int = 400,
    seed: int | None = None,
    vectorize: bool | None = None,
    **kwargs: Any,
) -> PSISResult:
    """PSIS k-hat of a fitted guide: how far q is from the posterior (module docstring).

    Draws :math:`\\theta_s \\sim q` by running ``guide(*args, **kwargs)``, replays
    ``model(*args, **kwargs)`` on each draw and takes :math:`\\log r_s = \\log p(\\theta_s,
    y) - \\log q(\\theta_s)` from the two traces (every site's log density, the observed
    ones included, with their plates' scales). Both densities are of the constrained
    values, so the Jacobians of constrained sites cancel.

    Parameters
    ----------
    model, guide : callable
        A Pyro model with its observations given through ``args``/``kwargs``, and a
        guide of it (any: an autoguide or a function).
    *args, **kwargs
        The model's arguments: the whole data set (a subsampled plate would make the
        ratios those of a minibatch).
    num_samples : int
        Draws :math:`S` from q (at least 5 for a tail fit; a few hundred or more).
    seed : int, optional
        Seeds torch's generator for the draws, which is restored afterwards; None draws
        from the global generator.
    vectorize : bool, optional
        How the :math:`S` draws are made. ``True``: all at once, the guide and the model
        run once inside a ``pyro.plate`` of size :math:`S` left of their own plates (as
        Pyro's ``Trace_ELBO(vectorize_particles=True)``): about as fast as Pyro's
        ``psis_diagnostic``, for a model whose sites broadcast over a batch of draws.
        ``False``: one guide and model run per draw, for any model (a ``PyroModule``
        network of ``nn.Linear`` layers, whose weights cannot carry a batch of draws).
        None (default): vectorized where it works (every site's log density carries the
        draws' dimension), else one draw at a time. The two draw different streams from
        the same seed: the same k-hat in distribution, not the same digits.

    Returns
    -------
    PSISResult
        ``khat``, the smoothed log weights and the raw log ratios.
    """
    if num_samples < 5:
        raise ValueError(f"num_samples must be at least 5 for the Pareto fit, got {num_samples}")
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    cuda = [first.device] if first is not None and first.is_cuda else []
    with torch.random.fork_rng(devices=cuda, enabled=seed is not None), torch.no_grad():
        if seed is not None:
            torch.manual_seed(seed)
        lr = None
        if vectorize is not False:
            state = torch.get_rng_state()
            lr = _vectorized_log_ratios(model, guide, args, kwargs, num_samples, vectorize)
            if lr is None:  # fell back: the loop draws from where the seed left the stream
                torch.set_rng_state(state)
        if lr is None:
            lr = np.array([_log_ratio(model, guide, args, kwargs) for _ in range(num_samples)])
    khat, log_weights = pareto_smooth(lr)
    return PSISResult(khat, log_weights, lr)


@dataclass(frozen=True, eq=False)
class VSBCResult:
    """The VSBC p-values of a guide: q's marginal CDF at the true values, per replication.

    Attributes
    ----------
    pvalues : dict of str to np.ndarray
        Latent site -> array ``(R, *unconstrained site shape)``: replication ``r``'s
        :math:`P_q(\\theta_i < \\theta^*_i)` for every coordinate ``i``.
    """

    pvalues: dict[str, np.ndarray]

    def symmetry(self) -> dict[str, np.ndarray]:
        """Per coordinate, the p-value of the KS two-sample test of p against 1 - p.

        Yao et al. (2018)'s VSBC diagnostic: a small value says q is biased in that
        coordinate (p-values on one side). A q that is too narrow but centred gives
        U-shaped, symmetric p-values and passes this test: use :meth:`uniformity` for it.
        (p and 1 - p are not independent samples, so the value is a heuristic scale, as in
        the paper, not an exact test level.)
        """
        return {
            k: stats.ks_2samp(p, 1.0 - p, axis=0).pvalue.reshape(p.shape[1:])
            for k, p in self.pvalues.items()
        }

    def uniformity(self) -> dict[str, np.ndarray]:
        """Per coordinate, the p-value of the one-sample KS test of the p-values against
        Uniform(0, 1): small for a biased q and for a q too narrow or too wide."""
        return {
            k: stats.kstest(p, "uniform", axis=0).pvalue.reshape(p.shape[1:])
            for k, p in self.pvalues.items()
        }


def _latent_truth(trace: Any, observed: Sequence[str]) -> dict[str, tuple[torch.Tensor, Any]]:
    """``{site: (value, support)}`` of the prior draw's latent sample sites."""
    return {
        name: (site["value"].detach(), site["fn"].support)
        for name, site in trace.nodes.items()
        if site["type"] == "sample"
        and not site["is_observed"]
        and name not in observed
        and not site_is_subsample(site)
    }


def _cdf_at(
    guide: Any,
    truth: Mapping[str, tuple[torch.Tensor, Any]],
    num_samples: int,
    args: tuple,
    kwargs: dict,
) -> dict[str, np.ndarray]:
    """q's marginal CDF at the true values, in unconstrained coordinates.

    Closed form from ``guide.loc_scale(site)`` (this package's guides: Gaussian in
    unconstrained space); otherwise the share of ``num_samples`` guide draws below the
    true value (ties count half).
    """
    unconstrained = {k: biject_to(s).inv(v) for k, (v, s) in truth.items()}
    if hasattr(guide, "loc_scale"):
        out = {}
        for k, u in unconstrained.items():
            loc, scale = (t.detach() for t in guide.loc_scale(k))
            out[k] = torch.distributions.Normal(loc, scale).cdf(u.reshape(loc.shape))
        return {k: v.double().cpu().numpy() for k, v in out.items()}
    below = {k: torch.zeros_like(u, dtype=torch.float64) for k, u in unconstrained.items()}
    for _ in range(num_samples):
        draw = guide(*args, **kwargs)
        for k, u in unconstrained.items():
            d = biject_to(truth[k][1]).inv(draw[k])
            below[k] += (d < u).double() + 0.5 * (d == u).double()
    return {k: (v / num_samples).cpu().numpy() for k, v in below.items()}


def vsbc(
    model: Callable,
    refit: Callable[[Callable, dict[str, torch.Tensor]], Any],
    *args: Any,
    observed: Sequence[str],
    replications: int = 100,
    seed: int = 0,
    num_samples: int = 1000,
    **kwargs: Any,
) -> VSBCResult:
    """Variational simulation-based calibration (Yao et al. 2018, section 3).

    For replication ``r`` (torch seeded with ``seed + r``, the global generator restored
    afterwards): run ``model(*args, **kwargs)`` with the ``observed`` sites unobserved, so
    it draws :math:`\\theta^*` from the prior and :math:`y^*` from the likelihood; on a
    cleared Pyro param store (so that a new guide starts from its own initialization, not
    from the last replication's parameters) call ``refit(conditioned_model, y_star)``,
    which builds a guide and fits it (``y_star``: ``{site: value}`` of the observed sites;
    the conditioned model is ``poutine.condition(model, y_star)``); then take the fitted
    q's marginal CDF at :math:`\\theta^*` for every coordinate of every latent site. The
    param store is restored at the end.

    Parameters
    ----------
    model : callable
        A Pyro model whose ``observed`` sites are sampled when ``args``/``kwargs`` carry no
        data (``model(x)`` with ``y=None``).
    refit : callable
        ``(model, y_star) -> guide``: builds a guide and fits it (e.g. SVI steps on the
        conditioned ``model`` with the same ``args``, or a closed-form update), called with
        the replication's torch seed.
    *args, **kwargs
        The model's arguments (no observations).
    observed : sequence of str
        The sites that are data; every other sample site is a latent parameter.
    replications : int
        Simulated data sets :math:`R`.
    seed : int
        Seed of replication 0.
    num_samples : int
        Guide draws per replication when the guide has no ``loc_scale`` (empirical CDF).

    Returns
    -------
    VSBCResult
        The p-values; ``.symmetry()`` and ``.uniformity()`` test them per coordinate.
    """
    if replications < 1:
        raise ValueError(f"replications must be at least 1, got {replications}")
    observed = list(observed)
    store = pyro.get_param_store()
    saved = store.get_state()
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    cuda = [first.device] if first is not None and first.is_cuda else []
    pvalues: dict[str, list[np.ndarray]] = {}
    try:
        for r in range(replications):
            with torch.random.fork_rng(devices=cuda):
                torch.manual_seed(seed + r)
                with torch.no_grad():
                    prior = poutine.trace(model).get_trace(*args, **kwargs)
                missing = [s for s in observed if s not in prior.nodes]
                if missing:
                    raise ValueError(f"observed sites {missing} are not sites of the model")
                y_star = {s: prior.nodes[s]["value"].detach() for s in observed}
                truth = _latent_truth(prior, observed)
                conditioned = poutine.condition(model, data=y_star)
                store.clear()
                guide = refit(conditioned, y_star)
                with torch.no_grad():
                    cdf = _cdf_at(guide, truth, num_samples, args, kwargs)
            for k, p in cdf.items():
                pvalues.setdefault(k, []).append(p)
    finally:
        store.clear()
        store.set_state(saved)
    return VSBCResult({k: np.stack(v) for k, v in pvalues.items()})
