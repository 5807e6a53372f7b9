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
import torch

from zoo.cli import main
from zoo.execution import execute, executors
from zoo.execution.executors import plan_workers
from zoo.runtime import Runtime

ZOO = [sys.executable, "-c", "import sys; from zoo.cli import main; sys.exit(main())"]


def test_plan_workers_never_oversubscribes() -> None:
    assert plan_workers(None, cores=8) == (8, 1)
    assert plan_workers(2, cores=8) == (2, 4)
    assert plan_workers(3, cores=8) == (3, 2)
    assert plan_workers(1, cores=2) == (1, 2)
    assert plan_workers(4, cores=2) == (4, 1)  # more workers than cores: one thread each
    with pytest.raises(ValueError, match="at least 1"):
        plan_workers(0)
    # a spec that fixes the threads keeps them; the default workers fill the cores
    assert plan_workers(None, cores=8, runtime=Runtime.cpu(threads=2)) == (4, 2)
    assert plan_workers(2, cores=8, runtime=Runtime.cpu(threads=1)) == (2, 1)


def test_plan_workers_one_worker_per_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    cuda = Runtime(torch.device("cuda"))
    assert plan_workers(None, cores=16, runtime=cuda) == (4, 4)
    assert plan_workers(None, cores=16, runtime=Runtime(torch.device("cuda", 1))) == (1, 16)
    assert plan_workers(8, cores=16, runtime=cuda) == (8, 2)


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
    proc = subprocess.Popen(
        [*ZOO, "run", str(tiny_spec), "--out", str(out), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
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
    real = execute.run_cell
    calls = []

    def flaky(cell, *args, **kwargs):
        calls.append(cell.cell_id)
        if cell.axes["model.depth"] == 2 and os.environ.get("FLAKY") == "1":
            raise FloatingPointError("loss is NaN at step 3")
        return real(cell, *args, **kwargs)

    monkeypatch.setattr(execute, "run_cell", flaky)
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


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_bad_input_and_loses_nothing(
    tiny_spec: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "fresh"
    for device in ("cuda", "cuda:1"):
        assert main(["run", str(tiny_spec), "--out", str(out), "--device", device]) == 2
        err = capsys.readouterr().err
        assert f"--device '{device}' asked for" in err and "use --device cpu" in err
        assert "Traceback" not in err and not out.exists()
    # a spec's runtime section is checked the same way, naming its field
    assert main(["run", str(tiny_spec), "--out", str(out), "--set", "runtime.device=cuda"]) == 2
    assert "runtime.device 'cuda'" in capsys.readouterr().err
    # a run directory with finished cells keeps every file untouched
    done = tmp_path / "done"
    args = [
        "--workers",
        "1",
        "--no-progress",
        "--set",
        "inference.0.steps=20",
        "--set",
        "sweep.seed=[0]",
    ]
    assert main(["run", str(tiny_spec), "--out", str(done), *args]) == 0
    files = {p: p.read_bytes() for p in done.rglob("*") if p.is_file()}
    assert main(["run", str(done), "--device", "cuda", "--no-progress"]) == 2
    assert {p: p.read_bytes() for p in done.rglob("*") if p.is_file()} == files
    assert main(["run", str(done), "--device", "cpu", "--workers", "1", "--no-progress"]) == 0
    rec = json.loads(next((done / "cells").glob("*.json")).read_text())
    assert rec["device"] == "cpu" and rec["threads"] >= 1


def _stub_cell(seen: list):
    from zoo.execution.cell import CellOutput

    def run_cell(cell, runtime, progress=False):
        seen.append(runtime)
        return CellOutput({"accuracy": 0.5 + cell.axes["model.depth"] / 10}, {".stub": b"s"})

    return run_cell


def test_the_runtime_is_built_once_and_reaches_every_cell(
    tiny_spec: Path, tmp_path: Path, monkeypatch
) -> None:
    from zoo.execution.runner import run_spec
    from zoo.spec import load_spec

    seen: list[Runtime] = []
    monkeypatch.setattr(execute, "run_cell", _stub_cell(seen))
    spec = load_spec(tiny_spec, ["runtime.dtype=float64", "runtime.threads=1"])
    res = run_spec(spec, tmp_path / "run", workers=1, progress=False, log=lambda m: None)
    assert res.n_ran == 4 and res.n_failed == 0
    assert seen == [Runtime.cpu(torch.float64, threads=1)] * 4
    cells = sorted((tmp_path / "run" / "cells").iterdir())
    assert len([p for p in cells if p.suffix == ".stub"]) == 4
    rec = json.loads(next(p for p in cells if p.suffix == ".json").read_text())
    assert (rec["device"], rec["threads"]) == ("cpu", 1)


def test_ray_tasks_ask_for_a_gpu_with_cuda(monkeypatch) -> None:
    asked = {}

    class FakeRay:
        def is_initialized(self):
            return True

        def remote(self, **kw):
            asked.update(kw)

            def task(fn):
                class Ref:  # hashable by identity, like a Ray object ref
                    def __init__(self, *args):
                        self.value = fn(*args)

                return type("Task", (), {"remote": Ref})

            return task

        def wait(self, refs, num_returns):
            return refs[:num_returns], refs[num_returns:]

        def get(self, ref):
            return ref.value

    def fake_execute(cell, runtime, progress):
        return executors.CellResult({"cell_id": cell, "device": str(runtime.device)})

    monkeypatch.setattr(executors, "_ray", FakeRay)
    monkeypatch.setattr(executors, "execute_cell", fake_execute)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    rt = Runtime(torch.device("cuda", 1), threads=3)
    out = list(executors.run_ray(["a", "b"], workers=2, runtime=rt))
    assert asked == {"num_cpus": 3, "num_gpus": 1, "max_retries": 0}
    assert [r.record["device"] for r in out] == ["cuda", "cuda"]  # Ray shows a task its GPU
    list(executors.run_ray(["a"], workers=1, runtime=Runtime.cpu(threads=2)))
    assert asked["num_gpus"] == 0 and asked["num_cpus"] == 2
