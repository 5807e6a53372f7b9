"""Ray that cannot start: one message saying what failed, the cells stay pending, and a
resume on local workers runs them (exit 2, no Ray traceback)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.execution.executors import ExecutorStartError, run_ray
from zoo.runtime import Runtime

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


def _dead_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_where_nothing_listens_is_refused_before_ray(
    tiny_spec: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """Ray retries a dead address for many minutes: the probe refuses it first, one line."""
    asked = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *a, **k: asked.append(k) or 1 / 0)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    address = f"127.0.0.1:{_dead_port()}"
    out = tmp_path / "run"
    args = ["run", str(tiny_spec), "--out", str(out), "--executor", "ray", "--address", address]
    assert main([*args, *ONE_CELL]) == 2
    err = capsys.readouterr().err
    assert f"--address {address}: nothing accepts a connection at 127.0.0.1 port" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and not asked
    for bad in ("ray://127.0.0.1", "http://127.0.0.1:6379", "127.0.0.1"):  # forms: at once
        assert main(["run", str(tiny_spec), "--executor", "ray", "--address", bad]) == 2
        assert f"--address {bad}: " in capsys.readouterr().err
    # the executor itself (the Python API's path) probes too, before ray.init
    with pytest.raises(ExecutorStartError, match="could not reach the Ray cluster at"):
        next(run_ray([], workers=1, runtime=Runtime(), address=address))
    assert not asked
