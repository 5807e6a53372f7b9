"""A stand-in worker entry: what its process had done when this module was imported."""

from __future__ import annotations

import ctypes
import os
import sys

from zoo.execution.worker_start import PR_GET_PDEATHSIG

_sig = ctypes.c_int(-1)
ctypes.CDLL(None).prctl(PR_GET_PDEATHSIG, ctypes.byref(_sig))
#: At this module's import: the parent-death signal, whether torch was imported yet, and the
#: OpenMP wait policy in the environment (None: unset).
AT_IMPORT = {
    "pdeathsig": _sig.value,
    "torch": "torch" in sys.modules,
    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
}


def main(conn, threads, device) -> None:
    conn.send(("probe", AT_IMPORT))
