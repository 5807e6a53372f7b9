"""A run's first step, shared by both front doors: read and check the request, before torch.

``zoo run`` (:mod:`zoo.cli`) and ``zoo.run(...)`` (:mod:`zoo.api`) both describe what to
run as a :class:`RunRequest` and pass it to :func:`plan_run`, which does everything that
can refuse a run (the options, the spec, the run directory's holder and version, the data
and the networks) without importing torch, so a typo'd path or a rejected spec answers at
once; :func:`zoo.execution.launch.launch` (which imports torch) then runs the
:class:`RunPlan`. Bad input raises :class:`~zoo.execution.usage.UsageError`,
:class:`~zoo.spec.SpecError` or (a run directory of another spec_version)
:class:`~zoo.execution.rundir.RunDirError`; messages name the option as the door spells it
(``--workers 0`` on the command line, ``workers=0`` in Python).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from zoo.execution.preflight import check_data, check_widths
from zoo.execution.ray_address import RayAddressError, check_ray_address
from zoo.execution.rundir import (
    DamagedRunDir,
    OutdatedRunDir,
    RunDir,
    busy_message,
    check_version,
    default_run_dir,
)
from zoo.execution.usage import UsageError
from zoo.shipped import resolve_spec
from zoo.spec import Spec, SpecError, load_spec

__all__ = [
    "RunPlan",
    "RunRequest",
    "check_free",
    "check_run_dir_version",
    "plan_run",
    "run_dir_spec",
]


@dataclass(frozen=True)
class RunRequest:
    """What to run and how: the arguments of ``zoo.run(...)`` and the options of ``zoo run``.

    Attributes
    ----------
    spec : str, Path or Spec
        A spec file, a shipped spec's name, a run directory to resume, or a loaded spec.
    overrides : tuple of str
        ``--set`` items.
    out : Path, optional
        The run directory (default ``runs/<name>/<timestamp>``).
    workers, executor, address, device, fresh, retry_failed, progress, checkpoint_every
        As the options of ``zoo run`` (``progress`` is not ``--no-progress``;
        ``checkpoint_every`` 0 or None: no sampler checkpoints).
    cli : bool
        Name options in messages as the command line spells them (``--workers 0``), not as
        Python does (``workers=0``).
    """

    spec: str | Path | Spec
    overrides: tuple[str, ...] = ()
    out: Path | None = None
    workers: int | None = None
    executor: str = "local"
    address: str | None = None
    device: str | None = None
    fresh: bool = False
    retry_failed: bool = False
    progress: bool = False
    checkpoint_every: float | None = 600.0
    cli: bool = False

    def option(self, name: str, value: object = None) -> str:
        """``name`` (and its ``value``) as the request's door spells it: ``--check-every 5``
        on the command line, ``check_every=5`` in Python."""
        if self.cli:
            flag = "--" + name.replace("_", "-")
            return flag if value is None else f"{flag} {value}"
        return f"{name}=" if value is None else f"{name}={value}"


@dataclass(frozen=True)
class RunPlan:
    """A checked request: the spec to run, with its overrides, and its run directory."""

    request: RunRequest
    spec: Spec
    out: Path


def plan_run(request: RunRequest) -> RunPlan:
    """Check a run's options and spec, and find its run directory (no torch import).

    Raises
    ------
    UsageError, SpecError, RunDirError
        Bad input, with the option, file or field and the fix; nothing is written.
    """
    _check_options(request)
    spec, out = _load(request)
    check_data(spec)
    check_widths(spec)
    return RunPlan(request, spec, out)


def _check_options(r: RunRequest) -> None:
    """The options alone: worker count, checkpoint interval, executor and Ray address."""
    if r.workers is not None and r.workers < 1:
        raise UsageError(f"{r.option('workers', r.workers)}: give at least 1 worker")
    every = r.checkpoint_every
    if every is not None and not (math.isfinite(every) and every >= 0):
        none = "0" if r.cli else "0 or None"
        raise UsageError(
            f"{r.option('checkpoint_every', every)}: give the seconds between two saves "
            f"({none}: no checkpoints)"
        )
    if r.address and r.executor != "ray":
        raise UsageError(f"{r.option('address')} is for {r.option('executor', 'ray')}")
    if r.executor == "ray" and importlib.util.find_spec("ray") is None:
        raise UsageError(f'{r.option("executor", "ray")} needs Ray: pip install "bnn-zoo[ray]"')
    if r.address:  # Ray itself retries a dead address for many minutes
        try:
            check_ray_address(r.address)
        except RayAddressError as e:
            raise UsageError(f"{r.option('address', r.address)}: {e}") from None


def _load(r: RunRequest) -> tuple[Spec, Path]:
    """The spec with its overrides, and the run directory: a run directory given as the spec
    is resumed in place from its stored spec; a given ``out`` must be free and of this
    spec_version (a damaged ``spec.yaml`` there is written again)."""
    source = None if isinstance(r.spec, Spec) else Path(r.spec)
    if source is not None and source.is_dir():  # resume a run directory from its stored spec
        if r.out is not None and Path(r.out).resolve() != source.resolve():
            raise UsageError(
                f"{source} is a run directory; drop {r.option('out')} (it runs in place)"
            )
        check_free(source)
        spec = run_dir_spec(source)
        if r.overrides:
            spec = load_spec(str(source / "spec.yaml"), list(r.overrides))
        return spec, source
    if source is None and r.overrides:
        raise UsageError("overrides apply to a spec file; give its path, or change the Spec")
    if r.out is not None:
        check_free(Path(r.out))
        check_run_dir_version(Path(r.out), damaged_ok=True)
    spec = r.spec if source is None else load_spec(resolve_spec(r.spec), list(r.overrides))
    return spec, Path(r.out) if r.out is not None else default_run_dir(spec.name)


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
