"""Stopping a run by signal: SIGINT (Ctrl-C) and SIGTERM.

Both stop the run at once: the workers are stopped, the cells already stored stay, and
:class:`RunInterrupted` (a :class:`KeyboardInterrupt`) says which signal, after a line
saying what was kept and how to resume. The command line exits with ``128 + signal``: 130
for SIGINT, 143 for SIGTERM. While a cell is being written (:meth:`Stopper.deferring`) the
signal waits until the write is done, so a stopped run never leaves a half-stored cell.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["RunInterrupted", "Stopper", "describe_signal"]


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by a signal (SIGINT or SIGTERM); ``signum`` says which.

    Everything stored before it stays; a resume runs the rest.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)
        self.reported = False  # a line has said what was kept


class Stopper:
    """SIGINT and SIGTERM raise :class:`RunInterrupted`, except inside :meth:`deferring`
    (a cell being written), where they are raised when the write is done."""

    def __init__(self) -> None:
        self.deferred = 0
        self.pending: int | None = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.deferred:
            self.pending = signum
            return
        raise RunInterrupted(signum)

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers can only be set from the main thread
            return
        old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    @contextmanager
    def deferring(self) -> Iterator[None]:
        self.deferred += 1
        try:
            yield
        finally:
            self.deferred -= 1
            if not self.deferred and self.pending is not None:
                signum, self.pending = self.pending, None
                raise RunInterrupted(signum)


def describe_signal(signum: int) -> str:
    if signum == signal.SIGINT:
        return "interrupted (Ctrl-C)"
    return f"stopped by {signal.Signals(signum).name}"
