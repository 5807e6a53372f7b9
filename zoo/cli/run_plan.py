"""``zoo run``'s first step: read and check the arguments and the spec, before torch.

:func:`plan_run` does everything that can refuse a run (the options, the spec, the run
directory's version, the data and the networks) without importing torch, so a typo'd path
or a rejected spec answers at once; :mod:`zoo.cli.run_commands` (which imports torch) runs
the plan. :func:`not_started` turns a Ctrl-C before any cell started into one line that
says nothing was computed (not "finished cells are kept").
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from zoo.cli.checks import check_data, check_widths
from zoo.cli.common import UsageError
from zoo.execution.ray_address import RayAddressError, check_ray_address
from zoo.execution.rundir import (
    DamagedRunDir,
    OutdatedRunDir,
    RunDir,
    busy_message,
    check_version,
    default_run_dir,
)
from zoo.execution.signals import RunInterrupted
from zoo.shipped import resolve_spec
from zoo.spec import Spec, SpecError, load_spec

__all__ = [
    "REPORT_WAIT",
    "RunPlan",
    "check_free",
    "check_run_dir_version",
    "not_started",
    "plan_run",
    "run_dir_spec",
]


#: What ``zoo report`` says after "wait for it to end" when a run holds the directory.
REPORT_WAIT = "; it writes the report itself as it ends"


@dataclass(frozen=True)
class RunPlan:
    """What ``zoo run`` runs: the checked spec and its run directory."""

    spec: Spec
    out: Path


def plan_run(a: argparse.Namespace) -> RunPlan:
    """Check ``zoo run``'s options and spec (no torch import).

    Raises
    ------
    UsageError, SpecError
        Bad input (exit 2), with the option, file or field and the fix.
    """
    if a.workers is not None and a.workers < 1:
        raise UsageError(f"--workers {a.workers}: give at least 1 worker")
    every = a.checkpoint_every
    if every is not None and not (math.isfinite(every) and every >= 0):
        raise UsageError(
            f"--checkpoint-every {every}: give the seconds between two saves (0: no checkpoints)"
        )
    if a.address and a.executor != "ray":
        raise UsageError("--address is for --executor ray")
    if a.executor == "ray" and importlib.util.find_spec("ray") is None:
        raise UsageError('--executor ray needs Ray: pip install "bnn-zoo[ray]"')
    if a.address:  # Ray itself retries a dead address for many minutes
        try:
            check_ray_address(a.address)
        except RayAddressError as e:
            raise UsageError(f"--address {a.address}: {e}") from None
    source = Path(a.spec)
    if source.is_dir():  # resume a run directory from its stored spec
        if a.out and a.out.resolve() != source.resolve():
            raise UsageError(f"{source} is a run directory; drop --out (it runs in place)")
        check_free(source)
        spec = run_dir_spec(source)
        if a.overrides:
            spec = load_spec(str(source / "spec.yaml"), a.overrides)
        out = source
    else:
        if a.out is not None:
            check_free(a.out)
            check_run_dir_version(a.out, damaged_ok=True)
        spec = load_spec(resolve_spec(a.spec), a.overrides)
        out = a.out or default_run_dir(spec.name)
    check_data(spec)
    check_widths(spec)
    return RunPlan(spec, out)


def check_free(run_dir: Path, then: str = "or give another --out") -> None:
    """Refuse a run directory that another zoo process holds now (:meth:`RunDir.holder`),
    before torch is imported: a second run is told at once (the lock itself, taken later,
    settles a race between two that both passed here).

    Raises
    ------
    UsageError
        "another zoo run (pid N) is using DIR; wait for it to end ..." and ``then``.
    """
    pid = RunDir(run_dir).holder()
    if pid is not None:
        raise UsageError(busy_message(run_dir, pid, then))


def check_run_dir_version(run_dir: Path, *, damaged_ok: bool = False) -> None:
    """A run directory of another spec_version is bad input: say to recompute it (exit 2).

    So is one whose spec.yaml is damaged, unless ``damaged_ok`` (a run given its spec
    writes spec.yaml anew; a note says so)."""
    run = RunDir(run_dir)
    try:
        check_version(run)
    except DamagedRunDir as e:
        if not damaged_ok:
            raise UsageError(str(e)) from None
        print(
            f"zoo: note: {run.spec_path} is damaged ({run.spec_damage()}); it is written "
            "again from the spec given, and the stored cells of that spec are kept",
            file=sys.stderr,
        )
    except OutdatedRunDir as e:
        raise UsageError(str(e)) from None


def run_dir_spec(run_dir: Path) -> Spec:
    """The spec stored in a run directory, checked (``zoo run DIR``, ``status``, ``report``).

    Raises
    ------
    UsageError, SpecError
        Not a run directory, another spec_version, a damaged or edited spec.yaml.
    """
    if not (run_dir / "spec.yaml").is_file():
        raise UsageError(
            f"{run_dir}: not a run directory (no spec.yaml); give the --out "
            "directory of a `zoo run`"
        )
    check_run_dir_version(run_dir)
    try:
        return load_spec(run_dir / "spec.yaml")
    except SpecError as e:  # zoo wrote a valid one: it was edited or damaged since
        raise SpecError(
            [
                *e.messages,
                f"zoo: {run_dir / 'spec.yaml'} was written by zoo and no longer validates "
                "(edited or damaged). The stored cells are kept: run the spec this "
                f"directory was made from into it (zoo run SPEC --out {run_dir}) to write it "
                "again and resume",
            ]
        ) from None


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
