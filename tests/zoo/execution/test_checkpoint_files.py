"""A checkpoint file is resumed only into the cell that wrote it (zoo.execution.checkpoint_file):
another cell's file renamed into place, a changed draw counter, a FIFO and a file larger
than a resume reads are each named with why, and the cell starts over and stores what a
run never stopped stores; ``zoo status`` says the same of each file before the run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pytest

from tests import specs
from tests.zoo.execution.test_checkpoint_cells import _same_cell
from tests.zoo.execution.test_chees_cells import CHEES, MFVI
from tests.zoo.execution.test_faults import ZOO
from zoo.cli import main
from zoo.execution import checkpoint_file, runner
from zoo.execution.checkpoint_file import (
    UnusableCheckpoint,
    config_sha256,
    open_checkpoint,
    read_checkpoint_file,
    seal_checkpoint,
)
from zoo.execution.store import RunStore
from zoo.inference.checkpoint import from_bytes, to_bytes
from zoo.spec import load_spec

SPEC = specs.spec(
    "chees_files",
    seed=0,
    data=specs.two_moons(n_train=40, n_test=20, noise=0.1),
    model=specs.mlp(depth=1, width=3, activation="tanh"),
    inference=[MFVI, specs.chees(**{**CHEES, "warmup": 40, "draws": 20, "target_ess": None})],
    runtime={"device": "cpu", "dtype": "float32", "threads": 1},
)
QUIET = dict(workers=1, progress=False)


class _Killed(BaseException):
    """The process died right after a checkpoint was written."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A run never stopped, and a run killed after the 30th save of its ChEES cell: the
    saved file, its cell id and its configuration's digest."""
    root = tmp_path_factory.mktemp("ckfiles")
    spec = load_spec(specs.write_spec(root, SPEC))
    runner.run_spec(spec, root / "reference", log=lambda m: None, **QUIET)
    saves: list[str] = []
    write = RunStore.write_checkpoint

    def write_then_die(self, cell_id: str, data: bytes, digest: str):
        path = write(self, cell_id, data, digest)
        saves.append(cell_id)
        if len(saves) == 30:
            raise _Killed
        return path

    RunStore.write_checkpoint = write_then_die
    try:
        with pytest.raises(_Killed):
            runner.run_spec(
                spec, root / "killed", checkpoint_every=1e-9, log=lambda m: None, **QUIET
            )
    finally:
        RunStore.write_checkpoint = write
    (path,) = (root / "killed" / "checkpoints").glob("*.pt")
    rec = json.loads((root / "reference" / "cells" / path.with_suffix(".json").name).read_text())
    return spec, root, path.read_bytes(), rec["cell_id"], config_sha256(rec["config"])


def _resume_with(runs, tmp_path: Path, content, capsys) -> tuple[list[str], str]:
    """Copy the killed run, put ``content(path)`` at its ChEES cell's checkpoint, ask
    ``zoo status``, then resume; the run's lines and the status's."""
    spec, root, _, cell_id, _ = runs
    out = tmp_path / "run"
    subprocess.run(["cp", "-r", str(root / "killed"), str(out)], check=True)
    path = out / "checkpoints" / f"{cell_id}.pt"
    path.unlink()
    content(path)
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    status = capsys.readouterr().out
    lines: list[str] = []
    runner.run_spec(spec, out, log=lines.append, **QUIET)
    _same_cell(root / "reference", out)
    assert not (out / "checkpoints").exists()  # gone with its last state
    return lines, status


def _retagged(runs, cell_id: str | None = None, payload: bytes | None = None) -> bytes:
    """The saved file with another cell id in its header, or other bytes under it."""
    _, _, data, cid, digest = runs
    inner = open_checkpoint(data, cid, digest)
    if payload is None:
        return seal_checkpoint(inner, cell_id or cid, digest)
    return data[: len(data) - len(inner)] + payload


def test_a_resume_takes_the_cells_own_checkpoint(runs, tmp_path, capsys) -> None:
    _, _, data, cell_id, _ = runs
    lines, status = _resume_with(runs, tmp_path, lambda p: p.write_bytes(data), capsys)
    assert "a resume continues from it" in status
    assert any("resumed from the checkpoint at warm-up 30 of 40" in x for x in lines), lines


def test_another_cells_checkpoint_renamed_into_place_starts_over(runs, tmp_path, capsys) -> None:
    other = _retagged(runs, "chees_seed1_0123456789ab")  # same sampler settings, same bytes
    lines, status = _resume_with(runs, tmp_path, lambda p: p.write_bytes(other), capsys)
    why = "it is the checkpoint of another cell (chees_seed1_0123456789ab)"
    assert why in status and "a resume starts the cell over" in status
    assert any(why in x and "the cell starts over" in x for x in lines), lines
    assert not any("resumed from the checkpoint" in x for x in lines)


def test_a_changed_draw_counter_is_found(runs, tmp_path, capsys) -> None:
    _, _, data, cell_id, digest = runs
    tree = from_bytes(open_checkpoint(data, cell_id, digest))
    tree["warmup_next"] = 39
    edited = _retagged(runs, payload=to_bytes(tree))
    lines, status = _resume_with(runs, tmp_path, lambda p: p.write_bytes(edited), capsys)
    assert "their SHA-256 differs" in status
    assert any("their SHA-256 differs" in x and "starts over" in x for x in lines), lines


def test_a_checkpoint_larger_than_a_resume_reads_is_not_read(
    runs, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(checkpoint_file, "max_checkpoint_bytes", lambda: 4 << 20)

    def sparse(path: Path) -> None:
        with open(path, "wb") as fh:
            fh.truncate(64 << 20)  # holes: no disk, but read whole it would be 64 MiB

    lines, status = _resume_with(runs, tmp_path, sparse, capsys)
    why = f"it has {64 << 20} bytes, more than a resume reads on this machine"
    assert why in status
    assert any(why in x and "starts over" in x for x in lines), lines


def test_a_fifo_is_never_read(runs, tmp_path, capsys) -> None:
    spec, root, _, cell_id, digest = runs
    fifo = tmp_path / "x.pt"
    os.mkfifo(fifo)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(_outcome(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    assert got == ["it is not a regular file"]  # at once, not a hang waiting for a writer
    out = tmp_path / "run"
    subprocess.run(["cp", "-r", str(root / "killed"), str(out)], check=True)
    path = out / "checkpoints" / f"{cell_id}.pt"
    path.unlink()
    os.mkfifo(path)
    assert main(["status", str(out)]) == 0
    assert f"{cell_id}.pt: it is not a regular file" in capsys.readouterr().out
    res = subprocess.run(
        [*ZOO, "run", str(out), "--no-progress"], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert f"{cell_id}.pt: it is not a regular file" in res.stderr
    assert "Traceback" not in res.stderr


def _outcome(path: Path) -> object:
    try:
        return read_checkpoint_file(path)
    except UnusableCheckpoint as e:
        return str(e)


def test_a_checkpoint_header_is_checked_and_never_echoed_raw() -> None:
    data = seal_checkpoint(b"state", "c_1", "cfg")
    assert open_checkpoint(data, "c_1", "cfg") == b"state"
    cases = {
        data[:-1]: "holds 4 bytes where its header says 5 (truncated?)",
        data.replace(b'"cfg"', b'"CFG"'): "saved for another configuration",
        data[:30]: "its header is damaged",
        b"PK\x03\x04 a zip of torch.save": "not a checkpoint of this bnn-zoo",
        seal_checkpoint(b"state", "\x1b[2J", "cfg"): "another cell (a name not shown)",
    }
    for bad, why in cases.items():
        with pytest.raises(UnusableCheckpoint, match=re.escape(why)):
            open_checkpoint(bad, "c_1", "cfg")
