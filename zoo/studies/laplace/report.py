"""Report section of the Laplace study: what its columns mean, a table and a figure.

Built from results.csv alone: ``laplace_kl`` (mean and standard error over seeds) per method
and x value, drawn beside the sampled ``kl_diag_full`` (and its excess over the shift null)
when the run has sampler cells. When the sweep has one more numeric axis besides x and the
seed (a depth x width grid), the KL and the KL per parameter as grid tables, both ways in
one figure, and the elasticities of each in both axes (:func:`reports.laplace.axis_effects`):
which axis moves the KL.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.document import Section, section
from reports.figures.kl_null import kl_null_figure
from reports.figures.laplace import grid_figure
from reports.laplace import axis_effects
from zoo.spec.sections.studies import LaplaceStudy
from zoo.studies.base import ArtifactReader

__all__ = ["laplace_sections"]


def _mean_se(part: pd.DataFrame, x: str, col: str):
    g = part.groupby(x)[col]
    return g.mean(), (g.std(ddof=1) / g.count() ** 0.5).fillna(0)


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
    paras = [
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
        f"NaN where H is not positive definite). Here: {how}.",
        "The Laplace KL and the sampled KL measure different Gaussians: the Laplace one is "
        "the local curvature at one mode, the sampled one the Gaussian fitted to draws that "
        "may spread over a wider, non-Gaussian region; the sampled one also carries a "
        "sampling bias (see its shift null).",
    ]
    x = spec.report.x if spec.report.x in rows.columns else "seed"  # unswept x: per seed
    table, figs = None, []
    grid = [
        a
        for a in spec.sweep
        if a not in (x, "seed") and a in rows.columns and rows[a].nunique() > 1
    ]
    extra: list = []
    if x in rows.columns and "method" in rows.columns:
        keys = ["method", *grid, x]
        spread = "laplace_kl_refine_rel_sd" in rows.columns
        header = [*keys, "laplace_kl", "laplace_w2", "cells"]
        header += ["KL sd over refinements (of the KL, median; max)"] if spread else []
        body = []
        for key, part in rows.groupby(keys, sort=True):
            kl, kl_se = _one(part["laplace_kl"])
            w2, w2_se = _one(part["laplace_w2"])
            row = [*map(str, key), f"{kl:.4g} ± {kl_se:.2g}", f"{w2:.4g} ± {w2_se:.2g}"]
            row.append(str(len(part)))
            if spread:
                rel = part["laplace_kl_refine_rel_sd"].dropna()
                row.append(f"{rel.median():.2%}; {rel.max():.2%}" if len(rel) else "-")
            body.append(row)
        if spread:
            paras.append(
                "The last column: each cell's KL was also taken at the modes refined from "
                "jittered copies of its point (the study's refinements), and its standard "
                "deviation over them, relative to their mean, is the part of the KL that is "
                "the mode's rather than the network's (laplace_kl_refine_rel_sd). A network "
                "with an exact mode (smooth units) gives rounding; ReLU networks have none. "
                "Differences between rows smaller than a few of these are not evidence."
            )
        table = (header, body)
        if pd.api.types.is_numeric_dtype(rows[x]):
            curves = {}
            by = ["method", *grid]
            for key, part in rows.groupby(by):
                m, se = _mean_se(part, x, "laplace_kl")
                curves[f"Laplace ({_label(by, key)})"] = (
                    m.index.to_numpy(),
                    m.to_numpy(),
                    se.to_numpy(),
                )
            sampled = ok[ok["kl_diag_full"].notna()] if "kl_diag_full" in ok.columns else ok[:0]
            for key, part in sampled.groupby(by):
                for col, name in (("kl_diag_full", "sampled"), ("kl_excess", "sampled excess")):
                    if col in part.columns and part[col].notna().any():
                        m, se = _mean_se(part, x, col)
                        curves[f"{name} ({_label(by, key)})"] = (
                            m.index.to_numpy(),
                            m.to_numpy(),
                            se.to_numpy(),
                        )
            figs = [("laplace_kl", kl_null_figure(curves, xlabel=x))]
        if len(grid) == 1 and all(pd.api.types.is_numeric_dtype(rows[a]) for a in (x, *grid)):
            paras_grid, extra, grid_figs = _grid(rows, ok, x, grid[0])
            paras += paras_grid
            figs = grid_figs + figs
    tables = ([table] if table is not None else []) + list(extra)
    return [section("The price of mean field at a mode (Laplace)", paras, tables, figs)]


def _label(by: list[str], key) -> str:
    """A groupby key over columns ``by`` (method first) as a legend label."""
    key = key if isinstance(key, tuple) else (key,)
    return ", ".join([str(key[0]), *(f"{a} {v}" for a, v in zip(by[1:], key[1:], strict=True))])


def _one(v: pd.Series) -> tuple[float, float]:
    v = v.dropna()
    se = v.std(ddof=1) / len(v) ** 0.5 if len(v) > 1 else 0.0
    return float(v.mean()), float(se)


def _grid(rows: pd.DataFrame, ok: pd.DataFrame, x: str, other: str):
    """Paragraphs, tables and the figure of a grid of networks (x by one other axis)."""
    paras, tables, figs = [], [], []
    for method, part in rows.groupby("method"):
        part = part.assign(laplace_kl_per_param=part["laplace_kl"] / part["laplace_dim"])
        xs, os = sorted(part[x].unique()), sorted(part[other].unique())
        g = part.groupby([x, other])
        for col, what in (("laplace_kl", "laplace_kl"), ("laplace_kl_per_param", "laplace_kl / D")):
            mean = g[col].mean().unstack(other).reindex(index=xs, columns=os)
            se = (g[col].std(ddof=1) / g[col].count() ** 0.5).fillna(0).unstack(other)
            se = se.reindex(index=xs, columns=os)
            head = [f"{what} ({method}), {x} down, {other} across", *map(str, os)]
            body = [
                [
                    str(v),
                    *(
                        f"{mean.at[v, o]:.4g} ± {se.at[v, o]:.2g}"
                        if mean.at[v, o] == mean.at[v, o]
                        else "-"
                        for o in os
                    ),
                ]
                for v in xs
            ]
            tables.append((head, body))
            if col == "laplace_kl":
                fig = grid_figure(
                    mean.to_numpy(),
                    se.to_numpy(),
                    xs,
                    os,
                    row_label=x,
                    col_label=other,
                    ylabel=f"laplace_kl ({method}), nats",
                )
                figs.append((f"laplace_kl_grid_{method}", fig))
        for col, what in (("laplace_kl", "laplace_kl"), ("laplace_kl_per_param", "KL / D")):
            eff = axis_effects(part[col], {x: part[x], other: part[other]})
            b = {a: f"{eff.slopes[a]:.2f} ± {eff.se[a]:.2f}" for a in (x, other)}
            paras.append(
                f"Which axis moves the KL ({method}): the least-squares fit of log {what} on "
                f"log {x} and log {other} over the {eff.n} cells gives elasticities {b[x]} "
                f"in {x} and {b[other]} in {other} (R^2 {eff.r2:.2f}): doubling {x} at fixed "
                f"{other} multiplies {what} by about {2 ** eff.slopes[x]:.2g}, doubling "
                f"{other} at fixed {x} by about {2 ** eff.slopes[other]:.2g}."
            )
    paras.append(
        f"The grid tables give the Laplace KL (and the KL per parameter, laplace_kl / D) with "
        f"{x} down and {other} across: read a column for {x} at fixed {other}, a row for "
        f"{other} at fixed {x}. The figure draws both (log scale)."
    )
    if "kl_diag_full" in ok.columns and ok["kl_diag_full"].notna().any():
        sampled = ok[ok["kl_diag_full"].notna()]
        head = ["method", x, other, "kl_diag_full", "kl_excess", "cells"]
        body = []
        for key, part in sampled.groupby(["method", x, other], sort=True):
            kl, kl_se = _one(part["kl_diag_full"])
            ex, ex_se = _one(part["kl_excess"]) if "kl_excess" in part else (float("nan"), 0.0)
            body.append(
                [
                    *map(str, key),
                    f"{kl:.4g} ± {kl_se:.2g}",
                    f"{ex:.4g} ± {ex_se:.2g}",
                    str(len(part)),
                ]
            )
        tables.append((head, body))
        paras.append(
            "The last table is the sampled KL and its excess over the shift null "
            "on the cells that have draws."
        )
    return paras, tables, figs
