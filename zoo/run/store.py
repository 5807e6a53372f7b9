"""The run directory: :class:`RunDir` reads it, :class:`RunStore` is its only writer.

A run directory holds::

    spec.yaml               the resolved spec, first line ``# bnn-zoo spec_version: N``
    cells/<cell id>.json    one record per cell: axes, config, status, error, metrics, time_s
    cells/<cell id><suffix> the cell's artifacts (``.nc`` posterior, ``.ktied.npz``, ...)
    results.csv summary.csv report.md report.html figures/*.png

Every file is written atomically: the bytes go to a temporary file beside the target
(``.<name>.<random>.tmp``), are synced, and the temporary file is renamed over the target,
so a run killed at any moment (even by SIGKILL) leaves whole files only. A cell's record is
written after its artifacts: a record on disk means the cell is complete.

``spec_version`` is :data:`zoo.spec.sweep.SPEC_VERSION` of the code that wrote the directory. Cell
ids depend on it, so a directory of another version needs ``zoo migrate`` before it can be
resumed or reported (see :mod:`zoo.run.migrate`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from zoo.spec.sweep import SPEC_VERSION

__all__ = [
    "SPEC_FILE",
    "SPEC_VERSION",
    "OutdatedRunDir",
    "RunDir",
    "RunStore",
    "atomic_path",
    "check_version",
    "dump_spec",
    "write_bytes_atomic",
]

SPEC_FILE = "spec.yaml"
CELLS = "cells"
RECORD = ".json"
_VERSION_LINE = re.compile(r"^#\s*bnn-zoo spec_version:\s*(\d+)\s*$")
_UMASK = os.umask(0)
os.umask(_UMASK)


# --------------------------------------------------------------------------- atomic writes


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` that replaces it when the block succeeds.

    The block writes the temporary file (``.<name>.<random>.tmp`` in the same directory, so
    the final :func:`os.replace` is atomic); it is synced and renamed over ``path`` on
    success and deleted on any exception, so ``path`` only ever holds a whole file.
    Parent directories are created; the file gets the usual ``0666 & ~umask`` mode.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a synced temporary file and a rename."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def dump_spec(spec: Any) -> str:
    """The resolved spec as YAML (defaults filled in, keys in schema order)."""
    return yaml.safe_dump(
        spec.model_dump(mode="json"), sort_keys=False, width=100, default_flow_style=None
    )


def _version_of(text: str) -> int | None:
    """The spec_version recorded in a spec.yaml text, None when there is none."""
    for line in text.splitlines()[:5]:
        if m := _VERSION_LINE.match(line):
            return int(m.group(1))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if isinstance(data, dict) and isinstance(data.get("spec_version"), int):
        return data["spec_version"]
    return None


# --------------------------------------------------------------------------- reading


class RunDir:
    """Read access to a run directory (what reports and studies get).

    Parameters
    ----------
    root : path
        The run directory.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r})"

    @property
    def cells_dir(self) -> Path:
        """``root/cells``."""
        return self.root / CELLS

    @property
    def spec_path(self) -> Path:
        """``root/spec.yaml``."""
        return self.root / SPEC_FILE

    def is_run_dir(self) -> bool:
        """True when the directory holds a spec.yaml."""
        return self.spec_path.is_file()

    def spec_text(self) -> str:
        """The stored spec.yaml text."""
        return self.spec_path.read_text()

    def spec_version(self) -> int | None:
        """The recorded spec_version; None for a directory written before versions existed."""
        return _version_of(self.spec_text())

    def record_path(self, cell_id: str) -> Path:
        """``cells/<cell id>.json``."""
        return self.cells_dir / f"{cell_id}{RECORD}"

    def artifact_path(self, cell_id: str, suffix: str) -> Path:
        """``cells/<cell id><suffix>`` (it may not exist)."""
        return self.cells_dir / f"{cell_id}{suffix}"

    def read_artifact(self, cell_id: str, suffix: str) -> bytes | None:
        """The bytes of a cell's artifact, None when the cell has none."""
        try:
            return self.artifact_path(cell_id, suffix).read_bytes()
        except FileNotFoundError:
            return None

    def artifacts(self, cell_id: str) -> list[str]:
        """Suffixes of the artifacts stored for ``cell_id`` (e.g. ``[".nc"]``)."""
        if not self.cells_dir.is_dir():
            return []
        out = []
        for p in self.cells_dir.iterdir():
            name = p.name
            if name.startswith(cell_id) and not name.startswith("."):
                suffix = name[len(cell_id) :]
                if suffix.startswith(".") and suffix != RECORD:
                    out.append(suffix)
        return sorted(out)

    def record(self, cell_id: str) -> dict[str, Any] | None:
        """The stored record of ``cell_id``; None when absent or unreadable."""
        try:
            rec = json.loads(self.record_path(cell_id).read_text())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) else None

    def records(self) -> list[dict[str, Any]]:
        """Every readable cell record, sorted by cell id."""
        if not self.cells_dir.is_dir():
            return []
        out = []
        for p in sorted(self.cells_dir.glob(f"*{RECORD}")):
            if p.name.startswith("."):
                continue
            try:
                rec = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def status(self, cell_id: str) -> str:
        """``ok``, ``failed`` or ``pending`` (no record, or one that cannot be read)."""
        rec = self.record(cell_id) or {}
        status = rec.get("status")
        return status if status in ("ok", "failed") else "pending"


class OutdatedRunDir(ValueError):
    """A run directory written with another spec_version: its cell ids do not match."""


def check_version(run: RunDir) -> None:
    """Raise :class:`OutdatedRunDir` unless ``run`` is new or has this spec_version."""
    if not run.is_run_dir():
        return
    version = run.spec_version()
    if version == SPEC_VERSION:
        return
    if version is not None and version > SPEC_VERSION:
        raise OutdatedRunDir(
            f"{run.root} was made by a newer bnn-zoo (spec_version {version}, this one "
            f"reads {SPEC_VERSION}); upgrade bnn-zoo to use it"
        )
    made = "before spec versions" if version is None else f"with spec_version {version}"
    raise OutdatedRunDir(
        f"{run.root} was made by an older bnn-zoo ({made}; this one is spec_version "
        f"{SPEC_VERSION}) and its cell ids differ; run `zoo migrate {run.root}` once to "
        "rename its cells (nothing is recomputed), then rerun this command"
    )


# --------------------------------------------------------------------------- writing


class RunStore(RunDir):
    """The only writer of a run directory; every write is atomic (see the module docstring)."""

    def prepare(self) -> None:
        """Create ``cells/`` and remove temporary files a killed run left behind."""
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        for folder in (self.root, self.cells_dir, self.root / "figures"):
            for stale in folder.glob(".*.tmp") if folder.is_dir() else ():
                stale.unlink(missing_ok=True)

    def write_file(self, rel: str, data: bytes) -> Path:
        """Write ``data`` to ``root/rel`` (a path inside the run directory)."""
        path = self.root / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"{rel!r} is not a path inside the run directory")
        return write_bytes_atomic(path, data)

    def write_files(self, files: Mapping[str, bytes]) -> dict[str, Path]:
        """Write report files (``{"report.md": b"...", "figures/x.png": b"..."}``)."""
        return {rel: self.write_file(rel, data) for rel, data in files.items()}

    def write_text(self, rel: str, text: str) -> Path:
        """Write UTF-8 text to ``root/rel``."""
        return self.write_file(rel, text.encode("utf-8"))

    def write_spec(self, spec: Any, version: int = SPEC_VERSION) -> Path:
        """Write the resolved spec as spec.yaml with its spec_version line."""
        return self.write_spec_text(dump_spec(spec), version)

    def write_spec_text(self, text: str, version: int = SPEC_VERSION) -> Path:
        """Write a spec.yaml text, replacing any spec_version line with ``version``."""
        lines = [ln for ln in text.splitlines() if not _VERSION_LINE.match(ln)]
        header = f"# bnn-zoo spec_version: {version}"
        return self.write_text(SPEC_FILE, "\n".join([header, *lines]) + "\n")

    def write_table(self, name: str, df: pd.DataFrame) -> Path:
        """Write ``df`` as CSV without the index (``results.csv``, ``summary.csv``)."""
        return self.write_text(name, df.to_csv(index=False))

    def write_cell(
        self, record: Mapping[str, Any], artifacts: Mapping[str, bytes] | None = None
    ) -> Path:
        """Store one finished cell: its artifacts first, then the record that marks it done."""
        cell_id = record["cell_id"]
        for suffix, data in (artifacts or {}).items():
            if not suffix.startswith(".") or suffix == RECORD or "/" in suffix:
                raise ValueError(f"artifact suffix {suffix!r}: use e.g. '.nc' or '.ktied.npz'")
            write_bytes_atomic(self.artifact_path(cell_id, suffix), data)
        text = json.dumps(dict(record), indent=1, sort_keys=True)
        return write_bytes_atomic(self.record_path(cell_id), text.encode("utf-8"))

    def rename_cell(self, old_id: str, new_id: str, record: Mapping[str, Any]) -> None:
        """Give a stored cell a new id (``zoo migrate``), keeping it whole at every moment.

        The artifacts are renamed first, then the new record (``record`` with the new id) is
        written and the old record removed. Each step is atomic, and a migration killed
        half way is finished by running it again (the directory keeps its old
        spec_version until every cell is renamed).
        """
        for suffix in self.artifacts(old_id):
            os.replace(self.artifact_path(old_id, suffix), self.artifact_path(new_id, suffix))
        self.write_cell({**record, "cell_id": new_id})
        if old_id != new_id:
            self.record_path(old_id).unlink(missing_ok=True)

    def remove_file(self, rel: str) -> None:
        """Delete ``root/rel`` if it exists (a stale report figure, say)."""
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"{rel!r} is not a path inside the run directory")
        (self.root / rel).unlink(missing_ok=True)

    def figures(self) -> list[str]:
        """Report figures on disk, as paths relative to the run directory."""
        folder = self.root / "figures"
        if not folder.is_dir():
            return []
        return sorted(f"figures/{p.name}" for p in folder.glob("*.png"))

    def clear_cells(self) -> None:
        """Delete every stored cell (``zoo run --fresh``)."""
        if self.cells_dir.is_dir():
            shutil.rmtree(self.cells_dir)
