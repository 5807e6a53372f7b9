"""`zoo migrate`: a run directory of the previous version gets today's cell ids, unrecomputed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from zoo.cli import main
from zoo.run import executors
from zoo.run.migrate import migrate_run_dir
from zoo.run.store import LOCK_FILE, SPEC_VERSION, RunDir, RunStore
from zoo.spec.load import load_spec
from zoo.spec.sweep import legacy_cell_id

OLD = Path(__file__).parent / "data" / "run_v1"


@pytest.fixture
def old_run(tmp_path: Path) -> Path:
    """The run directory of the previous version, each cell with a stand-in artifact."""
    run = tmp_path / "old"
    shutil.copytree(OLD, run, ignore=shutil.ignore_patterns("README.md"))
    for rec in (run / "cells").glob("*.json"):
        (run / "cells" / f"{rec.stem}.probe.bin").write_bytes(rec.stem.encode())
    return run


def test_the_fixture_is_a_version_1_directory(old_run: Path) -> None:
    run = RunDir(old_run)
    assert run.spec_version() is None
    for rec in run.records():  # ids follow the legacy rule
        assert legacy_cell_id(rec["config"], rec["axes"]) == rec["cell_id"]


def test_old_directory_says_to_migrate(old_run: Path, tiny_spec: Path, capsys) -> None:
    files = {p: p.read_bytes() for p in old_run.rglob("*") if p.is_file()}
    for cmd in (
        ["status", str(old_run)],
        ["report", str(old_run)],
        ["run", str(old_run)],
        ["run", str(tiny_spec), "--out", str(old_run)],
    ):
        assert main(cmd) == 2, cmd
        err = capsys.readouterr().err
        assert "made by an older bnn-zoo" in err and f"zoo migrate {old_run}" in err
        assert "Traceback" not in err
    assert {p: p.read_bytes() for p in old_run.rglob("*") if p.is_file()} == files


def test_migrate_renames_every_cell_and_keeps_the_numbers(
    old_run: Path, capsys, monkeypatch
) -> None:
    before = {r["cell_id"]: r for r in RunDir(old_run).records()}
    dry = migrate_run_dir(old_run, dry_run=True)
    assert len(dry.renamed) == 4 and not dry.skipped and RunDir(old_run).spec_version() is None

    assert main(["migrate", str(old_run)]) == 0
    out = capsys.readouterr().out
    assert "renamed 4 cells" in out and "no spec_version" in out
    run = RunDir(old_run)
    assert run.spec_version() == SPEC_VERSION
    spec = load_spec(run.spec_path)  # today's form: loads without a deprecation warning
    cells = {c.cell_id: c for c in spec.cells()}
    records = run.records()
    assert {r["cell_id"] for r in records} == set(cells)
    for rec in records:
        old = rec["migrated_from"]["cell_id"]
        assert rec["migrated_from"]["spec_version"] == 1
        assert rec["axes"] == before[old]["axes"] and rec["metrics"] == before[old]["metrics"]
        assert rec["config"] == cells[rec["cell_id"]].config()
        assert run.read_artifact(rec["cell_id"], ".probe.bin") == old.encode()
    names = {p.name for p in run.cells_dir.iterdir()}
    assert not any(old in n for old in before for n in names)
    assert not list(old_run.rglob("*.tmp"))

    # the tables are rebuilt with the new ids and the very same numbers
    old_res = pd.read_csv(OLD / "results.csv").drop(columns="cell_id")
    new_res = pd.read_csv(old_run / "results.csv")
    assert set(new_res["cell_id"]) == set(cells)
    pd.testing.assert_frame_equal(new_res.drop(columns="cell_id")[old_res.columns], old_res)

    # status, report and a resume work and recompute nothing
    assert main(["status", str(old_run)]) == 0
    assert "done 4, failed 0, pending 0" in capsys.readouterr().out

    def boom(*a, **k):
        raise AssertionError("a migrated cell was recomputed")

    monkeypatch.setattr(executors, "run_cell", boom)
    assert main(["run", str(old_run), "--workers", "1", "--no-progress"]) == 0
    assert "4 of 4 cells already done" in capsys.readouterr().err

    # a second migration has nothing to do
    again = migrate_run_dir(old_run)
    assert not again.renamed and len(again.unchanged) == 4


def test_a_record_whose_configuration_differs_is_kept(old_run: Path) -> None:
    path = next((old_run / "cells").glob("mfvi_depth=1_*.json"))
    rec = json.loads(path.read_text())
    rec["config"]["data"]["noise"] = 0.3  # not what the spec says: the id check catches it
    path.write_text(json.dumps(rec))
    done = migrate_run_dir(old_run)
    assert [old for old, _ in done.skipped] == [rec["cell_id"]]
    assert "does not give its id" in done.skipped[0][1]
    assert len(done.renamed) == 3 and len(done.pending) == 1
    assert path.is_file()  # left where it was; its cell runs again on `zoo run`


def test_migrate_bad_input_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["migrate", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_migrate_refuses_a_directory_a_run_is_using(old_run: Path, capsys) -> None:
    files = {p: p.read_bytes() for p in old_run.rglob("*") if p.is_file()}
    with RunStore(old_run).lock():  # what `zoo run` holds for the whole run
        assert main(["migrate", str(old_run)]) == 2
        err = capsys.readouterr().err
        assert f"is using {old_run}" in err and "Traceback" not in err
        assert main(["migrate", str(old_run), "--dry-run"]) == 0  # reads only, as status does
    lock = old_run / LOCK_FILE
    assert {p: p.read_bytes() for p in old_run.rglob("*") if p.is_file() and p != lock} == files
    assert RunDir(old_run).spec_version() is None  # nothing renamed
    assert main(["migrate", str(old_run)]) == 0  # once the run is over
    assert RunDir(old_run).spec_version() == SPEC_VERSION
