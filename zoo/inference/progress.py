"""Progress of a running fit: a terminal bar here, or messages to whoever runs the cell.

Every fit asks :func:`progress_bar` for its bar. In a terminal session that is a tqdm bar;
under Jupyter with ipywidgets ``tqdm.auto``'s notebook widget.
A process that runs cells for another one (a worker of :mod:`zoo.execution.executors`) sets a
*sink* with :func:`set_progress_sink`; the bars then call ``sink(desc, phase, i, n)``
instead of drawing (``phase`` is ``"steps"`` for optimizers, ``"warm-up"`` and then
``"draws"`` for samplers; ``i`` of ``n`` within the phase), at most every
:data:`MIN_INTERVAL` seconds and at every change of phase, so the process that owns the
terminal can show progress inside a cell that runs elsewhere.

Dependency rule: this module imports tqdm and the standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tqdm.auto import tqdm

__all__ = ["MIN_INTERVAL", "ProgressSink", "SinkBar", "progress_bar", "set_progress_sink"]

#: ``sink(desc, phase, i, n)``: progress of the bar labelled ``desc``, step ``i`` of ``n``.
ProgressSink = Callable[[str, str, int, int], None]

#: Seconds between two messages of one bar to its sink (phase changes always go out).
MIN_INTERVAL = 0.5

_sink: ProgressSink | None = None


def set_progress_sink(sink: ProgressSink | None) -> ProgressSink | None:
    """Send the progress of every later bar of this process to ``sink`` (None: draw bars).

    Returns the sink that was set before, so a caller can restore it.
    """
    global _sink
    previous, _sink = _sink, sink
    return previous


class SinkBar:
    """The part of tqdm's interface the fits use, reporting to a sink.

    Parameters
    ----------
    sink : callable
        ``sink(desc, phase, i, n)``.
    total : int
        Steps of the bar.
    desc : str
        The bar's label.
    warmup : int
        The first ``warmup`` steps are the ``"warm-up"`` phase, the rest ``"draws"``
        (with 0, every step is a ``"steps"`` step).
    """

    def __init__(self, sink: ProgressSink, total: int, desc: str, warmup: int = 0) -> None:
        self.sink, self.total, self.desc, self.warmup = sink, total, desc, warmup
        self.n = 0
        self._last = -float("inf")
        self._phase = ""
        self._post(force=True)

    def _where(self) -> tuple[str, int, int]:
        if not self.warmup:
            return "steps", self.n, self.total
        if self.n < self.warmup or self.n == self.warmup == self.total:
            return "warm-up", self.n, self.warmup
        return "draws", self.n - self.warmup, self.total - self.warmup

    def _post(self, force: bool = False) -> None:
        phase, i, n = self._where()
        now = time.monotonic()
        if force or phase != self._phase or now - self._last >= MIN_INTERVAL:
            self._phase, self._last = phase, now
            self.sink(self.desc, phase, i, n)

    def update(self, n: int = 1) -> None:
        """Advance by ``n`` steps."""
        self.n += n
        self._post(force=self.n >= self.total)

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        """Ignored: a sink gets counts only."""

    def close(self) -> None:
        """Nothing to release (the last step was posted by :meth:`update`)."""


def progress_bar(total: int, desc: str, *, unit: str = "step", warmup: int = 0) -> Any:
    """A bar of ``total`` steps: to the sink when one is set, else a tqdm bar.

    The tqdm bar is off when stderr is not a terminal, except where ``tqdm.auto`` chose
    its notebook widget (under Jupyter with ipywidgets). ``warmup`` (samplers) names the
    first steps as the warm-up phase for the sink.
    """
    if _sink is not None:
        return SinkBar(_sink, total, desc, warmup)
    disable = False if tqdm.__module__ == "tqdm.notebook" else None
    return tqdm(total=total, desc=desc, leave=False, unit=unit, dynamic_ncols=True, disable=disable)
