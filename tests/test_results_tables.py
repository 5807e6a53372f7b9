"""The tables of the README and of docs/results/ are written by a command, not typed.

Every table there sits between ``<!-- table:NAME -->`` and ``<!-- /table -->`` and equals
what ``python docs/results/make_tables.py`` renders from the summaries recorded in
docs/results/data/; ``--from RUN_DIR`` records the default's summary from a run's
``results.csv`` with the summary's own aggregation (:func:`reports.tables.summarize`).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reports.tables import summarize

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location(
    "make_tables", ROOT / "docs" / "results" / "make_tables.py"
)
make_tables = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_tables)
PAGES = make_tables.PAGES


def _ids(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_page_tables_equal_what_the_command_writes(page: Path) -> None:
    text = page.read_text()
    assert make_tables.rewrite(text) == text, (
        f"{_ids(page)}: a table differs from its recorded summary; run: "
        "python docs/results/make_tables.py"
    )


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_every_table_is_generated(page: Path) -> None:
    """No table row outside a marked block: a typed table would be a second source."""
    outside = make_tables.BLOCK.sub("", page.read_text())
    outside = re.sub(r"```.*?```", "", outside, flags=re.S)
    typed = [line for line in outside.splitlines() if line.lstrip().startswith("|")]
    assert not typed, f"{_ids(page)} has table rows outside a marked block: {typed[:2]}"


def test_every_recorded_summary_is_shown() -> None:
    shown = {m.group(2) for p in PAGES for m in make_tables.BLOCK.finditer(p.read_text())}
    recorded = {p.stem for p in make_tables.DATA.glob("*.csv")}
    assert shown, "no marked table found"
    assert recorded <= shown, f"recorded but shown nowhere: {sorted(recorded - shown)}"
    assert set(make_tables.ROWS) <= shown


def test_readme_and_default_page_show_one_table() -> None:
    """The README's table and the default page's are the same rendering of one summary."""
    table = make_tables.render("default_depth")
    for page in (ROOT / "README.md", ROOT / "docs" / "results" / "default.md"):
        assert table in page.read_text()
    assert "| the same less its sampling bias (`kl_debiased`) | 5.75 ± 0.32 |" in table


def _run(tmp_path: Path) -> Path:
    """A small run of the default's layout: 2 depths x 3 seeds of MF-VI and NUTS, one NUTS
    cell graded failed."""
    rng = np.random.default_rng(0)
    rows = []
    for depth in (1, 2):
        for seed in range(3):
            grade = "failed" if (depth, seed) == (2, 1) else ("silver" if seed else "bronze")
            rows.append(
                {
                    "model.depth": depth,
                    "seed": seed,
                    "method": "nuts",
                    "status": "ok",
                    "width": 24 // depth,
                    "n_params": 97 - 12 * depth,
                    "kl_diag_full": 5.0 + rng.normal(),
                    "kl_debiased": 3.0 + rng.normal(),
                    "kl_debiased_se": 0.1 + 0.01 * seed,
                    "w2_diag_full": 2.0 + 0.1 * seed,
                    "kl_rhat": 1.0 + 0.01 * seed,
                    "max_r_hat": 1.1 + 0.01 * seed,
                    "draws_per_chain": 100 + 25 * seed,
                    "reference_grade": grade,
                }
            )
            rows.append(
                {
                    "model.depth": depth,
                    "seed": seed,
                    "method": "mfvi",
                    "status": "ok",
                    "width": 24 // depth,
                    "n_params": 97 - 12 * depth,
                    "laplace_kl": 50.0 + seed,
                }
            )
    run = tmp_path / "run"
    run.mkdir()
    pd.DataFrame(rows).to_csv(run / "results.csv", index=False)
    return run


def test_from_run_uses_the_summary_rule(tmp_path: Path) -> None:
    run = _run(tmp_path)
    got = make_tables.from_run(run).set_index("model.depth")
    res = pd.read_csv(run / "results.csv")
    nuts = summarize(res[res["method"] == "nuts"], ["kl_debiased"], by=["model.depth"])
    nuts = nuts.set_index("model.depth")
    for depth in (1, 2):
        assert got.loc[depth, "kl_debiased_mean"] == pytest.approx(
            nuts.loc[depth, "kl_debiased_mean"]
        )
        assert got.loc[depth, "kl_debiased_ci95"] == pytest.approx(
            nuts.loc[depth, "kl_debiased_ci95"], nan_ok=True
        )
    # the failed cell: out of the mean, counted, and its grade still listed per seed
    assert got.loc[2, "kl_debiased_n"] == 2 and got.loc[2, "n_grade_failed"] == 1
    assert got.loc[2, "reference_grade_seeds"] == "bronze failed silver"
    # MF-VI's Laplace KL comes from the MF-VI rows; the plug-in W2² is squared per cell
    assert got.loc[1, "laplace_kl_mean"] == pytest.approx(51.0)
    assert got.loc[1, "w2sq_plugin_mean"] == pytest.approx(np.mean([2.0, 2.1, 2.2]) ** 2, 0.01)
    assert got.loc[1, "kl_rhat_max"] == pytest.approx(1.02)
    table = make_tables.default_table("default_depth", got.reset_index())
    assert " [2/3] |" in table and "bronze, failed, silver" in table
    assert "(largest of 3)" in table and "reference grade of the 3 NUTS cells" in table


def test_from_writes_the_summary_and_rewrites(tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "data"
    data.mkdir()
    page = tmp_path / "page.md"
    page.write_text("x\n<!-- table:default_depth -->\nold\n<!-- /table -->\n")
    monkeypatch.setattr(make_tables, "DATA", data)
    monkeypatch.setattr(make_tables, "PAGES", (page,))
    monkeypatch.setattr(make_tables, "ROOT", tmp_path)
    assert make_tables.main(["--from", str(_run(tmp_path))]) == 0
    assert (data / "default_depth.csv").is_file()
    assert "| depth 1 | depth 2 |" in page.read_text() and "old" not in page.read_text()
    assert make_tables.main(["--check"]) == 0


def test_bad_input_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert make_tables.main(["--from", str(tmp_path)]) == 2
    assert "results.csv" in capsys.readouterr().err
    assert make_tables.main(["--print", "no_such_table"]) == 2
    assert "no_such_table" in capsys.readouterr().err


def test_from_as_records_another_summary(tmp_path: Path, monkeypatch) -> None:
    """``--as fixed_width_depth`` records that summary (not the default's) and rewrites the
    tables read from it, leaving the default's untouched."""
    data = tmp_path / "data"
    data.mkdir()
    page = tmp_path / "page.md"
    page.write_text("<!-- table:fixed_width_depth -->\nold\n<!-- /table -->\n")
    monkeypatch.setattr(make_tables, "DATA", data)
    monkeypatch.setattr(make_tables, "PAGES", (page,))
    monkeypatch.setattr(make_tables, "ROOT", tmp_path)
    run = _run(tmp_path)
    assert make_tables.main(["--from", str(run), "--as", "fixed_width_depth"]) == 0
    assert sorted(p.name for p in data.iterdir()) == ["fixed_width_depth.csv"]
    text = page.read_text()
    assert "reference grade of the 3 ChEES cells" in text and "old" not in text
    assert "| bronze, failed, silver |" in text
    with pytest.raises(SystemExit):
        make_tables.main(["--from", str(run), "--as", "no_such_summary"])


def test_ground_truth_table_from_runs(tmp_path: Path, monkeypatch) -> None:
    """``--from ROTATED --from DIAGONAL --as ground_truth_d100``: a row per run, the S named
    from its spec, the debiased KL's distance to the truth in its own s.e.; a run of another
    spec is a usage error."""
    row = {
        "dim": 100,
        "kl_true": 38.0,
        "kl": 38.4,
        "kl_null": 0.3,
        "kl_excess": 38.1,
        "excess_se": 0.2,
        "kl_bias": 0.4,
        "kl_bias_se": 0.01,
        "kl_debiased": 37.8,
        "kl_debiased_se": 0.1,
        "n_eff": 7000.4,
        "warmup_seconds": 2.0,
        "seconds": 8.0,
    }
    runs = []
    for kind in ("rotated", "diagonal"):
        run = tmp_path / kind
        run.mkdir()
        pd.DataFrame([row]).to_csv(run / "results.csv", index=False)
        (run / "spec.yaml").write_text(f"simulation: {{kind: gaussian, structure: {kind}}}\n")
        runs.append(run)
    rows = make_tables.ground_truth_rows(runs)
    assert [r[1] for r in rows] == ["rotated", "diagonal (control)"]
    assert rows[0][7] == "37.800 ± 0.100 (-2.0 s.e.)" and rows[0][8] == "7000"
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(make_tables, "DATA", data)
    make_tables.record("ground_truth_d100", runs)
    assert make_tables.recorded_table(data / "ground_truth_d100.csv").count("\n") == 4
    other = _run(tmp_path)
    with pytest.raises(make_tables.UsageError, match="spec.yaml"):
        make_tables.ground_truth_rows([other])
    (other / "spec.yaml").write_text("name: two_moons_depth\n")
    with pytest.raises(make_tables.UsageError, match="kl_true"):
        make_tables.ground_truth_rows([other])
