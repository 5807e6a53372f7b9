"""What the ``zoo`` commands share beyond the run layer's checks
(:mod:`zoo.execution.usage`, :mod:`zoo.execution.preflight`): a reader that went away."""

from __future__ import annotations

import os
import sys

__all__ = ["stdout_closed"]


def stdout_closed() -> None:
    """Send the rest of standard output to the null device: its reader has gone (``zoo ...
    | head``). What the command still prints is dropped quietly, and its exit status is
    what it would have been (Python would otherwise fail again flushing at exit)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
