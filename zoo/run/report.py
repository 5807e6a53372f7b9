"""Tables and report of a run directory, rebuilt from its stored cells only.

``results.csv`` has one row per stored cell (sweep axes, metrics, bookkeeping; no timings,
so the same spec and seed give byte-identical files), ``summary.csv`` the mean and
standard error over seeds, and the report adds sections for what the cells hold:

- the sections of each study of the spec's ``studies:`` list (price of mean field, k-tied,
  pruning, product matrix), asked from the study itself (:data:`zoo.studies.STUDIES`);
- sampled cells: convergence diagnostics per cell and trace/rank plots read back from the
  cells' ArviZ files.

The tables and figures are rendered to bytes (:mod:`reports.render`) and written by the
run store (:class:`zoo.run.store.RunStore`), the directory's only writer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from reports.diagnostics import trace_rank_figure
from reports.render import Section, render_report
from reports.tables import summarize
from zoo.run.arviz_io import load_datatree
from zoo.run.store import RunDir, RunStore, dump_spec
from zoo.spec import Spec
from zoo.studies import STUDIES

__all__ = ["BOOKKEEPING", "TIMINGS", "build_report", "results_table"]

#: Columns of results.csv that are not sweep axes or metrics.
BOOKKEEPING = ["cell_id", "status", "error"]
#: Per-cell values kept in the cell JSON but out of results.csv (they vary run to run).
TIMINGS = ["time_s", "fit_seconds", "init_seconds", "warmup_seconds"]
#: Numeric columns that describe a setting rather than a result: kept out of the table.
_SETTINGS = {"n_train", "final_loss", "jitter", "dim", "n_draws", "shrinkage", "w_diag",
             "w_full", "w_diag_self", "w_full_self", "w_draws", "best_step", "ess_bulk_q05", "ess_bulk_q50", "min_ess_tail",
             "mean_tree_steps", "step_size"}  # fmt: skip
#: Sampled cells whose trace and rank plots are drawn (the first ones in spec order).
MAX_TRACE_PLOTS = 4


def _axis(wanted: str, axes: list[str], fallbacks: list[str]) -> str:
    """``wanted`` if it is a column of results.csv, else the first fallback that is."""
    return next(a for a in [wanted, *fallbacks] if a in axes)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "" if v != v else f"{v:.4g}"
    return "" if v is None else str(v)


def _sampler_section(run: RunDir, results: pd.DataFrame, spec: Spec) -> Section | None:
    """Convergence diagnostics of the sampled cells, with trace and rank plots of the first."""
    samplers = [m.name for m in spec.inference if type(m).family == "sampler"]
    sampled = results[results["method"].isin(samplers)]
    sampled = sampled[sampled["status"] == "ok"]
    if sampled.empty:
        return None
    axes = [c for c in ["method", "seed", *spec.sweep] if c in results.columns]
    axes = list(dict.fromkeys(axes))
    cols = ["max_r_hat", "min_ess_bulk", "ess_bulk_q05", "ess_bulk_q50", "min_ess_tail",
            "worst_ess_bulk", "n_divergent", "mean_tree_steps", "step_size",
            "gates_failed"]  # fmt: skip
    cols = [c for c in cols if c in sampled.columns]
    rows = [[_fmt(r[c]) for c in axes + cols] for _, r in sampled.iterrows()]
    n_flag = int((sampled["gates_failed"].fillna("") != "").sum()) if "gates_failed" in cols else 0
    paras = [
        "Convergence of every sampled cell (arviz-stats on the stored posterior): the worst "
        "r_hat (only with two or more chains), the smallest bulk ESS, its 5% and 50% "
        "quantiles over all parameters and the parameter where it is smallest, the "
        "smallest tail ESS, divergent transitions, the mean number of leapfrog steps per draw and "
        "the adapted step size. gates_failed lists the usual gates a cell fails: r_hat > "
        "1.01, ess_bulk < 100, any divergence.",
        f"{n_flag} of {len(sampled)} sampled cells fail at least one gate."
        + (
            " Their KL and Wasserstein numbers describe draws that have not mixed; more "
            "warmup and draws (or chains) are the fix."
            if n_flag
            else ""
        ),  # fmt: skip
    ]
    figs = []
    for _, r in sampled.head(MAX_TRACE_PLOTS).iterrows():
        path = run.artifact_path(r["cell_id"], ".nc")
        if path.is_file():
            fig = trace_rank_figure(load_datatree(path), n_params=4, seed=0)
            fig.suptitle(f"trace and rank plots: {r['cell_id']}")
            figs.append((f"trace_rank_{r['cell_id']}", fig))
    return Section("Sampler diagnostics", paras, (axes + cols, rows), figs)


def _study_sections(run: RunDir, results: pd.DataFrame, spec: Spec) -> list[Section]:
    """Each study's sections (once per study, in the order of ``studies:``), then diagnostics."""
    found: list[Section] = []
    for study in dict.fromkeys(STUDIES[type(s)] for s in spec.studies):
        found += study.sections(results, run, spec)
    diagnostics = _sampler_section(run, results, spec)
    return found + ([diagnostics] if diagnostics is not None else [])


def results_table(run: RunDir, spec: Spec) -> pd.DataFrame:
    """results.csv: one row per stored cell of ``spec``, in spec order (axes, metrics, bookkeeping)."""
    by_id = {r["cell_id"]: r for r in run.records()}
    axes = ["method", "seed", *[k for k in spec.sweep if k != "seed"]]
    rows = []
    for cell in spec.cells():  # spec order, so the file does not depend on run order
        rec = by_id.get(cell.cell_id)
        if rec is None:
            continue
        row = {a: cell.axes.get(a, cell.spec.seed if a == "seed" else None) for a in axes}
        row.update({k: v for k, v in rec["metrics"].items() if k not in TIMINGS})
        row.update(cell_id=rec["cell_id"], status=rec["status"], error=rec["error"])
        rows.append(row)
    results = pd.DataFrame(rows)
    metric_cols = [c for c in results.columns if c not in axes and c not in BOOKKEEPING]
    return results[[*axes, *metric_cols, *BOOKKEEPING]] if rows else results


def build_report(out: RunStore | str | os.PathLike[str], spec: Spec) -> dict[str, Path]:
    """Write results.csv, summary.csv and the report from the stored cells of ``spec``.

    Returns
    -------
    dict of str to Path
        The report files written (``report.md``, ``report.html``, ``figures/...``).
    """
    store = out if isinstance(out, RunStore) else RunStore(out)
    results = results_table(store, spec)
    store.write_table("results.csv", results)
    axes = ["method", "seed", *[k for k in spec.sweep if k != "seed"]]
    metric_cols = [c for c in results.columns if c not in axes and c not in BOOKKEEPING]
    numeric = [c for c in metric_cols if pd.api.types.is_numeric_dtype(results[c])]
    # repeats are UCI splits when split is swept and seed is not (Trippe & Turner 2018)
    over = "split" if "split" in spec.sweep and "seed" not in spec.sweep else "seed"
    summary = summarize(results, numeric, over=over, by=[a for a in axes if a != over])
    store.write_table("summary.csv", summary)
    have_rows = len(results) > 0
    failed = results[results["status"] != "ok"] if have_rows else None
    notes = [spec.description] if spec.description else []
    notes.append(f"{len(results)} cells stored of {len(spec.cells())} in the spec.")
    files = render_report(
        title=f"bnn-zoo report: {spec.name}",
        spec_text=dump_spec(spec),
        results=results,
        summary=summary,
        x=_axis(spec.report.x, axes, [*[a for a in spec.sweep if a != "seed"], "method"]),
        hue=_axis(spec.report.hue, axes, ["method"]),
        metrics=[m for m in spec.report.figures if m in numeric],
        notes=notes,
        failed=failed if failed is not None and len(failed) else None,
        table_metrics=[m for m in numeric if m not in _SETTINGS],
        sections=_study_sections(store, results, spec) if have_rows else [],
    )
    return store.write_files(files)
