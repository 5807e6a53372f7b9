"""The report's Summary: the few numbers the spec's studies declare as their headline,
labelled, first; every metric of every row behind them.

A study names its headline metrics (``Study.headline``: the price of mean field its KLs
and W2, the Laplace study its KL, the pruning study its pruned fractions). The Summary
leads with those of the spec's studies (or, when none declares any, the spec's figure
metrics), one column each under its label with its unit; the full table, every metric by
its column name, follows in :class:`reports.document.Details` (folded in HTML, a later
section of its own in Markdown), as in summary.csv.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from reports.document import Details, Paragraph, Table
from reports.grade import usable_for
from reports.labels import PSIS_NOTE, Labels, metric_label, plural, repeat_word
from reports.tables import GRADE_NOTE, key_columns, summary_tables
from zoo.spec import Spec
from zoo.studies import STUDIES

__all__ = ["ALL_METRICS", "MAX_LEAD", "lead_metrics", "summary_blocks"]

#: The title of the full table (the Markdown section and the HTML fold).
ALL_METRICS = "All metrics"
#: The most columns the leading table has.
MAX_LEAD = 6


def lead_metrics(spec: Spec, metrics: Sequence[str]) -> list[str]:
    """The metrics the Summary leads with: the headline metrics of the spec's studies (in
    the studies' order) that the run has, else its figure metrics; at most
    :data:`MAX_LEAD`."""
    declared = [m for s in spec.studies for m in STUDIES[type(s)].headline]
    lead = [m for m in dict.fromkeys(declared) if m in metrics]
    if not lead:
        lead = [m for m in spec.report.figures if m in metrics]
    return lead[:MAX_LEAD]


def summary_blocks(
    spec: Spec,
    summary: pd.DataFrame,
    metrics: Sequence[str],
    labels: Labels,
    over: str | None,
    weight_space: frozenset[str] = frozenset(),
) -> tuple[list, Details]:
    """The Summary section's blocks (the leading table and what its entries are) and the
    full table behind it.

    Parameters
    ----------
    spec : Spec
        The spec as run (its studies' headline metrics, its figures).
    summary : pd.DataFrame
        summary.csv.
    metrics : sequence of str
        Every metric of the summary tables, in order.
    labels : mapping
        The label table (the studies' labels merged).
    over : str or None
        The repeat axis the means are over.
    weight_space : frozenset of str
        The weight-space metrics: a row graded below silver does not support them, and the
        leading table says so beneath it.
    """
    n_keys = len(key_columns(summary))
    word = plural(repeat_word(over), 2)
    entries = Paragraph(
        f"Each entry is the mean ± the half-width of its 95% Student-t interval over "
        f"{word} (n: {word} per row; 4.3 standard errors with 3, 12.7 with 2); [k/n] marks "
        f"a mean over only the k finite values of the row's n (the others are NaN or "
        f"infinite: see the notes); - means no value."
    )
    grades = [Paragraph(GRADE_NOTE)] if "grade" in summary.columns else []
    tables = [Table(h, r, n_text=n_keys) for h, r in summary_tables(summary, metrics)]
    full = Details(
        f"{ALL_METRICS} ({len(metrics)}, by column name, as in summary.csv)",
        [*tables, *([Paragraph(PSIS_NOTE)] if "psis_khat" in metrics else [])],
    )
    lead = lead_metrics(spec, metrics)
    if not lead:
        return [entries, *grades, *tables], Details(ALL_METRICS)
    blocks = []
    for header, rows in summary_tables(summary, lead, per_table=len(lead)):
        named = [metric_label(h, labels) if h in lead else h for h in header]
        blocks.append(Table(named, rows, n_text=n_keys))
    said = Paragraph(
        f"The headline numbers of this run; every metric of every row is in "
        f"'{ALL_METRICS}' below and in summary.csv."
    )
    grades_of_rows = summary["grade"] if "grade" in summary.columns else []
    low = [g for g in grades_of_rows if isinstance(g, str) and not usable_for(g, "weights")]
    if low and any(m in weight_space for m in lead):
        rows_word = f"{len(low)} {plural('row', len(low))}"
        blocks.append(
            Paragraph(
                f"{rows_word} graded below silver: a weight-space number there (a KL or W2 "
                "of the weights' draws) is no finding, which needs silver or better."
            )
        )
    return [said, *blocks, entries, *grades], full
