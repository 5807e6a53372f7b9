"""Tables and report of a run directory, rebuilt from its stored cells only.

``results.csv`` has one row per stored cell (sweep axes, metrics, bookkeeping; no timings,
so the same spec and seed give byte-identical files), ``summary.csv`` the mean, standard
error and number of finite values over seeds (:func:`reports.tables.summarize`), and the
report:

- leads with what was found (:func:`reports.render.headline` of the first figures'
  metrics) and the settings of the spec as run (the run directory's ``spec.yaml``, after
  any ``--set``): data, model, methods, sweep;
- says which metric values are NaN or infinite (left out of the means, counted);
- adds the sections of each study of the spec's ``studies:`` list (asked from the study
  itself, :data:`zoo.studies.STUDIES`);
- for sampled cells: convergence diagnostics recomputed from each cell's ArviZ file (R-hat,
  ESS, divergences, transitions at the maximum tree depth), advice for the gates that
  failed, and trace and rank-ECDF plots of the worst cells' worst-mixing parameters.

The tables and figures are rendered to bytes (:mod:`reports.render`) and written by the
run store (:class:`zoo.run.store.RunStore`), the directory's only writer.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from reports.diagnostics import Diagnostics, diagnostic_gates, trace_rank_figure
from reports.render import Section, headline, render_report
from reports.tables import nonfinite_values, summarize
from zoo.run.store import RunDir, RunStore, dump_spec
from zoo.spec import Spec
from zoo.spec.sweep import AXIS_ALIASES
from zoo.studies import STUDIES

__all__ = ["BOOKKEEPING", "TIMINGS", "build_report", "report_axes", "results_table", "run_settings"]

#: Columns of results.csv that are not sweep axes or metrics.
BOOKKEEPING = ["cell_id", "status", "error", "nonfinite"]
#: Per-cell values kept in the cell JSON but out of results.csv (they vary run to run).
TIMINGS = ["time_s", "fit_seconds", "init_seconds", "warmup_seconds", "compile_seconds"]
#: Numeric columns that describe a setting rather than a result: kept out of the table.
_SETTINGS = {
    "n_train",
    "final_loss",
    "jitter",
    "dim",
    "n_draws",
    "shrinkage",
    "w_diag",
    "w_full",
    "w_diag_self",
    "w_full_self",
    "w_draws",
    "best_step",
    "ess_bulk_q05",
    "ess_bulk_q50",
    "min_ess_tail",
    "mean_tree_steps",
    "step_size",
    "max_r_hat",
    "min_ess_bulk",
    "n_divergent",
    "n_max_tree_depth",
    "max_r_hat_pred",
    "median_r_hat_pred",
    "min_ess_bulk_pred",
    "median_ess_bulk_pred",
    "n_pred_constant",
}
#: Sampled cells whose trace and rank plots are drawn: the worst ones.
MAX_TRACE_PLOTS = 3
#: Headline sentences: one per figure metric, for the first this many.
MAX_HEADLINES = 2


def _fmt(v: Any) -> str:
    if isinstance(v, float | np.floating):
        return "NaN" if v != v else f"{float(v):.4g}"
    return "" if v is None else str(v)


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


# --------------------------------------------------------------------------- settings


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return str(v.get("kind", v))
    if isinstance(v, list):
        return "[" + ", ".join(_value(i) for i in v) + "]"
    return str(v)


def _fields(
    section: Any, prefix: str, sweep: dict[str, list[Any]], skip=(), *, defaults: bool = False
) -> str:
    """``kind, field v, other a, b (swept), ...`` of a spec section: its fields that differ
    from their defaults (every field with ``defaults``; None values left out), and the
    swept ones with their values."""
    if section is None:
        return "none"
    d = section.model_dump(mode="json", exclude_defaults=not defaults)
    d.update(
        {k: None for k in type(section).model_fields if f"{prefix}.{k}" in sweep and k not in d}
    )
    parts = [str(d.pop("kind"))] if "kind" in d else []
    for key, v in d.items():
        path = f"{prefix}.{key}"
        if key in skip:
            continue
        if path in sweep:
            parts.append(f"{key} {', '.join(_value(i) for i in sweep[path])} (swept)")
        elif v is not None and not (isinstance(v, dict) and "kind" not in v):
            parts.append(f"{key} {_value(v)}")
    return ", ".join(parts)


def _widths(results: pd.DataFrame, spec: Spec) -> str | None:
    """The hidden widths the cells were built with, per swept model setting."""
    if "width" not in results.columns or results["width"].isna().all():
        return None
    axes = [a for a in spec.sweep if a.startswith("model.") and a in results.columns]
    ok = results[results["width"].notna()]
    if not axes:
        widths = sorted({int(w) for w in ok["width"]})
        return f"hidden width {', '.join(map(str, widths))}"
    a = axes[0]
    pairs = ok.groupby(a, sort=True)["width"].agg(lambda s: sorted({int(w) for w in s}))
    return "hidden width " + ", ".join(
        f"{'/'.join(map(str, w))} at {a.split('.')[-1]} {_value(k)}" for k, w in pairs.items()
    )


def run_settings(spec: Spec, results: pd.DataFrame) -> list[str]:
    """What this run was, computed from the spec as run (not its description).

    Parameters
    ----------
    spec : Spec
        The resolved spec of the run (the run directory's ``spec.yaml``, after ``--set``).
    results : pd.DataFrame
        results.csv (for the hidden widths the cells were built with).

    Returns
    -------
    list of str
        One line each: data, model, prior and likelihood, each method, studies, the sweep
        with its cell count.
    """
    sweep = {AXIS_ALIASES.get(k, k): v for k, v in spec.sweep.items()}
    data = _fields(spec.data, "data", sweep, defaults=True)
    if "n_train" in results.columns and results["n_train"].notna().any():
        sizes = sorted({int(v) for v in results["n_train"].dropna()})
        if sizes != [getattr(spec.data, "n_train", None)]:
            data += f"; {', '.join(map(str, sizes))} training points in the cells"
    lines = [f"Data: {data}."]
    model = _fields(spec.model, "model", sweep)
    widths = _widths(results, spec)
    lines.append(f"Model: {model}" + (f"; {widths}" if widths else "") + ".")
    lines.append(
        f"Prior: {_fields(spec.prior, 'prior', sweep, defaults=True)}; likelihood: "
        f"{_fields(spec.likelihood, 'likelihood', sweep, defaults=True)}."
    )
    for m in spec.inference:
        text = _fields(m, f"inference.{m.name}", sweep, skip=("name",))
        lines.append(f"Method {m.name}: {text}.")
    if spec.studies:
        lines.append("Studies: " + "; ".join(_fields(s, "studies", {}) for s in spec.studies) + ".")
    seeds = sweep.get("seed", [spec.seed])
    axes = [
        f"{k} = {', '.join(_value(v) for v in vals)}" for k, vals in sweep.items() if k != "seed"
    ]
    lines.append(
        f"Seeds: {', '.join(map(str, seeds))} ({len(seeds)} {'seed' if len(seeds) == 1 else 'seeds'}); "
        + (f"swept: {'; '.join(axes)}; " if axes else "")
        + f"{len(spec.inference)} method(s); {len(spec.cells())} cells."
    )
    return lines


# --------------------------------------------------------------------------- diagnostics


def _read_diagnostic_groups(data: bytes) -> xr.DataTree:
    """The ``posterior`` and ``sample_stats`` groups and root attributes of a cell's file.

    Only these are loaded: the test-set groups of a sampled cell are far larger.
    """
    with xr.open_datatree(io.BytesIO(data), engine="h5netcdf") as dt:
        groups = {"/": xr.Dataset(attrs=dict(dt.attrs))}
        for g in ("posterior", "sample_stats"):
            if g in dt.children:
                groups[g] = dt[g].to_dataset().load()
        return xr.DataTree.from_dict(groups)


def _recorded(row: pd.Series, column: str) -> str:
    """A metric of a results.csv row: ``n/a`` when blank (None: it does not apply), ``NaN``
    only when the cell's record lists it as non-finite."""
    v = row.get(column)
    if v is None or (isinstance(v, float) and v != v):
        named = row.get("nonfinite")
        return "NaN" if isinstance(named, str) and column in named.split(",") else "n/a"
    return _fmt(v)


def _pred(row: pd.Series) -> list[str]:
    """The predictive R-hat and bulk ESS a sampled cell recorded (blank before they were)."""
    return [_recorded(row, "max_r_hat_pred"), _recorded(row, "min_ess_bulk_pred")]


def _badness(d: Diagnostics) -> tuple:
    """Sort key: worst first (non-finite or larger R-hat, smaller ESS, more failed gates)."""
    r = d.max_r_hat if d.max_r_hat is not None else 0.0
    r = math.inf if r != r else r
    e = -math.inf if d.min_ess_bulk != d.min_ess_bulk else d.min_ess_bulk
    return (-r, e, -len(d.failed))


def _advice(gates: dict[str, Diagnostics], n: int) -> list[str]:
    """One paragraph per failed gate, with what it measured and what helps."""
    by_gate: dict[str, list[Diagnostics]] = {}
    for d in gates.values():
        for g in d.failed:
            by_gate.setdefault(g, []).append(d)
    out = []
    if "r_hat" in by_gate or "ess_bulk" in by_gate:
        cells = {id(d) for g in ("r_hat", "ess_bulk") for d in by_gate.get(g, [])}
        nonfinite = sum(1 for d in gates.values() if d.n_nonfinite_r_hat or d.n_nonfinite_ess)
        text = (
            f"{len(cells)} of {n} sampled cells have an r_hat above 1.01 or a bulk ESS "
            "below 100: their chains have not mixed, so their KL and Wasserstein numbers "
            "describe where the chains happened to be, not the posterior. More warm-up "
            "and draws (or more chains) are the fix."
        )
        if nonfinite:
            text += (
                f" In {nonfinite} of them some parameter never moved within its chains "
                "(r_hat or ESS not finite): the sampler is stuck, e.g. a step size that "
                "collapsed during warm-up."
            )
        out.append(text)
    if "divergences" in by_gate:
        ds = by_gate["divergences"]
        total = sum(d.n_divergent or 0 for d in ds)
        trans = sum(d.n_transitions for d in ds)
        out.append(
            f"{len(ds)} of {n} sampled cells have divergent transitions ({total} of "
            f"{trans}): the sampler met curvature its step size cannot follow, and "
            "the draws may miss part of the posterior. Raise target_accept (smaller "
            "steps) or reparameterize."
        )
    if "tree_depth" in by_gate:
        ds = by_gate["tree_depth"]
        hits = sum(d.n_max_tree_depth or 0 for d in ds)
        trans = sum(d.n_transitions for d in ds)
        depths = sorted({d.max_tree_depth for d in ds if d.max_tree_depth is not None})
        out.append(
            f"{len(ds)} of {n} sampled cells hit the maximum tree depth: {hits} of "
            f"{trans} transitions ({100 * hits / max(trans, 1):.0f}%) reached "
            f"max_tree_depth ({', '.join(map(str, depths))}), so their trajectories "
            "were cut at 2^D - 1 leapfrog steps before they could turn. The draws are "
            "still valid but explore slowly (low ESS per gradient); the usual causes "
            "are a step size or mass matrix that adapted poorly, or strong "
            "correlations. Raise max_tree_depth, lengthen warm-up so the step size "
            "and mass matrix adapt, or reparameterize (a dense mass matrix, "
            "mass_matrix: dense, helps with correlations)."
        )
    return out


def _sampler_section(run: RunDir, results: pd.DataFrame, spec: Spec) -> Section | None:
    """Convergence diagnostics of the sampled cells, with trace and rank plots of the worst."""
    samplers = {m.name: m for m in spec.inference if type(m).family == "sampler"}
    if "method" not in results.columns:
        return None
    sampled = results[results["method"].isin(list(samplers)) & (results["status"] == "ok")]
    if sampled.empty:
        return None
    methods = {c.cell_id: c.method for c in spec.cells()}
    axes = list(dict.fromkeys(c for c in ["method", "seed", *spec.sweep] if c in results.columns))
    gates: dict[str, Diagnostics] = {}
    trees: dict[str, xr.DataTree] = {}
    unread = []
    for cid in sampled["cell_id"]:
        method = methods.get(cid, samplers.get(str(sampled.set_index("cell_id").at[cid, "method"])))
        data = run.read_artifact(cid, ".nc")  # None: missing, or damaged (checksum)
        if data is None:
            unread.append(f"cells/{cid}.nc (missing or damaged)")
            continue
        try:
            dt = _read_diagnostic_groups(data)
            gates[cid] = diagnostic_gates(
                dt, max_tree_depth=getattr(method, "max_tree_depth", None)
            )
            trees[cid] = dt
        except Exception as e:  # a damaged file of any kind is named, not raised
            unread.append(f"cells/{cid}.nc (cannot be read: {type(e).__name__})")

    conv_cols = [
        "max_r_hat",
        "min_ess_bulk",
        "min_ess_tail",
        "ess_bulk_q05",
        "worst param",
        "max_r_hat_pred",
        "min_ess_bulk_pred",
    ]
    samp_cols = ["divergent", "at max tree depth", "mean steps", "step size", "gates failed"]
    conv, samp = [], []
    for _, r in sampled.iterrows():
        key = [_fmt(r[a]) for a in axes]
        d = gates.get(r["cell_id"])
        if d is None:  # the file could not be read: the record's numbers
            conv.append(
                key
                + [_recorded(r, c) for c in conv_cols[:4]]
                + [_fmt(r.get("worst_ess_bulk"))]
                + _pred(r)
            )
            hits = r.get("n_max_tree_depth")  # NUTS cells record it; blank (NaN) for others
            samp.append(
                key
                + [
                    _fmt(r.get("n_divergent")),
                    "?" if pd.isna(hits) else _fmt(hits),
                    _fmt(r.get("mean_tree_steps")),
                    _fmt(r.get("step_size")),
                    _fmt(r.get("gates_failed")),
                ]
            )
            continue
        worst = (d.worst_r_hat or d.worst_ess_bulk)[:1]
        conv.append(
            key
            + [
                "n/a" if d.max_r_hat is None else _fmt(d.max_r_hat),
                _fmt(d.min_ess_bulk),
                _fmt(d.min_ess_tail),
                _fmt(d.ess_bulk_quantiles[0]),
                worst[0][0] if worst else "",
            ]
            + _pred(r)
        )
        div = "" if d.n_divergent is None else f"{d.n_divergent} of {d.n_transitions}"
        depth = (
            "n/a"
            if d.n_max_tree_depth is None
            else f"{d.n_max_tree_depth} of {d.n_transitions} (D={d.max_tree_depth})"
        )
        samp.append(
            key
            + [
                div,
                depth,
                _fmt(r.get("mean_tree_steps")),
                _fmt(r.get("step_size")),
                ", ".join(d.failed),
            ]
        )

    n = len(sampled)
    n_flag = sum(1 for d in gates.values() if d.failed)
    paras = [
        "Convergence of every sampled cell, recomputed from its ArviZ file (arviz-stats on "
        "the stored posterior): the largest R-hat (rank-normalized split R-hat, two or more "
        "chains; NaN when a parameter did not move), the smallest bulk and tail ESS, the 5% "
        "quantile of the bulk ESS over parameters and the worst-mixing parameter, and the "
        "largest R-hat and smallest bulk ESS of the predictive class probabilities at the "
        "test points (the cell's record; weights are not identified, predictions are: "
        "chains can agree on the function while some weights do not mix); then the "
        "divergent transitions, the transitions whose NUTS tree reached max_tree_depth, the "
        "mean leapfrog steps per draw and the adapted step size. The gates are Stan's and "
        "ArviZ's: r_hat <= 1.01 (a non-finite r_hat fails), bulk ESS >= 100, no divergence, "
        "no transition at the maximum tree depth.",
        f"{n_flag} of {len(gates)} sampled cells fail at least one gate."
        + ("" if n_flag else " Nothing to fix."),
    ]
    paras += _advice(gates, len(gates))
    if unread:
        paras.append(
            f"{len(unread)} of {n} sampled cells' ArviZ files could not be read; their "
            f"rows show the numbers of the cell record: {', '.join(unread)}. Deleting a "
            "damaged file's cell record (cells/<cell id>.json) makes `zoo run DIR` "
            "compute that cell again."
        )
    figs = []
    worst_cells = sorted(gates, key=lambda c: _badness(gates[c]))[:MAX_TRACE_PLOTS]
    for cid in worst_cells:
        d = gates[cid]
        fig = trace_rank_figure(trees[cid], n_params=4)
        by = "R-hat" if d.max_r_hat is not None else "bulk ESS"
        failed = f"gates failed: {', '.join(d.failed)}" if d.failed else "all gates passed"
        fig.suptitle(f"{cid}: the 4 worst-mixing parameters by {by} ({failed})", fontsize=10)
        figs.append((f"trace_rank_{cid}", fig))
    if figs:
        paras.append(
            f"Trace and rank plots of the {len(figs)} worst sampled cells (largest R-hat, a "
            "non-finite one first, then smallest bulk ESS), each with its 4 worst-mixing "
            "parameters. "
            "Right: each chain's ECDF of its draws' ranks among all chains minus the uniform "
            "CDF; chains that mix stay inside the grey 95% band, a chain stuck elsewhere "
            "leaves it (Säilynoja et al. 2022)."
        )
    return Section(
        "Sampler diagnostics", paras, (axes + conv_cols, conv), figs, [(axes + samp_cols, samp)]
    )


def _study_sections(run: RunDir, results: pd.DataFrame, spec: Spec) -> list[Section]:
    """Each study's sections (once per study, in the order of ``studies:``), then diagnostics."""
    found: list[Section] = []
    for study in dict.fromkeys(STUDIES[type(s)] for s in spec.studies):
        found += study.sections(results, run, spec)
    diagnostics = _sampler_section(run, results, spec)
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
        if isinstance(v, float) and not math.isfinite(v) and k not in TIMINGS
    ]
    return ",".join(bad)


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
    metric_cols = [c for c in results.columns if c not in axes and c not in BOOKKEEPING]
    return results[[*axes, *metric_cols, *BOOKKEEPING]]


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
    axes = ["method", "seed", *[k for k in spec.sweep if k != "seed"]]
    metric_cols = [c for c in results.columns if c not in axes and c not in BOOKKEEPING]
    numeric = [c for c in metric_cols if pd.api.types.is_numeric_dtype(results[c])]
    # repeats are UCI splits when split is swept and seed is not (Trippe & Turner 2018)
    over = "split" if "split" in spec.sweep and "seed" not in spec.sweep else "seed"
    summary = summarize(results, numeric, over=over, by=[a for a in axes if a != over])
    store.write_table("summary.csv", summary)
    have_rows = len(results) > 0
    failed = results[results["status"] != "ok"] if have_rows else None
    x, hue = report_axes(spec, list(results.columns) if have_rows else axes)
    # an x or hue that is the repeat axis itself: the figures show single cells
    fig_summary = summary
    if over in (x, hue):
        fig_summary = summarize(results, numeric, over=None, by=axes)
    figures = [m for m in spec.report.figures if m in numeric]
    table_metrics = [m for m in numeric if m not in _SETTINGS]
    table_metrics = figures + [m for m in table_metrics if m not in figures]
    notes = []
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
            f"{store.root}` computes them and writes this report again."
        )
    note = _nonfinite_note(results, table_metrics) if have_rows else None
    if note:
        notes.append(note)
    headlines = []
    for m in figures:
        if len(headlines) >= MAX_HEADLINES:
            break
        if over in (x, hue):  # a trend along seeds says nothing: the means over seeds
            sentence = headline(summary, m, x if x != over else "method", "method", over=over)
        else:
            sentence = headline(summary, m, x, hue, over=over)
        if sentence:
            headlines.append(sentence)
    files = render_report(
        title=f"bnn-zoo report: {spec.name}",
        spec_text=dump_spec(spec),
        results=results,
        summary=summary,
        x=x,
        hue=hue,
        metrics=figures,
        notes=notes,
        failed=failed if failed is not None and len(failed) else None,
        table_metrics=table_metrics,
        sections=_study_sections(store, results, spec) if have_rows else [],
        headlines=headlines,
        settings=run_settings(spec, results),
        over=over,
        figure_summary=fig_summary if fig_summary is not summary else None,
    )
    return store.write_files(files)
