"""The price of the mean-field assumption, measured on the draws of a sampler.

On the draws of all weights and biases of a sampled cell, :class:`PriceOfMeanFieldProbe`
records (Farquhar, Smith & Gal 2020):

- KL(q_diag || q_full) for the whole network and per layer, the closed-form W2 between them
  and the Wasserstein error of Farquhar, Smith & Gal's 2020 blog post (:func:`reports.price_of_mf.diag_vs_full`), q_full being the
  Gaussian fit of the section's ``gaussian_fit``;
- the shift null of that KL (:func:`reports.kl_null.kl_shift_null`): the KL the same chains
  would show with independent parameters, and the excess over it; on the draws path also
  ``w2_null`` (and ``w2_null_sd``), the closed-form W2(q_diag, q_full) of the same shifted
  copies: the sampling floor of ``w2_diag_full``;
- ``kl_ess_n``, ``kl_bias_ess``, ``kl_debiased`` and ``kl_debiased_se``: the exact sampling
  bias of the KL at the effective n of the covariance's terms, measured independently of the
  null, the KL less it and its chain-group error (below); ``kl_debiased_ci``, the half-width
  of its 95% interval (Student's t with the chain groups' degrees of freedom), and
  ``kl_bias_rho``, the lag-one correlation of the AR(1) chains on which the bias was
  calibrated (:func:`reports.kl_reference.ar1_calibrated_bias`; None where the draws needed
  no calibration);
- ``w2sq_debiased`` and ``w2sq_debiased_se``: the closed-form W2(q_diag, q_full) squared
  less its sampling bias, by a jackknife over the same chain groups
  (:mod:`reports.w2_reference`; empirical fits only);
- ``kl_rhat`` and ``kl_rhat_nested``: the split and nested R-hat of the KL itself, of its
  per-draw influence values (:mod:`reports.kl_rhat`), which the grade gates;
- for a softmax classifier (more than one output), ``kl_output_columns``: the KLs of the output layer's columns, block by
  block, the part that the softmax's invariance to shifting all logits alone explains;
- with ``kl_target_draws``, the stopping rule of the sampler (``Hooks.stop_when``): draw
  until the draws are worth that many independent draws to the covariance estimate (and,
  with ``stop_at_grade``, until the aligned weights pass that grade's gates);
  ``stop_rule_met`` records whether the chains stopped on the rule (True) or at
  ``max_draws`` without meeting it (False);
- for an MLP with hidden layers, the price of mean field modulo hidden-unit permutations
  (:func:`unit_alignment`, :mod:`zoo.studies.price_of_mf.quotient`, :mod:`reports.alignment`):
  ``kl_aligned`` (every draw's units matched to a pivot before q_full is fitted),
  ``kl_relabelled`` (every draw's units relabelled at random), ``kl_alignment_null`` (what
  aligning adds to independent draws of the same marginals), the study's headline
  ``kl_aligned_debiased`` (the aligned KL less its sampling bias at the aligned draws' own
  effective n, ``kl_aligned_bias``, and that null; with ``kl_aligned_debiased_se``), the
  aligned draws' W2 (``w2_aligned``, ``w2sq_aligned_debiased``), the weights' largest split
  R-hat raw and aligned (and nested, aligned, over superchains) and smallest bulk ESS
  aligned, ``label_switches`` and, for ReLU and leaky-ReLU networks, ``orbit_rhat``
  (with ``orbit_rhat_balance``, ``orbit_rhat_invariant`` and ``orbit_rhat_nested``): the
  R-hat of each aligned unit's place on its rescaling orbit and of what the rescaling
  leaves unchanged (:mod:`reports.orbit`). The grade reads the aligned R-hats and ESS and
  the orbit R-hats (:mod:`reports.grade`). A sampler that moves between the copies of a mode
  that permuting units makes inflates the raw weights' R-hat and moves the raw KL; the
  aligned numbers are the same draws read modulo those copies. Computed on the draws the
  posterior keeps (on the moments path, the kept subset).

Two paths, named by the string metric ``kl_source``:

- ``"draws"``: everything from the posterior's draws (NUTS, HMC; or any sampler with a
  Ledoit-Wolf ``gaussian_fit``, which needs the draws).
- ``"moments"``: when the posterior carries streamed moments (``posterior.moments``, a
  :class:`zoo.inference.mcmc.streaming.Moments` of every post-warm-up draw; its ``draws``
  are then only a thinned, kept subset) and the fit is empirical. The moments are restricted
  to the weight and bias coordinates (``posterior.site_slices``, the flat layout of
  :class:`~zoo.inference.mcmc.potential.FlatPotential`, in the order of :func:`weight_draws`;
  without that attribute the layer sites are taken to come first in model order, as
  FlatPotential lays them out). The KLs, ``w2_diag_full`` and ``kl_output_columns`` come
  from the moments' mean and covariance (:func:`reports.price_of_mf.diag_vs_full_moments`,
  the same code as the draws path); the empirical Wasserstein error compares those two
  Gaussians with the kept draws and its keys end in ``_kept``; the shift null is the null
  of the kept draws, with ``kl_kept`` their own KL, so that ``kl_excess_kept = kl_kept -
  kl_null`` is a consistent pair (``kl_diag_full - kl_null`` is not: the two are at
  different numbers of draws, and this path records no ``kl_excess``). ``n_draws`` is all
  the draws behind the moments.

What each number is evidence of. ``kl_diag_full`` is a plug-in estimate, biased upward by
the noise of the covariance estimate, exactly b(n, D) = (1/2)(sum_k psi((n-k)/2) - D
psi((n-D)/2)), about D^2 / 4n, for n independent Gaussian draws whatever the covariance
(:func:`reports.gaussian.kl_sampling_bias`). For a chain the n that governs it is the KL's
own effective n, ``kl_ess_n`` (:func:`reports.kl_reference.kl_bias_n`): the chains split
into min(8, C) contiguous groups (the stream's groups on the moments path), and the spread
of the groups' covariances, weighed as the KL's second-order expansion weighs it, gives the
bias and so the n. ``kl_bias_ess`` is b at that n and ``kl_debiased = kl_diag_full -
kl_bias_ess``, unbiased for Gaussian draws when the n is right, with ``kl_debiased_se`` its
jackknife error over the same groups and the bias's own error in quadrature; ``kl_debiased.<layer>`` is the same for each layer's
own KL at its own n (no error). ``kl_squares_n`` is the per-coordinate reference the issue
proposed, the centred squares' ESS pooled over pairs (AR(1)-matched; from the draws, or
from the streamed per-chain means and variances with Gaussian marginals): right for AR(1)
and ChEES chains, but it over-states the bias of NUTS draws (6-23% on a diagonal target,
docs/notes/kl_references.md), so it is recorded only. The ESS of each coordinate's mean
(``ess_mean_n``: the median bulk ESS of the weights, or the moments' ``n_eff``) is the
wrong n for this: for AR(1) coordinates with lag correlations rho_i, rho_j the products'
autocorrelation time is (1 + rho_i rho_j) / (1 - rho_i rho_j), not (1 + rho) / (1 - rho),
so it over-states the bias of positively autocorrelated (NUTS-like) chains about 2x at rho
= 0.8 and under-states it for antithetic ones; it is kept for comparison only.

``kl_null`` measures the bias a second, independent way, on the draws themselves (each
parameter's series rotated within its chain), and ``kl_excess`` = KL - null is the part the
correlations between parameters explain, to the extent that the null is the sampler's bias.
Rotating each coordinate on its own drops the dependence a sampler puts between coordinates
at the same lags (NUTS's shared trajectories), so the null can fall short of the bias (by
half on NUTS draws of a known Gaussian, tests/zoo/studies/test_gaussian_ground_truth.py);
it stays as a cross-check. ``kl_null_draws`` is the n at which the closed form equals the
null: defined by the null, so the closed form at ``kl_null_draws`` equals ``kl_null`` by
construction and checks nothing. ``kl_ess_n``, ``kl_bias_ess``, ``kl_debiased`` and
``kl_debiased_se`` are None (not applicable) when the n is not finite or not above D (the
closed form needs n > D); all but ``kl_ess_n`` for a Ledoit-Wolf fit (the closed form is
for the sample covariance).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import arviz_stats as azs
import numpy as np

from reports.draws import FlatDraws, column_blocks, flatten_sites
from reports.gaussian import fit_gaussian, gaussian_from_moments, kl_diag_full, kl_sampling_bias
from reports.kl_null import kl_shift_null, shift_null_iid_draws
from reports.kl_reference import DebiasedKL, debiased_kl_draws, debiased_kl_moments
from reports.kl_rhat import kl_rhat
from reports.orbit import HOMOGENEOUS
from reports.price_of_mf import diag_vs_full, diag_vs_full_moments
from reports.w2_reference import DebiasedW2, debiased_w2_draws, debiased_w2_groups
from zoo.inference.base import Fit, Hooks
from zoo.inference.mcmc.streaming import Moments
from zoo.inference.sampling import SampledPosterior
from zoo.seeds import Stream, seed_for
from zoo.studies.base import CellContext
from zoo.studies.price_of_mf.quotient import quotient_metrics
from zoo.studies.price_of_mf.stopping import GateRule

__all__ = [
    "PriceOfMeanFieldProbe",
    "bulk_ess_n",
    "kl_bias_at",
    "kl_output_columns",
    "unit_alignment",
    "weight_draws",
    "weight_index",
]


def weight_draws(model: Any, draws: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The draws of the weight and bias sites, in model order (no noise)."""
    return {name: draws[name] for pair in model.layer_sites() for name in pair}


def weight_index(
    model: Any, draws: Mapping[str, np.ndarray], site_slices: Mapping[str, slice] | None
) -> np.ndarray:
    """Columns of the weight and bias sites in the posterior's flat vector.

    In the order of :func:`weight_draws` (and so of ``flatten_sites(weight_draws(...))``).
    ``site_slices`` is the flat layout (``FlatPotential.site_slices``); without it the layer
    sites are taken to come first, in model order, as FlatPotential lays them out.
    """
    names = [name for pair in model.layer_sites() for name in pair]
    if site_slices is None:
        sizes = [int(np.prod(draws[name].shape[2:])) for name in names]
        stops = np.cumsum(sizes)
        site_slices = {
            n: slice(int(b - k), int(b)) for n, k, b in zip(names, sizes, stops, strict=True)
        }
    return np.concatenate([np.arange(site_slices[n].start, site_slices[n].stop) for n in names])


def bulk_ess_n(draws: np.ndarray, chains: int) -> float | None:
    """Median bulk ESS over the columns of chain-major ``(C S, D)`` draws (arviz-stats).

    Columns constant within every chain are left out (arviz-stats gives them a full ESS,
    their ranks being all tied; :mod:`reports.diagnostics` does not trust it either). None
    when no column has a finite ESS.
    """
    x = np.asarray(draws, dtype=float)
    x = x.reshape(chains, x.shape[0] // chains, x.shape[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        ess = np.asarray(azs.ess(x, method="bulk", chain_axis=0, draw_axis=1), dtype=float)
    ess[np.all(x == x[:, :1], axis=(0, 1))] = np.nan
    ess = ess[np.isfinite(ess)]
    return float(np.median(ess)) if ess.size else None


def kl_bias_at(n: float | None, d: int, cov: str) -> float | None:
    """:func:`reports.gaussian.kl_sampling_bias` at ``n``, or None where it does not apply.

    None for no or a non-finite ``n``, for ``n <= d`` (the closed form needs ``n > d``) and
    for a covariance estimate other than ``"empirical"``.
    """
    if cov != "empirical" or n is None or not np.isfinite(n) or not n > d:
        return None
    return kl_sampling_bias(n, d)


def kl_output_columns(flat: FlatDraws, fit: Any, cov: np.ndarray | None = None) -> float | None:
    """Sum of the KLs of the output layer's columns (and bias), each block on its own.

    With a softmax, the C weights from a hidden unit to the C outputs are correlated by the
    likelihood's invariance to adding a constant to every logit, at any depth. Each block's
    KL is computed on its own (as ``kl_diag_full.<layer>`` is); the sum says how much of
    KL(q_diag || q_full) these blocks carry by themselves, and it shrinks with the width of
    the last hidden layer. ``fit`` is the study's ``gaussian_fit`` (``cov``, ``jitter``);
    ``cov``, when given, is q_full's covariance to use instead of fitting one to the draws
    (the streamed moments' one; ``flat`` then gives only labels and blocks). None (not
    applicable) when the draws have no ``layer<k>`` blocks.
    """
    layers = [k for k in flat.blocks if k.startswith("layer") and k[5:].isdigit()]
    if not layers:
        return None
    last = max(layers, key=lambda k: int(k[5:]))
    bias = f"{last}.bias" if any(lab.startswith(f"{last}.bias") for lab in flat.labels) else None
    blocks = column_blocks(flat.labels, f"{last}.weight", bias)
    if cov is None:
        cov = fit_gaussian(flat.draws, cov=fit.cov, jitter=fit.jitter).cov
    kls = kl_diag_full(cov, blocks)
    return float(sum(v for k, v in kls.items() if k != "total"))


def _is_mlp(sites: Mapping[str, np.ndarray]) -> bool:
    """Whether ``(chain, draw, *shape)`` weight sites are an MLP's with a hidden layer."""
    return len(sites) >= 4 and all(v.ndim == 4 for n, v in sites.items() if n.endswith(".weight"))


def _homogeneous(model: Any) -> bool:
    """ReLU or leaky ReLU: the hidden units have rescaling orbits."""
    return getattr(model, "act_name", None) in HOMOGENEOUS


def unit_alignment(
    model: Any, draws: Mapping[str, np.ndarray], superchain_ids: Any, seed: int, jitter: float
) -> dict[str, Any]:
    """The price of mean field modulo hidden-unit permutations of a model's draws
    (:func:`zoo.studies.price_of_mf.quotient.quotient_metrics` of its weight and bias sites,
    the other sites passed as sampled; rescaling orbits for ReLU and leaky-ReLU networks).
    Empty for other networks (no ``layer<k>.weight`` matrices, or no hidden layer)."""
    sites = weight_draws(model, draws)
    if not _is_mlp(sites):
        return {}
    return quotient_metrics(
        sites,
        {k: np.asarray(v) for k, v in draws.items() if k not in sites},
        homogeneous=_homogeneous(model),
        superchain_ids=superchain_ids,
        seed=seed,
        jitter=jitter,
    )


def kl_draws_rule(
    model: Any, section: Any, seed: int
) -> Callable[[Mapping[str, np.ndarray]], bool]:
    """The stopping rule of ``kl_target_draws``: true once the weights' draws are worth that
    many independent draws to the covariance estimate (a 4-rotation shift null, stream
    :attr:`~zoo.seeds.Stream.KL_STOP_NULL`) and, with ``stop_at_grade``, an MLP's aligned
    weights pass that grade's gates (:class:`~zoo.studies.price_of_mf.stopping.GateRule`)."""
    fit = section.gaussian_fit
    grade = getattr(section, "stop_at_grade", None)
    gates = (
        None
        if grade is None
        else GateRule(grade, homogeneous=_homogeneous(model), jitter=fit.jitter)
    )

    def enough(draws: Mapping[str, np.ndarray]) -> bool:
        sites = weight_draws(model, draws)
        parts = [v.reshape(v.shape[:2] + (-1,)) for v in sites.values()]
        iid = shift_null_iid_draws(
            np.concatenate(parts, -1),
            jitter=fit.jitter,
            reps=4,
            seed=seed_for(seed, Stream.KL_STOP_NULL),
        )
        if iid is None or iid < section.kl_target_draws:
            return False
        return gates is None or not _is_mlp(sites) or gates(sites)

    return enough


class _Recorded:
    """A stopping rule that remembers whether it was ever met (the chains stopped on it,
    not on ``max_draws``)."""

    def __init__(self, rule: Callable[[Mapping[str, np.ndarray]], bool]) -> None:
        self.rule, self.met = rule, False

    def __call__(self, draws: Mapping[str, np.ndarray]) -> bool:
        ok = bool(self.rule(draws))
        self.met = self.met or ok
        return ok


class PriceOfMeanFieldProbe:
    """KL(q_diag || q_full), its shift null and the Wasserstein errors of one sampled cell."""

    def __init__(self, section: Any, ctx: CellContext) -> None:
        self.section, self.ctx = section, ctx
        self._rule: _Recorded | None = None

    @property
    def hooks(self) -> Hooks:
        s = self.section
        if s.kl_target_draws is None:
            return Hooks()
        if self._rule is None:
            self._rule = _Recorded(kl_draws_rule(self.ctx.model, s, self.ctx.seed))
        return Hooks(stop_when=self._rule, max_draws=s.draws_cap(self.ctx.cell.method))

    def finish(self, fit: Fit) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The KL, null and Wasserstein metrics (no artifacts); nothing without draws.

        From the streamed moments when the posterior has them and the fit is empirical,
        else from the draws (module docstring). A metric that does not apply is None
        (``kl_null_draws``, ``kl_bias_ess`` and ``shrinkage`` of another covariance
        estimate than they are defined for), never NaN.
        """
        post = fit.posterior
        if not isinstance(post, SampledPosterior):
            return {}, {}
        gf = self.section.gaussian_fit
        flat = flatten_sites(weight_draws(self.ctx.model, post.draws))
        moments = getattr(post, "moments", None)
        if isinstance(moments, Moments) and gf.cov == "empirical":
            out = self._from_moments(post, moments, flat)
        else:
            out = self._from_draws(post, flat)
        deb: DebiasedKL = out.pop("_debiased")
        exact = gf.cov == "empirical"  # the Wishart bias is the sample covariance's
        out["kl_ess_n"], out["kl_squares_n"] = deb.n, deb.squares_n
        out["kl_bias_ess"] = bias = kl_bias_at(deb.n, flat.draws.shape[1], gf.cov)
        out["kl_debiased"] = None if bias is None else out["kl_diag_full"] - bias
        out["kl_debiased_se"] = deb.se if exact and bias is not None else None
        out["kl_debiased_ci"] = deb.half_width() if exact and bias is not None else None
        out["kl_bias_rho"] = deb.rho if exact else None
        for name, value in deb.blocks.items():
            out[f"kl_debiased.{name}"] = value if exact else None
        w2: DebiasedW2 = out.pop("_w2")
        out["w2sq_debiased"] = w2.w2sq_debiased if exact else None
        out["w2sq_debiased_se"] = w2.se if exact else None
        x = flat.draws.reshape(post.chains, -1, flat.draws.shape[1])
        out["kl_rhat"], out["kl_rhat_nested"] = kl_rhat(
            x, getattr(post, "superchain_ids", None), jitter=gf.jitter
        )
        if self.section.kl_target_draws is not None:
            out["stop_rule_met"] = self._rule is not None and self._rule.met
        if exact:
            out.update(
                unit_alignment(
                    self.ctx.model,
                    post.draws,
                    getattr(post, "superchain_ids", None),
                    seed_for(self.ctx.seed, Stream.UNIT_ALIGNMENT),
                    gf.jitter,
                )
            )
        return out, {}

    def _softmax(self) -> bool:
        return self.ctx.ds.n_classes > 1 and self.ctx.model.dims[-1] > 1  # not one logit

    def _null(self, post: SampledPosterior, flat: FlatDraws, w2: bool = False) -> Any:
        gf = self.section.gaussian_fit
        return kl_shift_null(
            flat.draws,
            chains=post.chains,
            cov=gf.cov,
            jitter=gf.jitter,
            reps=8,
            seed=seed_for(self.ctx.seed, Stream.SHIFT_NULL),
            w2=w2,
        )

    def _from_draws(self, post: SampledPosterior, flat: FlatDraws) -> dict[str, Any]:
        seed, gf = self.ctx.seed, self.section.gaussian_fit
        gauss = diag_vs_full(flat.draws, flat.blocks, cov=gf.cov, jitter=gf.jitter, seed=seed)
        out: dict[str, Any] = {
            k: v for k, v in gauss.items() if v is None or isinstance(v, int | float)
        }
        null = self._null(post, flat, w2=True)
        out.update(
            kl_null=null.null_mean,
            kl_null_sd=null.null_sd,
            kl_excess=null.excess,
            kl_null_draws=null.iid_draws,
            w2_null=null.w2_null_mean,
            w2_null_sd=null.w2_null_sd,
        )
        if self._softmax():
            out["kl_output_columns"] = kl_output_columns(flat, gf)
        x = flat.draws.reshape(post.chains, -1, flat.draws.shape[1])
        out.update(
            kl_source="draws",
            ess_mean_n=bulk_ess_n(flat.draws, post.chains),
            _debiased=debiased_kl_draws(
                x,
                jitter=gf.jitter,
                blocks=flat.blocks,
                calibrate=True,
                seed=seed_for(self.ctx.seed, Stream.KL_CALIBRATION),
            ),
            _w2=debiased_w2_draws(x, jitter=gf.jitter),
        )
        return out

    def _from_moments(
        self, post: SampledPosterior, moments: Moments, flat: FlatDraws
    ) -> dict[str, Any]:
        seed, gf = self.ctx.seed, self.section.gaussian_fit
        idx = weight_index(self.ctx.model, post.draws, getattr(post, "site_slices", None))
        if idx.size != flat.draws.shape[1]:
            raise ValueError(
                f"the weight sites have {flat.draws.shape[1]} columns in the "
                f"draws but {idx.size} in the flat layout"
            )
        m = moments.restrict(idx)
        gauss = diag_vs_full_moments(
            m.mean,
            m.cov,
            flat.blocks,
            n_draws=m.n * m.chains,
            jitter=gf.jitter,
            draws=flat.draws,
            seed=seed,
        )
        out: dict[str, Any] = {
            k: v for k, v in gauss.items() if v is None or isinstance(v, int | float)
        }
        null = self._null(post, flat)
        out.update(
            kl_kept=null.kl,
            kl_null=null.null_mean,
            kl_null_sd=null.null_sd,
            kl_excess_kept=null.excess,
            kl_null_draws=null.iid_draws,
        )
        if self._softmax():
            cov = gaussian_from_moments(m.mean, m.cov, m.n * m.chains, jitter=gf.jitter).cov
            out["kl_output_columns"] = kl_output_columns(flat, gf, cov=cov)
        n_eff = m.n_eff
        deb = debiased_kl_moments(
            m.chain_mean,
            m.chain_var,
            m.n,
            m.group_mean,
            m.group_cov,
            m.group_sizes,
            jitter=gf.jitter,
            blocks=flat.blocks,
            calibrate=True,
            seed=seed_for(self.ctx.seed, Stream.KL_CALIBRATION),
        )
        counts = np.asarray(m.group_sizes, dtype=float) * m.n
        m2s = np.asarray(m.group_cov, dtype=float) * (counts - 1)[:, None, None]
        out.update(
            kl_source="moments",
            ess_mean_n=n_eff if np.isfinite(n_eff) else None,
            _debiased=deb,
            _w2=debiased_w2_groups(counts, m.group_mean, m2s, jitter=gf.jitter),
        )
        return out
