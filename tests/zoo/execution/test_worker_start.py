"""A local worker dies with its driver from before its first heavy import."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.execution import local_pool
from zoo.execution.worker_start import quiet_openmp

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")


def _probe(monkeypatch) -> dict:
    """What a local worker's process had done and had in its environment at its entry's import."""
    monkeypatch.setattr(local_pool, "WORKER_ENTRY", "tests.zoo.execution._pdeathsig_probe:main")
    w = local_pool._Worker(mp.get_context("spawn"), 0, 1, None)
    try:
        assert w.conn.poll(60), "the worker sent nothing"
        kind, at_import = w.conn.recv()
    finally:
        w.stop()
        w.proc.join(5)
    assert kind == "probe"
    return at_import


def test_parent_death_signal_is_set_before_the_worker_imports(monkeypatch) -> None:
    at_import = _probe(monkeypatch)
    assert at_import["pdeathsig"] == int(signal.SIGKILL)
    assert at_import["torch"] is False


def test_a_worker_starts_with_openmp_passive_and_the_driver_keeps_its_environment(
    monkeypatch,
) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert _probe(monkeypatch)["omp_wait_policy"] == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in os.environ  # set for the start only


def test_a_users_openmp_wait_policy_is_kept(monkeypatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert _probe(monkeypatch)["omp_wait_policy"] == "ACTIVE"
    assert quiet_openmp(env := {"OMP_WAIT_POLICY": "ACTIVE"}) == {}
    assert env == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_the_zoo_command_sets_openmp_passive_before_torch() -> None:
    """``zoo validate`` in a fresh interpreter (it imports no torch), then torch: the
    setting is in the environment OpenMP reads."""
    code = (
        "import os, sys; from zoo.cli import main; main(['validate', 'specs/two_moons_depth.yaml']);"
        "import torch; print(os.environ.get('OMP_WAIT_POLICY'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split()[-1] == "PASSIVE"
