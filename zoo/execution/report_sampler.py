"""The sampler diagnostics section of a run's report.

Its tables come from what each sampled cell recorded when it ran (``zoo.execution.evaluate``:
R-hat, ESS, gates, divergences, transitions at the maximum tree depth, the reference grade;
made into tables and advice by :mod:`reports.sampler_report`, with the grades' gate table), so the diagnostics are computed once; a cell's
ArviZ file is read only to draw the trace and rank plots of the worst cells
(:func:`reports.figures.diagnostics.trace_rank_figure`), and only its ``posterior`` and
``sample_stats`` groups.
"""

from __future__ import annotations

import io

import pandas as pd
import xarray as xr

from reports.document import Section, section
from reports.figures.diagnostics import arviz_plots, arviz_plots_figures, trace_rank_figure
from reports.sampler_report import (
    SAMPLER_INTRO,
    grade_blocks,
    sampler_advice,
    sampler_record,
    sampler_tables,
    worst_cells,
)
from zoo.execution.store import RunDir
from zoo.spec import Spec

__all__ = ["MAX_TRACE_PLOTS", "read_diagnostic_groups", "sampler_section"]

#: Sampled cells whose trace and rank plots are drawn: the worst ones.
MAX_TRACE_PLOTS = 3


def read_diagnostic_groups(data: bytes) -> xr.DataTree:
    """The ``posterior`` and ``sample_stats`` groups and root attributes of a cell's file.

    Only these are loaded: the test-set groups of a sampled cell are far larger.
    """
    with xr.open_datatree(io.BytesIO(data), engine="h5netcdf") as dt:
        groups = {"/": xr.Dataset(attrs=dict(dt.attrs))}
        for g in ("posterior", "sample_stats"):
            if g in dt.children:
                groups[g] = dt[g].to_dataset().load()
        return xr.DataTree.from_dict(groups)


def sampler_section(run: RunDir, results: pd.DataFrame, spec: Spec) -> Section | None:
    """Convergence diagnostics of the sampled cells from their records, with trace and rank
    plots of the worst (read from their ArviZ files)."""
    samplers = {m.name: m for m in spec.inference if type(m).family == "sampler"}
    if "method" not in results.columns:
        return None
    sampled = results[results["method"].isin(list(samplers)) & (results["status"] == "ok")]
    if sampled.empty:
        return None
    methods = {c.cell_id: c.method for c in spec.cells()}
    axes = list(dict.fromkeys(c for c in ["method", "seed", *spec.sweep] if c in results.columns))
    records = {}
    for _, r in sampled.iterrows():
        m = methods.get(r["cell_id"], samplers.get(str(r["method"])))
        records[r["cell_id"]] = sampler_record(
            r.to_dict(),
            chains=getattr(m, "chains", None),
            max_tree_depth=getattr(m, "max_tree_depth", None),
        )
    conv, samp = sampler_tables(sampled, axes, records)
    n_flag = sum(1 for d in records.values() if d.failed)
    grade_paras, grade_tables = grade_blocks(records)
    paras = [
        SAMPLER_INTRO,
        f"{n_flag} of {len(records)} sampled cells fail at least one gate."
        + ("" if n_flag else " Nothing to fix."),
        *grade_paras,
        *sampler_advice(list(records.values())),
    ]
    figs, unread = [], []
    by_arviz, n_cells = arviz_plots() is not None, 0
    for cid in worst_cells(records, MAX_TRACE_PLOTS):
        data = run.read_artifact(cid, ".nc")  # None: missing, or damaged (checksum)
        if data is None:
            unread.append(f"cells/{cid}.nc (missing or damaged)")
            continue
        try:
            drawn = _figures(read_diagnostic_groups(data), by_arviz)
        except Exception as e:  # a damaged file of any kind is named, not raised
            unread.append(f"cells/{cid}.nc (cannot be read: {type(e).__name__})")
            continue
        d = records[cid]
        by = "R-hat" if d.max_r_hat is not None else "bulk ESS"
        failed = f"gates failed: {', '.join(d.failed)}" if d.failed else "all gates passed"
        n_cells += 1
        for kind, fig in drawn:
            fig.suptitle(f"{cid}: the 4 worst-mixing parameters by {by} ({failed})", fontsize=10)
            figs.append((f"{kind}_{cid}", fig))
    if unread:
        paras.append(
            f"{len(unread)} of the worst sampled cells' ArviZ files could not be read, so "
            f"they have no trace plot: {', '.join(unread)}. Deleting a damaged file's cell "
            "record (cells/<cell id>.json) makes `zoo run DIR` compute that cell again."
        )
    if figs:
        rank = (
            "The rank plots (arviz-plots' plot_rank; a cell it cannot draw, such as one with a "
            "parameter that never moved, gets the trace-and-rank figure of matplotlib) show "
            "each chain's ECDF of its draws' fractional ranks among all chains minus the "
            "uniform CDF, with ArviZ's simultaneous band"
            if by_arviz
            else "Right: each chain's ECDF of its draws' ranks among all chains minus the "
            "uniform CDF, with the grey simultaneous 95% band"
        )
        paras.append(
            f"Trace and rank plots of the {n_cells} worst sampled cells (largest R-hat, a "
            "non-finite one first, then smallest bulk ESS), each with its 4 worst-mixing "
            f"parameters{', drawn by arviz-plots' if by_arviz else ''}. {rank}: chains that "
            "mix stay inside the band, a chain stuck elsewhere leaves it (Säilynoja et al. "
            "2022)."
        )
    return section("Sampler diagnostics", paras, [conv, samp, *grade_tables], figs)


def _figures(tree, by_arviz: bool) -> list[tuple[str, object]]:
    """``(kind, figure)`` of a cell's 4 worst-mixing parameters: arviz-plots' trace and rank
    plots where it is installed and can draw them (a parameter that never moved defeats its
    density estimate), else :func:`trace_rank_figure`."""
    if by_arviz:
        try:
            return list(zip(("trace", "rank"), arviz_plots_figures(tree, n_params=4), strict=True))
        except Exception:  # drawn by our own figure below
            pass
    return [("trace_rank", trace_rank_figure(tree, n_params=4))]
