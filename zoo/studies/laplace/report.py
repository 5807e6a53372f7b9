"""Report section of the Laplace study: what its columns mean, a table and a figure.

Built from results.csv alone: ``laplace_kl`` (mean and standard error over seeds) per method
and x value, drawn beside the sampled ``kl_diag_full`` (and its excess over the shift null)
when the run has sampler cells.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.kl_null import kl_null_figure
from reports.render import Section
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
    how = ", ".join(sorted({f"{s.curvature} with {s.refine_steps} L-BFGS refinement steps"
                            for s in studies}))  # fmt: skip
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
    x = spec.report.x
    table, figs = None, []
    if x in rows.columns and "method" in rows.columns:
        header = ["method", x, "laplace_kl", "laplace_w2", "cells"]
        body = []
        for method, part in rows.groupby("method"):
            kl, kl_se = _mean_se(part, x, "laplace_kl")
            w2, w2_se = _mean_se(part, x, "laplace_w2")
            n = part.groupby(x).size()
            body += [[str(method), str(v), f"{kl[v]:.4g} ± {kl_se[v]:.2g}",
                      f"{w2[v]:.4g} ± {w2_se[v]:.2g}", str(n[v])] for v in kl.index]  # fmt: skip
        table = (header, body)
        if pd.api.types.is_numeric_dtype(rows[x]):
            curves = {}
            for method, part in rows.groupby("method"):
                m, se = _mean_se(part, x, "laplace_kl")
                curves[f"Laplace ({method})"] = (m.index.to_numpy(), m.to_numpy(), se.to_numpy())
            sampled = ok[ok["kl_diag_full"].notna()] if "kl_diag_full" in ok.columns else ok[:0]
            for method, part in sampled.groupby("method"):
                for col, name in (("kl_diag_full", "sampled"), ("kl_excess", "sampled excess")):
                    if col in part.columns and part[col].notna().any():
                        m, se = _mean_se(part, x, col)
                        curves[f"{name} ({method})"] = (m.index.to_numpy(), m.to_numpy(),
                                                        se.to_numpy())  # fmt: skip
            figs = [("laplace_kl", kl_null_figure(curves, xlabel=x))]
    return [Section("The price of mean field at a mode (Laplace)", paras, table, figs)]
