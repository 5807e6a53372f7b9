"""Report section of the price-of-mean-field study: what the KL and Wasserstein columns mean.

Built from results.csv alone: the explanation of ``kl_diag_full``, the Wasserstein
columns, the shift null and the stopping rule, with a figure of the KL, its null and the
excess against the report's x axis (mean and standard error over seeds).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.kl_null import kl_null_figure
from reports.render import Section
from zoo.spec.sections.studies import PriceOfMeanFieldStudy
from zoo.studies.base import ArtifactReader

__all__ = ["price_of_mf_sections"]


def price_of_mf_sections(results, run: ArtifactReader, spec: Any) -> list[Section]:
    """The price-of-mean-field section of a run, or [] when no cell has the KL columns."""
    if "kl_diag_full" not in results.columns:
        return []
    studies = [s for s in spec.studies if isinstance(s, PriceOfMeanFieldStudy)]
    fits = {(s.gaussian_fit.cov, s.gaussian_fit.jitter) for s in studies}
    desc = ", ".join(f"{c} covariance with jitter {j:g}" for c, j in sorted(fits))
    ok = results[results["status"] == "ok"]
    few = ok[(ok["n_draws"] <= ok["dim"])] if {"n_draws", "dim"} <= set(ok.columns) else ok[:0]
    paras = [
        "kl_diag_full is KL(q_diag || q_full), where q_full is the Gaussian fit to the sampler's "
        "draws of all weights and biases and q_diag its KL-closest diagonal Gaussian "
        "(variances 1 / diag(S^-1)); kl_diag_full.layerK is the same within layer K. "
        "w2_diag_full is the closed-form 2-Wasserstein distance between q_diag and q_full; "
        "w_error is the blog's Wasserstein error: the empirical W2 between draws of q_diag "
        "and the sampler's draws minus the same for q_full (exact assignment). In tens of "
        "dimensions it is biased below zero: q_diag has less total variance than q_full, and "
        "less spread points are easier to match, so it comes out negative even on exact "
        "Gaussian draws where q_diag is the wrong one. w_excess removes each Gaussian's own "
        "sampling term, W2^2(q, sampler) - W2^2(q, q') / 2 with q' a second set of draws, and "
        "takes the difference, diag minus full (squared units; reports/gaussian.py). Lower "
        "means the mean-field assumption costs less (Farquhar, Smith & Gal 2020).",
        f"q_full estimate: {desc}.",
    ]
    if len(few):
        paras.append(
            f"{len(few)} cells have no more draws than parameters: their sample covariance is "
            "singular, and the KL depends on the estimator and the jitter (Ledoit-Wolf "
            "shrinks towards a diagonal and underestimates it; the empirical covariance "
            "with jitter overestimates it). Compare depths at a fixed parameter budget, "
            "draw count and estimator, not the absolute values."
        )
    figs = []
    if "kl_excess" in results.columns:
        paras.append(
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
            "the covariance estimate (reports.gaussian.kl_sampling_bias)."
        )
        targets = sorted({s.kl_target_draws for s in studies if s.kl_target_draws is not None})
        if targets:
            paras.append(
                f"The sampler drew until kl_null_draws reached {', '.join(map(str, targets))} "
                "(kl_target_draws; draws_per_chain is where each cell stopped): a chain that "
                "mixes slowly draws longer, so every cell's KL carries about the same sampling "
                "bias, the closed form at that n (larger for larger D), instead of a bias "
                "that grows with the depth's autocorrelation. With a fixed number of draws the "
                "depths that mix worst would show the largest KL for that reason alone."
            )
        if "kl_output_columns" in results.columns:
            paras.append(
                "kl_output_columns is the KL of the output layer's columns, each block on its "
                "own: the C weights from one hidden unit to the C outputs (and the C biases). A "
                "softmax is unchanged when the same constant is added to every logit, so these "
                "weights are correlated at any depth, and there are as many blocks as units in "
                "the last hidden layer: at a fixed parameter budget that layer narrows with "
                "depth, and this part of the KL falls with it for a reason unrelated to the "
                "paper's argument. The KL is not additive over blocks: compare the trends, "
                "do not subtract."
            )
        figs = [("kl_null", _kl_null_figure(ok, spec))]
    if "agreement_vi" in results.columns:
        paras.append(
            "agreement_vi and tv_vi compare the predictive distributions of the variational "
            "method the chains started from and of the sampler on the test set: the "
            "fraction of points with the same predicted class, and the mean total variation "
            "distance."
        )
    return [Section("The price of mean field", paras, None, [f for f in figs if f[1] is not None])]


def _kl_null_figure(ok, spec: Any):
    """KL, shift null and excess against the report's x axis (mean and s.e. over seeds).

    A categorical x (``report.x: method``, an activation) gets one evenly spaced tick per
    value; an x that is not a column of the results falls back to ``method``.
    """
    x = spec.report.x if spec.report.x in ok.columns else "method"
    rows = ok[ok["kl_excess"].notna()]
    if rows.empty:
        return None
    numeric = pd.api.types.is_numeric_dtype(rows[x]) and not pd.api.types.is_bool_dtype(rows[x])
    cats = list(dict.fromkeys(map(str, rows[x]))) if not numeric else []
    groups = [c for c in rows.columns
              if (c.startswith("model.activation") or c == "method") and c != x]  # fmt: skip
    curves = {}
    for key, part in rows.groupby(groups) if groups else [((), rows)]:
        tag = ", ".join(map(str, key if isinstance(key, tuple) else (key,)))
        for col, name in (("kl_diag_full", "KL"), ("kl_null", "shift null"),
                          ("kl_excess", "excess"), ("kl_output_columns", "output columns")):  # fmt: skip
            if col not in part.columns or part[col].isna().all():
                continue
            g = part.groupby(x if numeric else part[x].map(str), sort=numeric)[col]
            se = g.std(ddof=1) / g.count() ** 0.5
            label = f"{name} ({tag})" if tag else name
            where = (
                g.mean().index.to_numpy() if numeric else [cats.index(c) for c in g.mean().index]
            )
            curves[label] = (where, g.mean().to_numpy(), se.fillna(0).to_numpy())
    if not curves:
        return None
    counts = sorted({int(c) for c in rows.groupby([*groups, x])["kl_excess"].count()})
    seeds = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}"
    title = "KL(q_diag || q_full), its shift null and the excess\n" + (
        f"mean ± 1 s.e. over {seeds} seeds" if counts[-1] > 1 else "one seed: no error bars"
    )
    fig = kl_null_figure(curves, xlabel=x, title=title)
    if not numeric:
        fig.axes[0].set_xticks(range(len(cats)), labels=cats)
    return fig
