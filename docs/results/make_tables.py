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
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from reports.tables import summarize

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
}
#: Per depth, each seed's value (seed order).
PER_SEED = ("kl_debiased_se", "kl_aligned_debiased_se", "draws_per_chain", "reference_grade")


class UsageError(Exception):
    """Bad input to this script: its message names the file and the fix (exit code 2)."""


# --- rendering ------------------------------------------------------------------------


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table (``|`` inside a cell escaped)."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [line(header), "|" + "---|" * len(header)] + [line(r) for r in rows]
    return "\n".join(out) + "\n"


def _num(rec: pd.Series, col: str, dec: int) -> str:
    v = rec.get(col)
    return "-" if v is None or pd.isna(v) else f"{float(v):.{dec}f}"


def ci(metric: str, dec: int) -> Callable[[pd.Series], str]:
    """``mean ± 95% half-width`` at ``dec`` decimals, ``[k/n]`` when cells were left out."""

    def cell(rec: pd.Series) -> str:
        text = _num(rec, f"{metric}_mean", dec)
        if not pd.isna(rec.get(f"{metric}_ci95", np.nan)):
            text += f" ± {_num(rec, f'{metric}_ci95', dec)}"
        k, n = rec.get(f"{metric}_n", np.nan), rec.get("n", np.nan)
        if not (pd.isna(k) or pd.isna(n)) and int(k) < int(n):
            text += f" [{int(k)}/{int(n)}]"
        return text

    return cell


def val(col: str, dec: int) -> Callable[[pd.Series], str]:
    """A value alone (a mean without its interval, or an extreme over the seeds)."""
    return lambda rec: _num(rec, col, dec)


def pct(col: str) -> Callable[[pd.Series], str]:
    """A fraction as a percentage to 3 significant digits."""
    return lambda rec: "-" if pd.isna(rec.get(col)) else f"{100 * float(rec[col]):.3g}%"


def seeds(col: str, sep: str = " / ") -> Callable[[pd.Series], str]:
    """The per-seed values; ``x (3)`` when every seed has the same."""

    def cell(rec: pd.Series) -> str:
        vals = str(rec.get(f"{col}_seeds", "")).split()
        if len(set(vals)) == 1 and len(vals) > 1:
            return f"{vals[0]} ({len(vals)})"
        return sep.join(vals) or "-"

    return cell


def span(col: str) -> Callable[[pd.Series], str]:
    """The range of the per-seed values, ``lo-hi``."""

    def cell(rec: pd.Series) -> str:
        vals = str(rec.get(f"{col}_seeds", "")).split()
        if not vals:
            return "-"
        nums = sorted(vals, key=float)
        return nums[0] if nums[0] == nums[-1] else f"{nums[0]}-{nums[-1]}"

    return cell


def joined(*parts: Callable[[pd.Series], str], sep: str = " / ") -> Callable[[pd.Series], str]:
    return lambda rec: sep.join(p(rec) for p in parts)


def _width(rec: pd.Series) -> str:
    return f"{_num(rec, 'width_mean', 0)} ({_num(rec, 'n_params_mean', 0)})"


def _tv(rec: pd.Series) -> str:
    tv = joined(val("pred_tv_mfvi_mean", 3), val("pred_tv_mfvi_ood_mean", 3))(rec)
    floor = joined(val("pred_tv_floor_mfvi_mean", 3), val("pred_tv_floor_mfvi_ood_mean", 3))
    return f"{tv} [{floor(rec)}]"


Row = tuple[str, Callable[[pd.Series], str]]
_KL, _DEB = ci("kl_diag_full", 2), ci("kl_debiased", 2)
_W2 = joined(ci("w2sq_plugin", 1), ci("w2sq_debiased", 1))
_DIV = joined(val("n_divergent_mean", 0), pct("saturated_frac_mean"))
#: The tables rendered from ``default_depth.csv``: (row label, how a depth's cell reads); a
#: label's ``{n}`` is the number of seeds and ``{seeds}`` their list.
#: The rows every depth table opens with: the network, the headline and its parts.
_KL_ROWS: list[Row] = [
    ("width (D = weights and biases)", _width),
    (
        "**headline**: KL with the hidden units aligned, less its bias and its alignment "
        "null (`kl_aligned_debiased`)",
        ci("kl_aligned_debiased", 2),
    ),
    ("its chain-group s.e. within one cell", span("kl_aligned_debiased_se")),
    ("the alignment null subtracted (`kl_alignment_null`)", ci("kl_alignment_null", 2)),
    ("KL(q_diag || q_full) of the draws as sampled, plug-in", _KL),
    ("the same less its sampling bias (`kl_debiased`)", _DEB),
    ("W2(q_diag, q_full)², plug-in / less its sampling bias (`w2sq_debiased`)", _W2),
]
ROWS: dict[str, list[Row]] = {
    "default_depth": [
        *_KL_ROWS,
        ("the KL's own R-hat (largest of {n})", val("kl_rhat_max", 3)),
        ("TV of MF-VI's predictive to the samples', test / far [its floor]", _tv),
        (
            "largest R-hat of the weights aligned / of their orbit coordinates / as sampled",
            joined(
                val("weights_rhat_aligned_max", 3),
                val("orbit_rhat_max", 3),
                val("weights_rhat_raw_max", 2),
            ),
        ),
        ("largest R-hat of the test predictions", val("max_r_hat_pred_max", 3)),
        ("divergent transitions per cell / trees cut at max_tree_depth 8", _DIV),
        ("reference grade of the {n} NUTS cells", seeds("reference_grade", ", ")),
    ],
    "default_depth_detail": [
        ("the KL's effective n (chain-group spread, `kl_ess_n`)", ci("kl_ess_n", 0)),
        ("exact Wishart bias at that n (`kl_bias_ess`)", ci("kl_bias_ess", 2)),
        (
            "`kl_debiased_se` of each cell (chain-group jackknife), seeds {seeds}",
            seeds("kl_debiased_se"),
        ),
        ("the shift null (same chains, parameters made independent)", ci("kl_null", 2)),
        (
            "closed-form W2(q_diag, q_full) / its shift-null floor",
            joined(val("w2_diag_full_mean", 2), val("w2_null_mean", 2)),
        ),
        ("Laplace KL at the MF-VI mode (Gauss-Newton, no sampling)", ci("laplace_kl", 1)),
        (
            "predictive TV to the samples on test points: q_diag / q_full / MF-VI",
            joined(
                val("pred_tv_qdiag_mean", 2),
                val("pred_tv_qfull_mean", 2),
                val("pred_tv_mfvi_mean", 3),
            ),
        ),
        (
            "each TV's own floor (draw noise of both sides): q_diag / q_full / MF-VI",
            joined(*(val(f"pred_tv_floor_{q}_mean", 3) for q in ("qdiag", "qfull", "mfvi"))),
        ),
        (
            "test NLL: samples / q_full / q_diag / MF-VI",
            joined(
                val("nll_samples_mean", 3),
                val("nll_qfull_mean", 2),
                val("nll_qdiag_mean", 2),
                val("nll_mfvi_mean", 3),
            ),
        ),
        (
            "draws per chain (16 chains) where the stopping rule stopped, seeds {seeds}",
            seeds("draws_per_chain"),
        ),
        (
            "smallest bulk ESS / largest R-hat of the weights",
            joined(val("min_ess_bulk_min", 0), val("max_r_hat_max", 2)),
        ),
        (
            "excess over the shift null (a cross-check, biased low where chains mix slowly)",
            ci("kl_excess", 2),
        ),
        ("the aligned KL, plug-in (`kl_aligned`)", ci("kl_aligned", 2)),
    ],
    "fixed_width_depth": [
        *_KL_ROWS,
        (
            "the KL's own R-hat, split / nested (largest of {n})",
            joined(val("kl_rhat_max", 3), val("kl_rhat_nested_max", 3)),
        ),
        ("TV of MF-VI's predictive to the samples', test / far [its floor]", _tv),
        (
            "largest R-hat of the weights aligned, split / nested (superchains)",
            joined(val("weights_rhat_aligned_max", 3), val("weights_rhat_nested_aligned_max", 3)),
        ),
        (
            "largest R-hat of the orbit coordinates, split / nested / of the weights as sampled",
            joined(
                val("orbit_rhat_max", 3),
                val("orbit_rhat_nested_max", 3),
                val("weights_rhat_raw_max", 2),
            ),
        ),
        (
            "largest R-hat of the test predictions, split / nested",
            joined(val("max_r_hat_pred_max", 3), val("rhat_nested_pred_max", 3)),
        ),
        ("smallest bulk ESS of the aligned weights", val("weights_ess_bulk_aligned_min", 0)),
        ("divergent transitions per cell / trajectories at max_leapfrog", _DIV),
        ("Laplace KL at the MF-VI mode (Gauss-Newton, no sampling)", ci("laplace_kl", 1)),
        ("draws per chain, seeds {seeds}", seeds("draws_per_chain")),
        ("reference grade of the {n} ChEES cells", seeds("reference_grade", ", ")),
    ],
}


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
        "--from", dest="run", metavar="RUN_DIR", help="record the default's summary from a run"
    )
    ap.add_argument(
        "--as",
        dest="summary",
        default=DEFAULT,
        choices=sorted(SUMMARIES),
        help=f"which summary --from records (default {DEFAULT})",
    )
    args = ap.parse_args(argv)
    try:
        if args.print:
            sys.stdout.write(render(args.print))
            return 0
        if args.run:
            summary = from_run(Path(args.run))
            buf = io.StringIO()
            summary.to_csv(buf, index=False)
            (DATA / f"{args.summary}.csv").write_text(buf.getvalue())
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
