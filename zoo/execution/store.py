"""The only writer of a run directory, :class:`RunStore`; every write is atomic.

The layout of a run directory and its reader are :mod:`zoo.execution.rundir`'s.

Every file is written atomically: the bytes go to a temporary file beside the target
(``.<name>.<random>.tmp``), are synced, and the temporary file is renamed over the target,
so a run killed at any moment (even by SIGKILL) leaves whole files only. A cell's record is
written after its artifacts: a record on disk means the cell is complete.

Files get the usual permissions (``0666 & ~umask``). A run (and ``zoo report``) holds an
exclusive :func:`fcntl.flock` on ``.zoo.lock`` in the directory (:meth:`RunStore.lock`),
so a second run of the same directory, or a report, is refused while reading it (``zoo
status``) stays possible; the file goes as the holder ends.

Nothing is written, truncated or deleted through a symbolic link inside the run directory:
a run directory received from someone else, or one under a shared directory, may hold
links to any file of the user. The lock file is opened with ``O_NOFOLLOW`` and must be a
regular file; :meth:`RunStore.check_target` refuses a directory holding a link among its
entries or those of ``cells/`` and ``figures/``; and each write checks again that no part
of its path below the run directory is a link (:class:`LinkedPath`). The run directory
itself may be a link: the user named it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from zoo.execution.checkpoint_file import seal_checkpoint
from zoo.execution.rundir import (
    CELLS,
    CHECKPOINTS,
    LOCK_FILE,
    RECORD,
    RUNNING_FILE,
    SPEC_FILE,
    SPEC_VERSION,
    VERSION_LINE,
    OutdatedRunDir,
    RunDir,
    RunDirBusy,
    RunDirError,
    artifact_digest,
    busy_message,
    check_version,
)
from zoo.execution.store_links import LinkedPath, check_no_links, inside, link_message

#: The reader and its errors are re-exported: ``zoo.execution.store`` is where callers find the
#: run directory's reader and writer together.
__all__ = [
    "LOCK_FILE",
    "SPEC_FILE",
    "SPEC_VERSION",
    "LinkedPath",
    "OutdatedRunDir",
    "RunDir",
    "RunDirBusy",
    "RunDirError",
    "TABLES_WRITTEN",
    "RunStore",
    "atomic_path",
    "check_version",
    "dump_spec",
    "write_bytes_atomic",
]


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


# --------------------------------------------------------------------------- writing


def _same_file(path: Path, st: os.stat_result) -> bool:
    """Whether ``path`` (not followed) is the file of ``st``."""
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def _ours_at_start(p: Path) -> bool:
    """zoo's lock file, or the empty ``cells/`` of a run stopped before its first write."""
    if p.name == LOCK_FILE:
        return True
    return p.name == CELLS and p.is_dir() and not any(p.iterdir())


#: Where the store keeps the SHA-256 of the tables it wrote, to tell a hand edit: beside
#: the cells, so that the run directory's own listing holds only what it documents.
TABLES_WRITTEN = f"{CELLS}/.tables.sha256"
#: Where bnn-zoo kept it before (read, then removed when the tables are written again).
_OLD_TABLES_WRITTEN = ".zoo.tables.json"


class RunStore(RunDir):
    """The only writer of a run directory; every write is atomic (see the module docstring).

    A run uses it as :meth:`check_target`, :meth:`lock` (held for the whole run),
    :meth:`check_writable`, then :meth:`prepare`.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__(root)
        self._notes: dict[str, None] = {}

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
        if not root.is_dir():
            return
        self.check_links()
        if self.looks_like_run_dir():
            return
        try:
            names = sorted(p.name for p in root.iterdir() if not _ours_at_start(p))
        except OSError as e:
            raise RunDirError(f"cannot read {root}: {e.strerror or e}") from None
        if names:
            pid = self.holder()  # a run that started here a moment ago: its files, not ours
            if pid is not None:
                raise RunDirBusy(busy_message(root, pid))
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            raise RunDirError(
                f"{root} is not empty ({shown}) and is not a zoo run directory (no "
                "spec.yaml written by zoo); nothing was changed in it. Give a new or empty "
                "directory, or a run directory"
            )

    def check_links(self) -> None:
        """Refuse a run directory holding a symbolic link where zoo writes.

        Zoo writes the directory's own entries (spec.yaml, the lock, the tables, the
        report) and those of ``cells/``, ``checkpoints/`` and ``figures/``: a link among
        them would have a write, a truncation or a delete land on its target.

        Raises
        ------
        RunDirError
            Naming the first link found (exit 2 at the command line); nothing was changed.
        """
        try:
            check_no_links(self.root, (CELLS, CHECKPOINTS, "figures"))
        except LinkedPath as e:
            raise RunDirError(e.strerror) from None
        except OSError as e:
            raise RunDirError(f"cannot read {self.root}: {e.strerror or e}") from None

    @contextmanager
    def lock(self, then: str = "or give another --out") -> Iterator[None]:
        """Hold the run directory for this process (creating the directory).

        An exclusive, non-blocking :func:`fcntl.flock` on ``.zoo.lock``, released when the
        block ends or the process dies (even by SIGKILL); the file keeps the owner's pid.
        It is opened with ``O_NOFOLLOW`` and must be a regular file: a link there would
        have its target truncated.

        The file is removed when the block ends, while still locked, so a finished run
        leaves none. A process that opened it before and locks it after the removal holds
        a lock on a file no longer there: so after locking, the path must still name the
        file locked, or it is opened again (:meth:`_take_lock`).

        Raises
        ------
        RunDirBusy
            Another process holds it ("another zoo run (pid N) is using DIR; wait for it
            to end ..." and ``then``).
        RunDirError
            The directory cannot be created or written, or the lock file is a link or not
            a regular file.
        """
        path = self.root / LOCK_FILE
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(f"cannot write in {self.root}: {e.strerror or e}") from None
        fd = self._take_lock(path, then)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            yield
        finally:
            try:
                if _same_file(path, os.fstat(fd)):
                    path.unlink()  # a link's own entry at most, never its target
            except OSError:
                pass
            os.close(fd)

    def _take_lock(self, path: Path, then: str) -> int:
        """The descriptor of ``path`` open and locked, the path still naming that file."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        for _ in range(100):
            try:
                fd = os.open(path, flags, 0o666)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise RunDirError(link_message(path)) from None
                raise RunDirError(f"cannot write in {self.root}: {e.strerror or e}") from None
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise RunDirError(
                        f"{path} is not a regular file; zoo keeps its lock there. Remove it, "
                        "or give another --out (a new directory)"
                    )
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RunDirError(f"cannot lock {self.root}: {e.strerror or e}") from None
                raise RunDirBusy(busy_message(self.root, self.lock_owner(), then)) from None
            except BaseException:
                os.close(fd)
                raise
            if _same_file(path, st):
                return fd
            os.close(fd)  # its holder removed it as it ended: lock the file there now
        raise RunDirError(f"cannot lock {self.root}: its lock file keeps being replaced")

    def check_writable(self) -> None:
        """Write, sync and delete a small probe file in the directory and in ``cells/``.

        Raises
        ------
        RunDirError
            When that fails (read-only, no permission, full disk), before any cell runs.
        """
        folder = self.root
        try:
            for folder in (self.root, inside(self.root, CELLS)):
                folder.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=".zoo-write-check.", suffix=".tmp")
                try:
                    os.write(fd, b"\0" * 4096)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                    os.unlink(tmp)
        except LinkedPath as e:
            raise RunDirError(e.strerror) from None
        except OSError as e:
            raise RunDirError(f"cannot write in {folder}: {e.strerror or e}") from None

    def prepare(self) -> None:
        """Create ``cells/`` and remove temporary files a killed run left behind.

        Call it holding :meth:`lock`: the temporary files of a running run are not stale.
        """
        inside(self.root, CELLS).mkdir(parents=True, exist_ok=True)
        folders = (CELLS, CHECKPOINTS, "figures")
        for folder in (self.root, *(inside(self.root, f) for f in folders)):
            for stale in folder.glob(".*.tmp") if folder.is_dir() else ():
                if not stale.is_symlink():
                    stale.unlink(missing_ok=True)

    def write_file(self, rel: str, data: bytes) -> Path:
        """Write ``data`` to ``root/rel`` (a path inside the run directory, no link on it:
        :class:`LinkedPath` otherwise)."""
        path = inside(self.root, rel)
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
        lines = [ln for ln in text.splitlines() if not VERSION_LINE.match(ln)]
        header = f"# bnn-zoo spec_version: {version}"
        return self.write_text(SPEC_FILE, "\n".join([header, *lines]) + "\n")

    def write_table(self, name: str, df: pd.DataFrame) -> Path:
        """Write ``df`` as CSV without the index (``results.csv``, ``summary.csv``).

        The tables are made from the cells, so a table edited by hand since zoo wrote it
        is replaced: :meth:`notes` says so (zoo keeps the SHA-256 of what it wrote in
        ``cells/.tables.sha256``, as ``sha256sum`` writes it: ``sha256sum -c
        cells/.tables.sha256`` in the run directory checks the tables).
        """
        data = df.to_csv(index=False).encode("utf-8")
        written = self._tables_written()
        try:
            before = hashlib.sha256(inside(self.root, name).read_bytes()).hexdigest()
        except OSError:
            before = None
        if before is not None and written.get(name) not in (None, before):
            self._notes.setdefault(
                f"{name} was edited since zoo wrote it; it is written again from the "
                "cells, so the edits are gone (copy a table under another name to keep "
                "edits)"
            )
        path = self.write_file(name, data)
        written[name] = hashlib.sha256(data).hexdigest()
        lines = "".join(f"{digest}  {table}\n" for table, digest in sorted(written.items()))
        self.write_file(TABLES_WRITTEN, lines.encode("utf-8"))
        self.remove_file(_OLD_TABLES_WRITTEN)
        return path

    def _tables_written(self) -> dict[str, str]:
        """Table name -> the SHA-256 of what zoo last wrote (empty when unknown)."""
        try:
            text = inside(self.root, TABLES_WRITTEN).read_text(encoding="utf-8")
            return dict(reversed(ln.split("  ", 1)) for ln in text.splitlines() if "  " in ln)
        except (OSError, ValueError):
            pass
        try:  # where bnn-zoo kept them before
            data = json.loads(inside(self.root, _OLD_TABLES_WRITTEN).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def notes(self) -> list[str]:
        """What the user should know of this store's writes (a hand-edited table replaced)."""
        return list(self._notes)

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
            write_bytes_atomic(inside(self.root, f"{CELLS}/{cell_id}{suffix}"), data)
        files = {suffix: artifact_digest(data) for suffix, data in artifacts.items()}
        return self._write_record({**record, "files": files})

    def _write_record(self, record: Mapping[str, Any]) -> Path:
        text = json.dumps(dict(record), indent=1, sort_keys=True)
        path = inside(self.root, f"{CELLS}/{record['cell_id']}{RECORD}")
        return write_bytes_atomic(path, text.encode("utf-8"))

    def write_checkpoint(self, cell_id: str, data: bytes, config_digest: str) -> Path:
        """Keep a running cell's sampler state in its envelope naming the cell and its
        configuration's SHA-256 (:meth:`RunDir.read_checkpoint` reads it).

        Raises
        ------
        UnusableCheckpoint
            Larger than a resume would read (nothing is written).
        OSError
            The file cannot be written (the caller says so; the cell goes on).
        """
        sealed = seal_checkpoint(data, cell_id, config_digest)
        return write_bytes_atomic(inside(self.root, f"{CHECKPOINTS}/{cell_id}.pt"), sealed)

    def remove_checkpoint(self, cell_id: str) -> None:
        """Drop a cell's sampler state once the cell is stored, and ``checkpoints/`` with
        the last one (a finished run keeps no empty folder)."""
        self.remove_file(f"{CHECKPOINTS}/{cell_id}.pt")
        try:
            inside(self.root, CHECKPOINTS).rmdir()
        except OSError:  # other cells' states are there, or it is gone already
            pass

    def write_running(self, ids: set[str] | None) -> None:
        """Record the cells whose fit has started (:meth:`RunDir.running`, an empty list
        while none has); None: the run has ended, the file goes."""
        if ids is not None:
            self.write_file(RUNNING_FILE, json.dumps(sorted(ids)).encode())
        else:
            self.remove_file(RUNNING_FILE)

    def remove_file(self, rel: str) -> None:
        """Delete ``root/rel`` if it exists (a stale report figure, say); never through a
        link (:class:`LinkedPath`)."""
        inside(self.root, rel).unlink(missing_ok=True)

    def figures(self) -> list[str]:
        """Report figures on disk, as paths relative to the run directory."""
        folder = self.root / "figures"
        if not folder.is_dir():
            return []
        return sorted(f"figures/{p.name}" for p in folder.glob("*.png"))

    def clear_cells(self) -> None:
        """Delete every stored cell and saved sampler state (``zoo run --fresh``); never
        through a link."""
        for name in (CELLS, CHECKPOINTS):
            folder = inside(self.root, name)
            if folder.is_dir():
                shutil.rmtree(folder)
