"""RunStore: the only writer of a run directory; atomic writes, records after artifacts."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from zoo.execution.store import SPEC_VERSION, RunDir, RunStore, atomic_path, write_bytes_atomic


def test_write_bytes_atomic_replaces_whole_files(tmp_path):
    target = tmp_path / "sub" / "f.bin"
    write_bytes_atomic(target, b"one")
    write_bytes_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert os.listdir(target.parent) == ["f.bin"]
    assert (target.stat().st_mode & 0o777) == 0o666 & ~_umask()


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "f.txt"
    write_bytes_atomic(target, b"whole")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed")
    assert target.read_bytes() == b"whole" and os.listdir(tmp_path) == ["f.txt"]


def test_cells_records_and_artifacts(tmp_path):
    store = RunStore(tmp_path / "run")
    store.prepare()
    rec = {"cell_id": "m_depth=1_abc", "status": "ok", "error": "", "metrics": {"nll": 0.5}}
    store.write_cell(rec, {".nc": b"NC", ".ktied.npz": b"NPZ"})
    store.write_cell({"cell_id": "m_depth=2_def", "status": "failed", "error": "x"})
    assert store.status("m_depth=1_abc") == "ok"
    assert store.status("m_depth=2_def") == "failed"
    assert store.status("missing") == "pending"
    assert store.read_artifact("m_depth=1_abc", ".ktied.npz") == b"NPZ"
    assert store.read_artifact("m_depth=1_abc", ".pruning.npz") is None
    assert store.artifacts("m_depth=1_abc") == [".ktied.npz", ".nc"]
    assert [r["cell_id"] for r in RunDir(store.root).records()] == [
        "m_depth=1_abc",
        "m_depth=2_def",
    ]
    with pytest.raises(ValueError, match="suffix"):
        store.write_cell(rec, {"nc": b""})


def test_unreadable_record_counts_as_pending(tmp_path):
    store = RunStore(tmp_path)
    store.prepare()
    (store.cells_dir / "c_1.json").write_text("{not json")
    assert store.status("c_1") == "pending" and store.records() == []


def test_prepare_removes_stale_temporaries(tmp_path):
    store = RunStore(tmp_path)
    (tmp_path / "cells").mkdir()
    for p in (tmp_path / ".results.csv.x1.tmp", tmp_path / "cells" / ".c.json.x2.tmp"):
        p.write_text("half")
    store.prepare()
    assert not list(tmp_path.rglob("*.tmp"))


def test_spec_version_line(tmp_path):
    store = RunStore(tmp_path)
    store.write_spec_text("name: x\nseed: 0\n")
    text = store.spec_text()
    assert text.startswith(f"# bnn-zoo spec_version: {SPEC_VERSION}\n")
    assert store.spec_version() == SPEC_VERSION
    store.write_spec_text(text, version=7)  # the old line is replaced, not repeated
    assert store.spec_text().count("spec_version") == 1 and store.spec_version() == 7
    (tmp_path / "spec.yaml").write_text("name: x\n")  # written before versions existed
    assert store.spec_version() is None


def test_tables_files_and_clear(tmp_path):
    store = RunStore(tmp_path)
    df = pd.DataFrame({"a": [1, 2], "b": [0.5, float("nan")]})
    store.write_table("results.csv", df)
    assert (tmp_path / "results.csv").read_text() == df.to_csv(index=False)
    written = store.write_files({"report.md": b"# r", "figures/f.png": b"PNG"})
    assert written["figures/f.png"].read_bytes() == b"PNG"
    assert store.figures() == ["figures/f.png"]
    with pytest.raises(ValueError, match="inside"):
        store.write_file("../escape.txt", b"")
    store.write_cell({"cell_id": "old_1", "status": "ok"}, {".nc": b"NC"})
    # the tables' digests (to tell a hand edit) are kept beside the cells
    assert sorted(os.listdir(store.cells_dir)) == [".tables.sha256", "old_1.json", "old_1.nc"]
    store.clear_cells()
    assert not store.cells_dir.exists()


def test_damaged_records_and_artifacts_are_pending_and_named(tmp_path):
    store = RunStore(tmp_path)
    store.prepare()
    store.write_cell(
        {"cell_id": "a_1", "status": "ok", "error": "", "metrics": {"x": 1}}, {".nc": b"0123456789"}
    )
    rec = json.loads(store.record_path("a_1").read_text())
    assert rec["files"][".nc"]["size"] == 10 and len(rec["files"][".nc"]["sha256"]) == 64
    assert store.status("a_1") == "ok" and store.read_artifact("a_1", ".nc") == b"0123456789"
    store.artifact_path("a_1", ".nc").write_bytes(b"0123456780")  # same size, other bytes
    assert store.read_artifact("a_1", ".nc") is None
    store.artifact_path("a_1", ".nc").write_bytes(b"01234")  # truncated
    assert store.status("a_1") == "pending" and store.records() == []
    cases = {
        "b_1": {"cell_id": "b_1"},  # no status
        "c_1": {"cell_id": "c_1", "status": "ok"},  # no metrics
        "d_1": {"cell_id": "other", "status": "ok", "metrics": {}},  # another cell's record
        "e_1": {"cell_id": "e_1", "status": "failed", "error": 5, "metrics": {}},
    }
    for cid, bad in cases.items():
        store.record_path(cid).write_text(json.dumps(bad))
        assert store.status(cid) == "pending"
    problems = "\n".join(store.problems())
    for cid in ["a_1", *cases]:
        assert f"cells/{cid}" in problems
    assert "truncated" in problems and "names cell 'other'" in problems
    # an old record without a list of files is read as it is, with defaults filled in
    store.record_path("f_1").write_text(json.dumps({"cell_id": "f_1", "status": "failed"}))
    assert store.record("f_1") == {"cell_id": "f_1", "status": "failed", "metrics": {}, "error": ""}


def test_target_checks_and_lock(tmp_path):
    from zoo.execution.store import RunDirBusy, RunDirError

    RunStore(tmp_path / "new").check_target()  # missing: fine
    (tmp_path / "empty").mkdir()
    RunStore(tmp_path / "empty").check_target()
    (tmp_path / "f").write_text("x")
    with pytest.raises(RunDirError, match="is a file"):
        RunStore(tmp_path / "f").check_target()
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "spec.yaml").write_text("mine: 1\n")  # not written by zoo
    with pytest.raises(RunDirError, match="not a zoo run directory"):
        RunStore(tmp_path / "user").check_target()
    run = RunStore(tmp_path / "run")
    with run.lock():
        run.check_writable()
        run.prepare()
        run.write_spec_text("name: x\n")
        with pytest.raises(RunDirBusy, match=f"another zoo run \\(pid {os.getpid()}\\)"):
            with RunStore(tmp_path / "run").lock():
                pass
    run.check_target()  # a run directory (its lock file and spec.yaml) is fine
    with RunStore(tmp_path / "run").lock():  # released
        pass
