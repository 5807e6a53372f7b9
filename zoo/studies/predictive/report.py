"""Report section of the predictive study: what its columns mean, a table and a figure.

Built from results.csv alone: per method and x value, the mean (and standard error over
seeds) of the predictive total variation to the samples of q_diag, q_full, q_marg and the
MF-VI posterior, on the test set and out of distribution, and a figure of them against the
report's x axis.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.lines import Line2D

from reports.kl_null import kl_null_figure
from reports.render import Section
from zoo.studies.base import ArtifactReader
from zoo.studies.predictive.probe import APPROXIMATIONS

__all__ = ["predictive_sections"]

_NAMES = {"qdiag": "q_diag", "qfull": "q_full", "qmarg": "q_marg", "mfvi": "MF-VI"}


def _mean_se(part: pd.DataFrame, x: str, col: str):
    g = part.groupby(x)[col]
    return g.mean(), (g.std(ddof=1) / g.count() ** 0.5).fillna(0)


def _style(ax) -> None:
    """One colour per approximation and method, dashed out of distribution."""
    colours: dict[str, Any] = {}
    handles = []
    for c in ax.containers:
        label = c.get_label()
        key = label.replace(" OOD", "").replace(" test", "")
        colour = colours.setdefault(key, f"C{len(colours) % 10}")
        for part in (c.lines[0], *c.lines[2]):
            part.set_color(colour)
        style = "--" if " OOD" in label else "-"
        c.lines[0].set_linestyle(style)
        handles.append(Line2D([], [], color=colour, ls=style, marker="o", label=label))
    ax.legend(handles=handles, fontsize="small")
    ax.set_ylabel("mean total variation")


def predictive_sections(results, run: ArtifactReader, spec: Any) -> list[Section]:
    """The predictive section of a run, or [] when no cell has ``pred_tv_qfull``."""
    if "pred_tv_qfull" not in results.columns:
        return []
    ok = results[results["status"] == "ok"]
    rows = ok[ok["pred_tv_qfull"].notna()]
    paras = [
        "The price of mean field in predictions. The reference is the posterior predictive "
        "of the sampler's draws. q_full is the Gaussian fit to those draws (all weights and "
        "biases), q_diag its KL-closest diagonal Gaussian (the q_diag of kl_diag_full), "
        "q_marg the diagonal Gaussian with the draws' marginal variances, MF-VI the "
        "variational posterior the chains started from. Each predictive is the mixture over "
        "the same number of weight draws. pred_tv_Q is the mean over points of the total "
        "variation 0.5 sum_c |p_Q - p_samples| (0: the same predictive, 1: disjoint), "
        "pred_agree_Q the fraction of points with the same predicted class, pred_kl_Q the "
        "mean KL(p_samples || p_Q) in nats; nll_Q and ece_Q are Q's test NLL and ECE, "
        "pred_entropy_Q its mean predictive entropy. The suffix _ood marks "
        "out-of-distribution inputs (pred_ood_kind: 'far', points at 3-5 times the data's "
        "scale from its mean; 'noise', uniform noise in the input range), where there are "
        "no labels.",
        "pred_tv_mc_floor is the TV between two independent sets of q_full draws: the Monte "
        "Carlo error of a TV between independent draws. The sampler's draws are "
        "autocorrelated, so the floor of a TV to them is higher; a pred_tv_qfull near the "
        "floor says the Gaussian fit predicts as the samples do (a larger one: the draws are "
        "not Gaussian, or too few for the fit). q_diag and q_full share the fit, so the gap "
        "between them is what dropping the correlations alone costs in predictions; MF-VI "
        "differs from q_diag also in how it was fitted (reverse KL to the posterior, "
        "not to the draws' Gaussian).",
        "pred_tv_split is the TV between the predictives of the two halves of the samples "
        "(first and second half of the chains), half the draws each: the samples' own "
        "error, about sqrt(2) times the floor for independent draws and more where chains "
        "disagree. A TV to the samples below it is not resolved.",
    ]
    x = spec.report.x
    if x not in rows.columns or rows.empty or "method" not in rows.columns:
        return [Section("The price of mean field in predictions", paras)]
    present = [q for q in APPROXIMATIONS if f"pred_tv_{q}" in rows.columns
               and rows[f"pred_tv_{q}"].notna().any()]  # fmt: skip
    header = ["method", x] + [f"TV {_NAMES[q]}{w}" for q in present for w in ("", " (OOD)")]
    header += ["TV floor", "TV split", "cells"]
    body, curves = [], {}
    numeric = pd.api.types.is_numeric_dtype(rows[x]) and not pd.api.types.is_bool_dtype(rows[x])
    for method, part in rows.groupby("method"):
        cols = {}
        for q in present:
            for sfx in ("", "_ood"):
                col = f"pred_tv_{q}{sfx}"
                if col in part.columns:
                    cols[col] = _mean_se(part, x, col)
                    if numeric:
                        m, se = cols[col]
                        where = " OOD" if sfx else " test"
                        curves[f"{_NAMES[q]}{where} ({method})"] = (
                            m.index.to_numpy(), m.to_numpy(), se.to_numpy())  # fmt: skip
        floor = _mean_se(part, x, "pred_tv_mc_floor")[0]
        split = _mean_se(part, x, "pred_tv_split")[0] if "pred_tv_split" in part else None
        n = part.groupby(x).size()
        for v in n.index:
            cells = [f"{cols[c][0][v]:.3g} ± {cols[c][1][v]:.2g}" if c in cols else "-"
                     for q in present for c in (f"pred_tv_{q}", f"pred_tv_{q}_ood")]  # fmt: skip
            halves = f"{split[v]:.2g}" if split is not None else "-"
            body.append([str(method), str(v), *cells, f"{floor[v]:.2g}", halves, str(n[v])])
    figs = []
    if curves:
        fig = kl_null_figure(curves, xlabel=x, title="Predictive TV to the samples' predictive")
        _style(fig.axes[0])
        figs = [("predictive_tv", fig)]
    return [Section("The price of mean field in predictions", paras, (header, body), figs)]
