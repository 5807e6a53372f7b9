"""Sweeps that survive and scale: resume after SIGKILL, worker processes, Ray, retries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from zoo.cli import main
from zoo.run import cell as zc
from zoo.run.executors import plan_workers

ZOO = [sys.executable, "-c", "import sys; from zoo.cli import main; sys.exit(main())"]


def test_plan_workers_never_oversubscribes() -> None:
    assert plan_workers(None, cores=8) == (8, 1)
    assert plan_workers(2, cores=8) == (2, 4)
    assert plan_workers(3, cores=8) == (3, 2)
    assert plan_workers(1, cores=2) == (1, 2)
    assert plan_workers(4, cores=2) == (4, 1)  # more workers than cores: one thread each
    with pytest.raises(ValueError, match="at least 1"):
        plan_workers(0)


def _eight_cells(tiny_spec: Path) -> list[str]:
    return ["--set", "sweep.seed=[0, 1, 2, 3]", "--set", "inference.0.steps=150"]


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*ZOO, *args], capture_output=True, text=True, timeout=600, **kw)


@pytest.mark.slow
def test_sigkill_then_resume_equals_an_uninterrupted_run(tiny_spec: Path, tmp_path: Path) -> None:
    # kill -9 at any moment loses only the cells in flight: nothing finished is recomputed
    # or lost, no half-written file is read, and results.csv equals an uninterrupted run's
    extra = [*_eight_cells(tiny_spec), "--workers", "2", "--no-progress"]
    full = tmp_path / "full"
    assert _run(["run", str(tiny_spec), "--out", str(full), *extra]).returncode == 0

    out = tmp_path / "killed"
    proc = subprocess.Popen([*ZOO, "run", str(tiny_spec), "--out", str(out), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    cells = out / "cells"
    deadline = time.monotonic() + 300
    while len(list(cells.glob("*.json"))) < 3:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # the driver alone, mid-sweep ...
    proc.wait()
    deadline = time.monotonic() + 30
    while True:  # ... takes its workers with it (PR_SET_PDEATHSIG): no orphans left
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "worker processes outlived the killed driver"
        time.sleep(0.1)
    done = {p.name: p.stat().st_mtime_ns for p in cells.glob("*.json")}
    assert 3 <= len(done) < 8
    for p in cells.glob("*.json"):  # every stored record is whole
        assert json.loads(p.read_text())["status"] == "ok"

    res = _run(["run", str(tiny_spec), "--out", str(out), *extra])
    assert res.returncode == 0, res.stderr
    assert f"{len(done)} of 8 cells already done" in res.stderr
    assert {n: (cells / n).stat().st_mtime_ns for n in done} == done  # nothing recomputed
    assert len(list(cells.glob("*.json"))) == 8
    assert not list(out.rglob("*.tmp"))
    assert (out / "results.csv").read_bytes() == (full / "results.csv").read_bytes()


@pytest.mark.slow
def test_ray_executor_gives_the_same_results_as_local_workers(
    tiny_spec: Path, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    common = ["--workers", "2", "--no-progress"]
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    assert _run(["run", str(tiny_spec), "--out", str(local), *common]).returncode == 0
    res = _run(["run", str(tiny_spec), "--out", str(on_ray), "--executor", "ray", *common])
    assert res.returncode == 0, res.stderr
    assert "on ray: 2 workers x 1 torch threads" in res.stderr
    assert (local / "results.csv").read_bytes() == (on_ray / "results.csv").read_bytes()
    for p in (local / "cells").glob("*.json"):
        assert json.loads(p.read_text())["threads"] == 1


def test_failed_cells_are_kept_until_retry_failed(
    tiny_spec: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    real = zc.METHODS["svi"]
    calls = []

    def flaky(cell, model, ds, progress):
        calls.append(cell.cell_id)
        if cell.axes["model.depth"] == 2 and os.environ.get("FLAKY") == "1":
            raise FloatingPointError("loss is NaN at step 3")
        return real(cell, model, ds, progress)

    monkeypatch.setitem(zc.METHODS, "svi", flaky)
    monkeypatch.setenv("FLAKY", "1")
    out = tmp_path / "run"
    base = ["--workers", "1", "--no-progress", "--set", "inference.0.steps=20"]
    assert main(["run", str(tiny_spec), "--out", str(out), *base]) == 1
    err = capsys.readouterr().err
    assert f"zoo run {out} --retry-failed" in err
    res = pd.read_csv(out / "results.csv")
    assert list(res["status"]) == ["ok", "ok", "failed", "failed"]
    assert res["error"].str.contains("NaN").sum() == 2
    rec = json.loads(next(p for p in (out / "cells").glob("*depth=2*.json")).read_text())
    assert "FloatingPointError" in rec["traceback"]

    monkeypatch.setenv("FLAKY", "0")
    calls.clear()
    assert main(["run", str(out), "--workers", "1", "--no-progress"]) == 1  # kept as failed
    assert calls == []
    assert "2 failed: rerun with --retry-failed" in capsys.readouterr().err
    assert main(["run", str(out), "--retry-failed", "--workers", "1", "--no-progress"]) == 0
    assert len(calls) == 2 and all("depth=2" in c for c in calls)
    assert (pd.read_csv(out / "results.csv")["status"] == "ok").all()
    assert main(["status", str(out)]) == 0
    assert "done 4, failed 0, pending 0" in capsys.readouterr().out


def test_run_argument_errors_exit_2(tiny_spec: Path, tmp_path: Path, capsys) -> None:
    assert main(["run", str(tiny_spec), "--workers", "0"]) == 2
    assert "--workers 0" in capsys.readouterr().err
    assert main(["run", str(tiny_spec), "--address", "auto"]) == 2
    assert "--executor ray" in capsys.readouterr().err
    assert main(["run", str(tmp_path)]) == 2  # a directory that is not a run directory
    assert "not a run directory" in capsys.readouterr().err
