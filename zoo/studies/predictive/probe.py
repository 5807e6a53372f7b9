r"""The price of mean field in predictions, on the draws of a sampled cell.

The reference is the posterior predictive of the sampler's draws,
:math:`p(y \mid x) \approx \frac1S \sum_s p(y \mid x, \theta_s)` (``draws`` draws, evenly
thinned over all chains). Against it, :class:`PredictiveProbe` puts the predictive, by the
same mixture over ``draws`` weight draws, of

- ``qfull``: the Gaussian fit :math:`\mathcal N(\mu, \Sigma)` to the draws of all weights and
  biases (:func:`reports.gaussian.fit_gaussian` with the section's ``gaussian_fit``, as the
  ``price_of_mean_field`` study fits it);
- ``qdiag``: its KL-closest diagonal Gaussian, variances :math:`1 / (\Sigma^{-1})_{ii}`
  (:func:`reports.gaussian.closest_diagonal`: the q_diag of ``kl_diag_full``);
- ``qmarg``: the diagonal Gaussian with the draws' marginal variances :math:`\Sigma_{ii}`
  (the mean field that matches each weight's spread; wider than q_diag);
- ``mfvi``: the variational posterior the chains started from (``init_from``; absent when
  they started from the prior), drawn from the stream :attr:`~zoo.seeds.Stream.PREDICTIVE`
  as the cell's ``tv_vi`` is.

On the test set (no suffix) and on out-of-distribution inputs (suffix ``_ood``) it records
``pred_tv_<q>`` (mean total variation to the samples' predictive), ``pred_agree_<q>``
(fraction of points with the same predicted class), ``pred_kl_<q>`` (mean
KL(samples || q) per point) and ``pred_entropy_<q>`` (mean predictive entropy; also for
``samples``); on the test set ``nll_<q>`` and ``ece_<q>`` (also ``nll_samples``,
``ece_samples``; :mod:`reports.calibration`, the spec's ``metrics.ece_bins``).
``pred_tv_floor_<q>`` (and ``_ood``) is the floor of ``pred_tv_<q>``: the mean TV the two
mixtures would show from their draw noise alone if ``q`` predicted exactly as the samples do
(:func:`reports.tv_floor.tv_floor`, from the variance over each side's draws of every class
probability), so that each TV is read against its own floor: a confident predictive's floor
is far below a diffuse one's. The samples' side is inflated by ``pred_tv_inflation``, the
ratio of the two halves' squared differences to what independent draws would give
(:func:`reports.tv_floor.split_inflation`). ``pred_tv_split`` (and ``_ood``) is the TV
between the predictives of the two halves of the samples (the first and second half of the
chains; of the draws with one chain), ``draws // 2`` draws each: the samples' own Monte
Carlo and mixing error, about sqrt(2) times that of a TV to all of them for independent
draws, more where chains disagree.

Out-of-distribution inputs (:func:`ood_inputs`): ``far``, points in uniformly random
directions from the training inputs' mean at a radius uniform in ``ood_radius`` times their
RMS distance from it (two moons: a ring at 3-5 times the data's scale); ``noise``, every
feature uniform in its training range (noise images for digits and Fashion-MNIST);
``holdout_class``, the images of the class the data section holds out of training
(``data.holdout_class``, :func:`zoo.data.holdout.hold_out_class`): real images of a kind
the network never saw, which no far or noise input imitates. With several kinds (``ood``
a list; ``auto`` on data with a held-out class is ``[holdout_class, noise]``) the first
kind's metrics end in ``_ood`` and each further kind's in ``_ood_<kind>``;
``pred_ood_kind`` names the first (``pred_ood_kinds`` lists them all when there are several).

With ``per_chain`` k > 0, the control for pooling: Farquhar et al. (2020, App. B) fit q_full
to one chain, the study to all of them. Each of k evenly spaced chains gets its own
Gaussian fit; ``pred_tv_qchain`` and ``pred_agree_qchain`` (and ``_ood``) are the medians
over those chains of the TV and agreement between that Gaussian's predictive and the
chain's own draws', ``pred_tv_floor_qchain`` the median of their floors (``inflation`` 1:
a chain's draws taken as independent, so the floor is low where they are not). Where the
pooled q_full predicts at chance and the per-chain fits do not, pooling chains that sit in
different places is the cause; where both fail, the Gaussian family is (a weight-space
Gaussian pushed through a nonlinear network; Immer et al. 2021, "Improving predictions of
Bayesian neural nets via local linearization"). A chain needs more held draws than the
network has weights, else ``pred_qchain_skipped`` says so.

The Gaussian draws and the OOD inputs come from a NumPy generator seeded from
:attr:`~zoo.seeds.Stream.PREDICTIVE_STUDY` (the per-chain fits from a generator of their
own, so that turning them on moves no other number); nothing is drawn from torch's global
generator. Classification only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from reports.calibration import ece, nll
from reports.draws import flatten_sites
from reports.gaussian import cholesky_factor, closest_diagonal, fit_gaussian
from reports.predictive import compare_predictives, predictive_entropy, predictive_tv
from reports.tv_floor import split_inflation, tv_floor
from zoo.inference.base import Fit, Hooks
from zoo.inference.sampling import SampledPosterior, thin
from zoo.seeds import Stream, seed_for
from zoo.spec.sections.studies import FAR_MAX_FEATURES
from zoo.studies.base import CellContext

__all__ = [
    "APPROXIMATIONS",
    "PredictiveProbe",
    "log_predictive",
    "ood_inputs",
    "predictive_moments",
    "weight_sites",
]

#: The approximations compared with the samples, in the order of the results' columns.
APPROXIMATIONS = ("qdiag", "qfull", "qmarg", "mfvi")

#: Draws x inputs per chunk of :func:`log_predictive`.
CHUNK_VALUES = 2**21


def ood_inputs(
    x_train: np.ndarray,
    kind: str,
    n: int,
    radius: tuple[float, float],
    seed: int,
    x_held_out: np.ndarray | None = None,
) -> np.ndarray:
    """``n`` out-of-distribution inputs like ``x_train`` (``(N, d)``), float32.

    ``kind`` is ``far``, ``noise``, ``holdout_class`` (the first ``n`` rows of
    ``x_held_out``, the data set's held-out class) or ``auto`` (``far`` for at most
    :data:`FAR_MAX_FEATURES` features, else ``noise``); see the module docstring.
    """
    if kind == "holdout_class":
        if x_held_out is None:
            raise ValueError(
                "ood: holdout_class needs a data set with a held-out class (data.holdout_class)"
            )
        return np.asarray(x_held_out[:n], np.float32)
    x = np.asarray(x_train, np.float64)
    rng = np.random.default_rng(seed)
    if kind == "auto":
        kind = "far" if x.shape[1] <= FAR_MAX_FEATURES else "noise"
    if kind == "noise":
        lo, hi = x.min(0), x.max(0)
        return (lo + (hi - lo) * rng.random((n, x.shape[1]))).astype(np.float32)
    centre = x.mean(0)
    scale = float(np.sqrt(np.mean(np.sum((x - centre) ** 2, 1))))
    u = rng.standard_normal((n, x.shape[1]))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    r = scale * rng.uniform(radius[0], radius[1], size=(n, 1))
    return (centre + r * u).astype(np.float32)


def log_predictive(model: Any, x: torch.Tensor, draws: Mapping[str, torch.Tensor]) -> np.ndarray:
    """Log class probabilities of the mixture over ``draws`` (leading dim S) at ``x``.

    Returns ``(len(x), n_classes)`` float64: ``logsumexp_s log p(c | x, theta_s) - log S``,
    in chunks of inputs of at most :data:`CHUNK_VALUES` // S.
    """
    return predictive_moments(model, x, draws)[0]


def predictive_moments(
    model: Any, x: torch.Tensor, draws: Mapping[str, torch.Tensor]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`log_predictive` and the variance over the draws of each class probability.

    Returns ``(log mixture, variance)``, both ``(len(x), n_classes)`` float64; the variance
    (``ddof=1``; 0 with one draw) divided by S is the mixture's draw noise, what
    :func:`reports.tv_floor.tv_floor` needs.
    """
    n_draws = next(iter(draws.values())).shape[0]
    size = max(1, min(2000, CHUNK_VALUES // n_draws))
    out, var = [], []
    with torch.no_grad():
        for xc in x.split(size):
            logp = model.likelihood.class_log_probs(model.apply(xc, draws)).double()
            out.append(torch.logsumexp(logp, 0) - np.log(n_draws))
            p = logp.exp()
            var.append(p.var(0) if n_draws > 1 else torch.zeros_like(p[0]))
    return torch.cat(out).cpu().numpy(), torch.cat(var).cpu().numpy()


def weight_sites(model: Any, draws: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The draws of the weight and bias sites, in model order (no noise)."""
    return {name: draws[name] for pair in model.layer_sites() for name in pair}


def _unflatten(
    flat: np.ndarray, shapes: Mapping[str, tuple[int, ...]], ctx: CellContext
) -> dict[str, torch.Tensor]:
    """``(n, D)`` rows of flattened sites back to ``{site: (n, *shape)}`` tensors."""
    out, start = {}, 0
    for name, shape in shapes.items():
        size = int(np.prod(shape, dtype=int))
        out[name] = ctx.runtime.tensor(flat[:, start : start + size].reshape((-1, *shape)))
        start += size
    return out


def _halves(sites: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], ...]:
    """The draws ``(chain, draw, ...)`` in two halves: by chains, or by draws with one chain."""
    chains, draws = next(iter(sites.values())).shape[:2]
    if chains >= 2:
        cut = chains // 2
        return ({k: v[:cut] for k, v in sites.items()}, {k: v[cut:] for k, v in sites.items()})
    cut = max(1, draws // 2)
    return ({k: v[:, :cut] for k, v in sites.items()}, {k: v[:, cut:] for k, v in sites.items()})


def chain_gaussians(
    sites: Mapping[str, np.ndarray],
    k: int,
    n: int,
    gaussian_fit: Any,
    seed: int,
    ctx: CellContext,
) -> tuple[list[dict[str, torch.Tensor]], list[dict[str, torch.Tensor]]] | str:
    """Per-chain control: ``n`` draws of the Gaussian fit (the study's ``gaussian_fit``) to
    each of ``k`` evenly spaced chains alone, beside that chain's own draws; a reason string
    when a chain holds no more draws than the network has weights."""
    chains, held = next(iter(sites.values())).shape[:2]
    flat = flatten_sites(sites).draws
    dim = flat.shape[1]
    if held <= dim:
        return f"{held} held draws per chain <= {dim} weights: a chain's covariance is singular"
    per_chain = flat.reshape(chains, held, dim)
    shapes = {name: v.shape[2:] for name, v in sites.items()}
    rng = np.random.default_rng(seed)
    own, gauss = [], []
    for c in np.unique(np.linspace(0, chains - 1, min(k, chains)).round().astype(int)):
        g = fit_gaussian(per_chain[c], cov=gaussian_fit.cov, jitter=gaussian_fit.jitter)
        try:
            chol = cholesky_factor(g.cov)
        except ValueError as err:  # a control, not the cell: say why, record nothing
            return f"chain {c}: {err}"
        z = rng.standard_normal((n, dim))
        gauss.append(_unflatten(g.mean + z @ chol.T, shapes, ctx))
        own.append({name: ctx.runtime.tensor(v[c]) for name, v in sites.items()})
    return own, gauss


class PredictiveProbe:
    """The predictive price of mean field of one sampled cell (module docstring)."""

    def __init__(self, section: Any, ctx: CellContext) -> None:
        self.section, self.ctx = section, ctx

    @property
    def hooks(self) -> Hooks:
        return Hooks()

    def _draw_sets(self, fit: Fit, post: SampledPosterior) -> dict[str, Any]:
        """Weight draws per approximation, of the samples and of the samples' two halves."""
        s, ctx, n = self.section, self.ctx, self.section.draws
        sites = weight_sites(ctx.model, post.draws)
        shapes = {k: v.shape[2:] for k, v in sites.items()}
        flat = flatten_sites(sites)
        g = fit_gaussian(flat.draws, cov=s.gaussian_fit.cov, jitter=s.gaussian_fit.jitter)
        rng = np.random.default_rng(seed_for(ctx.seed, Stream.PREDICTIVE_STUDY))
        z = rng.standard_normal((2, n, g.dim))
        chol = np.linalg.cholesky(g.cov)
        gauss = {
            "qdiag": g.mean + z[0] * np.sqrt(closest_diagonal(g.cov)),
            "qfull": g.mean + z[1] @ chol.T,
            "qmarg": g.mean + z[0] * np.sqrt(np.diag(g.cov)),
        }
        sets = {k: _unflatten(v, shapes, ctx) for k, v in gauss.items()}
        sets["samples"] = {k: ctx.runtime.tensor(v) for k, v in thin(sites, n).items()}
        for half, part in enumerate(_halves(sites)):
            sets[f"half{half}"] = {
                k: ctx.runtime.tensor(v) for k, v in thin(part, max(1, n // 2)).items()
            }
        if fit.init is not None:
            sets["mfvi"] = fit.init.posterior.sample(n, seed_for(ctx.seed, Stream.PREDICTIVE))
        return sets

    def finish(self, fit: Fit) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The ``pred_*``, ``nll_*`` and ``ece_*`` metrics (no artifacts)."""
        post, ctx, s = fit.posterior, self.ctx, self.section
        if not isinstance(post, SampledPosterior) or ctx.ds.n_classes == 0:
            return {}, {}
        if ctx.model.num_params > s.max_params:
            return {
                "pred_skipped": f"{ctx.model.num_params} parameters > max_params {s.max_params}"
            }, {}
        sets = self._draw_sets(fit, post)
        per_chain: Any = None  # the chains' draws and fits, or why there are none
        if s.per_chain:
            per_chain = chain_gaussians(
                weight_sites(ctx.model, post.draws),
                s.per_chain,
                s.draws,
                s.gaussian_fit,
                seed_for(ctx.seed, Stream.PREDICTIVE_CHAINS),
                ctx,
            )
        kinds = s.ood_kinds(ctx.cell.spec.data, ctx.ds.in_dim)
        inputs = {"": ctx.data.x_test}
        for i, kind in enumerate(kinds):
            x_ood = ood_inputs(
                ctx.ds.x_train,
                kind,
                s.ood_points,
                s.ood_radius,
                seed_for(ctx.seed, Stream.PREDICTIVE_STUDY),
                getattr(ctx.ds, "x_ood", None),
            )
            inputs["_ood" if i == 0 else f"_ood_{kind}"] = ctx.runtime.tensor(x_ood)
        y, bins = np.asarray(ctx.ds.y_test), ctx.cell.spec.metrics.ece_bins
        out: dict[str, Any] = {}
        for sfx, x in inputs.items():
            moments = {k: predictive_moments(ctx.model, x, d) for k, d in sets.items()}
            logp = {k: m[0] for k, m in moments.items()}
            prob = {k: np.exp(v) for k, v in logp.items()}
            size = {k: next(iter(d.values())).shape[0] for k, d in sets.items()}
            ref = prob["samples"]
            r = split_inflation(
                prob["half0"], prob["half1"], moments["samples"][1], size["half0"], size["half1"]
            )
            for k in ("samples", *APPROXIMATIONS):
                if k not in prob:
                    continue
                if k != "samples":
                    for m, v in compare_predictives(ref, prob[k]).items():
                        out[f"pred_{m}_{k}{sfx}"] = v
                    out[f"pred_tv_floor_{k}{sfx}"] = tv_floor(
                        moments[k][1], size[k], moments["samples"][1], size["samples"], r
                    )
                out[f"pred_entropy_{k}{sfx}"] = predictive_entropy(prob[k])
                if not sfx:
                    out[f"nll_{k}"] = nll(logp[k], y)
                    out[f"ece_{k}"] = ece(prob[k], y, n_bins=bins)
            if isinstance(per_chain, tuple):
                out.update(_per_chain_metrics(ctx.model, x, *per_chain, sfx))
            out[f"pred_tv_split{sfx}"] = predictive_tv(prob["half0"], prob["half1"])
            out[f"pred_tv_inflation{sfx}"] = r if np.isfinite(r) else None
        if isinstance(per_chain, str):
            out["pred_qchain_skipped"] = per_chain
        out["pred_ood_kind"] = kinds[0]
        if len(kinds) > 1:
            out["pred_ood_kinds"] = ",".join(kinds)
        return out, {}


def _per_chain_metrics(
    model: Any,
    x: torch.Tensor,
    own: list[dict[str, torch.Tensor]],
    gauss: list[dict[str, torch.Tensor]],
    sfx: str,
) -> dict[str, float]:
    """Medians over the chains of :func:`chain_gaussians`' TV, agreement and TV floor."""
    tv, agree, floor = [], [], []
    for o, g in zip(own, gauss, strict=True):
        mo, mg = predictive_moments(model, x, o), predictive_moments(model, x, g)
        cmp = compare_predictives(np.exp(mo[0]), np.exp(mg[0]))
        tv.append(cmp["tv"])
        agree.append(cmp["agree"])
        n_o, n_g = (next(iter(d.values())).shape[0] for d in (o, g))
        floor.append(tv_floor(mg[1], n_g, mo[1], n_o))
    return {
        f"pred_tv_qchain{sfx}": float(np.median(tv)),
        f"pred_agree_qchain{sfx}": float(np.median(agree)),
        f"pred_tv_floor_qchain{sfx}": float(np.median(floor)),
    }
