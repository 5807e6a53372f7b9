"""Faults around a run: signals, dead workers, foreign and busy directories, damaged files,
full disks, file modes, progress and non-finite metrics. Real processes and signals."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from tests import specs
from zoo.cli import main
from zoo.execution import execute, feedback, runner, saver
from zoo.execution.store import RunStore
from zoo.spec import load_spec

ZOO = [sys.executable, "-c", "import sys; from zoo.cli import main; sys.exit(main())"]

#: VI methods of a few fast steps on batches of 50.
VI = {"pretrain_epochs": 0, "batch_size": 50, "predictive_samples": 5}
MODEL = specs.mlp(depth=1, param_budget=100, activation="relu")

#: Two quick cells, then two that would run for an hour.
SLOW_TAIL = specs.spec(
    "slowtail",
    seed=0,
    data=specs.two_moons(n_train=100, n_test=100, noise=0.1),
    model=MODEL,
    inference=[specs.svi("quick", steps=10, **VI), specs.svi("endless", steps=10_000_000, **VI)],
    sweep={"seed": [0, 1]},
)


def _children(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _wait_for(cond, timeout: float, what: str, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended (rc {proc.returncode}) before {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


# --------------------------------------------------------------------------- 1 + 3: signals, lock


@pytest.mark.parametrize(
    "sig",
    [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_signal_stops_the_run_at_once_and_keeps_what_finished(tmp_path: Path, sig) -> None:
    with contextlib.ExitStack() as stack:
        _signal_run(tmp_path, sig, stack)


def _signal_run(tmp_path: Path, sig: int, stack: contextlib.ExitStack) -> None:
    spec, out = specs.write_spec(tmp_path, SLOW_TAIL), tmp_path / "run"
    err = stack.enter_context((tmp_path / "err.txt").open("w+"))
    proc = subprocess.Popen(
        [*ZOO, "run", str(spec), "--out", str(out), "--workers", "2", "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,
    )
    try:
        cells = out / "cells"
        _wait_for(lambda: len(list(cells.glob("quick_*.json"))) == 2, 240, "two stored cells", proc)
        time.sleep(1.0)  # both workers are in the endless cells now
        if sig == signal.SIGINT:
            # the directory is locked: a second run is refused, reading it is not
            res = subprocess.run(
                [*ZOO, "run", str(spec), "--out", str(out)],
                text=True,
                capture_output=True,
                timeout=120,
            )
            assert res.returncode == 2, res.stderr
            assert f"another zoo run (pid {proc.pid}) is using {out}" in res.stderr
            assert "Traceback" not in res.stderr
            res = subprocess.run(
                [*ZOO, "status", str(out)], text=True, capture_output=True, timeout=120
            )
            # the two endless cells: running once their fits report, queued before
            counts = re.search(
                r"done 2, running (\d), queued (\d), failed 0, pending 0", res.stdout
            )
            assert res.returncode == 0 and counts, res.stdout
            assert int(counts[1]) + int(counts[2]) == 2
            assert f"zoo run pid {proc.pid} is going" in res.stdout
        assert proc.poll() is None
        t0 = time.monotonic()
        os.kill(proc.pid, sig)  # the driver only, as `kill` does; workers must follow
        rc = proc.wait(timeout=30)
        assert time.monotonic() - t0 < 15, "the run did not stop promptly"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert _group_gone(proc.pid, 10), "worker processes outlived the stopped run"
    err.seek(0)
    text = err.read()
    assert rc == 128 + sig, text
    assert "Traceback" not in text
    assert "2 of 4 cells are stored" in text and f"resume with: zoo run {out}" in text
    assert sorted(p.name.split("_")[0] for p in cells.glob("*.json")) == ["quick", "quick"]
    assert not list(out.rglob("*.tmp"))


# --------------------------------------------------------------------------- 2: a dead worker


TWO_BY_TWO = specs.spec(
    "fourcells",
    seed=0,
    data=specs.two_moons(n_train=100, n_test=100, noise=0.1),
    model=MODEL,
    inference=[specs.svi("mfvi", steps=600, **VI)],
    sweep={"seed": [0, 1, 2, 3]},
)


def test_a_dead_worker_fails_only_its_own_cell_and_a_resume_reruns_it(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(feedback, "STATUS_EVERY", 0.0)
    spec = specs.load(tmp_path, TWO_BY_TWO)
    out, lines = tmp_path / "run", []
    killed: list[int] = []

    def kill_a_busy_worker() -> None:  # once two cells report steps, both workers are busy
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            busy = {ln.split(":")[0].strip() for ln in list(lines) if " steps " in ln}
            if len(busy) >= 2:
                break
            time.sleep(0.05)
        children = mp.active_children()
        if children:
            os.kill(children[0].pid, signal.SIGKILL)  # what the kernel's OOM killer does
            killed.append(children[0].pid)

    threading.Thread(target=kill_a_busy_worker, daemon=True).start()
    res = runner.run_spec(spec, out, workers=2, log=lines.append)
    assert killed
    recs = [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]
    assert len(recs) == 4, "cells that never ran must not be marked failed"
    failed = [r for r in recs if r["status"] == "failed"]
    assert len(failed) == 1 and res.n_failed == 1
    assert "killed by signal 9 (SIGKILL), likely out of memory" in failed[0]["error"]
    assert failed[0]["retry"] is True
    said = [ln for ln in lines if "worker died" in ln]
    assert said and f"while running cell {failed[0]['cell_id']}" in said[0]
    assert "killed by signal 9" in said[0]

    # a plain resume runs the dead worker's cell again, and only it
    again = runner.run_spec(spec, out, workers=1, progress=False, log=lines.append)
    assert (again.n_ran, again.n_failed) == (1, 0)
    assert (pd.read_csv(out / "results.csv")["status"] == "ok").all()


# --------------------------------------------------------------------------- 3: foreign dirs


def test_a_directory_that_is_not_a_run_directory_is_left_alone(
    tiny_spec: Path, tmp_path: Path, capsys
) -> None:
    mine = tmp_path / "mine"
    (mine / "cells").mkdir(parents=True)
    files = {
        mine / "notes.txt": b"mine",
        mine / ".draft.tmp": b"also mine",
        mine / "cells" / "keep.json": b"{}",
    }
    for p, data in files.items():
        p.write_bytes(data)
    for extra in (["--fresh"], []):
        assert main(["run", str(tiny_spec), "--out", str(mine), "--no-progress", *extra]) == 2
        err = capsys.readouterr().err
        assert "is not a zoo run directory" in err and "Traceback" not in err
        assert {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()} == files
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert main(["run", str(tiny_spec), "--out", str(a_file), "--no-progress"]) == 2
    assert "is a file" in capsys.readouterr().err and a_file.read_text() == "x"


def test_the_lock_names_the_process_that_holds_it(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from zoo.execution.store import RunStore\n"
            "with RunStore(sys.argv[1]).lock():\n    print('locked', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(runner.RunDirError, match=f"another zoo run \\(pid {holder.pid}\\)"):
            with RunStore(tmp_path).lock():
                pass
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    with RunStore(tmp_path).lock():  # released when its holder dies
        pass


# --------------------------------------------------------------------------- 4: damaged files


def test_damaged_cell_files_count_as_pending_and_are_named(
    tiny_spec: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(execute, "run_cell", _stub_run_cell)
    out = tmp_path / "run"
    args = ["--workers", "1", "--no-progress"]
    assert main(["run", str(tiny_spec), "--out", str(out), *args]) == 0
    cells = out / "cells"
    recs = sorted(cells.glob("*.json"))
    assert len(recs) == 4
    recs[0].write_text(recs[0].read_text()[:50])  # truncated JSON
    recs[1].write_text("{}")  # a record without fields
    nc = recs[2].with_suffix(".nc")
    nc.write_bytes(nc.read_bytes()[:100])  # a truncated ArviZ file
    (cells / "stray.json").write_text("[1, 2]")  # stray JSON files
    (cells / "other.json").write_text(recs[3].read_text())
    kept = recs[3].stat().st_mtime_ns
    capsys.readouterr()

    assert main(["status", str(out)]) == 0
    got = capsys.readouterr()
    assert "done 1, failed 0, pending 3" in got.out
    for name in (recs[0].name, recs[1].name, recs[2].name, "stray.json", "other.json"):
        assert name in got.err, name
    assert "truncated" in got.err and "Traceback" not in got.err
    assert main(["report", str(out)]) == 0
    assert recs[0].name in capsys.readouterr().err

    assert main(["run", str(out), *args]) == 0
    err = capsys.readouterr().err
    assert "damaged file" in err and recs[2].name in err
    assert "1 of 4 cells already done" in err
    assert recs[3].stat().st_mtime_ns == kept  # the whole cell was not recomputed
    assert main(["status", str(out)]) == 0
    assert "done 4, failed 0, pending 0" in capsys.readouterr().out


# --------------------------------------------------------------------------- 5: full disks


def test_an_unwritable_out_is_bad_input_before_any_cell(
    tiny_spec: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert main(["run", str(tiny_spec), "--out", str(a_file / "run"), "--no-progress"]) == 2
    assert "cannot write in" in capsys.readouterr().err

    ran = []
    monkeypatch.setattr(execute, "run_cell", lambda *a, **k: ran.append(1))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("zoo.execution.store.tempfile.mkstemp", full)
    out = tmp_path / "run"
    assert main(["run", str(tiny_spec), "--out", str(out), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert f"cannot write in {out}" in err and "No space left on device" in err
    assert "Traceback" not in err and not ran


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_out_is_bad_input(tiny_spec: Path, tmp_path: Path, capsys) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    assert main(["run", str(tiny_spec), "--out", str(ro / "run"), "--no-progress"]) == 2
    assert "cannot write in" in capsys.readouterr().err


def _stub_run_cell(cell, runtime, progress=False):
    from zoo.execution.cell import CellOutput

    nll = float("nan") if cell.axes["model.depth"] == 2 else 0.25
    return CellOutput({"accuracy": 0.5, "nll": nll}, {".nc": b"s" * 1000})


def test_a_cell_that_cannot_be_written_is_kept_and_written_again(
    tiny_spec: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(execute, "run_cell", _stub_run_cell)
    monkeypatch.setattr(saver, "WRITE_RETRY_DELAYS", (0.0, 0.0))
    monkeypatch.setattr(saver, "RETRY_EVERY", 0.0)
    real, calls = RunStore.write_cell, []

    def once(self, record, artifacts=None):
        calls.append(record["cell_id"])
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, record, artifacts)

    monkeypatch.setattr(RunStore, "write_cell", once)
    out = tmp_path / "run"
    assert main(["run", str(tiny_spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"could not store cell {calls[0]}" in err and "No space left on device" in err
    assert f"stored cell {calls[0]} on a later try" in err
    assert len(list((out / "cells").glob("*.json"))) == 4

    def never(self, record, artifacts=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(RunStore, "write_cell", never)
    out = tmp_path / "full"
    assert main(["run", str(tiny_spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "4 computed cells could not be stored" in err
    rescued = Path(err.split("they were saved to ")[1].split(". Once")[0])
    try:
        assert len(list(rescued.glob("*.json"))) == 4 and len(list(rescued.glob("*.nc"))) == 4
        for p in rescued.glob("*.json"):  # moved into the run directory, they count as done
            os.replace(p, out / "cells" / p.name)
            os.replace(p.with_suffix(".nc"), out / "cells" / p.with_suffix(".nc").name)
    finally:
        monkeypatch.setattr(RunStore, "write_cell", real)
    assert main(["run", str(out), "--workers", "1", "--no-progress"]) == 0
    assert "4 of 4 cells already done" in capsys.readouterr().err


# --------------------------------------------------------------------------- 6: file modes


def test_run_directory_files_get_the_usual_permissions(
    tiny_spec: Path, tmp_path: Path, monkeypatch
) -> None:
    # the umask of the moment decides, as for any program (not 0600, not the import's umask)
    monkeypatch.setattr(execute, "run_cell", _stub_run_cell)
    out = tmp_path / "run"
    old = os.umask(0o027)
    try:
        assert main(["run", str(tiny_spec), "--out", str(out), "--workers", "1"]) == 0
    finally:
        os.umask(old)
    modes = {p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in out.rglob("*")}
    want = {p: 0o750 if (out / p).is_dir() else 0o640 for p in modes}
    assert len(modes) > 8 and modes == want


# --------------------------------------------------------------------------- 7: feedback


SAMPLER_AND_VI = specs.spec(
    "feedback",
    seed=0,
    data=specs.two_moons(n_train=50, n_test=50, noise=0.1),
    model=specs.mlp(depth=1, param_budget=40, activation="relu"),
    inference=[
        specs.svi("mfvi", steps=300, **VI),
        specs.nuts(warmup=8, draws=8, chains=1, max_tree_depth=3, predictive_draws=5),
    ],
)


def test_progress_inside_worker_cells_reaches_the_parent(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(feedback, "STATUS_EVERY", 0.0)
    spec = specs.load(tmp_path, SAMPLER_AND_VI)
    lines: list[str] = []
    res = runner.run_spec(spec, tmp_path / "run", workers=2, log=lines.append)
    assert res.n_failed == 0
    nuts = [ln for ln in lines if ln.strip().startswith("nuts_")]
    assert any(" warm-up " in ln for ln in nuts) and any(" draws 8/8" in ln for ln in nuts)
    assert any(ln.strip().startswith("mfvi_") and " steps 300/300" in ln for ln in lines)


def test_time_left_is_estimated_per_method(tmp_path: Path) -> None:
    spec = specs.load(tmp_path, SAMPLER_AND_VI, overrides=["sweep.seed=[0, 1, 2, 3, 4]"])
    cells = spec.cells()
    by = {m: [c for c in cells if c.method.name == m] for m in ("mfvi", "nuts")}
    lines: list[str] = []
    fb = feedback.Feedback(cells, cells, 0, 2, lines.append, progress=False)
    fb.finished({"cell_id": by["mfvi"][0].cell_id, "status": "ok", "time_s": 1.0})
    assert "nuts: no cell timed yet" in lines[-1]
    fb.finished({"cell_id": by["nuts"][0].cell_id, "status": "ok", "time_s": 100.0})
    # 4 VI cells of 1 s and 4 sampler cells of 100 s left, over 2 workers: 202 s
    assert fb.eta() == "~3m22s left" and "~3m22s left" in lines[-1]
    # a sampler cell 89.5 s into its expected 100 s counts for its last 10.5 s, not a whole cell
    now = time.monotonic()
    fb.running[by["nuts"][1].cell_id] = {"t0": now - 89.5, "shown": now, "phase": None}
    assert fb.eta() == "~2m37s left"  # (4 + 400 - 89.5) / 2 = 157 s
    fb.running[by["nuts"][1].cell_id]["t0"] = now - 500.0  # over time: at most the mean
    assert fb.eta() == "~2m32s left"  # (4 + 400 - 100) / 2 = 152 s


def test_the_summary_keeps_to_the_terminal_width(tmp_path: Path, monkeypatch, capsys) -> None:
    from zoo.cli.summary import _SUMMARY_COLS, print_summary

    cols = {"method": ["mfvi", "nuts"], "model.depth": [1, 2], "n": [3, 3]}
    for i in range(20):
        cols[f"a_long_metric_name_{i}_mean"] = [0.123456, 1234.5]
    cols["kl_diag_full_mean"], cols["kl_diag_full_n"] = [None, 4.5], [0, 2]
    pd.DataFrame(cols).to_csv(tmp_path / "summary.csv", index=False)
    monkeypatch.setenv("COLUMNS", "60")
    print_summary(tmp_path)
    out = capsys.readouterr().out
    assert max(len(ln) for ln in out.splitlines()) <= 60
    # per method: headline metrics first, empty ones left out, the rest counted, not printed
    assert out.count("more metrics of this method in summary.csv") == 2
    mfvi, nuts, _ = out.split("more metrics of this method in summary.csv")
    assert "kl_diag_full" not in mfvi and "kl_diag_full" in nuts and "4.5 [2/3]" in nuts
    shown = [f"a_long_metric_name_{i} " for i in range(20)]
    assert sum(name in mfvi for name in shown) == _SUMMARY_COLS
    assert sum(name in nuts for name in shown) == _SUMMARY_COLS - 1  # after the headline one
    assert f"... and {20 - _SUMMARY_COLS} " in mfvi and f"... and {21 - _SUMMARY_COLS} " in nuts


# --------------------------------------------------------------------------- 8: NaN metrics


def test_non_finite_metrics_mark_the_cell_and_warn(
    tiny_spec: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(execute, "run_cell", _stub_run_cell)
    spec = load_spec(tiny_spec)
    lines: list[str] = []
    runner.run_spec(spec, tmp_path / "run", workers=1, progress=False, log=lines.append)
    recs = [json.loads(p.read_text()) for p in (tmp_path / "run" / "cells").glob("*.json")]
    marked = {r["cell_id"]: r.get("nonfinite") for r in recs}
    for r in recs:
        if r["axes"]["model.depth"] == 2:
            assert marked[r["cell_id"]] == ["nll"] and math.isnan(r["metrics"]["nll"])
            assert any(r["cell_id"] in ln and "non-finite metrics: nll=nan" in ln for ln in lines)
        else:
            assert marked[r["cell_id"]] is None
