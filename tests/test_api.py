"""The Python API: docs/api.md's example runs as written, and the run object reads back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import zoo
from zoo.execution.usage import UsageError

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


def test_zoo_run_and_the_command_line_reach_the_run_with_the_same_arguments(
    tiny_spec: Path, tmp_path: Path, monkeypatch
) -> None:
    """One front door: ``zoo run`` is a thin layer over the path of ``zoo.run(...)``
    (``plan_run`` then ``launch``), so both hand the run the same spec, directory and
    options; ``zoo.run`` is a function and the run layer's package is a plain module."""
    import sys
    import types

    from zoo.cli import main
    from zoo.execution import launch
    from zoo.execution.runner import RunOutcome

    calls = []

    def recorder(spec, out, **options):
        calls.append((spec, out, options))
        return RunOutcome(out, 4, 0, 0, 0, report_error="not run here")

    monkeypatch.setattr(launch, "run_spec", recorder)
    out = tmp_path / "run"
    args = ["--set", "sweep.seed=[0]", "--workers", "1", "--checkpoint-every", "30"]
    assert main(["run", str(tiny_spec), "--out", str(out), "--no-progress", *args]) == 1
    run = zoo.run(tiny_spec, out=out, overrides=["sweep.seed=[0]"], workers=1, checkpoint_every=30)
    assert run.outcome is not None and run.outcome.report_error == "not run here"
    (cli_spec, cli_out, cli_options), (api_spec, api_out, api_options) = calls
    assert cli_spec == api_spec and cli_out == api_out == out
    assert cli_options == api_options
    assert isinstance(zoo.run, types.FunctionType)
    assert type(sys.modules["zoo.execution"]) is types.ModuleType


def test_the_two_doors_name_a_bad_option_as_each_spells_it(tiny_spec: Path, capsys) -> None:
    from zoo.cli import main

    assert main(["run", str(tiny_spec), "--workers", "0"]) == 2
    assert "zoo: --workers 0: give at least 1 worker" in capsys.readouterr().err
    with pytest.raises(UsageError, match=r"^workers=0: give at least 1 worker$"):
        zoo.run(tiny_spec, workers=0)
