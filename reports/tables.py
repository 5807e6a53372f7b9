r"""Summary tables over repeated runs of a sweep.

A results table has one row per sweep cell. Its columns follow the run store's
conventions:

- sweep axes, named by their dotted spec path (``model.depth``, ``model.width``) plus
  ``seed`` and ``method``;
- bookkeeping columns :data:`BOOKKEEPING_COLUMNS` (``cell_id``, ``status``, ``error``,
  ``time_s``, ...), which never identify a group;
- metric columns (``accuracy``, ``nll``, ``neg_elbo``, ...); the usual names are listed in
  :data:`METRIC_COLUMNS`.

:func:`summarize` averages the metrics over one axis (by default ``seed``) and reports the
standard error of the mean and how many finite values each mean is over: a NaN or infinite
value never enters a mean silently, it lowers ``<metric>_n`` below the group's ``n``, and
:func:`nonfinite_values` lists it. A sampled cell graded ``failed``
(``reference_grade``, :mod:`reports.grade`) never enters a mean either: its metrics are left
out like a NaN and counted in ``n_grade_failed``, and ``grade`` is the worst grade of the
cells a mean is over, shown beside it by :func:`summary_tables`. Nothing here writes files
(the run store does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from reports.grade import worst_grade
from reports.labels import fmt_mean_error, fmt_value, is_missing

__all__ = [
    "BOOKKEEPING_COLUMNS",
    "GRADE_COLUMNS",
    "GRADE_NOTE",
    "METRIC_COLUMNS",
    "SETTING_COLUMNS",
    "TABLE_METRICS_PER_TABLE",
    "failed_table",
    "grade_cell",
    "key_columns",
    "nonfinite_values",
    "summarize",
    "summary_tables",
]

#: Columns that describe how a cell ran rather than what it is; never used as group keys.
BOOKKEEPING_COLUMNS: tuple[str, ...] = (
    "cell_id",
    "status",
    "error",
    "nonfinite",
    "time_s",
    "started_at",
    "finished_at",
    "path",
)

#: Per-row measurements written by the runner. When ``by`` is not given they are never group
#: keys, even if not summarized, so an unsummarized metric cannot split the groups.
METRIC_COLUMNS: tuple[str, ...] = (
    "accuracy",
    "nll",
    "brier",
    "ece",
    "rmse",
    "neg_elbo",
    "elbo",
    "n_params",
    "width",
    "kl",
    "w2",
    "pruned_fraction",
)
#: Columns that describe a cell's setting (sizes fixed by its configuration), not a
#: measurement: a summary table shows their value without an error, since ``257 ± 0`` reads
#: as a measured spread; one that differs between the repeats keeps its interval.
SETTING_COLUMNS: tuple[str, ...] = (
    "n_params",
    "n_var_params",
    "width",
    "laplace_dim",
    "n_train",
    "n_test",
)
#: A sampled cell's grade in results.csv, and the two columns :func:`summarize` gives of it.
GRADE_COLUMNS: tuple[str, ...] = ("reference_grade", "grade_failed")
_GRADE_STATS = ("grade", "n_grade_failed")
#: The tables' footnote on their ``grade`` column.
GRADE_NOTE = (
    "grade: the worst reference grade (gold, silver, bronze; their gates are in the sampler "
    "diagnostics section) of the sampled cells behind the row's means; blank: no sampled "
    "cell. A cell graded failed is never averaged: it is left out of every mean of its row "
    "(which then shows [k/n]) and counted as 'failed left out'. The weight-space KL and W2 "
    "need silver or better; a bronze row's predictive numbers stand, its weight-space ones "
    "do not."
)
#: Metric columns per summary table: wider tables are split into several.
TABLE_METRICS_PER_TABLE = 5
_MAX_ERROR_CHARS = 500


def summarize(
    results: pd.DataFrame,
    metrics: list[str],
    over: str | None = "seed",
    by: list[str] | None = None,
) -> pd.DataFrame:
    r"""Mean and standard error of metrics over repeats, one row per group.

    Parameters
    ----------
    results : pd.DataFrame
        One row per cell. If it has a ``status`` column, only rows with
        ``status == "ok"`` are summarized.
    metrics : list of str
        Metric columns to summarize; each must exist and hold numbers (or NaN).
    over : str or None, default "seed"
        The repeat axis averaged out. It is never a group key. None averages nothing: with
        the default ``by`` every row is its own group (``n`` is 1).
    by : list of str, optional
        Group-key columns. By default every column of ``results`` that is not in
        ``metrics``, not ``over``, not in :data:`BOOKKEEPING_COLUMNS` and not in
        :data:`METRIC_COLUMNS`. Any other per-row measurement would split the groups: list
        it in ``metrics`` or pass ``by`` explicitly.

    Returns
    -------
    pd.DataFrame
        The ``by`` columns, then ``<metric>_mean``, ``<metric>_sem``, ``<metric>_ci95`` and
        ``<metric>_n`` for each metric, then ``n`` (rows in the group). Rows are sorted by the group keys
        (missing keys last) and the index is a fresh ``RangeIndex``. With :math:`n_m` =
        ``<metric>_n`` the number of finite values of metric :math:`m` in the group (NaN and
        :math:`\pm\infty` are left out of the mean and counted out of :math:`n_m`),

        .. math::

            \mathrm{sem}_m = \frac{\operatorname{sd}(x_m)}{\sqrt{n_m}}, \qquad
            \operatorname{sd}(x) = \sqrt{\frac{1}{n-1} \sum_i (x_i - \bar x)^2},

        which is NaN when :math:`n_m \le 1`, and ``<metric>_ci95`` the half-width of the
        95% Student-t interval of the mean, :math:`t_{0.975,\,n_m-1}\,\mathrm{sem}_m`
        (:func:`t_half_width`): with 3 seeds 4.30 standard errors, with 2 seeds 12.7. The
        report quotes it, not the standard error: a mean of 3 seeds has 2 degrees of freedom,
        and ``± 1 s.e.`` then covers the true mean about 58% of the time, not 68%. With a
        ``reference_grade`` column, the rows graded ``failed`` are left out of every mean
        (counted out of :math:`n_m`, and in ``n_grade_failed``) and ``grade`` is the worst
        grade of the other rows (blank for ungraded ones, such as variational methods). If
        no row is ``ok`` the frame is empty but has these columns; so it is for ``results``
        without rows (no cell stored yet), whose columns may be missing.

    Raises
    ------
    KeyError
        If a metric or ``by`` column is missing from a ``results`` that has rows.
    ValueError
        If a metric column holds non-numeric values, or ``by`` overlaps ``metrics``.
    """
    metrics = list(metrics)
    if len(results) == 0:  # no cell stored yet: the empty table, whatever its columns
        wanted = [c for c in [*metrics, *(by or [])] if c not in results.columns]
        results = results.reindex(columns=[*results.columns, *wanted])
    by = _group_keys(results, metrics, over, by)
    ok = _kept_values(results, metrics)
    graded = "reference_grade" in ok.columns
    failed = ok["reference_grade"].eq("failed") if graded else None
    stats = ("mean", "sem", "ci95", "n")
    out_cols = list(by) + [f"{m}_{s}" for m in metrics for s in stats] + ["n"]
    out_cols += list(_GRADE_STATS) if graded else []
    if ok.empty:
        return pd.DataFrame({c: pd.Series(dtype=results[c].dtype) for c in by}).reindex(
            columns=out_cols
        )

    mean, std, count, size = _moments(ok, metrics, by)
    columns = _stat_columns(mean, std, count, metrics)
    columns["n"] = size.to_numpy(dtype=np.int64)
    if graded:  # per group, aligned with the means' index
        columns.update(_grade_columns(ok, failed, by))
    out = pd.DataFrame(columns, index=mean.index).reset_index(drop=not by)
    return out[out_cols].reset_index(drop=True)


def _group_keys(
    results: pd.DataFrame, metrics: list[str], over: str | None, by: list[str] | None
) -> list[str]:
    """:func:`summarize`'s group keys, checked (its Raises)."""
    missing = [m for m in metrics if m not in results.columns]
    if missing:
        raise KeyError(
            f"metric column(s) {missing} not in results; available: {list(results.columns)}"
        )
    if by is None:
        skip = set(metrics) | {over} | set(BOOKKEEPING_COLUMNS) | set(METRIC_COLUMNS)
        skip |= set(GRADE_COLUMNS)
        return [c for c in results.columns if c not in skip]
    by = list(by)
    missing = [c for c in by if c not in results.columns]
    if missing:
        raise KeyError(
            f"group column(s) {missing} not in results; available: {list(results.columns)}"
        )
    overlap = sorted(set(by) & set(metrics))
    if overlap:
        raise ValueError(f"column(s) {overlap} are both group keys (by) and metrics")
    return by


def _kept_values(results: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """The ``ok`` rows with each metric as floats, NaN where a value does not enter a mean:
    not finite, or of a cell graded ``failed``."""
    ok = results
    if "status" in results.columns:
        ok = results[results["status"] == "ok"]
    ok = ok.copy()
    for m in metrics:
        try:
            values = pd.to_numeric(ok[m], errors="raise").astype(float)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"metric column {m!r} holds non-numeric values: {exc}") from None
        ok[m] = values.where(np.isfinite(values))  # inf leaves the mean like NaN, counted
    if "reference_grade" in ok.columns:  # a failed reference never enters a mean: counted
        ok.loc[ok["reference_grade"].eq("failed"), metrics] = np.nan
    return ok


def _moments(ok: pd.DataFrame, metrics: list[str], by: list[str]):
    """Mean, sd (ddof 1), count of finite values per group, and group sizes."""
    if by:
        grouped = ok.groupby(by, sort=True, dropna=False)
        return (
            grouped[metrics].mean(),
            grouped[metrics].std(ddof=1),
            grouped[metrics].count(),
            grouped.size(),
        )
    frame = ok[metrics]
    return (
        frame.mean().to_frame().T,
        frame.std(ddof=1).to_frame().T,
        frame.count().to_frame().T,
        pd.Series([len(ok)]),
    )


def _stat_columns(
    mean: pd.DataFrame, std: pd.DataFrame, count: pd.DataFrame, metrics: list[str]
) -> dict[str, np.ndarray]:
    """``<metric>_mean``, ``_sem``, ``_ci95`` and ``_n`` from the groups' moments."""
    columns: dict[str, np.ndarray] = {}
    for m in metrics:
        columns[f"{m}_mean"] = mean[m].to_numpy(dtype=float)
        n_m = count[m].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            sem = std[m].to_numpy(dtype=float) / np.sqrt(n_m)
        columns[f"{m}_sem"] = np.where(n_m > 1, sem, np.nan)
        columns[f"{m}_ci95"] = t_half_width(columns[f"{m}_sem"], n_m)
        columns[f"{m}_n"] = n_m.astype(np.int64)
    return columns


def _grade_columns(ok: pd.DataFrame, failed: pd.Series, by: list[str]) -> dict[str, np.ndarray]:
    """``grade`` (the worst grade of the cells kept) and ``n_grade_failed`` per group."""
    kept, n_fail = ok["reference_grade"].where(~failed), failed.astype(np.int64)
    if by:
        keys = [ok[c] for c in by]
        worst = kept.groupby(keys, sort=True, dropna=False).agg(lambda g: worst_grade(g) or "")
        n_failed = n_fail.groupby(keys, sort=True, dropna=False).sum()
    else:
        worst = pd.Series([worst_grade(kept) or ""])
        n_failed = pd.Series([int(n_fail.sum())])
    grades = worst.to_numpy(dtype=object)
    return {
        "grade": np.where(grades == "", None, grades),
        "n_grade_failed": n_failed.to_numpy(dtype=np.int64),
    }


def t_half_width(sem: Any, n: Any, level: float = 0.95) -> np.ndarray:
    r"""Half-width of the Student-t interval of a mean: :math:`t_{(1+\ell)/2,\,n-1}\,\mathrm{sem}`.

    Element-wise over ``sem`` and ``n`` (the finite values behind each mean); NaN where
    ``n <= 1`` or ``sem`` is NaN.
    """
    sem = np.asarray(sem, dtype=float)
    n = np.asarray(n, dtype=float)
    df = np.where(n > 1, n - 1, np.nan)
    with np.errstate(invalid="ignore"):
        return np.asarray(student_t.ppf(0.5 + level / 2, df) * sem, dtype=float)


def nonfinite_values(results: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """The NaN or infinite values of ``metrics`` in the ``ok`` rows, one row per value.

    A NaN in a column of a metric that a row's method does not compute (a sampler's
    diagnostics on a variational row) is not a non-finite value. With a ``nonfinite`` column
    (the cell record's comma-separated list of its non-finite metrics), the values it names
    are listed; without it, every infinite value and every NaN of an ``ok`` row in a metric
    that another row of the same ``method`` has as a finite value.

    Parameters
    ----------
    results : pd.DataFrame
        One row per cell (``status``, ``cell_id``, ``method``, ``nonfinite`` optional).
    metrics : list of str
        Metric columns to check.

    Returns
    -------
    pd.DataFrame
        Columns ``cell_id`` (or the row index), ``metric`` and ``value``.
    """
    ok = results[results["status"] == "ok"] if "status" in results.columns else results
    rows = []
    for idx, r in ok.iterrows():
        named = None
        if "nonfinite" in ok.columns:
            listed = r["nonfinite"]
            named = set(str(listed).split(",")) if isinstance(listed, str) else set()
        for m in metrics:
            if m not in ok.columns:
                continue
            v = pd.to_numeric(pd.Series([r[m]]), errors="coerce").iloc[0]
            if np.isfinite(v):
                continue
            if named is not None:
                if m not in named:
                    continue
            elif not np.isinf(v):
                peers = (
                    ok[m] if "method" not in ok.columns else ok.loc[ok["method"] == r["method"], m]
                )
                if not np.isfinite(pd.to_numeric(peers, errors="coerce")).any():
                    continue  # the method does not compute this metric
            rows.append({"cell_id": r.get("cell_id", idx), "metric": m, "value": float(v)})
    return pd.DataFrame(rows, columns=["cell_id", "metric", "value"])


def _is_stat_column(summary: pd.DataFrame, column: Any) -> bool:
    """Whether ``column`` of a :func:`summarize` frame is a statistic."""
    c = str(column)
    if c == "n" or c in _GRADE_STATS or c.endswith(("_mean", "_sem", "_ci95")):
        return True
    return c.endswith("_n") and f"{c[:-2]}_mean" in summary.columns


def key_columns(summary: pd.DataFrame) -> list[str]:
    """Group-key columns of a :func:`summarize` frame."""
    return [c for c in summary.columns if not _is_stat_column(summary, c)]


def summary_tables(
    summary: pd.DataFrame, metrics: Sequence[str], per_table: int = TABLE_METRICS_PER_TABLE
) -> list[tuple[list[str], list[list[str]]]]:
    """The summary as ``(header, rows)`` tables of at most ``per_table`` metrics each.

    Each table repeats the group keys and ``n``, and with grades (:func:`summarize`) a
    ``grade`` column: the worst grade of the sampled cells behind the row's means and how
    many cells graded failed were left out of them (:func:`grade_cell`). Rows without a
    value in any of the table's metrics (e.g. a variational method in a table of sampler
    metrics) are left out, unless failed cells were.
    """
    keys = key_columns(summary)
    have_n = "n" in summary.columns
    have_grade = "grade" in summary.columns
    tables = []
    for start in range(0, len(metrics), per_table):
        chunk = list(metrics[start : start + per_table])
        header = [str(k) for k in keys] + chunk + (["n"] if have_n else [])
        header += ["grade"] if have_grade else []
        rows = []
        for _, rec in summary.iterrows():
            cells = [_entry(rec, m) for m in chunk]
            if all(c == "-" for c in cells) and not (have_grade and rec["n_grade_failed"]):
                continue
            rows.append(
                [fmt_value(rec[k]) for k in keys]
                + cells
                + ([fmt_value(rec["n"])] if have_n else [])
                + ([grade_cell(rec)] if have_grade else [])
            )
        if rows:
            tables.append((header, rows))
    return tables


def _entry(rec: Any, m: str) -> str:
    """A summary table's entry: ``mean ± ci95 [k/n]``; a setting the same in every repeat
    (:data:`SETTING_COLUMNS`) as its value alone."""
    err = rec.get(f"{m}_ci95")
    if m in SETTING_COLUMNS and (is_missing(err) or float(err) == 0.0):
        err = None
    return fmt_mean_error(rec.get(f"{m}_mean"), err, rec.get(f"{m}_n"), rec.get("n"))


def grade_cell(rec: Any) -> str:
    """A summary row's grade: the worst grade of its means' cells, and the failed ones left
    out (``silver; 1 failed left out``); blank for ungraded rows."""
    grade = rec.get("grade")
    k = rec.get("n_grade_failed")
    k = 0 if is_missing(k) else int(k)
    text = "" if is_missing(grade) else str(grade)
    if k:
        text += f"{'; ' if text else ''}{k} failed left out"
    return text


def failed_table(failed: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the failed-cells table: identifying columns plus the error."""
    drop = {"status", "time_s", "error", "nonfinite"}
    # cell id and sweep axes; columns empty for every failed cell (metrics) are left out
    ident = [c for c in failed.columns if c not in drop and failed[c].notna().any()]
    header = [str(c) for c in ident] + ["error"]
    rows = []
    for _, rec in failed.iterrows():
        err = rec.get("error", "")
        err = "" if is_missing(err) else str(err).strip()
        if len(err) > _MAX_ERROR_CHARS:
            err = err[: _MAX_ERROR_CHARS - 3] + "..."
        rows.append([fmt_value(rec[c]) for c in ident] + [err])
    return header, rows
