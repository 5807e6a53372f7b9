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
ids depend on it, so a directory of another version cannot be resumed or reported: its
cells are computed again by running the spec into a fresh directory.

A record lists the size and SHA-256 of each artifact (``files``). A record that cannot be
read, lacks its fields, names another cell, or whose artifacts are missing or of another
size is *damaged*: its cell counts as pending (a run computes it again) and
:meth:`RunDir.problems` says which file is bad; readers never see it.

Files get the usual permissions (``0666 & ~umask``). A run holds an exclusive
:func:`fcntl.flock` on ``.zoo.lock`` in the directory (:meth:`RunStore.lock`), so a second
run of the same directory is refused while reading it (``zoo status``, ``zoo report``)
stays possible.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
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
    "LOCK_FILE",
    "SPEC_FILE",
    "SPEC_VERSION",
    "OutdatedRunDir",
    "RunDir",
    "RunDirBusy",
    "RunDirError",
    "RunStore",
    "atomic_path",
    "check_version",
    "dump_spec",
    "write_bytes_atomic",
]

SPEC_FILE = "spec.yaml"
LOCK_FILE = ".zoo.lock"
CELLS = "cells"
RECORD = ".json"
_VERSION_LINE = re.compile(r"^#\s*bnn-zoo spec_version:\s*(\d+)\s*$")


# --------------------------------------------------------------------------- atomic writes


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` that replaces it when the block succeeds.

    The block writes the temporary file (``.<name>.<random>.tmp`` in the same directory, so
    the final :func:`os.replace` is atomic); it is synced and renamed over ``path`` on
    success and deleted on any exception, so ``path`` only ever holds a whole file.
    Parent directories are created; the file gets the usual permissions of a new file,
    ``0666 & ~umask`` with the umask of the moment (not :func:`tempfile.mkstemp`'s 0600).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_temp(path.parent, path.name)
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _new_temp(folder: Path, name: str) -> Path:
    """A new empty ``.<name>.<random>.tmp`` in ``folder``, opened with mode 0666 so that the
    process's umask sets its permissions, as for any file a program creates."""
    for _ in range(100):
        tmp = folder / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(errno.EEXIST, f"no free temporary name for {name} in {folder}")


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


def _digest(data: bytes) -> dict[str, Any]:
    """What a record lists of an artifact: its size and SHA-256."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


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
        self._problems: dict[str, None] = {}

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
        """The bytes of a cell's artifact; None when the cell has none or it is damaged.

        When the cell's record lists the artifact (``files``), bytes of another size or
        SHA-256 are damaged: they are not returned and :meth:`problems` names the file.
        """
        try:
            data = self.artifact_path(cell_id, suffix).read_bytes()
        except OSError:
            return None
        files = (self._raw_record(cell_id)[0] or {}).get("files")
        info = files.get(suffix) if isinstance(files, dict) else None
        if isinstance(info, dict) and _digest(data) != {**_digest(data), **info}:
            self._note(
                f"{CELLS}/{cell_id}{suffix}: its contents differ from what was "
                f"stored (damaged); delete {CELLS}/{cell_id}{RECORD} to compute the "
                "cell again"
            )
            return None
        return data

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

    def problems(self) -> list[str]:
        """Damaged files met so far by this reader (one line each, naming the file)."""
        return list(self._problems)

    def _note(self, problem: str) -> None:
        self._problems[problem] = None

    def _raw_record(self, cell_id: str) -> tuple[dict[str, Any] | None, str | None]:
        """The parsed record of ``cell_id`` and, when it is damaged, why (None: absent)."""
        path = self.record_path(cell_id)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None, None
        except (OSError, UnicodeDecodeError) as e:
            return None, f"cannot be read ({getattr(e, 'strerror', None) or e})"
        try:
            rec = json.loads(text)
        except ValueError:
            return None, "is not whole JSON (truncated?)"
        return (rec, None) if isinstance(rec, dict) else (None, "is not a JSON object")

    def check_record(self, cell_id: str) -> tuple[dict[str, Any] | None, str | None]:
        """``(record, None)`` for a whole record; ``(None, why)`` for a damaged one; ``(None,
        None)`` when there is none.

        A whole record is a JSON object naming ``cell_id``, with ``status`` ok or failed,
        ``metrics`` an object (ok cells; absent means none for failed cells), ``error`` text
        if present, whose listed
        artifacts (``files``) exist with their recorded sizes.
        """
        rec, why = self._raw_record(cell_id)
        if rec is None:
            return None, why
        status, metrics, error = rec.get("status"), rec.get("metrics"), rec.get("error")
        if rec.get("cell_id") != cell_id:
            why = f"names cell {rec.get('cell_id')!r}, not the one of its file name"
        elif status not in ("ok", "failed"):
            why = "has no status ok or failed"
        elif not isinstance(metrics, dict) and (status == "ok" or metrics is not None):
            why = "has no metrics"
        elif error is not None and not isinstance(error, str):
            why = "has an error message that is not text"
        else:
            why = self._check_files(cell_id, rec.get("files"))
        if why is not None:
            return None, why
        return {**rec, "metrics": metrics or {}, "error": error or ""}, None

    def _check_files(self, cell_id: str, files: Any) -> str | None:
        if files is None:  # written before records listed their artifacts
            return None
        if not isinstance(files, dict):
            return "has a damaged list of files"
        for suffix, info in files.items():
            path = self.artifact_path(cell_id, suffix)
            try:
                size = path.stat().st_size
            except OSError:
                return f"lists {path.name}, which is missing"
            if not isinstance(info, dict) or size != info.get("size"):
                want = info.get("size") if isinstance(info, dict) else "?"
                return f"lists {path.name} with {want} bytes, but it has {size} (truncated?)"
        return None

    def record(self, cell_id: str) -> dict[str, Any] | None:
        """The stored record of ``cell_id``; None when absent or damaged (see :meth:`problems`).

        A whole record always has ``metrics`` (a dict) and ``error`` (a string).
        """
        rec, why = self.check_record(cell_id)
        if why is not None:
            self._note(f"{CELLS}/{cell_id}{RECORD}: {why}; the cell counts as pending")
        return rec

    def records(self) -> list[dict[str, Any]]:
        """Every whole cell record, sorted by cell id; damaged ones are left out and noted."""
        if not self.cells_dir.is_dir():
            return []
        out = []
        for p in sorted(self.cells_dir.glob(f"*{RECORD}")):
            if p.name.startswith(".") or not p.is_file():
                continue
            rec = self.record(p.name[: -len(RECORD)])
            if rec is not None:
                out.append(rec)
        return out

    def status(self, cell_id: str) -> str:
        """``ok``, ``failed`` or ``pending`` (no record, or a damaged one)."""
        rec = self.record(cell_id) or {}
        return rec.get("status", "pending")

    def lock_owner(self) -> int | None:
        """The process id written in the lock file by the last run that took it."""
        try:
            return int((self.root / LOCK_FILE).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def looks_like_run_dir(self) -> bool:
        """A spec.yaml written by zoo: with its spec_version line, or beside ``cells/``."""
        if not self.spec_path.is_file():
            return False
        if self.cells_dir.is_dir():
            return True
        try:
            head = self.spec_path.read_text(errors="replace").splitlines()[:1]
        except OSError:
            return False
        return bool(head) and _VERSION_LINE.match(head[0]) is not None


class RunDirError(ValueError):
    """A run directory that cannot be used as asked (not a run directory, not writable)."""


class RunDirBusy(RunDirError):
    """Another zoo run holds the run directory's lock."""


class OutdatedRunDir(RunDirError):
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
        f"{SPEC_VERSION}) and its cell ids differ; recompute its cells: run the spec "
        "again into a fresh --out"
    )


# --------------------------------------------------------------------------- writing


def _ours_at_start(p: Path) -> bool:
    """zoo's lock file, or the empty ``cells/`` of a run stopped before its first write."""
    if p.name == LOCK_FILE:
        return True
    return p.name == CELLS and p.is_dir() and not any(p.iterdir())


class RunStore(RunDir):
    """The only writer of a run directory; every write is atomic (see the module docstring).

    A run uses it as :meth:`check_target`, :meth:`lock` (held for the whole run),
    :meth:`check_writable`, then :meth:`prepare`.
    """

    def check_target(self) -> None:
        """Refuse a path that is a file, or a non-empty directory that is not a run directory.

        Raises
        ------
        RunDirError
            With a message naming the path. Only zoo's own lock file and an empty
            ``cells/`` may be in a directory without spec.yaml (a run stopped at its start).
        """
        root = self.root
        if root.exists() and not root.is_dir():
            raise RunDirError(
                f"{root} is a file, not a directory; give a new or empty "
                "directory, or a zoo run directory"
            )
        if not root.is_dir() or self.looks_like_run_dir():
            return
        try:
            names = sorted(p.name for p in root.iterdir() if not _ours_at_start(p))
        except OSError as e:
            raise RunDirError(f"cannot read {root}: {e.strerror or e}") from None
        if names:
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            raise RunDirError(
                f"{root} is not empty ({shown}) and is not a zoo run directory (no "
                "spec.yaml written by zoo); nothing was changed in it. Give a new or empty "
                "directory, or a run directory"
            )

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the run directory for this process (creating the directory).

        An exclusive, non-blocking :func:`fcntl.flock` on ``.zoo.lock``, released when the
        block ends or the process dies (even by SIGKILL); the file keeps the owner's pid.

        Raises
        ------
        RunDirBusy
            Another process holds it ("another zoo run (pid N) is using DIR").
        RunDirError
            The directory cannot be created or written.
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise RunDirError(f"cannot write in {self.root}: {e.strerror or e}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RunDirError(f"cannot lock {self.root}: {e.strerror or e}") from None
                pid = self.lock_owner()
                who = f"another zoo run (pid {pid})" if pid else "another zoo run"
                raise RunDirBusy(
                    f"{who} is using {self.root}; wait for it to end (`zoo "
                    f"status {self.root}` shows its progress) or give another "
                    "--out"
                ) from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            yield
        finally:
            os.close(fd)

    def check_writable(self) -> None:
        """Write, sync and delete a small probe file in the directory and in ``cells/``.

        Raises
        ------
        RunDirError
            When that fails (read-only, no permission, full disk), before any cell runs.
        """
        folder = self.root
        try:
            for folder in (self.root, self.cells_dir):
                folder.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=".zoo-write-check.", suffix=".tmp")
                try:
                    os.write(fd, b"\0" * 4096)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                    os.unlink(tmp)
        except OSError as e:
            raise RunDirError(f"cannot write in {folder}: {e.strerror or e}") from None

    def prepare(self) -> None:
        """Create ``cells/`` and remove temporary files a killed run left behind.

        Call it holding :meth:`lock`: the temporary files of a running run are not stale.
        """
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
        """Store one finished cell: its artifacts first, then the record that marks it done.

        The record gets ``files``: the size and SHA-256 of each artifact, so that a damaged
        artifact is found (:meth:`check_record`). An :class:`OSError` (full disk) leaves the
        cell not stored (no record) and is the caller's to handle.
        """
        cell_id = record["cell_id"]
        artifacts = dict(artifacts or {})
        for suffix in artifacts:
            if not suffix.startswith(".") or suffix == RECORD or "/" in suffix:
                raise ValueError(f"artifact suffix {suffix!r}: use e.g. '.nc' or '.ktied.npz'")
        for suffix, data in artifacts.items():
            write_bytes_atomic(self.artifact_path(cell_id, suffix), data)
        files = {suffix: _digest(data) for suffix, data in artifacts.items()}
        return self._write_record({**record, "files": files})

    def _write_record(self, record: Mapping[str, Any]) -> Path:
        text = json.dumps(dict(record), indent=1, sort_keys=True)
        return write_bytes_atomic(self.record_path(record["cell_id"]), text.encode("utf-8"))

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
