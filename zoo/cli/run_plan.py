"""``zoo run``'s first step: its options as a :class:`~zoo.execution.plan.RunRequest`,
checked before torch by the same :func:`~zoo.execution.plan.plan_run` as ``zoo.run(...)``.

:func:`plan_args` does everything that can refuse a run without importing torch, so a
typo'd path or a rejected spec answers at once; :mod:`zoo.cli.run_commands` (which imports
torch) launches the plan. :func:`not_started` turns a Ctrl-C before any cell started into
one line that says nothing was computed (not "finished cells are kept").
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from zoo.execution.plan import RunPlan, RunRequest, plan_run
from zoo.execution.signals import RunInterrupted

__all__ = ["REPORT_WAIT", "not_started", "plan_args", "request"]


#: What ``zoo report`` says after "wait for it to end" when a run holds the directory.
REPORT_WAIT = "; it writes the report itself as it ends"


def request(a: argparse.Namespace) -> RunRequest:
    """The options of ``zoo run`` as the request ``zoo.run(...)`` makes of its arguments."""
    return RunRequest(
        a.spec,
        overrides=tuple(a.overrides),
        out=a.out,
        workers=a.workers,
        executor=a.executor,
        address=a.address,
        device=a.device,
        fresh=a.fresh,
        retry_failed=a.retry_failed,
        progress=not a.no_progress,
        checkpoint_every=a.checkpoint_every,
        cli=True,
    )


def plan_args(a: argparse.Namespace) -> RunPlan:
    """Check ``zoo run``'s options and spec (no torch import): :func:`plan_run`.

    Raises
    ------
    UsageError, SpecError
        Bad input (exit 2), with the option, file or field and the fix.
    """
    return plan_run(request(a))


@contextmanager
def not_started() -> Iterator[None]:
    """A Ctrl-C in the block, before the run's own handler is installed, says that no cell
    started and raises :class:`~zoo.execution.signals.RunInterrupted` (exit 130, no further line).

    Once a run has started its handler turns Ctrl-C into ``RunInterrupted`` itself (with
    its own line), which passes through unchanged.
    """
    try:
        yield
    except KeyboardInterrupt as e:
        if getattr(e, "signum", None) is not None:
            raise
        print("\nzoo: interrupted before any cell started; nothing was computed", file=sys.stderr)
        stop = RunInterrupted(signal.SIGINT)
        stop.reported = True
        raise stop from None
