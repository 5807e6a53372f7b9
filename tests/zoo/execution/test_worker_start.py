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
from zoo.execution.worker_start import MALLOC_ENV, keep_freed_memory, quiet_openmp

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


_FAULTS = r"""
import resource, sys
from zoo.execution.worker_start import keep_freed_memory
set_ = keep_freed_memory() if sys.argv[1] == "zoo" else False
import torch
torch.set_num_threads(1)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
x = torch.ones(64, 28, 10_000)  # 72 MB: a batched gradient's activations at N = 10,000
def step():  # temporaries as large, allocated, touched and freed
    a = x * 2
    return (a + a.relu()).sum()
for _ in range(20):  # the heap grows to its peak (here by step 12 at the latest)
    step()
f0 = faults()
for _ in range(10):
    step()
print(set_, (faults() - f0) // 10)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_memory_is_kept_so_large_blocks_reuse_their_pages() -> None:
    """Temporaries of 72 MB touch new pages on every use under glibc's default (it maps such
    a block afresh each time: 17,500 pages of 4 KB a block, three blocks a step) and none with
    the cells' setting once the heap has grown to its peak. How many steps that takes varies
    from run to run (4 to 12 here, by where the blocks fall), so the bound allows one more
    block's pages over the ten steps measured: a tenth of a block a step, against three."""
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}
    env.pop("GLIBC_TUNABLES", None)
    got = {}
    for how in ("default", "zoo"):
        out = subprocess.run(
            [sys.executable, "-c", _FAULTS, how], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        got[how] = out.stdout.split()
    if got["zoo"][0] != "True":
        pytest.skip("not glibc: mallopt is not there")
    assert int(got["default"][1]) > 18_000 and int(got["zoo"][1]) < 1_800, got


def test_a_users_malloc_setting_is_kept() -> None:
    for env in ({"MALLOC_MMAP_MAX_": "65536"}, {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}):
        assert keep_freed_memory(env) is False
