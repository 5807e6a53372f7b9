"""Write the tables of the README and of docs/results/ from the summaries recorded beside them.

Every table of those pages sits between two markers, ``<!-- table:NAME -->`` and
``<!-- /table -->``, and is written by this script from ``docs/results/data/``, so that a
number has one source:

- ``default_depth.csv``: the default run's summary, one row per depth, in the columns of
  :func:`reports.tables.summarize` (``<metric>_mean``, ``<metric>_ci95``, ``<metric>_n``,
  ``n``, ``grade``, ``n_grade_failed``) plus, per depth, the largest value of a diagnostic
  over the seeds' cells (``<metric>_max``, ``<metric>_min``) and the per-seed values
  (``<metric>_seeds``, space-separated, seed order). The tables ``default_depth`` and
  ``default_depth_detail`` are rendered from it by the declarations :data:`ROWS`.
- ``fixed_width_depth.csv``: the same summary of a run of
  ``specs/two_moons_depth_fixed_width.yaml`` (``--from RUN --as fixed_width_depth``), the
  table ``fixed_width_depth`` (:data:`SUMMARIES` says which table reads which summary).
- ``ground_truth_d100.csv``: the known-Gaussian control at D = 100, a row per run of
  ``specs/gaussian_ground_truth.yaml`` (``--from RUN --from RUN --as ground_truth_d100``:
  the rotated S and its diagonal control), written by :func:`ground_truth_rows`.
- ``NAME.csv`` for every other table: its header and rows as the page shows them (a table
  recorded from a run that no longer exists, or from runs this script cannot read).

Usage (from the repository root)::

    python docs/results/make_tables.py            # rewrite every marked table in place
    python docs/results/make_tables.py --check    # exit 1 and name each table out of date
    python docs/results/make_tables.py --print NAME
    python docs/results/make_tables.py --from RUN_DIR   # record the default's summary
                                                        # from a run's results.csv, then
                                                        # rewrite the tables
    python docs/results/make_tables.py --from RUN_DIR --as fixed_width_depth
    python docs/results/make_tables.py --from ROTATED --from DIAGONAL --as ground_truth_d100

``--from`` aggregates with the summary's own rule (:func:`reports.tables.summarize`: mean
and 95% Student-t interval over the seeds, cells graded failed left out of every mean and
counted); after it, state the run's commit, date and machine where the pages say which run
produced the table (the README and docs/results/default.md).
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from pathlib import Path

import pandas as pd
import yaml

from reports.tables import summarize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table_rows import ROWS, markdown  # noqa: E402  (the sibling module of the rows)

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
#: The pages whose marked tables this script writes.
PAGES = (
    ROOT / "README.md",
    ROOT / "docs" / "results.md",
    *sorted(Path(__file__).resolve().parent.glob("*.md")),
)
BLOCK = re.compile(r"(<!-- table:([\w-]+) -->\n)(.*?)(<!-- /table -->)", re.S)
DEFAULT = "default_depth"
#: The summaries ``--from`` records (``--as NAME``, default the default's) and the tables
#: rendered from each.
SUMMARIES = {
    DEFAULT: ("default_depth", "default_depth_detail"),
    "fixed_width_depth": ("fixed_width_depth",),
    # the fixed-width spec's ablations, in the same rows: its earlier settings (drawn until
    # a between-chain ESS of 1000, acceptance 0.651), chains drawn to 1600 draws, and with
    # it ChEES's acceptance at 0.9, 1600 draws at 0.8 with 20 and with 100 draws a chain
    # held
    "fixed_width_ess_stop": ("fixed_width_ess_stop",),
    "fixed_width_keep20": ("fixed_width_keep20",),
    "fixed_width_1600": ("fixed_width_1600",),
    # the spec's settings with each superchain started at its own prior draw (a control
    # over-dispersed against the MF-VI fits)
    "fixed_width_prior_starts": ("fixed_width_prior_starts",),
    # depths 3 and 4 with seeds 3-5 added to the spec's run (6 seeds)
    "fixed_width_seeds6": ("fixed_width_seeds6",),
    "fixed_width_long": ("fixed_width_long",),
    "fixed_width_long_accept": ("fixed_width_long_accept",),
    # the default's networks under the fixed-width spec's sampler (an ablation of the
    # default's sampler), in the fixed-width rows
    "default_chees": ("default_chees",),
    # the default as it was before its sampler was tempered (16 untempered chains), in the
    # default's rows
    "default_untempered": ("default_untempered",),
    # depths 3 and 4 of the default with seeds 3-5 added to its run (6 seeds)
    "default_seeds6": ("default_seeds6",),
}
#: The default's sweep axis and the columns summarized over its seeds.
AXIS = "model.depth"
MEAN_METRICS = (
    "width",
    "n_params",
    "kl_diag_full",
    "kl_ess_n",
    "kl_bias_ess",
    "kl_debiased",
    "kl_aligned",
    "kl_alignment_null",
    "kl_aligned_debiased",
    "kl_null",
    "kl_excess",
    "w2_diag_full",
    "w2_null",
    "w2sq_plugin",
    "w2sq_debiased",
    "laplace_kl",
    *(f"pred_tv_{q}" for q in ("qdiag", "qfull", "mfvi")),
    *(f"pred_tv_floor_{q}" for q in ("qdiag", "qfull", "mfvi")),
    "pred_tv_mfvi_ood",
    "pred_tv_floor_mfvi_ood",
    *(f"nll_{q}" for q in ("samples", "qfull", "qdiag", "mfvi")),
    "n_divergent",
    "saturated_frac",
)
#: Per depth, the largest (``_max``) or smallest (``_min``) value over the sampled cells.
EXTREMES = {
    "kl_rhat": "max",
    "max_r_hat": "max",
    "weights_rhat_raw": "max",
    "weights_rhat_aligned": "max",
    "orbit_rhat": "max",
    "max_r_hat_pred": "max",
    "min_ess_bulk": "min",
    "kl_rhat_nested": "max",
    "weights_rhat_nested_aligned": "max",
    "orbit_rhat_nested": "max",
    "rhat_nested_pred": "max",
    "weights_ess_bulk_aligned": "min",
    "tempering_swap_rate_min": "min",
    "tempering_round_trips": "min",
}
#: Per depth, each seed's value (seed order).
PER_SEED = ("kl_debiased_se", "kl_aligned_debiased_se", "draws_per_chain", "reference_grade")


class UsageError(Exception):
    """Bad input to this script: its message names the file and the fix (exit code 2)."""


# --- rendering (the row declarations: table_rows.py) -----------------------------------


def default_table(name: str, summary: pd.DataFrame) -> str:
    """A table of :data:`ROWS`: one column per depth."""
    summary = summary.sort_values(AXIS)
    header = [""] + [f"depth {int(d)}" for d in summary[AXIS]]
    n = int(summary["n"].max())  # seeds behind a mean; a label may name them
    words = {"n": n, "seeds": " / ".join(str(s) for s in range(n))}
    rows = [
        [label.format(**words)] + [how(rec) for _, rec in summary.iterrows()]
        for label, how in ROWS[name]
    ]
    return markdown(header, rows)


def recorded_table(path: Path) -> str:
    """A table recorded as it reads: its CSV's first line the header, the rest its rows."""
    with path.open(newline="") as fh:
        header, *rows = list(csv.reader(fh))
    return markdown(header, rows)


def render(name: str) -> str:
    """The table ``name`` as this script writes it."""
    if name in ROWS:
        (summary,) = (s for s, tables in SUMMARIES.items() if name in tables)
        dtype = {f"{c}_seeds": str for c in PER_SEED}
        return default_table(name, pd.read_csv(DATA / f"{summary}.csv", dtype=dtype))
    path = DATA / f"{name}.csv"
    if not path.is_file():
        raise UsageError(
            f"no recorded summary for the table {name!r}: expected {path.relative_to(ROOT)}"
        )
    return recorded_table(path)


def rewrite(text: str) -> str:
    """``text`` with every marked table replaced by what :func:`render` gives."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + m.group(4), text)


# --- recording the default's summary from a run ---------------------------------------


def from_run(run_dir: Path) -> pd.DataFrame:
    """The default's per-depth summary from a run directory's ``results.csv``.

    Means and 95% t-intervals come from :func:`reports.tables.summarize` over the seeds,
    per depth and method; each metric is taken from the method that records it (the
    sampled cells' KLs, MF-VI's Laplace KL). The extremes and per-seed values are those of
    the sampled cells (the rows with a ``reference_grade``).
    """
    path = run_dir / "results.csv"
    if not path.is_file():
        raise UsageError(
            f"{path}: no results.csv there; give the run directory that `zoo run` wrote"
        )
    res = pd.read_csv(path).copy()  # one block, so that a new column does not fragment it
    if AXIS not in res.columns or "reference_grade" not in res.columns:
        raise UsageError(
            f"{path}: no {AXIS!r} or 'reference_grade' column: not a run of the default spec"
        )
    if "w2_diag_full" in res.columns:
        res["w2sq_plugin"] = res["w2_diag_full"] ** 2  # per cell, before any mean
    metrics = [m for m in MEAN_METRICS if m in res.columns]
    summ = summarize(res, metrics, over="seed", by=[AXIS, "method"])
    ok = res["status"].eq("ok") if "status" in res.columns else True
    sampled = res[res["reference_grade"].notna() & ok]
    rows = []
    for depth, group in summ.groupby(AXIS):
        cells = sampled[sampled[AXIS] == depth].sort_values("seed")
        main = (
            group[group["grade"].notna()].iloc[0] if group["grade"].notna().any() else group.iloc[0]
        )
        rec: dict = {
            AXIS: depth,
            "n": main["n"],
            "grade": main["grade"],
            "n_grade_failed": main["n_grade_failed"],
        }
        for m in metrics:
            best = group.loc[group[f"{m}_n"].idxmax()]
            rec.update({f"{m}_{s}": best[f"{m}_{s}"] for s in ("mean", "ci95", "n")})
        for m, how in EXTREMES.items():
            if m in cells.columns:
                rec[f"{m}_{how}"] = getattr(cells[m], how)()
        for m in PER_SEED:
            if m in cells.columns:
                rec[f"{m}_seeds"] = " ".join(_seed_word(v) for v in cells[m])
        rows.append(rec)
    return pd.DataFrame(rows)


#: The known-Gaussian control's table, recorded from its runs by :func:`ground_truth_rows`.
GROUND_TRUTH = "ground_truth_d100"
#: The header of the known-Gaussian control's table (:func:`ground_truth_rows`).
GROUND_TRUTH_HEADER = [
    "D",
    "S",
    "true KL",
    "sampled KL",
    "shift null",
    "excess over it ± s.e.",
    "bias b(n, D) ± s.e.",
    "kl_debiased ± s.e.",
    "n",
    "seconds (warm-up + draws)",
]


def ground_truth_rows(run_dirs: list[Path]) -> list[list[str]]:
    """A row per dimension of each run of ``specs/gaussian_ground_truth.yaml``: its
    ``results.csv`` beside the S it sampled (``spec.yaml``'s ``simulation.structure``), the
    debiased KL's distance to the truth in its own s.e."""
    rows = []
    for run in run_dirs:
        path = run / "results.csv"
        if not path.is_file() or not (run / "spec.yaml").is_file():
            raise UsageError(f"{run}: no results.csv and spec.yaml: give a `zoo run` directory")
        sim = yaml.safe_load((run / "spec.yaml").read_text()).get("simulation") or {}
        if "kl_true" not in pd.read_csv(path, nrows=0).columns:
            raise UsageError(f"{path}: no kl_true column: not a run of gaussian_ground_truth")
        kind = str(sim.get("structure", "rotated"))
        label = "diagonal (control)" if kind == "diagonal" else kind
        for _, r in pd.read_csv(path).iterrows():
            z = (r["kl_debiased"] - r["kl_true"]) / r["kl_debiased_se"]
            rows.append(
                [
                    f"{int(r['dim'])}",
                    label,
                    f"{r['kl_true']:.3f}" if r["kl_true"] else "0",
                    f"{r['kl']:.3f}",
                    f"{r['kl_null']:.3f}",
                    f"{r['kl_excess']:.3f} ± {r['excess_se']:.3f}",
                    f"{r['kl_bias']:.3f} ± {r['kl_bias_se']:.3f}",
                    f"{r['kl_debiased']:.3f} ± {r['kl_debiased_se']:.3f} ({z:.1f} s.e.)",
                    f"{r['n_eff']:.0f}",
                    f"{r['warmup_seconds']:.1f} + {r['seconds']:.1f}",
                ]
            )
    return rows


def record(name: str, runs: list[Path]) -> None:
    """Write ``data/<name>.csv`` from ``runs`` (``--from``, ``--as name``)."""
    buf = io.StringIO()
    if name in SUMMARIES:
        if len(runs) != 1:
            raise UsageError(f"{name} is recorded from one run; got {len(runs)}")
        from_run(runs[0]).to_csv(buf, index=False)
    else:
        csv.writer(buf, lineterminator="\n").writerows(
            [GROUND_TRUTH_HEADER, *ground_truth_rows(runs)]
        )
    (DATA / f"{name}.csv").write_text(buf.getvalue())


def _seed_word(v: object) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return f"{v:.2f}" if isinstance(v, float) else str(v)


# --- command line ---------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a page's table is out of date")
    ap.add_argument("--print", metavar="NAME", help="print one table")
    ap.add_argument(
        "--from",
        dest="runs",
        metavar="RUN_DIR",
        action="append",
        type=Path,
        help="record a summary from a run (repeat for a table of several runs)",
    )
    ap.add_argument(
        "--as",
        dest="summary",
        default=DEFAULT,
        choices=sorted([*SUMMARIES, GROUND_TRUTH]),
        help=f"which summary --from records (default {DEFAULT})",
    )
    args = ap.parse_args(argv)
    try:
        if args.print:
            sys.stdout.write(render(args.print))
            return 0
        if args.runs:
            record(args.summary, args.runs)
        stale = []
        for page in PAGES:
            old = page.read_text()
            new = rewrite(old)
            if new != old:
                stale.append(str(page.relative_to(ROOT)))
                if not args.check:
                    page.write_text(new)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check and stale:
        print(
            f"out of date: {', '.join(stale)}; run: python docs/results/make_tables.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
