"""The Python API: docs/api.md's example runs as written, and the run object reads back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import zoo
from zoo.cli.common import UsageError

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "api.md"


def test_the_documented_example_runs_verbatim(tmp_path: Path, monkeypatch, capsys) -> None:
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    monkeypatch.chdir(tmp_path)  # the example writes runs/api_example here
    ns: dict = {}
    exec(compile(code, str(PAGE), "exec"), ns)
    run = ns["run"]
    assert run.outcome.n_cells == run.outcome.n_ran == 2 and run.outcome.n_failed == 0
    assert list(run.results["model.depth"]) == [1, 2]
    assert set(run.status.values()) == {"ok"}
    assert {"posterior", "log_likelihood"} <= set(ns["tree"].children)
    assert run.report == Path("runs/api_example/report.md") and run.report.is_file()
    again = ns["again"]
    assert again.outcome is None and [c.cell_id for c in again.cells] == list(run.status)
    assert again.datatree(run.cells[1].cell_id).identical(run.datatree(1))
    out = capsys.readouterr().out
    assert "accuracy_mean" in out and "runs/api_example/report.md" in out


def test_open_run_and_datatree_refuse_what_is_not_there(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a run directory"):
        zoo.open_run(tmp_path)
    with pytest.raises(zoo.SpecError, match="did you mean 'two_moons_depth'"):
        zoo.run("two_moons_dept", out=tmp_path / "r")
    with pytest.raises(UsageError, match="overrides apply to a spec file"):
        zoo.run(zoo.load_spec(ROOT / "specs" / "two_moons_depth.yaml"), overrides=["seed=1"])


def test_run_refuses_a_python_without_a_dependency(tmp_path: Path, without_h5netcdf) -> None:
    """h5netcdf is imported only when a cell writes its ArviZ file: zoo.run checks first."""
    with pytest.raises(UsageError, match="pip install h5netcdf"):
        zoo.run("two_moons_depth", out=tmp_path / "r")
    assert not (tmp_path / "r").exists()
