"""Report section of the predictive study: what its columns mean, a table and a figure.

Built from results.csv alone: per method and x value, the mean (and 95% t-interval over
seeds) of the predictive total variation to the samples of q_diag, q_full, q_marg and the
MF-VI posterior, and their agreement with the samples' predicted class, on the test set and
on each out-of-distribution set, and a figure of the TV against the report's x axis.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from reports.document import Section, section
from reports.figures.curves import predictive_tv_figure
from reports.study_table import Column, StudyTable, curves, render
from zoo.studies.base import ArtifactReader
from zoo.studies.predictive.probe import APPROXIMATIONS

__all__ = ["predictive_sections", "tv_table"]

#: What the predictive columns are.
WHAT_TEXT = (
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
    "further OOD kind's columns end in _ood_<kind>."
)
#: How each TV is read against its own floor.
FLOOR_TEXT = (
    "Each TV is read against its own floor, the column after it: pred_tv_floor_Q, the mean TV "
    "the two mixtures would show from their draw noise alone if Q predicted exactly as "
    "the samples do (from the variance over each side's draws of every class "
    "probability; the samples' side inflated by pred_tv_inflation, measured from the two "
    "halves of the chains). A confident predictive has a far lower floor than a diffuse "
    "one, so one floor for every comparison (q_full's, as this report used to quote) "
    "says nothing about a confident q_diag or MF-VI. A TV within about twice its floor is "
    "not resolved from no difference. q_diag and q_full share the fit, so the gap "
    "between them is what dropping the correlations alone costs in predictions; MF-VI "
    "differs from q_diag also in how it was fitted (reverse KL to the posterior, "
    "not to the draws' Gaussian)."
)
#: The samples' own error: the TV between their two halves.
SPLIT_TEXT = (
    "TV split is the TV between the predictives of the two halves of the samples "
    "(first and second half of the chains), half the draws each: the samples' own "
    "error, about sqrt(2) times their floor for independent draws and more where chains "
    "disagree."
)
#: The per-chain control for pooling.
PER_CHAIN_TEXT = (
    "q_full per chain is the control for pooling (the study's per_chain): Farquhar et "
    "al. (2020) fit q_full to one chain's draws, this study to all chains' at once. "
    "Each of per_chain chains gets its own Gaussian fit, compared with that chain's "
    "own draws (not with all of them); the column is the median over the chains. "
    "Where q_full predicts at chance and q_full per chain does not, chains sitting in "
    "different places are the cause; where both fail, the Gaussian family is (a "
    "weight-space Gaussian pushed through the network; Immer et al. 2021)."
)
#: What a table entry and an error bar are: the report's one rule (reports.study_table).
ENTRIES_TEXT = (
    "Each entry is the mean over seeds ± the half-width of its 95% Student-t interval "
    "([k/n]: a mean over only k of the row's n cells; a sampled cell graded failed is left "
    "out and counted in the grade column), and so are the figure's error bars. A predictive "
    "number needs its cells graded bronze or better."
)

_NAMES = {
    "qdiag": "q_diag",
    "qfull": "q_full",
    "qmarg": "q_marg",
    "mfvi": "MF-VI",
    "qchain": "q_full per chain",
}


def predictive_sections(results, run: ArtifactReader, spec: Any) -> list[Section]:
    """The predictive section of a run, or [] when no cell has ``pred_tv_qfull``."""
    if "pred_tv_qfull" not in results.columns:
        return []
    ok = results[results["status"] == "ok"]
    rows = ok[ok["pred_tv_qfull"].notna()]
    paras = [WHAT_TEXT, FLOOR_TEXT, SPLIT_TEXT]
    if "pred_tv_qchain" in rows.columns and rows["pred_tv_qchain"].notna().any():
        paras.append(PER_CHAIN_TEXT)
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
    tables = [render(rows, tv_table(by, x, m, present, where)) for m in ("tv", "agree")]
    tables = [t for t in tables if t is not None]
    figs = []
    numeric = pd.api.types.is_numeric_dtype(rows[x]) and not pd.api.types.is_bool_dtype(rows[x])
    lines = _tv_curves(rows, x, by, present, where) if numeric else {}
    if lines:
        fig = predictive_tv_figure(
            lines, xlabel=x, title="Predictive TV to the samples' predictive"
        )
        figs = [("predictive_tv", fig)]
    paras.append(
        "The second table is the agreement (fraction of points with the samples' "
        "predicted class) of the same predictives: 1 is no difference in decisions."
    )
    paras.append(ENTRIES_TEXT)
    tables = [t for t in tables if t is not None]
    return [section("The price of mean field in predictions", paras, tables, figs)]


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


def tv_table(by: list[str], x: str, metric: str, present: list[str], where: dict) -> StudyTable:
    """``pred_<metric>_<q><suffix>`` per group ``by`` (the method and any other swept axis,
    e.g. the width of a depth x width grid) and x value; for the TV each column is followed
    by its floor, and the samples' own split TV closes the table."""
    name = "TV" if metric == "tv" else "agree"
    cols = []
    for q in present:
        for sfx, label in where.items():
            tag = f"{_NAMES[q]}" + ("" if not sfx else f" ({label})")
            cols.append(Column(f"pred_{metric}_{q}{sfx}", f"{name} {tag}", "predictions"))
            if metric == "tv":
                cols.append(Column(f"pred_tv_floor_{q}{sfx}", "its floor", "predictions"))
    if metric == "tv":
        cols.append(Column("pred_tv_split", "TV split", "predictions"))
    return StudyTable((*by, x), cols)


def _tv_curves(rows: pd.DataFrame, x: str, by: list[str], present: list[str], where) -> dict:
    """The TV figure's lines: each approximation on the test set and the first OOD set."""
    columns = [
        (f"pred_tv_{q}{sfx}", f"{_NAMES[q]}{' OOD' if sfx else ' test'}")
        for q in present
        for sfx in where
        if sfx in ("", "_ood")
    ]
    return curves(rows, x, columns, by)
