"""Tables and report of a run directory, rebuilt from its stored cells only.

``results.csv`` has one row per stored cell (sweep axes, metrics, bookkeeping; no timings,
so the same spec and seed give byte-identical files), ``summary.csv`` the mean and
standard error over seeds, and the report adds sections for what the cells hold:

- sampled cells (NUTS/HMC): convergence diagnostics per cell and trace/rank plots read
  back from the cells' ArviZ files;
- the price of mean field: an explanation of the KL and Wasserstein columns and of how
  q_full was estimated (the estimate depends on draws versus parameters, see below).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo.run.runner import dump_spec, load_cells
from zoo.spec.schema import Spec

__all__ = ["BOOKKEEPING", "TIMINGS", "build_report"]

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


def _sampler_section(out_dir: Path, results, spec: Spec):
    from reports.diagnostics import trace_rank_figure
    from reports.render import Section
    from zoo.run.arviz_io import load_datatree

    kinds = {m.name: m.kind for m in spec.inference}
    sampled = results[results["method"].map(kinds).isin(["nuts", "hmc"])]
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
        path = out_dir / "cells" / f"{r['cell_id']}.nc"
        if path.is_file():
            fig = trace_rank_figure(load_datatree(path), n_params=4, seed=0)
            fig.suptitle(f"trace and rank plots: {r['cell_id']}")
            figs.append((f"trace_rank_{r['cell_id']}", fig))
    return Section("Sampler diagnostics", paras, (axes + cols, rows), figs)


def _mean_field_section(results, spec: Spec):
    from reports.render import Section

    if "kl_diag_full" not in results.columns:
        return None
    fits = {(m.gaussian_fit.cov, m.gaussian_fit.jitter) for m in spec.inference
            if m.kind in ("nuts", "hmc")}  # fmt: skip
    desc = ", ".join(f"{c} covariance with jitter {j:g}" for c, j in sorted(fits))
    ok = results[results["status"] == "ok"]
    few = ok[(ok["n_draws"] <= ok["dim"])] if {"n_draws", "dim"} <= set(ok.columns) else ok[:0]
    paras = [
        "kl_diag_full is KL(q_diag || q_full), where q_full is the Gaussian fit to the sampler's "
        "draws of all weights and biases and q_diag its KL-closest diagonal Gaussian "
        "(variances 1 / diag(S^-1)); kl_diag_full.layerK is the same within layer K. "
        "w2_diag_full is the closed-form 2-Wasserstein distance between q_diag and q_full; "
        "w_error is the blog's Wasserstein error: the empirical W2 between draws of q_diag "
        "and the sampler's draws minus the same for q_full (exact assignment). In tens of "
        "dimensions it is biased below zero: q_diag has less total variance than q_full, and "
        "less spread points are easier to match, so it comes out negative even on exact "
        "Gaussian draws where q_diag is the wrong one. w_excess removes each Gaussian's own "
        "sampling term, W2^2(q, sampler) - W2^2(q, q') / 2 with q' a second set of draws, and "
        "takes the difference, diag minus full (squared units; reports/gaussian.py). Lower "
        "means the mean-field assumption costs less (Farquhar, Smith & Gal 2020).",
        f"q_full estimate: {desc}.",
    ]
    if len(few):
        paras.append(
            f"{len(few)} cells have no more draws than parameters: their sample covariance is "
            "singular, and the KL depends on the estimator and the jitter (Ledoit-Wolf "
            "shrinks towards a diagonal and underestimates it; the empirical covariance "
            "with jitter overestimates it). Compare depths at a fixed parameter budget, "
            "draw count and estimator, not the absolute values."
        )
    figs = []
    if "kl_excess" in results.columns:
        paras.append(
            "kl_null is the KL that the same chains give after every parameter's series is "
            "rotated within its chain by its own random offset (mean of 8 rotations; "
            "kl_null_sd their spread): each parameter keeps its marginal and its "
            "autocorrelation, the alignment between parameters is gone, so kl_null is what "
            "finite, autocorrelated draws of independent parameters would show. kl_excess = "
            "kl_diag_full - kl_null is the part the correlations between parameters explain. "
            "A chain that mixes poorly has a high kl_null, and then a high kl_diag_full says "
            "little about the posterior (reports/kl_null.py). For independent Gaussian draws "
            "the estimator's bias is known in closed form, (1/2)(sum_k psi((n-k)/2) - D "
            "psi((n-D)/2)), about D^2 / 4n, whatever the covariance; kl_null_draws is the n "
            "for which it equals kl_null: how many independent draws the chains are worth to "
            "the covariance estimate (reports.gaussian.kl_sampling_bias)."
        )
        targets = sorted({m.kl_target_draws for m in spec.inference
                          if m.kind in ("nuts", "hmc") and m.kl_target_draws is not None})  # fmt: skip
        if targets:
            paras.append(
                f"The sampler drew until kl_null_draws reached {', '.join(map(str, targets))} "
                "(kl_target_draws; draws_per_chain is where each cell stopped): a chain that "
                "mixes slowly draws longer, so every cell's KL carries about the same sampling "
                "bias, the closed form at that n (larger for larger D), instead of a bias "
                "that grows with the depth's autocorrelation. With a fixed number of draws the "
                "depths that mix worst would show the largest KL for that reason alone."
            )
        if "kl_output_columns" in results.columns:
            paras.append(
                "kl_output_columns is the KL of the output layer's columns, each block on its "
                "own: the C weights from one hidden unit to the C outputs (and the C biases). A "
                "softmax is unchanged when the same constant is added to every logit, so these "
                "weights are correlated at any depth, and there are as many blocks as units in "
                "the last hidden layer: at a fixed parameter budget that layer narrows with "
                "depth, and this part of the KL falls with it for a reason unrelated to the "
                "paper's argument. The KL is not additive over blocks: compare the trends, "
                "do not subtract."
            )
        figs = [("kl_null", _kl_null_figure(ok, spec))]
    if "agreement_vi" in results.columns:
        paras.append(
            "agreement_vi and tv_vi compare the predictive distributions of the variational "
            "method the chains started from and of the sampler on the test set: the "
            "fraction of points with the same predicted class, and the mean total variation "
            "distance."
        )
    return Section("The price of mean field", paras, None, [f for f in figs if f[1] is not None])


def _kl_null_figure(ok, spec: Spec):
    """KL, shift null and excess against the report's x axis (mean and s.e. over seeds)."""
    from reports.kl_null import kl_null_figure

    x = spec.report.x
    if x not in ok.columns:
        return None
    rows = ok[ok["kl_excess"].notna()]
    groups = [c for c in rows.columns if c.startswith("model.activation") or c == "method"]
    curves = {}
    for key, part in rows.groupby(groups) if groups else [((), rows)]:
        tag = ", ".join(map(str, key if isinstance(key, tuple) else (key,)))
        for col, name in (("kl_diag_full", "KL"), ("kl_null", "shift null"),
                          ("kl_excess", "excess"), ("kl_output_columns", "output columns")):  # fmt: skip
            if col not in part.columns or part[col].isna().all():
                continue
            g = part.groupby(x)[col]
            se = g.std(ddof=1) / g.count() ** 0.5
            label = f"{name} ({tag})" if tag else name
            curves[label] = (
                g.mean().index.to_numpy(),
                g.mean().to_numpy(),
                se.fillna(0).to_numpy(),
            )
    return kl_null_figure(curves, xlabel=x) if curves else None


def _product_section(out_dir: Path, results, spec: Spec):
    import numpy as np

    from reports.product_matrix import product_covariance_figure
    from reports.render import Section

    if "product_offdiag_mass" not in results.columns:
        return None
    done = results[results["product_offdiag_mass"].notna() & (results["status"] == "ok")]
    x = spec.report.x if spec.report.x in done.columns else "method"
    first = done.drop_duplicates(subset=[c for c in ("method", x) if c in done.columns])
    covs = {}
    for _, r in first.head(6).iterrows():
        path = out_dir / "cells" / f"{r['cell_id']}.product_cov.npz"
        if path.is_file():
            with np.load(path) as f:
                covs[f"{r['method']}, {x}={r[x]}, seed {r['seed']}"] = f["cov"]
    paras = [
        "The covariance of vec(W_L ... W_1), the product of the posterior's weight matrices, "
        f"over {spec.metrics.product_matrix_draws} draws of the fitted variational posterior "
        "(row-major: entry a*n_in + b is W[a, b]; model.depth d has d + 1 weight matrices). Every layer is mean-field, yet from three "
        "layers on the product can carry covariance between all its entries (Farquhar et al. "
        "2020, section 2). product_offdiag_mass is the share of its squared Frobenius norm "
        "off the diagonal."
    ]
    figs = [("product_covariance_trained",
             product_covariance_figure(covs, title="posterior product-matrix covariance"))] \
        if covs else []  # fmt: skip
    return Section("Product-matrix covariance of the trained networks", paras, None, figs)


def build_report(out_dir: Path, spec: Spec) -> dict[str, Path]:
    """Write results.csv, summary.csv and the report from the stored cells of ``spec``."""
    import pandas as pd

    from reports.render import render_report
    from reports.tables import summarize, write_csv_atomic

    by_id = {r["cell_id"]: r for r in load_cells(out_dir)}
    axes = ["method", "seed", *[k for k in spec.sweep if k != "seed"]]
    rows = []
    cells = spec.cells()
    for cell in cells:  # spec order, so the file does not depend on run order
        rec = by_id.get(cell.cell_id)
        if rec is None:
            continue
        row = {a: cell.axes.get(a, cell.spec.seed if a == "seed" else None) for a in axes}
        row.update({k: v for k, v in rec["metrics"].items() if k not in TIMINGS})
        row.update(cell_id=rec["cell_id"], status=rec["status"], error=rec["error"])
        rows.append(row)
    results = pd.DataFrame(rows)
    metric_cols = [c for c in results.columns if c not in axes and c not in BOOKKEEPING]
    results = results[[*axes, *metric_cols, *BOOKKEEPING]] if rows else results
    write_csv_atomic(results, out_dir / "results.csv")
    numeric = [c for c in metric_cols if pd.api.types.is_numeric_dtype(results[c])]
    # repeats are UCI splits when split is swept and seed is not (Trippe & Turner 2018)
    over = "split" if "split" in spec.sweep and "seed" not in spec.sweep else "seed"
    summary = summarize(results, numeric, over=over, by=[a for a in axes if a != over])
    write_csv_atomic(summary, out_dir / "summary.csv")
    failed = results[results["status"] != "ok"] if rows else None
    figs = [m for m in spec.report.figures if m in numeric]
    notes = [spec.description] if spec.description else []
    notes.append(f"{len(results)} cells stored of {len(cells)} in the spec.")
    sections = []
    if rows:
        sections = [s for s in (_mean_field_section(results, spec),
                                _sampler_section(out_dir, results, spec),
                                _product_section(out_dir, results, spec)) if s is not None]  # fmt: skip
        from zoo.studies.ktied.report import ktied_sections
        from zoo.studies.pruning.report import pruning_sections

        sections += pruning_sections(out_dir, results, spec)
        sections += ktied_sections(out_dir, results, spec)
    return render_report(
        out_dir,
        title=f"bnn-zoo report: {spec.name}",
        spec_text=dump_spec(spec),
        results=results,
        summary=summary,
        x=_axis(spec.report.x, axes, [*[a for a in spec.sweep if a != "seed"], "method"]),
        hue=_axis(spec.report.hue, axes, ["method"]),
        metrics=figs,
        notes=notes,
        failed=failed if failed is not None and len(failed) else None,
        table_metrics=[m for m in numeric if m not in _SETTINGS],
        sections=sections,
    )
