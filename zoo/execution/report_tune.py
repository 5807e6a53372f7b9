"""The report's section on a spec's ``tune``: each grid search and the values it chose.

One table per run: a row per tuning cell (search, method, grid values, validation
metric), the chosen row marked, built from the stored tuning cells through
:func:`zoo.execution.tune.plan` (the same choice the run made).
"""

from __future__ import annotations

import json
from typing import Any

from reports.document import Heading, Paragraph, Table
from zoo.execution.tune import plan

__all__ = ["tune_section"]


def _where(group: str) -> str:
    rest = {k: v for k, v in json.loads(group).items() if k != "method"}
    return ", ".join(f"{k}={v}" for k, v in rest.items())


def tune_section(spec: Any, records: dict[str, dict[str, Any]]) -> list[Any]:
    """The blocks of the tuning section (none for a spec without ``tune``).

    Parameters
    ----------
    spec : Spec
    records : dict
        The stored cell records by cell id.
    """
    if spec.tune is None:
        return []
    t = spec.tune
    tp = plan(spec, records.get)
    at = ", ".join(f"{k} {v}" for k, v in t.at.items()) or "every sweep cell"
    rows = []
    several = any(_where(s.group) for s in tp.searches)
    for s in tp.searches:
        for i, (values, value, note) in enumerate(s.tried):
            shown = f"{value:.4g}" if value is not None else note
            mark = "chosen" if i == s.chosen else ""
            grid = ", ".join(f"{k}={v}" for k, v in values.items())
            rows.append([*([_where(s.group)] if several else []), s.method, grid, shown, mark])
    header = [*(["search"] if several else []), "method", "grid values", f"validation {t.metric}"]
    blocks: list[Any] = [
        Heading(f"Tuned on {at} (validation {t.metric.upper()})"),
        Paragraph(
            f"Each tuned method was fitted once per grid value on {1 - t.validation_fraction:.0%}"
            f" of the training part of {at} and scored by its {t.metric} on the other "
            f"{t.validation_fraction:.0%} (the test part is never used); its main cells run "
            f"with the value marked chosen (the best {t.metric}; ties: the first). A failed "
            "tuning cell is skipped."
        ),
        Table([*header, ""], rows, n_text=len(header) - 1),
    ]
    errors = [s.error for s in tp.searches if s.error]
    blocks += [Paragraph(f"{e}; its main cells fail.") for e in errors]
    return blocks
