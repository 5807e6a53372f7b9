"""A ChEES cell stopped halfway resumes from its checkpoint (zoo.inference.checkpoint): a run
killed with SIGKILL in the middle of the sampler, then resumed, stores the cell a run that
was never stopped stores (same machine, same threads), and its checkpoint is gone after."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import xarray as xr

from tests import specs
from tests.zoo.execution.test_chees_cells import CHEES, MFVI, PRICE
from tests.zoo.execution.test_faults import ZOO, _group_gone, _wait_for
from zoo.cli import main
from zoo.execution import runner
from zoo.execution.store import RunStore
from zoo.spec import load_spec

SPEC = specs.spec(
    "chees_resume",
    seed=0,
    data=specs.two_moons(n_train=60, n_test=40, noise=0.1),
    model=specs.mlp(depth=1, width=3, activation="tanh"),
    inference=[MFVI, specs.chees(**{**CHEES, "warmup": 400, "draws": 200, "target_ess": None})],
    studies=[PRICE],
    runtime={"device": "cpu", "dtype": "float32", "threads": 1},  # the same bits everywhere
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The run never stopped, in this process (one thread, as the workers below)."""
    root = tmp_path_factory.mktemp("reference")
    spec = load_spec(specs.write_spec(root, SPEC))
    runner.run_spec(spec, root / "run", workers=1, progress=False, log=lambda m: None)
    return root / "run"


def _chees(out: Path) -> tuple[dict, xr.Dataset]:
    recs = [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]
    (rec,) = [r for r in recs if r["axes"]["method"] == "chees"]
    assert rec["status"] == "ok", rec.get("error")
    post = xr.open_dataset(out / "cells" / f"{rec['cell_id']}.nc", group="posterior")
    return rec, post.load()


def _same_cell(a: Path, b: Path) -> None:
    (ra, pa), (rb, pb) = _chees(a), _chees(b)
    assert ra["cell_id"] == rb["cell_id"]
    ma, mb = ra["metrics"], rb["metrics"]
    timing = {k for k in ma if "seconds" in k or k.endswith("_s") or "per_s" in k}
    assert {k: v for k, v in ma.items() if k not in timing} == {
        k: v for k, v in mb.items() if k not in timing
    }
    xr.testing.assert_equal(pa, pb)  # the draws; the attributes hold a creation time


@pytest.mark.slow  # about 70 s: two spawned workers twice; the in-process test below is fast
def test_a_run_killed_inside_a_chees_cell_resumes_it_bitwise(
    tmp_path: Path, reference: Path
) -> None:
    spec = specs.write_spec(tmp_path, SPEC)
    args = ["--workers", "2", "--no-progress"]  # the local pool: two cells, one thread each
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*ZOO, "run", str(spec), "--out", str(out), *args, "--checkpoint-every", "1e-9"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: list((out / "checkpoints").glob("*.pt")), 300, "a checkpoint", proc)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)  # driver and workers at once, as a crash does
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert _group_gone(proc.pid, 10)
    assert not [p for p in (out / "cells").glob("*.json") if "chees" in p.name]
    res = subprocess.run(
        [*ZOO, "run", str(out), *args], capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr
    assert "chees: resumed from the checkpoint at warm-up" in res.stderr, res.stderr
    _same_cell(reference, out)
    assert not (out / "checkpoints").exists()  # gone with its last state


class _Killed(BaseException):
    """The process died right after a checkpoint was written."""


def test_the_in_process_executor_resumes_and_ignores_a_damaged_checkpoint(
    tmp_path: Path, reference: Path, monkeypatch, capsys
) -> None:
    spec = load_spec(specs.write_spec(tmp_path, SPEC))
    quiet = dict(workers=1, progress=False, log=lambda m: None)
    written: list[str] = []
    write = RunStore.write_checkpoint

    def write_then_die(self, cell_id: str, data: bytes, digest: str):
        path = write(self, cell_id, data, digest)
        written.append(cell_id)
        if len(written) == 250:  # inside the warm-up of 400
            raise _Killed
        return path

    monkeypatch.setattr(RunStore, "write_checkpoint", write_then_die)
    out = tmp_path / "run"
    with pytest.raises(_Killed):
        runner.run_spec(spec, out, checkpoint_every=1e-9, **quiet)
    monkeypatch.setattr(RunStore, "write_checkpoint", write)
    (saved,) = (out / "checkpoints").glob("*.pt")
    assert main(["status", str(out)]) == 0
    assert "(sampler checkpoint of " in capsys.readouterr().out
    lines: list[str] = []
    runner.run_spec(spec, out, workers=1, progress=False, log=lines.append)
    assert any("resumed from the checkpoint at warm-up 250 of 400, draw 0" in x for x in lines)
    _same_cell(reference, out)
    assert not saved.exists()
    # a file that is not a checkpoint is named and ignored: the cell starts over
    rec, _ = _chees(out)
    (out / "cells" / f"{rec['cell_id']}.json").unlink()
    saved.parent.mkdir(exist_ok=True)  # the last state went with its folder
    saved.write_bytes(b"not a checkpoint")
    lines.clear()
    runner.run_spec(spec, out, workers=1, progress=False, log=lines.append)
    assert any(f"{saved.name}: it is not a checkpoint" in x and "starts over" in x for x in lines)
    _same_cell(reference, out)
