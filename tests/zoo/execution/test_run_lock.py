"""The run directory's lock: a report never writes while a run does, a second run is told
"is using" at once (before torch) and never "not a zoo run directory", and a finished run
leaves no lock file, no table digests and no empty ``checkpoints/`` behind."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.execution.rundir import LOCK_FILE, RunDir
from zoo.execution.store import RunDirBusy, RunStore
from zoo.execution.usage import UsageError

#: What a finished run directory of the tiny spec holds, and nothing else.
FINISHED = {"cells", "figures", "report.html", "report.md", "results.csv", "spec.yaml"}


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Each file's inode and modification time: an atomic write changes both."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_ino, st.st_mtime_ns)
    return out


def test_a_finished_run_leaves_only_its_documented_files(one_run, capsys) -> None:
    spec, out = one_run
    assert set(os.listdir(out)) == FINISHED | {"summary.csv"}
    assert main(["report", str(out)]) == 0  # a report ends as clean
    assert set(os.listdir(out)) == FINISHED | {"summary.csv"}
    capsys.readouterr()


def test_a_report_while_a_run_holds_the_directory_is_refused(run_dir, capsys) -> None:
    before = _files(run_dir)
    with RunStore(run_dir).lock():  # a run going there
        assert main(["report", str(run_dir)]) == 2
        err = capsys.readouterr().err
        assert f"another zoo run (pid {os.getpid()}) is using {run_dir}" in err
        assert "it writes the report itself as it ends" in err and "Traceback" not in err
        # the report that passed the first check before the run started loses the race too
        from zoo.cli.run_commands import cmd_report

        with pytest.raises(UsageError, match="is using"):
            cmd_report(argparse.Namespace(run_dir=run_dir))
    assert _files(run_dir) == before  # nothing of the run's was replaced
    assert main(["report", str(run_dir)]) == 0  # once it ended


def test_a_second_run_is_refused_before_it_imports_torch(one_run, run_dir) -> None:
    spec, _ = one_run
    code = (
        "import sys; from zoo.cli import main; rc = main(sys.argv[1:]); "
        "print('torch' in sys.modules); sys.exit(rc)"
    )
    with RunStore(run_dir).lock():
        for args in (["run", str(run_dir)], ["run", str(spec), "--out", str(run_dir)]):
            res = subprocess.run(
                [sys.executable, "-c", code, *args, "--no-progress"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert res.returncode == 2, res.stderr
            assert f"another zoo run (pid {os.getpid()}) is using {run_dir}" in res.stderr
            assert res.stdout.strip() == "False"  # refused before torch was imported


def test_a_run_starting_in_a_directory_another_just_took_is_told_in_use(tmp_path) -> None:
    out = tmp_path / "new"
    first = RunStore(out)
    with first.lock():
        first.check_writable()  # its files, but no spec.yaml yet
        (out / ".spec.yaml.0123abcd.tmp").write_text("name: x\n")
        with pytest.raises(RunDirBusy, match=f"another zoo run \\(pid {os.getpid()}\\)"):
            RunStore(out).check_target()


def test_the_lock_file_goes_and_a_late_opener_locks_the_new_one(tmp_path, monkeypatch) -> None:
    """A process that opened ``.zoo.lock`` before its holder removed it must not take a
    lock on the removed file while another holds the new one."""
    out = tmp_path / "run"
    path = out / LOCK_FILE
    with RunStore(out).lock():
        stale = os.open(path, os.O_RDWR)  # opened while held...
    assert not path.exists()  # ...removed as the holder ended
    real_open, handed = os.open, []

    def open_stale_first(p, flags, *a):
        if Path(p) == path and not handed:
            handed.append(p)
            return stale  # the late opener's descriptor of the removed file
        return real_open(p, flags, *a)

    monkeypatch.setattr(os, "open", open_stale_first)
    with RunStore(out).lock():
        assert handed and path.exists()
        assert RunDir(out).holder() == os.getpid()  # its lock is on the file at the path
        monkeypatch.setattr(os, "open", real_open)
        with pytest.raises(RunDirBusy):
            with RunStore(out).lock():
                pass
    assert not path.exists()
