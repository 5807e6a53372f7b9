"""Study tables as data: one renderer, the summary's rule (reports.study_table)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports.study_table import Column, StudyTable, curves, render, render_grid
from reports.tables import summarize


def _results() -> pd.DataFrame:
    rows = []
    for method, base in (("vi", 1.0), ("nuts", 3.0)):  # nuts second, as in a spec
        for depth in (1, 2):
            for seed in (0, 1, 2):
                grade = None if method == "vi" else ("failed" if seed == 2 else "silver")
                rows.append(
                    {
                        "method": method,
                        "model.depth": depth,
                        "seed": seed,
                        "status": "ok",
                        "reference_grade": grade,
                        "kl": base * depth + 0.1 * seed,
                        "kl_se": 0.3,
                    }
                )
    rows.append({**rows[0], "seed": 3, "status": "failed", "kl": 1e9})  # never averaged
    return pd.DataFrame(rows)


def test_entries_are_the_summarys_means_and_t_intervals() -> None:
    res = _results()
    table = StudyTable(("method", "model.depth"), (Column("kl", "KL", "weights"),))
    header, rows = render(res, table)
    assert header == ["method", "model.depth", "KL", "seeds", "grade"]
    assert [r[:2] for r in rows] == [["vi", "1"], ["vi", "2"], ["nuts", "1"], ["nuts", "2"]]
    s = summarize(res, ["kl"], "seed", ["method", "model.depth"])
    vi1 = s[(s["method"] == "vi") & (s["model.depth"] == 1)].iloc[0]
    # 3 seeds of sd 0.1: the half-width is t(0.975, 2) = 4.303 standard errors, 0.1 / sqrt(3)
    assert np.isclose(vi1["kl_ci95"], 4.303 * 0.1 / np.sqrt(3), atol=1e-3)
    assert rows[0][2] == f"1.1 ± {vi1['kl_ci95']:.2g}" and rows[0][3:] == ["3", ""]
    # nuts: seed 2 graded failed, left out of the mean (3.05 of seeds 0, 1) and counted
    assert rows[2][2].startswith("3.05 ± ") and rows[2][2].endswith("[2/3]")
    assert rows[2][4] == "silver; 1 failed left out"


def test_a_column_needing_a_better_grade_is_marked_and_a_setting_has_no_interval() -> None:
    res = _results()
    res.loc[res["reference_grade"].eq("silver") & res["model.depth"].eq(2), "reference_grade"] = (
        "bronze"
    )
    cols = (
        Column("kl", "KL", "weights"),
        Column("acc", "accuracy", "predictions", values=lambda r: r["kl"] * 0 + 0.9),
        Column("dim", "parameters", kind="setting", values=lambda r: 10 * r["model.depth"]),
    )
    _, rows = render(res, StudyTable(("method", "model.depth"), cols))
    nuts2 = rows[3]
    assert nuts2[2].endswith("[2/3] (bronze; needs silver)")
    assert nuts2[3] == "0.9 ± 0 [2/3]" and nuts2[4] == "20"


def test_a_pooled_standard_error_and_a_grid() -> None:
    res = _results()
    cols = (Column("kl_se", "its s.e.", kind="pooled_se"),)
    _, rows = render(res, StudyTable(("method",), cols))
    # vi: 6 cells of s.e. 0.3: sqrt(6 x 0.09) / 6; nuts: the 4 cells kept
    assert rows[0][1] == f"{np.sqrt(6 * 0.09) / 6:.4g}"
    assert rows[1][1] == f"{np.sqrt(4 * 0.09) / 4:.4g} [4/6]"
    header, grid = render_grid(
        res[res["method"] == "vi"], "model.depth", "seed", Column("kl", "KL")
    )
    assert header == ["KL, model.depth down, seed across", "0", "1", "2"]
    assert grid[1] == ["2", "2", "2.1", "2.2"]  # one value per cell: no interval


def test_curves_are_the_same_means_and_half_widths() -> None:
    res = _results()
    lines = curves(res, "model.depth", [("kl", "KL")], ["method"])
    assert set(lines) == {"KL (nuts)", "KL (vi)"}
    x, mean, half = lines["KL (nuts)"]
    s = summarize(res[res["method"] == "nuts"], ["kl"], "seed", ["model.depth"])
    np.testing.assert_allclose(mean, s["kl_mean"])
    np.testing.assert_allclose(half, s["kl_ci95"])
    assert list(x) == [1, 2]
    failed = res[res["reference_grade"].eq("failed")]  # no cell kept: no line at all
    assert curves(failed, "model.depth", [("kl", "KL")]) == {}


def test_rows_without_a_value_are_left_out_unless_kept() -> None:
    res = _results()
    res.loc[res["method"] == "vi", "kl"] = np.nan
    table = StudyTable(("method",), (Column("kl", "KL", missing="n/a (no draws)"),))
    assert [r[0] for r in render(res, table)[1]] == ["nuts"]
    kept = StudyTable(("method",), table.columns, keep_empty=True)
    assert render(res, kept)[1][0][:2] == ["vi", "n/a (no draws)"]
    assert render(res[res["method"] == "none"], table) is None
