"""The first code a local worker process runs: die with the driver, then import the rest.

A spawned worker imports what its target needs (torch, Pyro, the zoo) before the target
runs: seconds, minutes on a loaded machine. A driver killed in that window (kill -9, an
out-of-memory kill) would leave the worker importing until it ends, with nobody to give it
a cell. So the process target is :func:`start_worker`, in this module of the standard
library only: it asks Linux for the parent-death signal (``prctl(PR_SET_PDEATHSIG,
SIGKILL)``) first and only then imports the worker's real entry point, named as
``"module:function"``. Elsewhere than Linux the signal is not set (no such call).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys
from typing import Any

__all__ = ["PR_GET_PDEATHSIG", "PR_SET_PDEATHSIG", "die_with_parent", "start_worker"]

#: ``prctl`` options of ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1
PR_GET_PDEATHSIG = 2


def die_with_parent(parent: int) -> None:
    """Ask Linux to kill this process (SIGKILL) when its parent dies, even by SIGKILL; exit
    at once if ``parent`` already died. A no-op elsewhere than Linux."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the driver died before prctl took effect
        os._exit(1)


def start_worker(parent: int, entry: str, *args: Any) -> Any:
    """Set the parent-death signal, then import ``entry`` (``"package.module:function"``)
    and call it with ``args``: the target of a local worker process."""
    die_with_parent(parent)
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)(*args)
