"""Reading a data file of the user within a size ceiling, decompressed by its suffix.

A data file is read whole into memory (a table, an IDX array), so its size is bounded before
it is allocated: :data:`MAX_DATA_BYTES`, far above the data sets of the zoo (the largest
shipped one, Fashion-MNIST's training images, is 47 MB decompressed; an UCI table less
than 10 MB) and below what a small machine holds. A compressed file (``.gz``, ``.bz2``,
``.xz``) is counted as it decompresses, so a small file that would inflate to gigabytes (a
decompression bomb) is refused once it passes the ceiling, not after filling the memory.
Each function takes the ceiling as a parameter, so a test can lower it.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from pathlib import Path
from typing import IO

from zoo.data.errors import DataError

__all__ = [
    "COMPRESSED",
    "MAX_DATA_BYTES",
    "READ_ERRORS",
    "open_data",
    "read_at_most",
    "read_data_file",
    "too_large",
]

#: The most bytes a data file may hold (decompressed): 1 GiB.
MAX_DATA_BYTES = 1 << 30

#: File suffix -> opener of a compressed data file.
COMPRESSED = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}

#: What a damaged compressed file raises while it is read.
READ_ERRORS = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)

#: Bytes decompressed at a time while the total is counted.
_CHUNK = 1 << 20


def open_data(path: Path) -> IO[bytes]:
    """``path`` opened for reading bytes, decompressed if its suffix says so."""
    opener = COMPRESSED.get(path.suffix.lower())
    return opener(path, "rb") if opener is not None else open(path, "rb")  # noqa: SIM115


def read_at_most(fh: IO[bytes], n: int) -> bytearray:
    """Up to ``n`` bytes of ``fh``, read in chunks into one buffer (no copy to join them; a
    short read is the end of the file)."""
    buf = bytearray()
    while len(buf) < n:
        part = fh.read(min(_CHUNK, n - len(buf)))
        if not part:
            break
        buf += part
    return buf


def too_large(where: str, path: Path, limit: int) -> DataError:
    """The error of a data file over ``limit`` bytes; ``where`` starts the message."""
    packed = " decompressed" if path.suffix.lower() in COMPRESSED else ""
    return DataError(
        f"{where}{path}: more than {limit:,} bytes{packed}; a data file is read into "
        f"memory and may hold at most {limit:,} bytes: give a smaller file (a subset of the "
        "rows)"
    )


def read_data_file(path: Path, where: str, limit: int = MAX_DATA_BYTES) -> bytearray:
    """The bytes of the data file ``path``, decompressed, at most ``limit`` of them.

    Parameters
    ----------
    path : Path
        The file; ``.gz``, ``.bz2`` and ``.xz`` files are decompressed.
    where : str
        What starts a message (the spec field, e.g. ``"data.path: "``).
    limit : int
        The ceiling in bytes (decompressed).

    Raises
    ------
    DataError
        If the file cannot be read, does not decompress (truncated or corrupt), or holds
        more than ``limit`` bytes; a plain file's size is checked before it is read.
    """
    try:
        if path.suffix.lower() not in COMPRESSED and path.stat().st_size > limit:
            raise too_large(where, path, limit)
        with open_data(path) as fh:
            raw = read_at_most(fh, limit + 1)
    except DataError:
        raise
    except READ_ERRORS as e:
        why = getattr(e, "strerror", None) or e
        damaged = isinstance(
            e, EOFError | ValueError | zlib.error | lzma.LZMAError | gzip.BadGzipFile
        )
        fix = "; the file is truncated or corrupt: get it again" if damaged else ""
        raise DataError(f"{where}{path}: cannot be read ({why}){fix}") from None
    if len(raw) > limit:
        raise too_large(where, path, limit)
    return raw
