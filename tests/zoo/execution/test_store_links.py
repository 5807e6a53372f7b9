"""Nothing is written, truncated or deleted through a symbolic link in a run directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.execution.checkpoint_file import UnusableCheckpoint
from zoo.execution.store import LinkedPath, RunDirError, RunStore


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "elsewhere" / "precious.txt"
    victim.parent.mkdir()
    victim.write_text("keep me\n")
    return victim


def test_lock_file_link_is_refused_and_its_target_kept(tmp_path):
    victim = _victim(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / ".zoo.lock").symlink_to(victim)
    with pytest.raises(RunDirError, match="symbolic link"):
        RunStore(run).check_target()  # a directory holding only the link is not new
    with pytest.raises(RunDirError, match="symbolic link"), RunStore(run).lock():
        pass  # the lock itself refuses it too (O_NOFOLLOW), without check_target
    assert victim.read_text() == "keep me\n"


def test_lock_file_that_is_not_a_regular_file_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / ".zoo.lock").mkdir(parents=True)
    with pytest.raises(RunDirError, match="not a regular file|cannot write"):
        with RunStore(run).lock():
            pass
    os.rmdir(run / ".zoo.lock")
    os.mkfifo(run / ".zoo.lock")
    with pytest.raises(RunDirError, match="not a regular file"), RunStore(run).lock():
        pass


def test_linked_figures_and_cells_receive_nothing(tmp_path):
    victim_dir = _victim(tmp_path).parent
    (victim_dir / ".old.tmp").write_text("not zoo's")
    store = RunStore(tmp_path / "run")
    store.prepare()
    store.write_spec_text("name: x\n")
    (store.root / "figures").symlink_to(victim_dir, target_is_directory=True)
    with pytest.raises(RunDirError, match="figures is a symbolic link"):
        store.check_target()
    with pytest.raises(LinkedPath, match="symbolic link"):
        store.write_file("figures/a.png", b"PNG")
    with pytest.raises(LinkedPath):
        store.remove_file("figures/.old.tmp")
    with pytest.raises(LinkedPath):
        store.prepare()  # would delete the target's .*.tmp files
    (store.root / "report.md").symlink_to(victim_dir / "precious.txt")
    with pytest.raises(LinkedPath):
        store.write_text("report.md", "# report")
    os.rmdir(store.cells_dir)
    store.cells_dir.symlink_to(victim_dir, target_is_directory=True)
    rec = {"cell_id": "c_1", "status": "ok", "error": "", "metrics": {}}
    with pytest.raises(LinkedPath):
        store.write_cell(rec, {".nc": b"NC"})
    with pytest.raises(LinkedPath):
        store.clear_cells()
    assert sorted(os.listdir(victim_dir)) == [".old.tmp", "precious.txt"]
    assert (victim_dir / "precious.txt").read_text() == "keep me\n"


def test_linked_entry_in_cells_is_refused(tmp_path):
    victim = _victim(tmp_path)
    store = RunStore(tmp_path / "run")
    store.prepare()
    store.write_spec_text("name: x\n")
    (store.cells_dir / "c_1.nc").symlink_to(victim)
    with pytest.raises(RunDirError, match="c_1.nc is a symbolic link"):
        store.check_target()


def test_checkpoints_are_read_written_and_cleared_never_through_a_link(tmp_path):
    victim = _victim(tmp_path)
    store = RunStore(tmp_path / "run")
    store.prepare()
    store.write_spec_text("name: x\n")
    assert store.read_checkpoint("c_1", "cfg") is None
    store.write_checkpoint("c_1", b"state", "cfg")
    assert store.read_checkpoint("c_1", "cfg") == b"state"
    store.remove_checkpoint("c_1")
    assert store.read_checkpoint("c_1", "cfg") is None
    store.write_checkpoint("c_2", b"state", "cfg")
    store.clear_cells()  # zoo run --fresh: the saved states go with the cells
    assert not (store.root / "checkpoints").exists()
    # a link in checkpoints/ (or checkpoints/ itself a link) is refused, never read or written
    (store.root / "checkpoints").mkdir()
    (store.root / "checkpoints" / "c_1.pt").symlink_to(victim)
    with pytest.raises(RunDirError, match="c_1.pt is a symbolic link"):
        store.check_target()
    with pytest.raises(UnusableCheckpoint, match="c_1.pt is a symbolic link"):
        store.read_checkpoint("c_1", "cfg")
    with pytest.raises(LinkedPath):
        store.write_checkpoint("c_1", b"state", "cfg")
    with pytest.raises(LinkedPath):
        store.remove_checkpoint("c_1")
    os.unlink(store.root / "checkpoints" / "c_1.pt")
    os.rmdir(store.root / "checkpoints")
    (store.root / "checkpoints").symlink_to(victim.parent, target_is_directory=True)
    with pytest.raises(RunDirError, match="checkpoints is a symbolic link"):
        store.check_target()
    with pytest.raises(LinkedPath):
        store.write_checkpoint("c_1", b"state", "cfg")
    with pytest.raises(LinkedPath):
        store.clear_cells()
    assert sorted(os.listdir(victim.parent)) == ["precious.txt"]
    assert victim.read_text() == "keep me\n"


def test_cli_refuses_a_run_directory_with_a_lock_link(tiny_spec, tmp_path, capsys):
    victim = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / ".zoo.lock").symlink_to(victim)
    code = main(["run", str(tiny_spec), "--out", str(out), "--no-progress"])
    assert code == 2
    assert "symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "keep me\n"
    assert sorted(os.listdir(out)) == [".zoo.lock"]
