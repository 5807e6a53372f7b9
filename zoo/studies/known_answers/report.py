"""The tables and report of a known-answer simulation, written through the run store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from reports.document import render, section, simulation_document
from reports.labels import fmt_cell
from zoo.studies.product_matrix.simulate import SimulationStore

__all__ = ["write_known_answer"]


def write_known_answer(
    spec: Any,
    store: SimulationStore,
    title: str,
    paragraphs: Sequence[str],
    tables: dict[str, pd.DataFrame],
) -> dict[str, Path]:
    """Write every table as ``<name>.csv`` (the first is ``results.csv``) and a report with
    ``paragraphs`` and the tables in order; returns the report files written."""
    for name, df in tables.items():
        store.write_table(f"{name}.csv", df)
    shown = [
        (list(df.columns), [[fmt_cell(v) for v in row] for row in df.itertuples(index=False)])
        for df in tables.values()
    ]
    doc = simulation_document(
        f"bnn-zoo report: {spec.name}",
        len(tables["results"]),
        spec.description,
        [section(title, paragraphs, shown)],
        store.spec_text(),
    )
    return store.write_files(render(doc))
