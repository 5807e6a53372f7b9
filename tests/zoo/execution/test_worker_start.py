"""A local worker dies with its driver from before its first heavy import."""

from __future__ import annotations

import multiprocessing as mp
import signal
import sys

import pytest

from zoo.execution import local_pool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")


def test_parent_death_signal_is_set_before_the_worker_imports(monkeypatch) -> None:
    monkeypatch.setattr(local_pool, "WORKER_ENTRY", "tests.zoo.execution._pdeathsig_probe:main")
    w = local_pool._Worker(mp.get_context("spawn"), 0, 1, None)
    try:
        assert w.conn.poll(60), "the worker sent nothing"
        kind, at_import = w.conn.recv()
    finally:
        w.stop()
        w.proc.join(5)
    assert kind == "probe"
    assert at_import == {"pdeathsig": int(signal.SIGKILL), "torch": False}
