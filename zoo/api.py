"""The Python API for notebooks: ``zoo.run(...)`` and ``zoo.open_run(DIR)``.

The same path as ``zoo run``, which is a thin layer over the same two functions:
:func:`zoo.execution.plan.plan_run` resolves the spec (a file, a shipped spec's name, or a
run directory to resume), loads it with its overrides and checks the options, the run
directory, the data and the networks (:mod:`zoo.execution.preflight`); then
:func:`zoo.execution.launch.launch` checks the device and runs the cells not yet stored and
the report. Bad input raises (:class:`~zoo.spec.SpecError`,
:class:`~zoo.execution.usage.UsageError`, :class:`~zoo.execution.rundir.RunDirError`)
instead of exiting; failed cells are recorded and the run goes on, as on the command line.

The result is a :class:`Run`: the run directory read back (``results.csv`` and
``summary.csv`` as pandas frames, the cells with their stored status, one cell's ArviZ
``DataTree``, the report's path). ``open_run`` gives the same for a finished run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd
import xarray as xr

from reports.grade import GRADES
from zoo.execution.launch import launch
from zoo.execution.netcdf import datatree_from_bytes
from zoo.execution.plan import RunRequest, plan_run
from zoo.execution.rundir import RunDir, check_version
from zoo.execution.runner import RunOutcome
from zoo.execution.tune import plan as tune_plan
from zoo.execution.usage import UsageError, check_dependencies
from zoo.spec import Cell, Spec, load_spec

__all__ = ["Run", "open_run", "run"]

#: The artifact of a cell that holds its ArviZ tree.
DATATREE_SUFFIX = ".nc"


@dataclass(frozen=True, repr=False)
class Run:
    """A run directory, read back.

    Shown short, as pandas and xarray objects are: ``repr`` is one line (the directory,
    the cells ok / failed / pending, the reference grades, the report's path) and
    ``_repr_html_`` the same as a small table in a notebook; the spec is
    :attr:`spec`, printed in full only when asked for.

    Attributes
    ----------
    dir : Path
        The run directory.
    spec : Spec
        Its stored spec (``spec.yaml``).
    outcome : RunOutcome or None
        What :func:`run` did (cells run, skipped, failed); None from :func:`open_run`.
    """

    dir: Path
    spec: Spec
    outcome: RunOutcome | None = None

    @property
    def results(self) -> pd.DataFrame:
        """``results.csv``: one row per stored cell (sweep axes, metrics, bookkeeping)."""
        return _read_csv(self.dir / "results.csv")

    @property
    def summary(self) -> pd.DataFrame:
        """``summary.csv``: per method and axis values, each metric's mean, s.e. and count."""
        return _read_csv(self.dir / "summary.csv")

    @property
    def cells(self) -> list[Cell]:
        """The spec's cells, in sweep order (``cell.cell_id``, ``cell.axes``, ...); with
        ``tune``, its tuning cells first and the main cells with the values chosen so far."""
        if self.spec.simulation is not None:
            return []
        return tune_plan(self.spec, RunDir(self.dir).record).cells

    @property
    def status(self) -> dict[str, str]:
        """Cell id -> ``ok``, ``failed`` or ``pending`` (not stored, or damaged)."""
        stored = RunDir(self.dir)
        return {c.cell_id: stored.status(c.cell_id) for c in self.cells}

    @property
    def report(self) -> Path:
        """The path of ``report.md`` (``report.html`` lies beside it)."""
        return self.dir / "report.md"

    def overview(self) -> dict[str, Any]:
        """What the reprs show: the directory, the cells per status (``ok``, ``failed``,
        ``pending``), the sampled cells per reference grade, the report's path (None
        before it is written)."""
        stored = RunDir(self.dir)
        status = Counter(stored.status(c.cell_id) for c in self.cells)
        grades = Counter(
            g
            for c in self.cells
            if isinstance(
                g := ((stored.record(c.cell_id) or {}).get("metrics") or {}).get("reference_grade"),
                str,
            )
        )
        return {
            "dir": str(self.dir),
            "spec": self.spec.name,
            "cells": {k: status.get(k, 0) for k in ("ok", "failed", "pending")},
            "grades": {g: grades[g] for g in GRADES if grades.get(g)},
            "report": str(self.report) if self.report.is_file() else None,
        }

    def __repr__(self) -> str:
        o = self.overview()
        cells = ", ".join(f"{n} {k}" for k, n in o["cells"].items())
        grades = ", ".join(f"{n} {g}" for g, n in o["grades"].items())
        parts = [repr(o["dir"]), f"spec {o['spec']}", f"cells: {cells}"]
        if grades:
            parts.append(f"grades: {grades}")
        parts.append(f"report: {o['report'] or 'not written yet'}")
        return f"Run({'; '.join(parts)})"

    def _repr_html_(self) -> str:
        o = self.overview()
        rows = {
            "directory": f"<code>{escape(o['dir'])}</code>",
            "spec": escape(o["spec"]),
            "cells": ", ".join(f"{n} {k}" for k, n in o["cells"].items()),
            "grades": ", ".join(f"{n} {g}" for g, n in o["grades"].items()) or "-",
            "report": f"<code>{escape(o['report'])}</code>" if o["report"] else "not written yet",
        }
        body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows.items())
        return f"<table><caption>zoo Run</caption>{body}</table>"

    def datatree(self, cell: str | int) -> xr.DataTree:
        """The ArviZ ``DataTree`` of one cell (its ``cells/<id>.nc``), fully loaded.

        Parameters
        ----------
        cell : str or int
            A cell id, or an index into :attr:`cells`.

        Raises
        ------
        KeyError
            No such cell, or the cell has no tree stored (not run, failed, or damaged).
        """
        if isinstance(cell, int):
            cells = self.cells
            if not -len(cells) <= cell < len(cells):
                raise KeyError(f"cell index {cell}: the run has cells 0..{len(cells) - 1}")
            cell = cells[cell].cell_id
        stored = RunDir(self.dir)
        data = stored.read_artifact(cell, DATATREE_SUFFIX)
        if data is None:
            why = "; ".join(stored.problems()) or f"its status is {stored.status(cell)}"
            raise KeyError(f"cell {cell}: no {DATATREE_SUFFIX} file stored in {self.dir} ({why})")
        return datatree_from_bytes(data)


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(path)


def run(
    spec: str | Path | Spec,
    *,
    overrides: Iterable[str] = (),
    out: str | Path | None = None,
    workers: int | None = None,
    executor: str = "local",
    address: str | None = None,
    device: str | None = None,
    fresh: bool = False,
    retry_failed: bool = False,
    progress: bool = False,
    checkpoint_every: float | None = 600.0,
) -> Run:
    """Run a spec as ``zoo run`` does and return the run read back.

    Parameters
    ----------
    spec : str, Path or Spec
        A spec file, a shipped spec's name (``"two_moons_depth"``, see ``zoo list``), a
        run directory to resume, or a loaded :class:`~zoo.spec.Spec`.
    overrides : iterable of str
        ``--set`` items, e.g. ``["sweep.seed=[0]", "inference.mfvi.steps=200"]``.
    out : str or Path, optional
        The run directory (default ``runs/<name>/<timestamp>``); cells already stored in
        it are skipped (resume).
    workers : int, optional
        Cells run at once (default: one per core); 1 runs them in this process.
    executor, address, device, fresh, retry_failed, progress
        As ``--executor``, ``--address``, ``--device``, ``--fresh``, ``--retry-failed`` and
        not ``--no-progress`` of ``zoo run``.
    checkpoint_every : float, optional
        ``--checkpoint-every``: seconds between two saves of a running sampled cell's
        sampler state, from which a later run of ``out`` resumes the cell; None or 0: never.

    Returns
    -------
    Run
        The run directory read back, with :attr:`Run.outcome` saying what ran.

    Raises
    ------
    SpecError, UsageError, RunDirError
        Bad input, before any cell runs (nothing stored is lost).
    """
    check_dependencies()  # h5netcdf, say, is imported only when a cell writes its file
    request = RunRequest(
        spec if isinstance(spec, Spec) else Path(spec),
        overrides=tuple(overrides),
        out=None if out is None else Path(out),
        workers=workers,
        executor=executor,
        address=address,
        device=device,
        fresh=fresh,
        retry_failed=retry_failed,
        progress=progress,
        checkpoint_every=checkpoint_every,
    )
    plan = plan_run(request)
    return Run(plan.out, plan.spec, launch(plan))


def open_run(path: str | Path) -> Run:
    """A finished (or partly finished) run directory, read back without running anything.

    Raises
    ------
    UsageError
        ``path`` holds no ``spec.yaml``.
    OutdatedRunDir
        The directory was written with another spec_version.
    """
    root = Path(path)
    if not (root / "spec.yaml").is_file():
        raise UsageError(f"{root}: not a run directory (no spec.yaml)")
    check_version(RunDir(root))
    return Run(root, load_spec(root / "spec.yaml"))
