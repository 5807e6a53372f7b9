"""Write the graded reference posteriors of a finished run in posteriordb's layout.

:func:`export_run` reads every sampled cell of a run directory that holds a reference grade
(:mod:`reports.grade`: gold, silver, bronze, failed) and writes, per cell, the five files
of :mod:`zoo.references.layout`: the posterior, the model (the cell's resolved spec and a
description of its network), the data it was fitted to (shared by the cells of the same
data, named by a hash of their content), and the reference draws with their diagnostics.

The draws are thinned to at most ``max_draws`` in all (every ``thin``-th draw of each
chain, ``thin = ceil(chains * draws / max_draws)``), so that a reference stays a few
hundred kB; the diagnostics are those of the full draws: per parameter the rank-normalized
split :math:`\\hat R` and the bulk and tail ESS (Vehtari et al. 2021, as posteriordb
lists them), and per cell what the grade reads (split and nested :math:`\\hat R` of the
weights, predictions and KL, bulk ESS, divergences, saturation), the grade, the gates that
kept the cell from the next grade up and the gates of Stan's diagnose that failed.
Provenance: the SHA-256 of the run's ``spec.yaml``, the cell's configuration hash (the end
of its id), the bnn-zoo version that ran it and the git commit of the code that exported
it (a run directory does not record the commit that computed it).

Nothing is written through a symbolic link or outside ``out``: ``out`` must be new or an
empty directory and not a link, and every file goes through
:func:`zoo.execution.store_links.inside` and an atomic write. Every file is built in memory
before the first is written, so bad input leaves ``out`` as it was; the files are written
into a new directory beside ``out`` (``.NAME.*.partial``) renamed into place once whole,
so a failed write (a full disk) leaves ``out`` as it was too, and a retry starts afresh.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports.grade import GRADES
from zoo.execution.netcdf import datatree_from_bytes
from zoo.execution.rundir import CELLS, SPEC_FILE, RunDir
from zoo.execution.store import write_bytes_atomic
from zoo.execution.store_links import LinkedPath, inside
from zoo.references.cell_files import Exported, cell_files

__all__ = ["DEFAULT_MAX_DRAWS", "ExportError", "ExportResult", "Exported", "export_run"]

#: Draws kept per posterior (all chains together) unless ``max_draws`` says otherwise.
DEFAULT_MAX_DRAWS = 400


class ExportError(ValueError):
    """Bad input to :func:`export_run` (exit 2 at the command line); nothing was written."""


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_run` wrote.

    Attributes
    ----------
    out : Path
        The database directory.
    posteriors : tuple of Exported
        The posteriors written, in cell order.
    skipped : tuple of str
        One line per sampled cell left out, with why.
    n_bytes : int
        Bytes written in all.
    """

    out: Path
    posteriors: tuple[Exported, ...]
    skipped: tuple[str, ...]
    n_bytes: int


def check_out(out: Path) -> None:
    """Refuse an ``out`` that is a link, a file, or a directory that is not empty.

    Raises
    ------
    ExportError
        Naming the path and the fix.
    """
    if out.is_symlink():
        raise ExportError(
            f"--out {out} is a symbolic link; zoo export writes nothing through a link. "
            "Give a new directory"
        )
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} is a file; give a new or empty directory")
    if out.is_dir() and any(out.iterdir()):
        raise ExportError(
            f"--out {out} is not empty; give a new or empty directory (an export is never "
            "merged into another one)"
        )


def export_run(
    run_dir: str | os.PathLike[str],
    spec: Any,
    out: str | os.PathLike[str],
    *,
    max_draws: int = DEFAULT_MAX_DRAWS,
    min_grade: str = "bronze",
) -> ExportResult:
    """Write the graded sampled cells of a run as posteriordb-style reference posteriors.

    Parameters
    ----------
    run_dir : path
        A run directory (``zoo run --out``).
    spec : zoo.spec.Spec
        The spec stored in it (``zoo.execution.plan.run_dir_spec`` checks it).
    out : path
        The database directory to write: new, or an empty directory; not a link.
    max_draws : int, default 400
        Draws kept per posterior, all chains together (each chain thinned alike).
    min_grade : {"gold", "silver", "bronze", "failed"}, default "bronze"
        Cells below this grade are left out (listed in ``skipped``).

    Returns
    -------
    ExportResult

    Raises
    ------
    ExportError
        ``out`` is a link, a file or not empty; ``max_draws`` or ``min_grade`` is invalid;
        the run holds no graded sampled cell (or none at ``min_grade`` or better).
    """
    run_dir, out = Path(run_dir), Path(out)
    if min_grade not in GRADES:
        raise ExportError(f"--min-grade {min_grade!r}: choose one of {', '.join(GRADES)}")
    if max_draws < 1:
        raise ExportError(f"--max-draws {max_draws}: give at least 1")
    check_out(out)
    run = RunDir(run_dir)
    spec_sha = hashlib.sha256((run_dir / SPEC_FILE).read_bytes()).hexdigest()
    files: dict[str, bytes] = {}
    done: list[Exported] = []
    skipped: list[str] = []
    graded_any = False
    for cell in spec.cells():
        found = _graded_record(run, run_dir, cell, skipped)
        if found is None:
            continue
        graded_any = True
        rec, grade = found
        if GRADES.index(grade) > GRADES.index(min_grade):
            skipped.append(f"{cell.cell_id}: grade {grade}, below --min-grade {min_grade}")
            continue
        data = run.read_artifact(cell.cell_id, ".nc")
        if data is None:
            skipped.append(f"{cell.cell_id}: its ArviZ file is missing or damaged")
            continue
        ref = cell_files(cell, rec, datatree_from_bytes(data), spec, spec_sha, max_draws)
        files.update(ref[0])
        done.append(ref[1])
    for problem in run.problems():
        skipped.append(f"damaged file: {problem}")
    if not graded_any:
        raise ExportError(
            f"{run_dir} holds no finished sampled cell with a reference grade (zoo export "
            "writes the draws of NUTS, HMC, ChEES and other samplers); run a spec with a "
            "sampler, or wait for its sampled cells (zoo status DIR)"
        )
    if not done:
        raise ExportError(
            f"no sampled cell of {run_dir} could be exported:\n  " + "\n  ".join(skipped)
        )
    return ExportResult(out, tuple(done), tuple(skipped), _write(out, files))


def _graded_record(
    run: RunDir, run_dir: Path, cell: Any, skipped: list[str]
) -> tuple[dict[str, Any], str] | None:
    """A cell's stored record and reference grade; None for a cell without one (a sampler's
    cell that is not finished or failed is listed in ``skipped``, with why).

    Raises
    ------
    ExportError
        The record's grade is not a grade (damaged, or written by another program).
    """
    rec = run.record(cell.cell_id)
    metrics = (rec or {}).get("metrics") if isinstance(rec, dict) else None
    grade = metrics.get("reference_grade") if isinstance(metrics, dict) else None
    if rec is None or rec.get("status") != "ok" or not grade:
        if getattr(cell.method, "needs_samplable_model", False):  # a sampler's cell
            why = "not finished (pending or running)" if rec is None else "it failed"
            skipped.append(f"{cell.cell_id}: {why}")
        return None
    if grade not in GRADES:
        raise ExportError(
            f"{run_dir / CELLS / cell.cell_id}.json: metrics.reference_grade is "
            f"{grade!r}, not a grade ({', '.join(GRADES)}); the record is damaged or "
            "from another program: run the cell again (zoo run resumes it) or remove "
            "the record"
        )
    return rec, grade


def _write(out: Path, files: Mapping[str, bytes]) -> int:
    """Write ``files`` into a new directory beside ``out`` and rename it into place, so
    that ``out`` holds the whole database or is left as it was (a full disk, a link made
    while writing: the partial copy is removed and the error raised); never through a
    link. ``out`` may be missing or an empty directory (a rename replaces an empty one)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        for rel, data in files.items():
            write_bytes_atomic(inside(tmp, rel), data)
        tmp.chmod(0o755)
        check_out(out)  # still new or empty, and not a link, now that it is replaced
        os.replace(tmp, out)
    except LinkedPath as e:  # a link made in the new directory while we wrote
        shutil.rmtree(tmp, ignore_errors=True)
        raise ExportError(e.strerror) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sum(len(d) for d in files.values())
