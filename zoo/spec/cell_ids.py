"""Cell ids: a readable slug of the axes and a hash of the cell's configuration.

A cell id is a readable prefix (method and axis values, at most :data:`MAX_SLUG` characters)
and a hash of the cell's configuration written without defaults, together with
:data:`SPEC_VERSION`: a field added later at its default leaves every id unchanged, and a
change of what the ids mean bumps the version (recorded in a run's ``spec.yaml``). Data read
from files of the user (a CSV, a directory of IDX files) enters the hash as the SHA-256 of
the files' bytes, not their path (:func:`id_config`), so a moved checkout keeps its ids.
No torch import here.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_ID", "MAX_SLUG", "SPEC_VERSION", "cell_id", "id_config"]

#: Version of the cell-id rule, hashed into every cell id.
SPEC_VERSION = 2

#: Most characters of the readable part of a cell id (the hash follows it).
MAX_SLUG = 80

#: Most bytes (= characters: ids are ASCII) of a cell id: slug, ``_`` and 12 hex digits.
MAX_ID = MAX_SLUG + 1 + 12


def id_config(config: dict[str, Any], data: Any) -> dict[str, Any]:
    """What a cell id hashes: :meth:`zoo.spec.sweep.Cell.config`, with data files named by their contents.

    A data section read from files of the user (``content_file``: ``csv``'s ``path``,
    ``idx``'s ``dir``) enters as the SHA-256 of the files' bytes instead of their absolute
    path, so a moved checkout keeps its cell ids and changed data gets new ones. Files that
    cannot be read keep the path (the data checks then say what is wrong with them).
    """
    field = getattr(type(data), "content_file", None)
    section = config.get("data")
    if field is None or not isinstance(section, dict) or field not in section:
        return config
    paths = data.content_paths()
    digests = [_file_sha256(str(p)) for p in paths]
    if not paths or None in digests:
        return config
    joined = "\n".join(digests)  # one file (CSV): its own digest, so CSV ids stay as they were
    digest = joined if len(digests) == 1 else hashlib.sha256(joined.encode()).hexdigest()
    rest = {k: v for k, v in section.items() if k != field}
    return {**config, "data": {**rest, f"{field}_sha256": digest}}


#: (path, size, mtime in ns) -> SHA-256 of the file: a sweep hashes its data file once.
_DIGESTS: dict[tuple[str, int, int], str] = {}


def _file_sha256(path: str) -> str | None:
    """The SHA-256 of the file at ``path`` (cached by size and modification time)."""
    try:
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns)
        if key not in _DIGESTS:
            digest = hashlib.sha256()
            with open(path, "rb") as fh:
                while block := fh.read(1 << 20):
                    digest.update(block)
            _DIGESTS[key] = digest.hexdigest()
    except (OSError, ValueError):
        return None
    return _DIGESTS[key]


def _slug(axes: Mapping[str, Any]) -> str:
    """The method and ``field=value`` of each axis; ``+`` is dropped (``1e+30`` reads
    ``1e30``, not ``1e-30``) and other characters than ASCII letters, digits and ``=-_.``
    become ``-``."""
    parts = [str(axes["method"])]
    for k, v in axes.items():
        if k != "method":
            parts.append(f"{k.split('.')[-1]}={v}")
    slug = "_".join(parts).replace("+", "")
    return "".join(c if c.isascii() and (c.isalnum() or c in "=-_.") else "-" for c in slug)


def cell_id(config: Mapping[str, Any], axes: Mapping[str, Any]) -> str:
    """The id of a cell with this :meth:`zoo.spec.sweep.Cell.config` and these axes.

    ``<slug>_<hash>``: the slug is the method and the axis values in ASCII (cut at
    :data:`MAX_SLUG` characters), the hash the first 12 hex digits of the SHA-256 of the
    configuration and :data:`SPEC_VERSION`. An id is ASCII and at most :data:`MAX_ID`
    bytes, so a cell's files (``<id>.json``, ``<id>.posterior.nc``, the store's temporary
    ``.<id><suffix>.<random>.tmp``) stay far below the 255 bytes of a file name.
    """
    payload = json.dumps({"spec_version": SPEC_VERSION, "config": config}, sort_keys=True)
    digest = hashlib.sha256(payload.encode()).hexdigest()[:12]
    return f"{_slug(axes)[:MAX_SLUG]}_{digest}"
