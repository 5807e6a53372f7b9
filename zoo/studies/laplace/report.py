"""Report section of the Laplace study: what its columns mean, a table and a figure.

Built from results.csv alone: ``laplace_kl`` (mean and 95% t-interval over seeds) per method
and x value, drawn beside the sampled ``kl_diag_full`` (and its excess over the shift null)
when the run has sampler cells. When the sweep has one more numeric axis besides x and the
seed (a depth x width grid), the KL and the KL per parameter as grid tables, both ways in
one figure, and the elasticities of each in both axes (:func:`reports.laplace.axis_effects`):
which axis moves the KL.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from reports.document import Section, section
from reports.figures.kl_null import kl_null_figure
from reports.figures.laplace import grid_figure
from reports.laplace import axis_effects
from reports.study_table import Column, StudyTable, curves, present, render, render_grid
from reports.tables import summarize
from zoo.spec.sections.studies import LaplaceStudy
from zoo.studies.base import ArtifactReader

__all__ = ["laplace_sections", "laplace_table"]


#: What the Laplace columns are; formatted with the curvature and refinement used.
LAPLACE_TEXT = (
    "laplace_kl is KL(q_diag || q_full) for the Laplace approximation q_full = N(m, H^-1) "
    "at a mode m of the posterior over all weights and biases, H the Hessian "
    "(curvature: hessian) or the generalized Gauss-Newton matrix J^T Lambda J plus the "
    "prior precision (curvature: ggn) of the negative log posterior, and q_diag its "
    "KL-closest diagonal Gaussian, whose precisions are H_ii: laplace_kl = "
    "(sum_i log H_ii - log det H) / 2, exact, with no sampling error. laplace_w2 is the "
    "closed-form 2-Wasserstein distance between them. laplace_kl_layerK and "
    "laplace_w2_layerK use layer K's block of H (that layer with the others held at the "
    "mode); laplace_kl_marginal_layerK uses its block of H^-1 (its marginal, as the "
    "sampled kl_diag_full.layerK does). m is the method's point (MAP estimate, or the "
    "svi posterior mean) refined by full-batch L-BFGS; laplace_grad_norm is the "
    "gradient norm left there, laplace_min_eig the smallest eigenvalue of H (the KL is "
    "NaN where H is not positive definite). Here: {how}."
)
#: The Laplace KL against the sampled one.
DIFFERENT_TEXT = (
    "The Laplace KL and the sampled KL measure different Gaussians: the Laplace one is "
    "the local curvature at one mode, the sampled one the Gaussian fitted to draws that "
    "may spread over a wider, non-Gaussian region; the sampled one also carries a "
    "sampling bias (see its shift null)."
)
#: The spread over refinements.
REFINE_TEXT = (
    "The last column: each cell's KL was also taken at the modes refined from jittered "
    "copies of its point (the study's refinements), and its standard deviation over them, "
    "relative to their mean (laplace_kl_refine_rel_sd, in percent), is the part of the KL "
    "that is the mode's rather than the network's. A network with an exact mode (smooth "
    "units) gives rounding; ReLU networks have none. Differences between rows smaller than "
    "a few of these are not evidence."
)
#: What a table entry and an error bar are: the report's one rule (reports.study_table).
ENTRIES_TEXT = (
    "Each entry is the mean over seeds ± the half-width of its 95% Student-t interval "
    "([k/n]: a mean over only k of the row's n cells; a sampled cell graded failed is left "
    "out and counted in the grade column), and so are the figure's error bars."
)
#: How to read the grid tables; formatted with the two axes.
GRID_TEXT = (
    "The grid tables give the Laplace KL (and the KL per parameter, laplace_kl / D) with "
    "{x} down and {other} across: read a column for {x} at fixed {other}, a row for "
    "{other} at fixed {x}. The figure draws both (log scale)."
)
#: An elasticity sentence; formatted per method and quantity.
ELASTICITY_TEXT = (
    "Which axis moves the KL ({method}): the least-squares fit of log {what} on log {x} and "
    "log {other} over the {n} cells gives elasticities {bx} in {x} and {bo} in {other} "
    "(R^2 {r2:.2f}): doubling {x} at fixed {other} multiplies {what} by about {fx:.2g}, "
    "doubling {other} at fixed {x} by about {fo:.2g}."
)
SAMPLED_TEXT = (
    "The last table is the sampled KL and its excess over the shift null on the cells that "
    "have draws."
)


def laplace_table(rows: list[str]) -> StudyTable:
    """The Laplace KL and W2 (and their spread over refinements) per method and x."""
    rel = Column(
        "refine_pct",
        "KL sd over refinements (% of the KL)",
        values=lambda r: 100 * r.get("laplace_kl_refine_rel_sd", np.nan),
    )
    return StudyTable(
        rows, (Column("laplace_kl", "laplace_kl"), Column("laplace_w2", "laplace_w2"), rel)
    )


def laplace_sections(results, run: ArtifactReader, spec: Any) -> list[Section]:
    """The Laplace section of a run, or [] when no cell has ``laplace_kl``."""
    if "laplace_kl" not in results.columns:
        return []
    studies = [s for s in spec.studies if isinstance(s, LaplaceStudy)]
    how = ", ".join(
        sorted({f"{s.curvature} with {s.refine_steps} L-BFGS refinement steps" for s in studies})
    )
    ok = results[results["status"] == "ok"]
    rows = ok[ok["laplace_kl"].notna()]
    paras = [LAPLACE_TEXT.format(how=how), DIFFERENT_TEXT]
    x = spec.report.x if spec.report.x in rows.columns else "seed"  # unswept x: per seed
    grid = [
        a
        for a in spec.sweep
        if a not in (x, "seed") and a in rows.columns and rows[a].nunique() > 1
    ]
    tables, figs = [], []
    if x in rows.columns and "method" in rows.columns:
        table = render(rows, laplace_table(["method", *grid, x]))
        tables += [table] if table is not None else []
        if present(rows, "laplace_kl_refine_rel_sd"):
            paras.append(REFINE_TEXT)
        paras.append(ENTRIES_TEXT)
        if pd.api.types.is_numeric_dtype(rows[x]):
            figs = [("laplace_kl", kl_null_figure(_kl_curves(rows, ok, x, grid), xlabel=x))]
        if len(grid) == 1 and all(pd.api.types.is_numeric_dtype(rows[a]) for a in (x, *grid)):
            paras_grid, extra, grid_figs = _grid(rows, ok, x, grid[0])
            paras += paras_grid
            tables += extra
            figs = grid_figs + figs
    return [section("The price of mean field at a mode (Laplace)", paras, tables, figs)]


def _kl_curves(rows: pd.DataFrame, ok: pd.DataFrame, x: str, grid: list[str]) -> dict:
    """The figure's lines: the Laplace KL, and the sampled KL and its excess where drawn."""
    by = ["method", *grid]
    lines = curves(rows, x, [("laplace_kl", "Laplace")], by)
    sampled = ok[ok["kl_diag_full"].notna()] if "kl_diag_full" in ok.columns else ok[:0]
    named = (("kl_diag_full", "sampled"), ("kl_excess", "sampled excess"))
    return lines | curves(sampled, x, named, by)


def _grid(rows: pd.DataFrame, ok: pd.DataFrame, x: str, other: str):
    """Paragraphs, tables and the figure of a grid of networks (x by one other axis)."""
    paras, tables, figs = [], [], []
    for method, part in rows.groupby("method"):
        part = part.assign(laplace_kl_per_param=part["laplace_kl"] / part["laplace_dim"])
        for col, what in (("laplace_kl", "laplace_kl"), ("laplace_kl_per_param", "laplace_kl / D")):
            table = render_grid(part, x, other, Column(col, f"{what} ({method})"))
            tables += [table] if table is not None else []
        lines = summarize(part, ["laplace_kl"], "seed", [x, other])
        mean = lines.pivot(index=x, columns=other, values="laplace_kl_mean")
        half = lines.pivot(index=x, columns=other, values="laplace_kl_ci95").fillna(0)
        fig = grid_figure(
            mean.to_numpy(),
            half.to_numpy(),
            list(mean.index),
            list(mean.columns),
            row_label=x,
            col_label=other,
            ylabel=f"laplace_kl ({method}), nats",
        )
        figs.append((f"laplace_kl_grid_{method}", fig))
        paras += [_elasticity(part, col, what, x, other, method) for col, what in _PER]
    paras.append(GRID_TEXT.format(x=x, other=other))
    if present(ok, "kl_diag_full"):
        sampled = StudyTable(
            ("method", x, other),
            (
                Column("kl_diag_full", "kl_diag_full", "weights"),
                Column("kl_excess", "kl_excess", "weights"),
            ),
        )
        table = render(ok, sampled)
        tables += [table] if table is not None else []
        paras.append(SAMPLED_TEXT)
    return paras, tables, figs


#: The two quantities whose elasticities the grid reports.
_PER = (("laplace_kl", "laplace_kl"), ("laplace_kl_per_param", "KL / D"))


def _elasticity(part: pd.DataFrame, col: str, what: str, x: str, other: str, method) -> str:
    """Which axis moves ``col``: its elasticities in ``x`` and ``other``
    (:func:`reports.laplace.axis_effects`)."""
    eff = axis_effects(part[col], {x: part[x], other: part[other]})
    b = {a: f"{eff.slopes[a]:.2f} ± {eff.se[a]:.2f}" for a in (x, other)}
    return ELASTICITY_TEXT.format(
        method=method,
        what=what,
        x=x,
        other=other,
        n=eff.n,
        bx=b[x],
        bo=b[other],
        r2=eff.r2,
        fx=2 ** eff.slopes[x],
        fo=2 ** eff.slopes[other],
    )
