"""``zoo migrate RUN_DIR``: give a run directory of an older spec_version today's cell ids.

Cell ids hash each cell's configuration together with :data:`zoo.spec.sweep.SPEC_VERSION`,
so the ids of a directory written by an older version match no cell of today's expansion,
and resuming it would recompute everything. Migration renames instead of recomputing:

1. load the stored ``spec.yaml`` (old-form specs validate, with deprecation messages) and
   expand today's cells;
2. match each stored cell record to today's cell with the same method and sweep axes,
   after checking the record (version 1: :func:`zoo.spec.sweep.legacy_cell_id` of its
   stored configuration must give its id) and that the stored configuration holds every
   setting of today's cell (``data``, ``model``, ``prior``, ``likelihood``, ``seed``, the
   method): a record that fails either check is left as it is, and its cell will run again;
3. rename each matched record and its artifacts (atomic renames, :meth:`RunStore.rename_cell`);
4. rewrite ``spec.yaml`` in today's form with today's spec_version (last: a migration killed
   half way is finished by running it again), drop report figures named after old ids, and
   rebuild the tables and report.

Nothing is recomputed and no record is deleted. A migration holds the run directory's lock
(:meth:`zoo.run.store.RunStore.lock`) from start to end, so it cannot rename cells under a
running ``zoo run`` (it is refused with a message), and no run starts while it renames.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.run.runner import build_report
from zoo.run.store import SPEC_VERSION, RunStore
from zoo.spec.load import load_spec
from zoo.spec.sweep import legacy_cell_id

__all__ = ["Migration", "migrate_run_dir"]

#: Parts of a cell's configuration a stored record must agree with to keep its numbers.
_CHECKED = ("seed", "data", "model", "prior", "likelihood", "method", "init_method")


@dataclass
class Migration:
    """What :func:`migrate_run_dir` did (or would do, with ``dry_run``)."""

    run_dir: Path
    version_from: int | None
    version_to: int
    renamed: list[tuple[str, str]] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    #: (stored cell id, why it was not renamed)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: today's cells that no stored record matched (they run with ``zoo run DIR``)
    pending: list[str] = field(default_factory=list)
    #: deprecation messages of the stored spec (rewritten in today's form)
    deprecations: list[str] = field(default_factory=list)
    dry_run: bool = False

    def summary(self) -> str:
        """A few lines for the user."""
        was = "no spec_version" if self.version_from is None else f"version {self.version_from}"
        verb = "would rename" if self.dry_run else "renamed"
        lines = [
            f"{self.run_dir}: {was} -> {self.version_to}; {verb} {len(self.renamed)} "
            f"cells, {len(self.unchanged)} already current, {len(self.skipped)} kept "
            f"as they are, {len(self.pending)} not stored yet"
        ]
        lines += [f"  {old} -> {new}" for old, new in self.renamed]
        lines += [f"  kept {old}: {why}" for old, why in self.skipped]
        if self.deprecations:
            verb = "would be" if self.dry_run else "was"
            lines.append(
                f"spec.yaml used {len(self.deprecations)} deprecated form(s); it "
                f"{verb} rewritten in today's form"
            )
        return "\n".join(lines)


def _axes_key(axes: Mapping[str, Any]) -> str:
    return json.dumps(dict(axes), sort_keys=True)


def _first_difference(stored: Any, wanted: Any, path: str) -> str | None:
    """Where ``stored`` lacks a value of ``wanted`` (a configuration without defaults)."""
    if isinstance(wanted, dict):
        if not isinstance(stored, dict):
            return path
        for key, value in wanted.items():
            if key not in stored:
                return f"{path}.{key}"
            if (diff := _first_difference(stored[key], value, f"{path}.{key}")) is not None:
                return diff
        return None
    return None if stored == wanted else path


def _check_record(rec: Mapping[str, Any], cell: Any, version: int | None) -> str | None:
    """Why ``rec`` cannot become ``cell``'s record, or None when it can."""
    config = rec.get("config")
    if not isinstance(config, dict):
        return "the record stores no configuration"
    if version in (None, 1) and legacy_cell_id(config, rec["axes"]) != rec["cell_id"]:
        return "its stored configuration does not give its id (edited by hand?)"
    new = cell.config()
    for part in _CHECKED:
        if part in new:
            if part not in config:
                return f"the stored configuration has no {part}"
            if (diff := _first_difference(config[part], new[part], part)) is not None:
                return f"today's cell differs at {diff}"
    return None


def migrate_run_dir(
    run_dir: str | Path, *, dry_run: bool = False, log: Callable[[str], None] | None = None
) -> Migration:
    """Rename the cells of an older run directory to today's ids (see the module docstring).

    Parameters
    ----------
    run_dir : path
        A directory written by ``zoo run``.
    dry_run : bool
        Only say what would change.
    log : callable, optional
        Receives progress lines.

    Raises
    ------
    ValueError
        ``run_dir`` is not a run directory, or was written by a newer bnn-zoo.
    zoo.run.store.RunDirBusy
        A run (or another migration) holds the directory's lock
        (:meth:`~zoo.run.store.RunStore.lock`); nothing was changed. A dry run takes no lock.
    zoo.spec.load.SpecError
        The stored spec does not validate any more.
    """
    store = RunStore(run_dir)
    if not store.is_run_dir():
        raise ValueError(f"{store.root}: not a run directory (no spec.yaml)")
    if dry_run:  # reads only, as `zoo status` does
        return _migrate(store, dry_run=True, log=log)
    with store.lock():  # no run may use the directory while its cells are renamed
        return _migrate(store, dry_run=False, log=log)


def _migrate(store: RunStore, *, dry_run: bool, log: Callable[[str], None] | None) -> Migration:
    """The migration of :func:`migrate_run_dir` (called holding the lock, unless dry)."""
    version = store.spec_version()
    if version is not None and version > SPEC_VERSION:
        raise ValueError(
            f"{store.root} was made by a newer bnn-zoo (spec_version {version}); "
            f"this one migrates up to {SPEC_VERSION}"
        )
    with warnings.catch_warnings(record=True) as caught:  # old forms: expected here
        warnings.simplefilter("always")
        spec = load_spec(store.spec_path)
    out = Migration(store.root, version, SPEC_VERSION, dry_run=dry_run)
    out.deprecations = [str(w.message) for w in caught]
    cells = spec.cells() if spec.simulation is None else []
    by_axes = {_axes_key(c.axes): c for c in cells}
    current = {c.cell_id for c in cells}
    matched: set[str] = set()
    plan: list[tuple[dict[str, Any], Any]] = []
    for rec in store.records():
        old = str(rec.get("cell_id", ""))
        if old in current:
            out.unchanged.append(old)
            matched.add(old)
            continue
        cell = by_axes.get(_axes_key(rec.get("axes", {})))
        if cell is None:
            out.skipped.append((old, "no cell of the spec has its method and axes"))
            continue
        if cell.cell_id in matched:
            out.skipped.append((old, f"{cell.cell_id} is already stored"))
            continue
        if (why := _check_record(rec, cell, version)) is not None:
            out.skipped.append((old, why))
            continue
        matched.add(cell.cell_id)
        plan.append((rec, cell))
        out.renamed.append((old, cell.cell_id))
    out.pending = [c.cell_id for c in cells if c.cell_id not in matched]
    if dry_run:
        return out
    for rec, cell in plan:
        moved = {
            **rec,
            "config": cell.config(),
            "migrated_from": {"cell_id": rec["cell_id"], "spec_version": version or 1},
        }
        store.rename_cell(rec["cell_id"], cell.cell_id, moved)
        if log:
            log(f"renamed {rec['cell_id']} -> {cell.cell_id}")
    store.write_spec(spec)
    old_tags = [old.rsplit("_", 1)[-1] for old, _ in out.renamed]
    for rel in store.figures():  # figures named after old ids (the report redraws them)
        if any(tag in rel for tag in old_tags):
            store.remove_file(rel)
    build_report(store, spec)
    return out
