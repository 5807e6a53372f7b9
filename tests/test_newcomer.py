"""What a newcomer trips over first: documented overrides that must work on the default
spec, ``zoo status`` words, the report's text, and the commands' help."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import zoo
from reports.tables import summarize, summary_tables
from tests import specs
from zoo.cli import main
from zoo.execution.rundir import RUNNING_FILE
from zoo.execution.store import RunStore
from zoo.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "specs" / "two_moons_depth.yaml"


@pytest.mark.parametrize("item", ["inference=[mfvi]", "inference.nuts=null"])
def test_dropping_the_sampler_skips_its_studies_with_a_warning(item: str, capsys) -> None:
    spec = load_spec(DEFAULT, [item])
    assert [m.name for m in spec.inference] == ["mfvi"]
    assert [s.kind for s in spec.studies] == ["laplace"]  # the one that applies to svi
    assert len(spec.cells()) == 12
    err = capsys.readouterr().err
    for k, kind in ((0, "price_of_mean_field"), (2, "predictive")):
        assert f"warning: studies[{k}]: the {kind} study records no cell once --set " in err
        assert "dropped nuts" in err and "it is skipped" in err


def test_summary_shows_settings_without_an_error() -> None:
    results = pd.DataFrame(
        {
            "method": ["mfvi"] * 3,
            "seed": [0, 1, 2],
            "accuracy": [0.8, 0.9, 0.85],
            "n_params": [257, 257, 257],
            "width": [8, 8, 8],
            "n_train": [100, 120, 110],  # differs between repeats: keeps its interval
            "status": ["ok"] * 3,
        }
    )
    summary = summarize(results, ["accuracy", "n_params", "width", "n_train"])
    ((header, (row,)),) = summary_tables(summary, ["accuracy", "n_params", "width", "n_train"])
    entry = dict(zip(header, row, strict=True))
    assert entry["n_params"] == "257" and entry["width"] == "8"
    assert " ± " in entry["accuracy"] and " ± " in entry["n_train"]


def test_report_names_data_relative_states_the_test_set_and_has_no_entities(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 2))
    rows = [f"{a:.4f},{b:.4f},{int(a + b > 0)}" for a, b in x]
    (project / "data" / "t.csv").write_text("a,b,y\n" + "\n".join(rows) + "\n")
    path = specs.write_spec(
        project,
        name="relpath",
        data=specs.csv("data/t.csv", "y", task="classification", test_fraction=0.25),
        model=specs.mlp(depth=1, width=4),
        inference=[specs.svi("mfvi", steps=10)],
    )
    run = zoo.run(path, out=project / "runs" / "r", workers=1)
    assert run.outcome.n_failed == 0
    md = run.report.read_text()
    html = (run.dir / "report.html").read_text()
    for text in (md, html):
        assert str(tmp_path) not in text  # no absolute path of this machine
    assert "path ../../data/t.csv" in md and "(paths relative to the run directory)" in md
    assert "path: ../../data/t.csv" in md  # the spec dump too
    assert "60 training and 20 test points in the cells" in md
    assert "&amp;" not in md and "&lt;" not in md and "&gt;" not in md
    # the run directory's own spec keeps the absolute path: a resume reads the same file
    assert str(project / "data" / "t.csv") in (run.dir / "spec.yaml").read_text()


def test_status_tells_running_from_queued_while_a_run_holds_the_directory(
    tmp_path: Path, capsys
) -> None:
    spec = specs.load(tmp_path, name="st", sweep={"seed": [0, 1]})
    first, second = (c.cell_id for c in spec.cells())
    store = RunStore(tmp_path / "run")
    with store.lock():  # what a zoo run holds for its whole length
        store.prepare()
        store.write_spec(spec)
        assert main(["status", str(store.root)]) == 0  # no list kept (a Ray run)
        ray = capsys.readouterr().out.splitlines()
        store.write_running({first})  # the run's first cell has started its fit
        assert main(["status", str(store.root)]) == 0
        held = capsys.readouterr().out.splitlines()
    assert held[0] == (
        f"done 0, running 1, queued 1, failed 0, pending 0 (zoo run pid {os.getpid()} is going)"
    )
    assert held[1:3] == [f"running  {first}", f"queued   {second}"]
    assert ray[0].startswith("done 0, running/queued 2, failed 0, pending 0")
    assert main(["status", str(store.root)]) == 0  # the run has ended: nothing is running
    free = capsys.readouterr().out.splitlines()
    assert free[0] == "done 0, failed 0, pending 2" and free[1].startswith("pending ")


def test_a_run_lists_a_cell_while_its_fit_runs_and_then_removes_the_list(
    tmp_path: Path, monkeypatch
) -> None:
    seen: list[set[str] | None] = []
    real = RunStore.write_running

    def spy(self: RunStore, ids: set[str] | None) -> None:
        seen.append(None if ids is None else set(ids))
        real(self, ids)
        assert (self.root / RUNNING_FILE).exists() == (ids is not None)

    monkeypatch.setattr(RunStore, "write_running", spy)
    run = zoo.run(specs.load(tmp_path, name="st"), out=tmp_path / "run", workers=1)
    assert run.outcome.n_failed == 0
    (cell,) = run.cells
    assert seen == [set(), {cell.cell_id}, set(), None]  # started, stored, the run's end
    assert not (run.dir / RUNNING_FILE).exists()


@pytest.mark.parametrize("command", ["validate", "show", "list", "report", "status"])
def test_every_command_help_has_a_description_and_positional_help(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    usage, description = text.split("\n\n")[:2]
    assert usage.startswith(f"usage: zoo {command}") and description.strip()[0].isupper()
    if "positional arguments:" in text:
        block = text.split("positional arguments:\n")[1].split("\n\n")[0]
        for line in block.splitlines():
            if line.startswith("  ") and not line.startswith("   "):
                assert len(line.split(None, 1)) == 2, f"no help for {line.strip()}"
