"""Ray that cannot start: one message saying what failed, the cells stay pending, and a
resume on local workers runs them (exit 2, no Ray traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.cli import main

ray = pytest.importorskip("ray")

ONE_CELL = ["--set", "sweep.seed=[0]", "--set", "sweep.model.depth=[1]", "--no-progress"]


def test_ray_that_cannot_start_leaves_the_cells_pending(
    tiny_spec: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    def timed_out(*args, **kwargs):
        raise RuntimeError("The current node timed out during startup.\nMore lines of Ray's")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", timed_out)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    out = tmp_path / "run"
    assert main(["run", str(tiny_spec), "--out", str(out), "--executor", "ray", *ONE_CELL]) == 2
    err = capsys.readouterr().err
    assert "could not start a local Ray instance" in err and "timed out during startup" in err
    assert f"zoo run {out} --executor local" in err and "Traceback" not in err
    assert main(["status", str(out)]) == 0
    assert "pending 1" in capsys.readouterr().out
    monkeypatch.undo()
    assert main(["run", str(out), "--executor", "local", "--workers", "1", "--no-progress"]) == 0
    assert main(["status", str(out)]) == 0
    assert "done 1, failed 0, pending 0" in capsys.readouterr().out
