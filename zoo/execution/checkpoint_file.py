"""The file that keeps a running cell's sampler state: ``checkpoints/<cell id>.pt``.

The sampler's bytes (:mod:`zoo.inference.checkpoint`) are kept inside an envelope that says
whose they are::

    bnn-zoo checkpoint 1
    {"cell_id": "...", "config_sha256": "...", "sha256": "...", "size": N}
    <the N bytes>

A resume takes the bytes only from a regular file (opened with ``O_NOFOLLOW`` and
``O_NONBLOCK``, then ``fstat``: a link, a FIFO or a device is never read, so nothing hangs)
of at most :func:`max_checkpoint_bytes`, whose header names this cell and the SHA-256 of its
configuration, and whose bytes have the size and SHA-256 the header gives. Anything else is
:class:`UnusableCheckpoint`: the run says why in a line and the cell starts over;
``zoo status`` uses the same test before it says that a resume continues from a file.

The SHA-256 finds damage and edits made without this format (another cell's file renamed
into place, a counter changed inside the bytes); it is not a signature: whoever can write
a run directory can write its cells' records too.

Dependency rule: the standard library only (``zoo status`` and the lock check of ``zoo run``
read it before torch is imported).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "MAGIC",
    "UnusableCheckpoint",
    "config_sha256",
    "max_checkpoint_bytes",
    "open_checkpoint",
    "read_checkpoint_file",
    "seal_checkpoint",
]

#: The first line of a checkpoint file (its format's version is the number).
MAGIC = b"bnn-zoo checkpoint 1\n"
#: The most bytes the header line may have.
_HEADER_MAX = 4096


class UnusableCheckpoint(ValueError):
    """A checkpoint file that is not resumed; the message says why (after the file name)."""


def config_sha256(config: Mapping[str, Any]) -> str:
    """The SHA-256 of a cell's configuration (:meth:`zoo.spec.sweep.Cell.config`) as
    canonical JSON: what a checkpoint must name besides its cell id."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def max_checkpoint_bytes() -> int:
    """The largest checkpoint file read: half this machine's memory (a restore holds the
    file's bytes and the tensors made from them), 16 GiB where that is unknown."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        total = 0
    return total // 2 if total > 0 else 16 << 30


def seal_checkpoint(payload: bytes, cell_id: str, config_digest: str) -> bytes:
    """``payload`` in its envelope for ``cell_id`` (module docstring).

    Raises
    ------
    UnusableCheckpoint
        The file would be larger than :func:`max_checkpoint_bytes` (no resume could read it).
    """
    header = {
        "cell_id": cell_id,
        "config_sha256": config_digest,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "size": len(payload),
    }
    data = MAGIC + json.dumps(header, sort_keys=True).encode("utf-8") + b"\n" + payload
    if len(data) > max_checkpoint_bytes():
        raise UnusableCheckpoint(
            f"it would have {len(data)} bytes, more than a resume reads on this machine "
            f"({max_checkpoint_bytes()}: half its memory)"
        )
    return data


def open_checkpoint(data: bytes, cell_id: str, config_digest: str) -> bytes:
    """The sampler's bytes inside a checkpoint file's ``data``.

    Raises
    ------
    UnusableCheckpoint
        Not this format, another cell's or configuration's, or bytes of another size or
        SHA-256 than its header gives.
    """
    if not data.startswith(MAGIC):
        raise UnusableCheckpoint("it is not a checkpoint of this bnn-zoo (no header)")
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + _HEADER_MAX)
    try:
        header = json.loads(data[len(MAGIC) : end]) if end > 0 else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise UnusableCheckpoint("its header is damaged")
    other = header.get("cell_id")
    if other != cell_id:
        plain = isinstance(other, str) and other.isascii() and other.isprintable()
        shown = other if plain and len(other) <= 200 else "a name not shown"
        raise UnusableCheckpoint(f"it is the checkpoint of another cell ({shown})")
    if header.get("config_sha256") != config_digest:
        raise UnusableCheckpoint("it was saved for another configuration of this cell")
    payload = data[end + 1 :]
    if header.get("size") != len(payload):
        raise UnusableCheckpoint(
            f"it holds {len(payload)} bytes where its header says {header.get('size')} (truncated?)"
        )
    if header.get("sha256") != hashlib.sha256(payload).hexdigest():
        raise UnusableCheckpoint("its bytes differ from those saved (their SHA-256 differs)")
    return payload


def read_checkpoint_file(path: Path) -> bytes | None:
    """The bytes of the checkpoint file at ``path``; None when there is none.

    Only a regular file is read (``O_NOFOLLOW``, ``O_NONBLOCK``, ``fstat``), of at most
    :func:`max_checkpoint_bytes`.

    Raises
    ------
    UnusableCheckpoint
        A link, not a regular file (a FIFO, a device, a directory), too large, or unreadable.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnusableCheckpoint("it is a symbolic link") from None
        raise UnusableCheckpoint(f"it cannot be read ({e.strerror or e})") from None
    limit = max_checkpoint_bytes()
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UnusableCheckpoint("it is not a regular file")
        if st.st_size > limit:
            raise UnusableCheckpoint(
                f"it has {st.st_size} bytes, more than a resume reads on this machine "
                f"({limit}: half its memory)"
            )
        try:
            data = fh.read(limit + 1)
        except OSError as e:
            raise UnusableCheckpoint(f"it cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise UnusableCheckpoint(f"it grew past {limit} bytes while being read")
    return data
