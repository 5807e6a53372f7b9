"""The run directory and its reader, :class:`RunDir` (what reports and studies get).

A run directory holds::

    spec.yaml               the resolved spec, first line ``# bnn-zoo spec_version: N``
    cells/<cell id>.json    one record per cell: axes, config, status, error, metrics, time_s
    cells/<cell id><suffix> the cell's artifacts (``.nc`` posterior, ``.ktied.npz``, ...)
    results.csv summary.csv report.md report.html figures/*.png

It is written by :class:`zoo.execution.store.RunStore` only, atomically; a cell's record is
written after its artifacts: a record on disk means the cell is complete.

``spec_version`` is :data:`zoo.spec.sweep.SPEC_VERSION` of the code that wrote the directory. Cell
ids depend on it, so a directory of another version cannot be resumed or reported: its
cells are computed again by running the spec into a fresh directory.

A record lists the size and SHA-256 of each artifact (``files``). A record that cannot be
read, lacks its fields, names another cell, or whose artifacts are missing, of another
size or of another SHA-256 is *damaged*: its cell counts as pending (a run computes it again) and
:meth:`RunDir.problems` says which file is bad; readers never see it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from zoo.execution.checkpoint_file import UnusableCheckpoint, open_checkpoint, read_checkpoint_file
from zoo.execution.store_links import LinkedPath, inside
from zoo.spec.sweep import SPEC_VERSION

__all__ = [
    "CELLS",
    "CHECKPOINTS",
    "LOCK_FILE",
    "DamagedRunDir",
    "RECORD",
    "RUNNING_FILE",
    "SPEC_FILE",
    "SPEC_VERSION",
    "VERSION_LINE",
    "OutdatedRunDir",
    "RunDir",
    "RunDirBusy",
    "RunDirError",
    "artifact_digest",
    "busy_message",
    "check_version",
    "default_run_dir",
]

SPEC_FILE = "spec.yaml"
LOCK_FILE = ".zoo.lock"
#: The cells whose fit has started, written by the ``zoo run`` that holds the lock (a JSON
#: list of cell ids); ``zoo status`` tells them from the queued ones.
RUNNING_FILE = ".zoo.running.json"
CELLS = "cells"
#: A running cell's saved sampler state (``checkpoints/<cell id>.pt``), gone once it is stored.
CHECKPOINTS = "checkpoints"
RECORD = ".json"
#: The kernel's table of file locks (Linux): one line per lock, ``N: FLOCK ADVISORY WRITE
#: PID MAJ:MIN:INODE START END``.
PROC_LOCKS = Path("/proc/locks")
#: The first line of a stored spec.yaml: ``# bnn-zoo spec_version: N``.
VERSION_LINE = re.compile(r"^#\s*bnn-zoo spec_version:\s*(\d+)\s*$")


def default_run_dir(name: str, root: Path = Path("runs")) -> Path:
    """``runs/<spec name>/<timestamp>``: where a run goes without ``--out``."""
    return root / name / datetime.now().strftime("%Y%m%d-%H%M%S")


def artifact_digest(data: bytes) -> dict[str, Any]:
    """What a record lists of an artifact: its size and SHA-256."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _file_sha256(path: Path) -> str | None:
    """The SHA-256 of a file's bytes, read in blocks; None when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _version_of(text: str) -> int | None:
    """The spec_version recorded in a spec.yaml text, None when there is none."""
    for line in text.splitlines()[:5]:
        if m := VERSION_LINE.match(line):
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

    def running(self) -> set[str] | None:
        """The cell ids that the run holding this directory has started and not yet
        stored; None when no run keeps that list (a Ray run, whose cells report no
        progress, or a run of an older bnn-zoo), and for a link or a damaged file.
        Meaningful only while a ``zoo run`` holds the lock."""
        path = self.root / RUNNING_FILE
        try:
            if path.is_symlink():
                return None
            ids = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return {i for i in ids if isinstance(i, str)} if isinstance(ids, list) else None

    def spec_text(self) -> str:
        """The stored spec.yaml text."""
        return self.spec_path.read_text()

    def spec_damage(self) -> str | None:
        """Why the stored spec.yaml cannot be read as a spec; None when it can (or is absent).

        Not readable, not UTF-8 text, not YAML (with the line), or not a mapping: a damaged
        file, not one from an older bnn-zoo (whose spec.yaml is YAML all the same).
        """
        try:
            data = self.spec_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            return f"cannot be read ({e.strerror or e})"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            return f"is not UTF-8 text (at byte {e.start} of {len(data)})"
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            problem = getattr(e, "problem", None) or type(e).__name__
            return f"is not valid YAML{where} ({problem})"
        if not isinstance(doc, dict):
            return "does not hold a spec (a YAML mapping of its sections)"
        return None

    def spec_version(self) -> int | None:
        """The recorded spec_version; None for a directory written before versions existed."""
        return _version_of(self.spec_text())

    def record_path(self, cell_id: str) -> Path:
        """``cells/<cell id>.json``."""
        return self.cells_dir / f"{cell_id}{RECORD}"

    def checkpoint_path(self, cell_id: str) -> Path:
        """``checkpoints/<cell id>.pt``: the sampler state of a cell not yet stored."""
        return self.root / CHECKPOINTS / f"{cell_id}.pt"

    def read_checkpoint(self, cell_id: str, config_digest: str) -> bytes | None:
        """The saved sampler state of ``cell_id`` (:mod:`zoo.inference.checkpoint`), or None
        when it has none; never through a link, only from a regular file of a bounded size
        (:mod:`zoo.execution.checkpoint_file`).

        Parameters
        ----------
        cell_id, config_digest : str
            The cell and the SHA-256 of its configuration
            (:func:`~zoo.execution.checkpoint_file.config_sha256`), which the file must name.

        Raises
        ------
        UnusableCheckpoint
            Naming the file and why it is not resumed (the cell starts over).
        """
        rel = f"{CHECKPOINTS}/{cell_id}.pt"
        try:
            inside(self.root, rel)
            data = read_checkpoint_file(self.checkpoint_path(cell_id))
            return None if data is None else open_checkpoint(data, cell_id, config_digest)
        except LinkedPath as e:
            raise UnusableCheckpoint(f"{rel}: {e.strerror}") from None
        except UnusableCheckpoint as e:
            raise UnusableCheckpoint(f"{rel}: {e}") from None

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
        if isinstance(info, dict) and artifact_digest(data) != {**artifact_digest(data), **info}:
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
        artifacts (``files``) exist with their recorded sizes and SHA-256.
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
            want = info.get("sha256")
            if want is not None and _file_sha256(path) != want:
                return (
                    f"lists {path.name}, whose contents differ from what was stored (its "
                    "SHA-256 differs: damaged)"
                )
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

    def holder(self) -> int | None:
        """The pid of the zoo process that holds this directory's lock now, or None.

        A ``zoo run`` (or ``zoo report``) holds an exclusive ``flock`` on ``.zoo.lock``
        (the kernel drops it when the process dies, even by SIGKILL), and the file keeps its
        pid. The lock is looked up in :data:`PROC_LOCKS` rather than probed, so that asking
        can never make a starting run find the directory busy; where that table is missing
        (not Linux) the answer is None. Returns 0 when the lock is held but the file names
        no pid.
        """
        try:
            fd = os.open(self.root / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
        try:
            table = PROC_LOCKS.read_text().splitlines()
        except OSError:
            return None
        for line in table:
            fields = line.split()
            if len(fields) < 6 or fields[1] != "FLOCK":  # "->" marks a waiter, not a holder
                continue
            try:
                major, minor, inode = fields[5].split(":")
                held = (int(major, 16), int(minor, 16), int(inode))
            except ValueError:
                continue
            if held == want:
                return self.lock_owner() or 0
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
        return bool(head) and VERSION_LINE.match(head[0]) is not None


class RunDirError(ValueError):
    """A run directory that cannot be used as asked (not a run directory, not writable)."""


class RunDirBusy(RunDirError):
    """Another zoo run holds the run directory's lock."""


def busy_message(root: Path, pid: int | None, then: str = "or give another --out") -> str:
    """What a command refused because another zoo process (``pid``) holds ``root`` says;
    ``then`` is the way on after waiting."""
    who = f"another zoo run (pid {pid})" if pid else "another zoo run"
    return (
        f"{who} is using {root}; wait for it to end (`zoo status {root}` shows its progress) {then}"
    )


class OutdatedRunDir(RunDirError):
    """A run directory written with another spec_version: its cell ids do not match."""


class DamagedRunDir(RunDirError):
    """A run directory whose spec.yaml is damaged (:meth:`RunDir.spec_damage`)."""


def check_version(run: RunDir, *, damaged_ok: bool = False) -> None:
    """Raise :class:`OutdatedRunDir` unless ``run`` is new or has this spec_version.

    A damaged spec.yaml raises :class:`DamagedRunDir` (saying that the cells are kept and
    how to write it again); with ``damaged_ok`` (a run given its spec, which writes
    spec.yaml anew) it passes: the stored cells whose ids match are kept, the others are
    computed.
    """
    if not run.is_run_dir():
        return
    why = run.spec_damage()
    if why is not None:
        if damaged_ok:
            return
        raise DamagedRunDir(
            f"{run.spec_path} is damaged: it {why}. The cells stored beside it are kept: "
            f"run the spec this directory was made from into it (zoo run SPEC --out "
            f"{run.root}, with the same --set options) to write spec.yaml again and resume, "
            "or run the spec into a fresh --out"
        )
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
