"""The terminal summary of a run: per method, the headline means of ``summary.csv``; and
whether a ``zoo run`` is going in a run directory now (:func:`run_holder`, for ``zoo
status``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from reports.tables import grade_cell
from zoo.execution.rundir import RunDir
from zoo.studies import STUDIES

__all__ = ["print_summary", "run_holder"]


def run_holder(run_dir: Path) -> int | None:
    """The pid of the ``zoo run`` that holds ``run_dir`` now, or None when none does
    (:meth:`RunDir.holder`: where the kernel's lock table is missing, not Linux, None)."""
    return RunDir(run_dir).holder()


#: Metrics every cell records that the terminal summary shows first; each study's own
#: headline metrics (``Study.headline``) follow, then the sampler's diagnostics.
_FIRST = ("accuracy", "nll", "rmse")
_LAST = ("max_r_hat", "min_ess_bulk", "draws_per_chain")


def _headline() -> tuple[str, ...]:
    """The summary's metric order: the cell's, each study's headline, the sampler's."""
    return _FIRST + tuple(m for s in STUDIES.values() for m in s.headline) + _LAST


_SUMMARY_COLS = 8  # metrics per method in the terminal summary; all of them are in summary.csv


def print_summary(out: Path) -> None:
    """Print, per method, the headline means of ``summary.csv`` within the terminal's width.

    Columns that are empty for a method are left out (an ungraded method has no grade
    column; a blank key is ``-``, never ``NaN``), a mean over fewer finite values than
    the row's seeds is marked ``[k/n]``, and at most ``_SUMMARY_COLS`` metrics are shown per
    method (the headline ones first); the file has all of them.
    """
    path = out / "summary.csv"
    if not path.exists() or path.stat().st_size == 0:
        return
    df = pd.read_csv(path)
    if df.empty:  # no cell stored, or none ok
        print(f"no finished cell to summarize yet (zoo status {out} lists the cells)")
        return
    width = shutil.get_terminal_size((100, 24)).columns  # COLUMNS, the terminal, or 100
    hidden = (
        "n_train_mean",
        "n_test_mean",
        "final_loss_mean",
        "n_var_params_mean",
        "n_params_mean",
    )
    means = [c for c in df.columns if c.endswith("_mean") and c not in hidden]
    keys = [c for c in df.columns if c not in means and not c.endswith(("_sem", "_ci95", "_n"))]
    keys = [c for c in keys if c not in ("n", "grade", "n_grade_failed") and c not in hidden]
    rank = {m: i for i, m in enumerate(_headline())}
    groups = df.groupby("method", sort=False) if "method" in df.columns else [(None, df)]
    lines: list[str] = []
    for _, rows in groups:
        have = [c for c in means if rows[c].notna().any()]
        have.sort(key=lambda c: rank.get(c[: -len("_mean")], len(rank)))
        shown, more = have[:_SUMMARY_COLS], len(have) - _SUMMARY_COLS
        table = rows[keys].astype(object).where(rows[keys].notna(), "-")
        grades = [grade_cell(r) for _, r in rows.iterrows()]
        if any(grades):  # "bronze; 1 failed left out"; an ungraded method has no column
            table["grade"] = [g or "-" for g in grades]
        for c in shown:
            k = rows.get(c[: -len("_mean")] + "_n")
            cells = []
            for i, v in zip(rows.index, rows[c], strict=True):
                text = "-" if pd.isna(v) else f"{v:.4g}"
                if k is not None and "n" in rows and pd.notna(k[i]) and k[i] < rows["n"][i]:
                    text += f" [{int(k[i])}/{int(rows['n'][i])}]"
                cells.append(text)
            table[c[: -len("_mean")]] = cells
        if "n" in rows:
            table["seeds"] = rows["n"].astype(int)
        lines += table.to_string(index=False, line_width=width).splitlines()
        if more > 0:
            lines.append(f"  ... and {more} more metrics of this method in summary.csv")
        lines.append("")
    # column blocks wrap at the width; a single cell wider than it is cut
    print("\n".join(ln if len(ln) <= width else ln[: width - 1] + "…" for ln in lines).rstrip())
