"""Tables and report of a run directory, rebuilt from its stored cells only.

``results.csv`` has one row per stored cell (sweep axes, metrics, bookkeeping; no timings,
so the same spec and seed give byte-identical files), ``summary.csv`` the mean, standard
error and number of finite values over seeds (:func:`reports.tables.summarize`), and the
report, a :class:`reports.document.Document` built once here and rendered to Markdown and
HTML by :func:`reports.document.render`:

- it leads with what was found (:func:`reports.headline.headline` of the first figures'
  metrics) and the settings of the spec as run (:func:`zoo.execution.report_settings.run_settings`);
- says which metric values are NaN or infinite (left out of the means, counted);
- names the metrics with the labels of the cell metrics (:data:`reports.labels.METRIC_LABELS`)
  and of each registered study (its ``labels``), and leaves out of the tables the columns
  the cells record as settings (:data:`zoo.execution.evaluate.HIDDEN_COLUMNS`) and those a study
  hides (its ``hidden``);
- for a spec with ``tune``: the grid searched per method and the values chosen
  (:mod:`zoo.execution.report_tune`); results.csv has the chosen values as ``tuned.<path>``;
- adds the sections of each study of the spec's ``studies:`` list (asked from the study
  itself, :data:`zoo.studies.STUDIES`);
- for sampled cells: the convergence diagnostics each cell recorded when it ran
  (:mod:`zoo.execution.report_sampler`), advice for the gates that failed, and trace and rank-ECDF
  plots of the worst cells' worst-mixing parameters (the only time an ArviZ file is read).

The files are written by the run store (:class:`zoo.execution.store.RunStore`), the directory's
only writer.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from reports.document import (
    Bullets,
    Code,
    Document,
    Figure,
    Heading,
    Paragraph,
    Section,
    Table,
    render,
)
from reports.figures.metric_vs import figure_name, metric_figure
from reports.headline import headline
from reports.labels import METRIC_LABELS, Labels
from reports.tables import (
    failed_table,
    nonfinite_values,
    summarize,
)
from zoo.execution.evaluate import HIDDEN_COLUMNS
from zoo.execution.report_sampler import sampler_section
from zoo.execution.report_settings import relative_paths, run_settings
from zoo.execution.report_summary import summary_blocks
from zoo.execution.report_tune import tune_section
from zoo.execution.store import RunDir, RunStore, dump_spec
from zoo.execution.tune import plan as tune_plan
from zoo.spec import Spec
from zoo.studies import STUDIES

__all__ = [
    "BOOKKEEPING",
    "TIMINGS",
    "build_report",
    "is_timing",
    "report_axes",
    "report_labels",
    "results_table",
    "run_document",
]

#: Columns of results.csv that are not sweep axes or metrics.
BOOKKEEPING = ["cell_id", "status", "error", "nonfinite"]
#: Per-cell values kept in the cell JSON but out of results.csv (they vary run to run); any
#: other ``*_seconds`` metric is a timing too (:func:`is_timing`).
TIMINGS = ["time_s", "fit_seconds", "init_seconds", "warmup_seconds", "compile_seconds"]
#: Headline sentences: one per figure metric, for the first this many.
MAX_HEADLINES = 2


def is_timing(name: str) -> bool:
    """Whether cell value ``name`` is a wall-clock time (:data:`TIMINGS` or ``*_seconds``):
    it stays in the cell's record (``cells/<id>.json``) and out of results.csv, so two runs
    of a spec on one machine write the same tables."""
    return name in TIMINGS or name.endswith("_seconds")


def report_labels() -> tuple[Labels, frozenset[str], dict[str, str]]:
    """The label table, the hidden columns and the companions of every registered study.

    Returns
    -------
    labels : mapping
        :data:`reports.labels.METRIC_LABELS` and each study's ``labels``.
    hidden : frozenset of str
        :data:`zoo.execution.evaluate.HIDDEN_COLUMNS` and each study's ``hidden``.
    companions : dict of str to str
        Each study's ``companions`` (a metric never plotted alone -> the one beside it).
    """
    labels, hidden, companions = dict(METRIC_LABELS), set(HIDDEN_COLUMNS), {}
    for study in STUDIES.values():
        labels.update(study.labels)
        hidden |= set(study.hidden)
        companions.update(study.companions)
    return labels, frozenset(hidden), companions


def weight_space_metrics() -> frozenset[str]:
    """The metrics of the studies that declare ``weight_space``: what a sampled cell may
    report only with the weights' gates passed (silver or better)."""
    return frozenset(
        m
        for study in STUDIES.values()
        if getattr(study, "weight_space", False)
        for m in study.labels
    )


# --------------------------------------------------------------------------- axes


def report_axes(spec: Spec, columns: list[str]) -> tuple[str, str | None]:
    """The figures' x axis and hue: the spec's ``report.x`` / ``report.hue`` when they are
    columns of results.csv, else the first swept axis other than seed, else ``method`` when
    there are several methods, else ``seed``.

    Parameters
    ----------
    spec : Spec
        The spec as run.
    columns : list of str
        The columns of results.csv.

    Returns
    -------
    x, hue : str, str or None
    """
    swept = [a for a in spec.sweep if a in columns and a != "seed" and len(spec.sweep[a]) > 1]
    several = len(spec.inference) > 1
    fallbacks = [*swept, *(["method"] if several else []), "seed", "method"]
    x = next(a for a in [spec.report.x, *fallbacks] if a in columns)
    hue = spec.report.hue if spec.report.hue in columns else "method"
    return x, (hue if hue in columns else None)


def _study_sections(run: RunDir, results: pd.DataFrame, spec: Spec) -> list[Section]:
    """Each study's sections (once per study, in the order of ``studies:``), then diagnostics."""
    found: list[Section] = []
    for study in dict.fromkeys(STUDIES[type(s)] for s in spec.studies):
        found += study.sections(results, run, spec)
    diagnostics = sampler_section(run, results, spec)
    return found + ([diagnostics] if diagnostics is not None else [])


# --------------------------------------------------------------------------- tables


def _nonfinite_names(rec: dict[str, Any]) -> str:
    """The cell record's non-finite metrics, comma-separated (its ``nonfinite`` list, or
    the metrics whose value is a non-finite number)."""
    named = rec.get("nonfinite")
    if isinstance(named, list | tuple):
        return ",".join(map(str, named))
    bad = [
        k
        for k, v in (rec.get("metrics") or {}).items()
        if isinstance(v, float) and not math.isfinite(v) and not is_timing(k)
    ]
    return ",".join(bad)


def results_table(run: RunDir, spec: Spec) -> pd.DataFrame:
    """results.csv: one row per stored cell of ``spec``, in spec order (axes, metrics, bookkeeping)."""
    by_id = {r["cell_id"]: r for r in run.records()}
    axes = ["method", "seed", *[k for k in spec.sweep if k != "seed"]]
    rows, tuned = [], []
    for cell in tune_plan(spec, by_id.get).main:  # spec order, not run order
        rec = by_id.get(cell.cell_id)
        if rec is None:
            continue
        row = {a: cell.axes.get(a, cell.spec.seed if a == "seed" else None) for a in axes}
        chosen = {k: v for k, v in cell.axes.items() if k.startswith("tuned.")}
        tuned += [k for k in chosen if k not in tuned]
        row.update(chosen)  # the values a tune section chose for this cell
        row.update({k: v for k, v in rec["metrics"].items() if not is_timing(k)})
        row.update(
            cell_id=rec["cell_id"],
            status=rec["status"],
            error=rec["error"],
            nonfinite=_nonfinite_names(rec),
        )
        rows.append(row)
    if not rows:  # no cell stored yet: the columns all the same
        return pd.DataFrame(columns=[*axes, *BOOKKEEPING])
    results = pd.DataFrame(rows)
    skip = {*axes, *tuned, *BOOKKEEPING}
    metric_cols = [c for c in results.columns if c not in skip]
    return results[[*axes, *tuned, *metric_cols, *BOOKKEEPING]]


def _nonfinite_note(results: pd.DataFrame, metrics: list[str]) -> str | None:
    """A note naming the NaN or infinite metric values of ok cells (left out of the means)."""
    bad = nonfinite_values(results, metrics)
    if bad.empty:
        return None
    listed = "; ".join(f"{r.metric} = {r.value} in {r.cell_id}" for r in bad.head(8).itertuples())
    more = f"; and {len(bad) - 8} more" if len(bad) > 8 else ""
    return (
        f"{len(bad)} metric value(s) of ok cells are NaN or infinite and are left out of "
        f"the means (the tables mark such means [k/n]; summary.csv has <metric>_n, the "
        f"number of finite values): {listed}{more}."
    )


def _axes(spec: Spec) -> list[str]:
    return ["method", "seed", *[k for k in spec.sweep if k != "seed"]]


def _over(spec: Spec) -> str:
    """The repeat axis: UCI splits when split is swept and seed is not (Trippe & Turner 2018)."""
    return "split" if "split" in spec.sweep and "seed" not in spec.sweep else "seed"


def _numeric(results: pd.DataFrame, spec: Spec) -> list[str]:
    axes = _axes(spec)
    metric_cols = [c for c in results.columns if c not in axes and c not in BOOKKEEPING]
    metric_cols = [c for c in metric_cols if not c.startswith("tuned.")]  # chosen values
    return [c for c in metric_cols if pd.api.types.is_numeric_dtype(results[c])]


def _notes(spec: Spec, results: pd.DataFrame, numeric: list[str], root: Any) -> list[str]:
    notes = []
    have_rows = len(results) > 0
    skipped = [m for m in spec.report.figures if m not in numeric]
    if skipped and have_rows:
        notes.append(
            f"report.figures: {', '.join(skipped)} not among these cells' numeric "
            "metrics; no figure for them."
        )
    if spec.description:
        notes.append(
            f"The spec's description, as written (the settings above are the ones "
            f"run): {' '.join(spec.description.split())}"
        )
    if have_rows:
        notes.append(f"{len(results)} cells stored of {len(spec.cells())} in the spec.")
    else:
        notes.append(
            f"No cell is stored yet (0 of {len(spec.cells())} in the spec): `zoo run "
            f"{root}` computes them and writes this report again."
        )
    return notes


def run_document(
    store: RunDir, spec: Spec, results: pd.DataFrame, summary: pd.DataFrame
) -> Document:
    """The report of a run as a document, built once from its tables and stored cells.

    Parameters
    ----------
    store : RunDir
        The run directory (its cells' artifacts, for the studies and the trace plots).
    spec : Spec
        The spec as run: settings, headline and axes are computed from it.
    results, summary : pd.DataFrame
        results.csv and summary.csv.
    """
    labels, hidden, companions = report_labels()
    weight_space = weight_space_metrics()
    have_rows = len(results) > 0
    numeric, over, axes = _numeric(results, spec), _over(spec), _axes(spec)
    x, hue = report_axes(spec, list(results.columns) if have_rows else axes)
    # an x or hue that is the repeat axis itself: the figures show single cells
    single = over in (x, hue)
    fig_summary = summarize(results, numeric, over=None, by=axes) if single else summary
    figures = [m for m in spec.report.figures if m in numeric]
    table_metrics = figures + [m for m in numeric if m not in hidden and m not in figures]
    notes = _notes(spec, results, numeric, store.root)
    note = _nonfinite_note(results, table_metrics) if have_rows else None
    notes += [note] if note else []
    blocks: list[Any] = []
    for m in figures:
        if len(blocks) >= MAX_HEADLINES:
            break
        # a trend along seeds says nothing: the means over seeds
        args = (x if x != over else "method", "method") if single else (x, hue)
        use = "weights" if m in weight_space else "predictions"
        sentence = headline(summary, m, *args, over=over, labels=labels, use=use)
        blocks += [Paragraph(sentence, headline=True)] if sentence else []
    blocks += [Heading("Settings of this run"), Bullets(run_settings(spec, results, store.root))]
    failed = results[results["status"] != "ok"] if have_rows else results.iloc[0:0]
    n_ok = len(results) - len(failed)
    blocks += [
        Paragraph(f"{len(results)} cell(s): {n_ok} ok, {len(failed)} failed."),
        Bullets(notes),
        Heading("Summary"),
    ]
    have_summary = not summary.empty
    full = None
    if have_summary:
        lead, full = summary_blocks(spec, summary, table_metrics, labels, over, weight_space)
        blocks += lead
    else:
        blocks.append(
            Paragraph("No cell finished successfully, so there is no summary and no figure.")
        )
    if have_summary and figures:
        blocks.append(Heading("Figures"))
        for m in figures:
            companion = companions.get(m)
            if companion is not None and f"{companion}_mean" not in fig_summary.columns:
                companion = None
            png, caption = metric_figure(
                fig_summary,
                x,
                m,
                hue,
                results=results,
                over=None if single else over,
                companion=companion,
                labels=labels,
                weight_space=weight_space,
            )
            blocks.append(Figure(f"figures/{figure_name(m, x)}", png, caption))
    blocks += tune_section(spec, {r["cell_id"]: r for r in store.records()})
    blocks += _study_sections(store, results, spec) if have_rows else []
    blocks += [full] if full is not None and full.blocks else []
    if len(failed):
        blocks += [Heading("Failed cells"), Table(*failed_table(failed), cls="failed")]
    spec_text = relative_paths(dump_spec(spec), spec, store.root)
    blocks += [Heading("Spec (as run)"), Code(spec_text, "yaml")]
    return Document(f"bnn-zoo report: {spec.name}", blocks)


def build_report(out: RunStore | str | os.PathLike[str], spec: Spec) -> dict[str, Path]:
    """Write results.csv, summary.csv and the report from the stored cells of ``spec``.

    Parameters
    ----------
    out : RunStore or path
        The run directory.
    spec : Spec
        The spec as run: the report's settings, headline and axes are computed from it.

    Returns
    -------
    dict of str to Path
        The report files written (``report.md``, ``report.html``, ``figures/...``).
    """
    store = out if isinstance(out, RunStore) else RunStore(out)
    results = results_table(store, spec)
    store.write_table("results.csv", results)
    over = _over(spec)
    by = [a for a in _axes(spec) if a != over]
    summary = summarize(results, _numeric(results, spec), over=over, by=by)
    store.write_table("summary.csv", summary)
    return store.write_files(render(run_document(store, spec, results, summary)))
