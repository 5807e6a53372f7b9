"""Report section of the predictive study: what its columns mean, a table and a figure.

Built from results.csv alone: per method and x value, the mean (and standard error over
seeds) of the predictive total variation to the samples of q_diag, q_full, q_marg and the
MF-VI posterior, and their agreement with the samples' predicted class, on the test set and
on each out-of-distribution set, and a figure of the TV against the report's x axis.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.document import Section, section
from reports.figures.curves import predictive_tv_figure
from zoo.studies.base import ArtifactReader
from zoo.studies.predictive.probe import APPROXIMATIONS

__all__ = ["predictive_sections"]

_NAMES = {
    "qdiag": "q_diag",
    "qfull": "q_full",
    "qmarg": "q_marg",
    "mfvi": "MF-VI",
    "qchain": "q_full per chain",
}


def _mean_se(part: pd.DataFrame, x: str, col: str):
    g = part.groupby(x)[col]
    return g.mean(), (g.std(ddof=1) / g.count() ** 0.5).fillna(0)


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
        "scale from its mean; 'noise', uniform noise in the input range; 'holdout_class', "
        "the images of the class held out of training), where there are no labels; a "
        "further OOD kind's columns end in _ood_<kind>.",
        "Each TV is read against its own floor, in brackets: pred_tv_floor_Q, the mean TV "
        "the two mixtures would show from their draw noise alone if Q predicted exactly as "
        "the samples do (from the variance over each side's draws of every class "
        "probability; the samples' side inflated by pred_tv_inflation, measured from the two "
        "halves of the chains). A confident predictive has a far lower floor than a diffuse "
        "one, so one floor for every comparison (q_full's, as this report used to quote) "
        "says nothing about a confident q_diag or MF-VI. A TV within about twice its floor is "
        "not resolved from no difference. q_diag and q_full share the fit, so the gap "
        "between them is what dropping the correlations alone costs in predictions; MF-VI "
        "differs from q_diag also in how it was fitted (reverse KL to the posterior, "
        "not to the draws' Gaussian).",
        "TV split is the TV between the predictives of the two halves of the samples "
        "(first and second half of the chains), half the draws each: the samples' own "
        "error, about sqrt(2) times their floor for independent draws and more where chains "
        "disagree.",
    ]
    if "pred_tv_qchain" in rows.columns and rows["pred_tv_qchain"].notna().any():
        paras.append(
            "q_full per chain is the control for pooling (the study's per_chain): Farquhar et "
            "al. (2020) fit q_full to one chain's draws, this study to all chains' at once. "
            "Each of per_chain chains gets its own Gaussian fit, compared with that chain's "
            "own draws (not with all of them); the column is the median over the chains. "
            "Where q_full predicts at chance and q_full per chain does not, chains sitting in "
            "different places are the cause; where both fail, the Gaussian family is (a "
            "weight-space Gaussian pushed through the network; Immer et al. 2021)."
        )
    x = spec.report.x if spec.report.x in rows.columns else "seed"  # unswept x: per seed
    if x not in rows.columns or rows.empty or "method" not in rows.columns:
        return [section("The price of mean field in predictions", paras)]
    present = [
        q
        for q in (*APPROXIMATIONS, "qchain")
        if f"pred_tv_{q}" in rows.columns and rows[f"pred_tv_{q}"].notna().any()
    ]
    where = _ood_sets(rows)
    if len(where) > 2:
        paras.append(
            "Out of distribution here: "
            + "; ".join(f"{name} (columns ending {sfx})" for sfx, name in where.items() if sfx)
            + "."
        )
    by = ["method"] + [
        a
        for a in spec.sweep
        if a not in (x, "seed") and a in rows.columns and rows[a].nunique() > 1
    ]
    tv, curves = _table(rows, x, by, "tv", present, where)
    agree, _ = _table(rows, x, by, "agree", present, where)
    figs = []
    if curves:
        fig = predictive_tv_figure(
            curves, xlabel=x, title="Predictive TV to the samples' predictive"
        )
        figs = [("predictive_tv", fig)]
    paras.append(
        "The second table is the agreement (fraction of points with the samples' "
        "predicted class) of the same predictives: 1 is no difference in decisions."
    )
    return [section("The price of mean field in predictions", paras, [tv, agree], figs)]


def _ood_sets(rows: pd.DataFrame) -> dict[str, str]:
    """Suffix -> name of the input sets present: test, the first OOD kind, further kinds."""
    out = {"": "test"}
    if "pred_tv_qfull_ood" in rows.columns and rows["pred_tv_qfull_ood"].notna().any():
        kinds = rows["pred_ood_kind"].dropna().unique() if "pred_ood_kind" in rows else []
        out["_ood"] = "OOD" if len(kinds) != 1 else f"OOD {kinds[0]}"
    prefix = "pred_tv_qfull_ood_"
    for col in rows.columns:
        if col.startswith(prefix) and rows[col].notna().any():
            out[f"_ood_{col[len(prefix) :]}"] = f"OOD {col[len(prefix) :]}"
    return out


def _cell(cols: dict, col: str, v: Any, floor: pd.Series | None) -> str:
    """``mean ± se`` of ``col`` at x value ``v``, and ``[floor]`` where the column has one."""
    if col not in cols:
        return "-"
    text = f"{cols[col][0][v]:.3g} ± {cols[col][1][v]:.2g}"
    return text if floor is None else f"{text} [{floor[v]:.2g}]"


def _table(
    rows: pd.DataFrame,
    x: str,
    by: list[str],
    metric: str,
    present: list[str],
    where: dict[str, str],
) -> tuple[tuple[list[str], list[list[str]]], dict]:
    """``(header, body)`` of ``pred_<metric>_<q><suffix>`` per group ``by`` (the method and
    any other swept axis, e.g. the width of a depth x width grid) and x value (mean ±
    standard error over seeds), and the TV figure's curves (test and first OOD set)."""
    name = "TV" if metric == "tv" else "agree"
    header = [*by, x] + [
        f"{name} {_NAMES[q]}" + ("" if not sfx else f" ({label})")
        for q in present
        for sfx, label in where.items()
    ]
    if metric == "tv":
        header += ["TV split"]
    header.append("cells")
    body, curves = [], {}
    numeric = pd.api.types.is_numeric_dtype(rows[x]) and not pd.api.types.is_bool_dtype(rows[x])
    for key, part in rows.groupby(by):
        key = key if isinstance(key, tuple) else (key,)
        group = ", ".join(
            [str(key[0]), *(f"{a} {v}" for a, v in zip(by[1:], key[1:], strict=True))]
        )
        cols = {}
        for q in present:
            for sfx in where:
                col = f"pred_{metric}_{q}{sfx}"
                if col in part.columns and part[col].notna().any():
                    cols[col] = _mean_se(part, x, col)
                    if metric == "tv" and numeric and sfx in ("", "_ood"):
                        m, se = cols[col]
                        label = " OOD" if sfx else " test"
                        curves[f"{_NAMES[q]}{label} ({group})"] = (
                            m.index.to_numpy(),
                            m.to_numpy(),
                            se.to_numpy(),
                        )
        n = part.groupby(x).size()
        floors = {
            c: _mean_se(part, x, c)[0]
            for q in present
            for sfx in where
            if metric == "tv"
            and (c := f"pred_tv_floor_{q}{sfx}") in part.columns
            and part[c].notna().any()
        }
        split = (
            _mean_se(part, x, "pred_tv_split")[0]
            if metric == "tv" and "pred_tv_split" in part
            else None
        )
        for v in n.index:
            cells = [
                _cell(cols, c, v, floors.get(f"pred_tv_floor_{q}{sfx}"))
                for q in present
                for sfx, c in ((sfx, f"pred_{metric}_{q}{sfx}") for sfx in where)
            ]
            if metric == "tv":
                cells.append(f"{split[v]:.2g}" if split is not None else "-")
            body.append([*map(str, key), str(v), *cells, str(n[v])])
    return (header, body), curves
