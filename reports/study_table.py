r"""The studies' tables as data, rendered by the summary's one rule.

A study section declares each table it shows as a :class:`StudyTable`: the row keys (the
columns of ``results.csv`` that a row is grouped by), and its :class:`Column`\ s, each a
metric with its label, the use its number serves (a weight-space KL needs a cell graded
silver or better, a predictive number bronze: :data:`reports.grade.NEEDS`) and how it is
aggregated. :func:`render` turns it and ``results.csv`` into ``(header, rows)``, and
:func:`curves` the same numbers into a figure's lines; both aggregate with
:func:`reports.tables.summarize`, the rule of the report's summary tables, so every number
of a report is a mean read the same way:

- the mean over the repeats (seeds, or splits) of the row's cells with status ``ok``;
- ``±`` the half-width of its 95% Student-t interval (:func:`reports.tables.t_half_width`:
  4.30 standard errors with 3 seeds, 12.7 with 2), written by
  :func:`reports.labels.fmt_mean_error`;
- a cell graded ``failed`` (``reference_grade``) left out of every mean, like a NaN, which
  shows as ``[k/n]`` beside the entry, and counted in the row's ``grade`` column
  (:func:`reports.tables.grade_cell`: the worst grade of the cells behind the row, and
  ``1 failed left out``);
- an entry whose column needs a grade the row does not reach marked ``(bronze; needs
  silver)``: its number stands as a measurement of the draws, not as a finding.

Nothing here reads files or knows a study: the studies' report modules hold the data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from reports.grade import NEEDS, usable_for
from reports.labels import fmt_mean_error, fmt_value, is_missing
from reports.tables import grade_cell, summarize

__all__ = ["Column", "StudyTable", "curves", "present", "render", "render_grid"]

#: A table's body: its header and rows of text.
Rendered = tuple[list[str], list[list[str]]]


@dataclass(frozen=True)
class Column:
    r"""One aggregated column of a study table.

    Parameters
    ----------
    metric : str
        The ``results.csv`` column averaged (or the name of what ``values`` computes).
    label : str
        The column's header.
    needs : str or None
        The use its number serves, a key of :data:`reports.grade.NEEDS` (``"weights"``:
        silver or better; ``"predictions"``: bronze or better); None for any cell.
    values : callable or None
        Computes the values from the results frame (e.g. the log-likelihood ``-nll``);
        None reads ``metric``.
    kind : {"mean", "pooled_se", "setting"}
        ``mean``: the mean and its interval. ``pooled_se``: the column is a within-cell
        standard error, and the row shows the error of the repeats' mean from them,
        :math:`\sqrt{\sum_i se_i^2}/k` over the ``k`` cells kept (the failed ones left
        out). ``setting``: a size fixed by the cell's configuration (units in a layer),
        its mean without an interval.
    missing : str
        The entry of a row without a value (``-`` unless a study says why, e.g. a point
        estimate has no posterior std).
    """

    metric: str
    label: str
    needs: str | None = None
    values: Callable[[pd.DataFrame], pd.Series] | None = None
    kind: str = "mean"
    missing: str = "-"


@dataclass(frozen=True)
class StudyTable:
    """A study table: rows grouped by ``rows``, one entry per :class:`Column`.

    Parameters
    ----------
    rows : sequence of str
        The group keys, in order; each row shows their values first.
    columns : sequence of Column
        The aggregated columns; a column whose metric the run did not record is left out.
    over : str
        The repeat axis the means are over (``seed``, ``split``); the count column is named
        after it (``seeds``).
    notes : sequence of (label, callable)
        Text columns after the aggregated ones, each computed from the row's keys (a dict
        of ``rows`` to values), e.g. a paper's quoted number.
    keep_empty : bool
        Keep a row none of whose columns has a value (its entries say why, e.g. a point
        estimate has no posterior std); by default it is left out.
    """

    rows: Sequence[str]
    columns: Sequence[Column]
    over: str = "seed"
    notes: Sequence[tuple[str, Callable[[dict], str]]] = ()
    keep_empty: bool = False


def present(results: pd.DataFrame, metric: str) -> bool:
    """Whether ``results`` has ``metric`` with at least one value."""
    return metric in results.columns and bool(results[metric].notna().any())


def _values(results: pd.DataFrame, c: Column) -> pd.Series:
    """Column ``c``'s numbers, one per row of ``results`` (NaN where it has none)."""
    v = c.values(results) if c.values is not None else results[c.metric]
    return pd.to_numeric(pd.Series(v, index=results.index), errors="coerce")


def _frame(results: pd.DataFrame, columns: Sequence[Column]) -> pd.DataFrame:
    """The results with each column's values under its metric name (squared for a pooled
    standard error, whose mean of squares :func:`_entry` turns into the error of a mean)."""
    out = results.copy()
    for c in columns:
        v = _values(results, c)
        out[c.metric] = v**2 if c.kind == "pooled_se" else v
    return out


def _kept(results: pd.DataFrame, table: StudyTable) -> list[Column]:
    """The table's columns that have a value in ``results``."""
    kept = []
    for c in table.columns:
        if c.values is not None:
            has = bool(_values(results, c).notna().any())
        else:
            has = present(results, c.metric)
        kept += [c] if has else []
    return kept


def _entry(rec: pd.Series, c: Column) -> str:
    """A row's entry of column ``c``: ``mean ± ci95 [k/n]``, marked when below its grade."""
    m = c.metric
    mean, k = rec[f"{m}_mean"], rec[f"{m}_n"]
    if is_missing(mean):
        return c.missing
    if c.kind == "pooled_se":
        text = fmt_mean_error(np.sqrt(mean / k), None, k, rec["n"])
    elif c.kind == "setting":
        text = fmt_value(float(mean))
    else:
        text = fmt_mean_error(mean, rec[f"{m}_ci95"], k, rec["n"])
    grade = rec.get("grade")
    if c.needs is not None and not is_missing(grade) and not usable_for(grade, c.needs):
        text += f" ({grade}; needs {NEEDS[c.needs]})"
    return text


def _in_order(summary: pd.DataFrame, results: pd.DataFrame, rows: list[str]) -> pd.DataFrame:
    """The summary's rows in the order their keys first appear in ``results`` (the sweep's
    order: the spec's methods as listed), not sorted by name."""
    first: dict[tuple, int] = {}
    for i, key in enumerate(results[rows].itertuples(index=False, name=None)):
        first.setdefault(tuple(map(fmt_value, key)), i)
    keys = [tuple(map(fmt_value, k)) for k in summary[rows].itertuples(index=False, name=None)]
    order = sorted(range(len(keys)), key=lambda i: first.get(keys[i], len(first)))
    return summary.iloc[order].reset_index(drop=True)


def render(results: pd.DataFrame, table: StudyTable) -> Rendered | None:
    """The table's ``(header, rows)`` from ``results.csv`` rows, or None without a row.

    Groups with :func:`reports.tables.summarize` by ``table.rows`` over ``table.over`` (the
    ``ok`` rows only; failed grades left out and counted), then writes each entry with
    :func:`_entry`. The header is the row keys, the columns' labels, the notes' labels, the
    count of repeats per row and, where a row has a graded cell, ``grade``. A row none of
    whose columns has a value is left out unless failed cells were (or
    ``table.keep_empty``).
    """
    cols = _kept(results, table)
    rows = list(table.rows)
    if not cols or any(r not in results.columns for r in rows):
        return None
    summary = summarize(_frame(results, cols), [c.metric for c in cols], table.over, rows)
    summary = _in_order(summary, results, rows)
    graded = "grade" in summary.columns  # shown where a row has a graded or failed cell
    graded = graded and bool(summary["grade"].notna().any() or summary["n_grade_failed"].any())
    header = [*rows, *(c.label for c in cols), *(label for label, _ in table.notes)]
    header += [f"{table.over}s", *(["grade"] if graded else [])]
    body = []
    for _, rec in summary.iterrows():
        entries = [_entry(rec, c) for c in cols]
        failed = graded and bool(rec["n_grade_failed"])
        empty = all(rec[f"{c.metric}_n"] == 0 for c in cols)
        if empty and not (failed or table.keep_empty):
            continue
        key = {r: rec[r] for r in rows}
        notes = [fn(key) for _, fn in table.notes]
        tail = [str(int(rec["n"])), *([grade_cell(rec)] if graded else [])]
        body.append([*(fmt_value(rec[r]) for r in rows), *entries, *notes, *tail])
    return (header, body) if body else None


def render_grid(
    results: pd.DataFrame, down: str, across: str, column: Column, over: str = "seed"
) -> Rendered | None:
    """One column as a grid: ``down`` values as rows, ``across`` values as columns.

    Each entry is :func:`render`'s for the cell ``(down, across)``; the corner names the
    column and both axes.
    """
    flat = render(results, StudyTable((down, across), (column,), over))
    if flat is None:
        return None
    downs = list(dict.fromkeys(r[0] for r in flat[1]))
    acrosses = list(dict.fromkeys(r[1] for r in flat[1]))
    at = {(r[0], r[1]): r[2] for r in flat[1]}
    header = [f"{column.label}, {down} down, {across} across", *acrosses]
    return header, [[d, *(at.get((d, a), "-") for a in acrosses)] for d in downs]


def _tag(by: list[str], key: tuple) -> str:
    """A line group's legend tag: the first key's value, then ``axis value`` for the rest."""
    if not key:
        return ""
    rest = (f"{a} {fmt_value(v)}" for a, v in zip(by[1:], key[1:], strict=True))
    return ", ".join([fmt_value(key[0]), *rest])


def curves(
    results: pd.DataFrame,
    x: str,
    columns: Sequence[tuple[str, str]],
    by: Sequence[str] = (),
    tag: Callable[[tuple], str] | None = None,
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A figure's lines: ``{label: (x values, means, 95% t half-widths)}`` per column and
    line group ``by``, by :func:`reports.tables.summarize` (failed cells left out; a
    half-width is 0 where a mean has one value). ``columns`` are ``(metric, name)``; a
    label is the name with the group's ``tag`` in brackets (by default the first key's value,
    then ``axis value`` for the others: ``nuts, model.width 8``). ``x`` must be numeric.
    """
    out = {}
    for metric, name in columns:
        if not present(results, metric):
            continue
        s = summarize(results, [metric], "seed", [*by, x])
        s = s[s[f"{metric}_n"] > 0]
        for key, part in s.groupby(list(by), sort=True) if by else [((), s)]:
            if part.empty:  # no cell kept: no line
                continue
            key = key if isinstance(key, tuple) else (key,)
            text = tag(key) if tag is not None else _tag(list(by), key)
            out[f"{name} ({text})" if text else name] = (
                part[x].to_numpy(),
                part[f"{metric}_mean"].to_numpy(dtype=float),
                np.nan_to_num(part[f"{metric}_ci95"].to_numpy(dtype=float)),
            )
    return out
