"""The first code a local worker process runs: die with the driver, then import the rest.

A spawned worker imports what its target needs (torch, Pyro, the zoo) before the target
runs: seconds, minutes on a loaded machine. A driver killed in that window (kill -9, an
out-of-memory kill) would leave the worker importing until it ends, with nobody to give it
a cell. So the process target is :func:`start_worker`, in this module of the standard
library only: it asks Linux for the parent-death signal (``prctl(PR_SET_PDEATHSIG,
SIGKILL)``) first and only then imports the worker's real entry point, named as
``"module:function"``. Elsewhere than Linux the signal is not set (no such call).

:data:`OPENMP_ENV` is the OpenMP setting a zoo process starts torch with (unless its
environment says otherwise): OpenMP reads it once, when torch is imported, so the ``zoo``
command sets it before its first import of torch and a local worker gets it in its
environment (:func:`openmp_environment`). :func:`keep_freed_memory` is the malloc setting
every cell runs with (glibc's, set at run time).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

__all__ = [
    "OPENMP_ENV",
    "PR_GET_PDEATHSIG",
    "PR_SET_PDEATHSIG",
    "die_with_parent",
    "keep_freed_memory",
    "openmp_environment",
    "quiet_openmp",
    "start_worker",
]

#: ``prctl`` options of ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1
PR_GET_PDEATHSIG = 2


#: An idle OpenMP thread of torch's intra-op pool sleeps instead of spinning (libgomp's
#: default spins before it sleeps). On a CPU shared with other processes a spinning thread
#: holds a core that the thread it waits for needs: with two threads on a 2-core machine
#: under a busy process per core, one batched gradient of the default's network cost 3.5 to
#: 5.7 times its CPU time on the quiet machine, and 1.0 to 1.1 times with this setting
#: (``benchmarks/load.py``). One thread (the zoo's workers on a CPU with as many workers as
#: cores) has no pool to spin.
OPENMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def quiet_openmp(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set the variables of :data:`OPENMP_ENV` that ``environ`` lacks (a user's own value
    stays); returns those set. Takes effect in a process that imports torch after it."""
    added = {k: v for k, v in OPENMP_ENV.items() if k not in environ}
    environ.update(added)
    return added


@contextmanager
def openmp_environment() -> Iterator[None]:
    """:func:`quiet_openmp` on this process's environment inside the block, undone after:
    a process started inside it (a spawned worker) inherits the setting."""
    added = quiet_openmp()
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


#: ``mallopt`` parameters of glibc's ``<malloc.h>``.
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
#: Free memory at the top of the heap that glibc keeps instead of returning it (1 GiB).
TRIM_THRESHOLD = 2**30
#: The environment variables by which a user sets what :func:`keep_freed_memory` sets.
MALLOC_ENV = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Have glibc's malloc serve every block from its heap and keep what is freed, so that a
    computation that frees and allocates the same large blocks again and again (a sampler's
    gradients) reuses its pages; returns whether the setting was made.

    Torch's CPU tensors come from ``malloc``. glibc maps a block above its mmap threshold
    (adaptive, at most 32 MB) afresh and unmaps it when it is freed, so every call touches
    new pages, a page fault each: one batched gradient of a 2-28-28-2 network at N = 10,000
    faulted 17,000 times at 16 chains and 122,000 times at 64 (the activations of 64 chains
    are 72 MB), and ran at about half its speed (``benchmarks/malloc.py``). With mapping off
    (``M_MMAP_MAX`` 0) and 1 GiB of free heap kept (``M_TRIM_THRESHOLD``) it faults only
    while its heap first grows. The cost is memory: a process keeps its peak. A no-op
    elsewhere than glibc, and where the environment sets either itself (``MALLOC_MMAP_MAX_``,
    ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, or ``GLIBC_TUNABLES`` with
    ``mmap`` or ``trim``: the user's own choice stays). Allocation does not change results.
    """
    own = [k for k in MALLOC_ENV if k in environ]
    tunables = environ.get("GLIBC_TUNABLES", "")
    if not sys.platform.startswith("linux") or own or "mmap" in tunables or "trim" in tunables:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


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
