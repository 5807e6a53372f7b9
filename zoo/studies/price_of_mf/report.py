"""Report section of the price-of-mean-field study: what the KL and Wasserstein columns mean.

Built from results.csv alone: the explanation of ``kl_diag_full``, the Wasserstein
columns, the shift null and the stopping rule; a table of the KL beside its references,
led where the run recorded it by the headline ``kl_aligned_debiased`` (the KL of the draws
with their hidden units aligned to a pivot, less its sampling bias and its alignment null,
``kl_alignment_null`` in the next column; the KL of the draws as sampled stays a column),
then ``kl_debiased`` (the raw KL less its exact sampling bias at the KL's own effective n,
with its chain-group error) and the shift null, an independent cross-check; and a table of
the Wasserstein measures (the aligned draws' first where recorded); a figure of the KL, its
references and the excess against the report's x axis; and a figure led by
the closed-form W2(q_diag, q_full) with its sampling floor (``w2_null``, when recorded),
the empirical Wasserstein error of samples beside it as the secondary measure. Every
table entry and error bar is a mean over seeds and the half-width of its 95% Student-t
interval, cells graded failed left out and counted (:mod:`reports.study_table`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.document import Section, section
from reports.figures.curves import panels_figure
from reports.figures.kl_null import kl_null_figure
from reports.study_table import Column, StudyTable, curves, render
from zoo.spec.sections.studies import PriceOfMeanFieldStudy
from zoo.studies.base import ArtifactReader

__all__ = ["W2_FIGURE", "price_of_mf_sections"]

#: File stem of the Wasserstein figure (closed-form W2 first, empirical error second).
W2_FIGURE = "w2_closed_form"
#: KL columns of the section's first table, with their headers, in order.
_KL_COLUMNS = (
    ("kl_aligned_debiased", "aligned KL less its bias and alignment null (kl_aligned_debiased)"),
    ("kl_aligned_debiased_se", "its chain-group s.e. (kl_aligned_debiased_se)"),
    ("kl_alignment_null", "alignment null (kl_alignment_null)"),
    ("kl_diag_full", "KL(q_diag ‖ q_full) of the draws as sampled (kl_diag_full)"),
    ("kl_debiased", "debiased KL (kl_debiased)"),
    ("kl_debiased_se", "its chain-group s.e. (kl_debiased_se)"),
    ("kl_bias_ess", "exact bias at the KL's n (kl_bias_ess)"),
    ("kl_ess_n", "the KL's effective n (kl_ess_n)"),
    ("kl_null", "shift null (kl_null)"),
    ("kl_excess", "excess over the shift null (kl_excess)"),
    ("kl_null_draws", "kl_null_draws (n that makes the closed form equal kl_null)"),
    ("kl_aligned", "hidden units aligned to a pivot, plug-in (kl_aligned)"),
    ("kl_aligned_bias", "its exact bias at the aligned draws' n (kl_aligned_bias)"),
    ("kl_relabelled", "hidden units randomly relabelled (kl_relabelled)"),
)
#: Columns that are a within-cell standard error: a row shows the error of the seeds' mean,
#: sqrt(sum se^2) / k, not a mean and its spread.
_SE_COLUMNS = frozenset(
    {"kl_debiased_se", "w2sq_debiased_se", "kl_aligned_debiased_se", "w2sq_aligned_debiased_se"}
)
#: Wasserstein columns of the second table: the closed form leads, the samples' error follows.
_W_COLUMNS = (
    ("w2_aligned", "W2(q_diag, q_full) of the aligned draws, closed form (w2_aligned)"),
    ("w2sq_aligned_debiased", "its square less its sampling bias (w2sq_aligned_debiased)"),
    ("w2sq_aligned_debiased_se", "its jackknife s.e. (w2sq_aligned_debiased_se)"),
    ("w2_diag_full", "W2(q_diag, q_full), closed form"),
    ("w2_null", "its sampling floor: W2 of the shift-null draws (w2_null)"),
    ("w2sq_debiased", "W2² less its sampling bias (chain-group jackknife, squared units)"),
    ("w2sq_debiased_se", "its jackknife s.e. (squared units)"),
    ("w_error", "empirical W error of samples (assignment problem, biased)"),
    ("w_excess", "empirical W excess, self-terms removed (squared units)"),
)


#: What kl_diag_full is (the section's first paragraph).
KL_TEXT = (
    "kl_diag_full is KL(q_diag || q_full), where q_full is the Gaussian fit to the sampler's "
    "draws of all weights and biases and q_diag its KL-closest diagonal Gaussian "
    "(variances 1 / diag(S^-1)); kl_diag_full.layerK is the same within layer K. Lower "
    "means the mean-field assumption costs less (Farquhar, Smith & Gal 2020)."
)
#: The secondary, empirical Wasserstein measure.
W_ERROR_TEXT = (
    "Secondary: w_error is the empirical W error of samples, an assignment-problem "
    "estimate with its own bias (the 'Wasserstein error' of Farquhar, Smith & Gal's blog "
    "post 'Is Mean-field Good Enough for Variational Inference in Bayesian Neural "
    "Networks?', OATML, 2020): the empirical W2 between "
    "draws of q_diag and the sampler's draws minus the same for q_full (exact "
    "assignment). In tens of dimensions it is biased below zero: q_diag has less total "
    "variance than q_full, and less spread points are easier to match, so it comes out "
    "negative even on exact Gaussian draws where q_diag is the wrong one. w_excess "
    "removes each Gaussian's own sampling term, W2^2(q, sampler) - W2^2(q, q') / 2 with "
    "q' a second set of draws, and takes the difference, diag minus full (squared units; "
    "reports/gaussian.py)."
)
#: Cells with no more draws than parameters; formatted with their number.
FEW_DRAWS_TEXT = (
    "{n} cells have no more draws than parameters: their sample covariance is "
    "singular, and the KL depends on the estimator and the jitter (Ledoit-Wolf "
    "shrinks towards a diagonal and underestimates it; the empirical covariance "
    "with jitter overestimates it). Compare depths at a fixed parameter budget, "
    "draw count and estimator, not the absolute values."
)
#: The shift null and kl_null_draws.
SHIFT_NULL_TEXT = (
    "kl_null is the KL that the same chains give after every parameter's series is "
    "rotated within its chain by its own random offset (mean of 8 rotations; "
    "kl_null_sd their spread): each parameter keeps its marginal and its "
    "autocorrelation, the alignment between parameters is gone, so kl_null is what "
    "finite, autocorrelated draws of independent parameters would show. kl_excess = "
    "kl_diag_full - kl_null is the part the correlations between parameters explain. "
    "A chain that mixes poorly has a high kl_null, and then a high kl_diag_full says "
    "little about the posterior (reports/kl_null.py). For independent Gaussian draws "
    "the estimator's bias is known in closed form, (1/2)(sum_k psi((n-k)/2) - D "
    "psi((n-D)/2)), about D^2 / 4n, whatever the covariance; kl_null_draws is the n "
    "for which it equals kl_null: how many independent draws the chains are worth to "
    "the covariance estimate (reports.gaussian.kl_sampling_bias). The closed form at "
    "kl_null_draws equals kl_null by that definition: an identity, not a check of "
    "the null."
)
#: The debiased KL, the reference to read the KL against.
DEBIASED_TEXT = (
    "The reference to read the KL against is kl_debiased = kl_diag_full - "
    "kl_bias_ess: the closed form at kl_ess_n, the KL's own effective n. The bias "
    "comes from the noise of the sample covariance, so its n is measured there: the "
    "chains split into up to 8 contiguous groups, and the spread of the groups' "
    "covariances, weighed as the KL's second-order expansion weighs it, gives the "
    "bias and so the n (reports/kl_reference.py). It is not the ESS of the "
    "weights' means: for positively autocorrelated chains (NUTS-like) that ESS is "
    "about half the covariance's and over-states the bias about 2x; for antithetic "
    "or ChEES chains it under-states it. For Gaussian draws E[KL] = KL + b(n, D) "
    "exactly, so kl_debiased is unbiased where the n is right (the ground truth, "
    "specs/gaussian_ground_truth.yaml, recovers a known KL with it) and a negative "
    "value is noise or an n that is too small, never a real KL below 0. "
    "kl_debiased_se is its jackknife standard error over up to 8 contiguous "
    "groups of chains with the error of the bias reference itself in quadrature "
    "(in a row over seeds: the error of the seeds' mean from these within-cell "
    "errors, sqrt(sum se^2) / k); it is conservative, about 1.5x, where the KL is "
    "near 0. On NUTS draws of a diagonal Gaussian the reference is 4-7% short of "
    "the bias (its higher-order terms are those of independent draws), a "
    "systematic error the s.e. does not cover. The shift null is an independent cross-check of "
    "the same bias; on NUTS draws of a known Gaussian it falls short of the bias "
    "(rotating coordinates one by one drops the dependence that shared "
    "trajectories put between them), so kl_excess over-states the KL there."
)
#: The stopping rule; formatted with the target draws.
TARGET_TEXT = (
    "The sampler drew until kl_null_draws reached {targets} "
    "(kl_target_draws; draws_per_chain is where each cell stopped): a chain that "
    "mixes slowly draws longer, so every cell's KL carries about the same sampling "
    "bias, the closed form at that n (larger for larger D), instead of a bias "
    "that grows with the depth's autocorrelation. With a fixed number of draws the "
    "depths that mix worst would show the largest KL for that reason alone."
)
#: The output layer's column blocks.
OUTPUT_COLUMNS_TEXT = (
    "kl_output_columns is the KL of the output layer's columns, each block on its "
    "own: the C weights from one hidden unit to the C outputs (and the C biases). A "
    "softmax is unchanged when the same constant is added to every logit, so these "
    "weights are correlated at any depth, and there are as many blocks as units in "
    "the last hidden layer: at a fixed parameter budget that layer narrows with "
    "depth, and this part of the KL falls with it for a reason unrelated to the "
    "paper's argument. The KL is not additive over blocks: compare the trends, "
    "do not subtract."
)
#: The predictive agreement of VI and sampler.
AGREEMENT_TEXT = (
    "agreement_vi and tv_vi compare the predictive distributions of the variational "
    "method the chains started from and of the sampler on the test set: the "
    "fraction of points with the same predicted class, and the mean total variation "
    "distance."
)
#: What a table entry is: the report's one rule (reports.study_table).
ENTRIES_TEXT = (
    "In the tables each entry is the mean over seeds ± the half-width of its 95% Student-t "
    "interval ([k/n]: a mean over only k of the row's n cells; a cell graded failed is left "
    "out and counted in the grade column); a weight-space number of a row graded below "
    "silver is marked, as it is no finding."
)


def price_of_mf_sections(results, run: ArtifactReader, spec: Any) -> list[Section]:
    """The price-of-mean-field section of a run, or [] when no cell has the KL columns."""
    if "kl_diag_full" not in results.columns:
        return []
    studies = [s for s in spec.studies if isinstance(s, PriceOfMeanFieldStudy)]
    fits = {(s.gaussian_fit.cov, s.gaussian_fit.jitter) for s in studies}
    desc = ", ".join(f"{c} covariance with jitter {j:g}" for c, j in sorted(fits))
    ok = results[results["status"] == "ok"]
    few = ok[(ok["n_draws"] <= ok["dim"])] if {"n_draws", "dim"} <= set(ok.columns) else ok[:0]
    paras = [KL_TEXT, _w2_paragraph(ok), W_ERROR_TEXT, f"q_full estimate: {desc}."]
    if len(few):
        paras.append(FEW_DRAWS_TEXT.format(n=len(few)))
    figs = []
    if _present(ok, "kl_aligned_debiased"):
        paras.append(_ALIGNED)
    if "kl_excess" in results.columns:
        paras.append(SHIFT_NULL_TEXT)
        if _present(ok, "kl_debiased"):
            paras.append(DEBIASED_TEXT)
        targets = sorted({s.kl_target_draws for s in studies if s.kl_target_draws is not None})
        if targets:
            paras.append(TARGET_TEXT.format(targets=", ".join(map(str, targets))))
        if "kl_output_columns" in results.columns:
            paras.append(OUTPUT_COLUMNS_TEXT)
        figs = [("kl_null", _kl_null_figure(ok, spec))]
    tables = _tables(results, spec)
    if "w2_diag_full" in ok.columns:
        figs.append((W2_FIGURE, _w2_figure(ok, spec)))
    if "agreement_vi" in results.columns:
        paras.append(AGREEMENT_TEXT)
    paras += [ENTRIES_TEXT] if tables else []
    return [
        section("The price of mean field", paras, tables, [f for f in figs if f[1] is not None])
    ]


#: What the headline KL is, where the run recorded it.
_ALIGNED = (
    "The headline is kl_aligned_debiased: KL(q_diag || q_full) in raw coordinates with "
    "every draw's hidden units aligned to a pivot (the posterior modulo unit permutations, "
    "Stephens 2000; reports/alignment.py), less its exact sampling bias at the aligned "
    "draws' own effective n (kl_aligned_bias) and less its alignment null "
    "(kl_alignment_null, the column beside it: what the same alignment adds to independent "
    "draws of the same marginals, whose KL is 0). kl_diag_full, the KL of the draws as "
    "sampled, and kl_debiased are kept as columns but are not one number: a sampler that "
    "moves between relabelled copies of a mode changes them with no change of the "
    "posterior (kl_relabelled is the same draws with every draw's units relabelled at "
    "random). The rescaling orbits of ReLU units are not quotiented: mean field in raw "
    "coordinates pays for them, and the grade gates the chains' agreement on them "
    "(orbit_rhat). w2_aligned and w2sq_aligned_debiased are the Wasserstein measures of "
    "the same aligned draws."
)


def _present(ok, col: str) -> bool:
    return col in ok.columns and ok[col].notna().any()


def _w2_paragraph(ok) -> str:
    """The headline Wasserstein measure, with its sampling floor or the lack of one."""
    text = (
        "w2_diag_full is the headline Wasserstein measure: the closed-form 2-Wasserstein "
        "distance W2(q_diag, q_full) between the two Gaussian fits "
        "(reports.wasserstein.w2_gaussian), positive by construction (0 only for a diagonal "
        "q_full) and free of matching noise. Like the KL it has a sampling floor: finite "
        "draws of independent parameters have sample correlations that are not zero, so "
        "w2_diag_full is above 0 even then. "
    )
    if _present(ok, "w2sq_debiased"):
        text += (
            "w2sq_debiased removes that floor from W2 squared, where it adds: a jackknife "
            "over the chain groups (pseudo-values G W2^2 - (G - 1) W2^2 without group g; "
            "Quenouille 1956) with its s.e. w2sq_debiased_se, in squared parameter units "
            "(it can be negative near 0); compare it with w2_diag_full squared. On a known "
            "Gaussian it is within its s.e. where the true W2 is well above its noise and D "
            "is 100 or less, and over-corrects by 3-10% of the bias where the truth is "
            "diagonal or D/n is large (7% at D = 1000, n = 8000; reports/w2_reference.py): "
            "a systematic error its s.e. does not include. "
        )
    if _present(ok, "w2_null"):
        return text + (
            "w2_null is that floor, measured on the chains: the same closed form on the "
            "shift-null copies of the draws (each parameter's series rotated within its "
            "chain, as for kl_null; mean over the rotations). Read w2_diag_full against it: "
            f"both are in the left panel of the figure {W2_FIGURE}."
        )
    return text + (
        "This run measured no floor for it: the same closed form on the shift-null copies "
        "of the draws (each parameter rotated within its chain, as for kl_null; a w2_null "
        "column) would give it, as would the W2 between q_diag and the Gaussian fit to "
        "independent draws of q_diag at the chains' effective sample size. Until then, "
        "w2_diag_full is the population W2 plus a sampling term of unknown size: a small "
        "value, or a small difference between cells, may be floor alone."
    )


def _tables(results, spec: Any) -> list[tuple[list[str], list[list[str]]]]:
    """The KL table (KL, its two references, both excesses) and the Wasserstein table.

    One row per value of the report's x and of the other varying sweep axes, by the
    report's one rule (:mod:`reports.study_table`); a column whose metric the run did not
    record (an older run) is left out.
    """
    ok = results[results["status"] == "ok"]
    x = spec.report.x if spec.report.x in ok.columns else "method"
    keys = [c for c in ["method", *spec.sweep] if c in ok.columns and c not in (x, "seed")]
    keys = [c for c in dict.fromkeys(keys) if c == "method" or ok[c].nunique() > 1]
    out = []
    for columns in (_KL_COLUMNS, _W_COLUMNS):
        cols = [
            Column(c, h, "weights", kind="pooled_se" if c in _SE_COLUMNS else "mean")
            for c, h in columns
        ]
        table = render(results, StudyTable((*keys, x), cols))
        out += [table] if table is not None else []
    return out


def _axis(ok, spec: Any, col: str):
    """(x, rows with ``col``, numeric, categories, line groups) of a figure, or None."""
    x = spec.report.x if spec.report.x in ok.columns else "method"
    rows = ok[ok[col].notna()] if col in ok.columns else ok[:0]
    if rows.empty:
        return None
    numeric = pd.api.types.is_numeric_dtype(rows[x]) and not pd.api.types.is_bool_dtype(rows[x])
    cats = list(dict.fromkeys(map(str, rows[x]))) if not numeric else []
    groups = [
        c for c in rows.columns if (c.startswith("model.activation") or c == "method") and c != x
    ]
    return x, rows, numeric, cats, groups


def _curves(rows, x, numeric, cats, groups, columns) -> dict:
    """``{label: (x positions, mean, 95% t half-width)}`` of each present column per line
    group, by the report's one rule (:func:`reports.study_table.curves`)."""
    if not numeric:  # a categorical x: its categories' positions
        rows = rows.assign(**{x: [cats.index(str(v)) for v in rows[x]]})
    return curves(rows, x, columns, groups)


def _seeds_phrase(rows, groups, x, col: str) -> str:
    counts = sorted({int(c) for c in rows.groupby([*groups, x])[col].count()})
    seeds = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}"
    if counts[-1] <= 1:
        return "one seed: no error bars"
    return f"mean ± 95% t-interval over {seeds} seeds"


def _kl_null_figure(ok, spec: Any):
    """KL, shift null and excess against the report's x axis (mean and 95% t-interval over
    seeds).

    With the debiased KL recorded, the exact bias at the KL's n and the KL less it
    are drawn beside the shift null and the excess over it. A categorical x
    (``report.x: method``, an activation) gets one evenly spaced tick per value; an x that
    is not a column of the results falls back to ``method``.
    """
    found = _axis(ok, spec, "kl_excess")
    if found is None:
        return None
    x, rows, numeric, cats, groups = found
    curves = _curves(
        rows,
        x,
        numeric,
        cats,
        groups,
        (
            ("kl_aligned_debiased", "aligned KL less bias and alignment null"),
            ("kl_alignment_null", "alignment null"),
            ("kl_diag_full", "KL"),
            ("kl_null", "shift null"),
            ("kl_bias_ess", "exact bias at the KL's n (a null)"),
            ("kl_debiased", "debiased KL"),
            ("kl_excess", "excess (kl_excess)"),
            ("kl_output_columns", "output columns"),
        ),
    )
    if not curves:
        return None
    title = "KL(q_diag || q_full), its references and the debiased KL\n" + _seeds_phrase(
        rows, groups, x, "kl_excess"
    )
    fig = kl_null_figure(curves, xlabel=x, title=title)
    if not numeric:
        fig.axes[0].set_xticks(range(len(cats)), labels=cats)
    return fig


def _w2_figure(ok, spec: Any) -> Any:
    """Left (the headline): closed-form W2(q_diag, q_full) and its floor ``w2_null`` when
    recorded; right (secondary): the empirical W error of samples, ``w_error``."""
    found = _axis(ok, spec, "w2_diag_full")
    if found is None:
        return None
    x, rows, numeric, cats, groups = found
    left = _curves(
        rows,
        x,
        numeric,
        cats,
        groups,
        (
            ("w2_diag_full", "W2(q_diag, q_full), closed form"),
            ("w2_null", "sampling floor: shift null"),
        ),
    )
    right = _curves(rows, x, numeric, cats, groups, (("w_error", "empirical W error of samples"),))
    if not left:  # every cell with the closed form graded failed: nothing to draw
        return None
    panels = [
        (
            left,
            "W2(q_diag, q_full) of the Gaussian fits, closed form"
            + ("" if _present(rows, "w2_null") else "\n(no sampling floor measured in this run)"),
            "W2 [parameter units]",
        )
    ]
    if right:
        panels.append(
            (
                right,
                "secondary: empirical W error of samples\n(assignment problem; biased below 0)",
                "W2(q_diag, draws) − W2(q_full, draws)",
            )
        )
    return panels_figure(
        panels,
        xlabel=x,
        categories=None if numeric else list(cats),
        suptitle=_seeds_phrase(rows, groups, x, "w2_diag_full"),
    )
