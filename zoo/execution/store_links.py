"""No write through a symbolic link inside a run directory (the store's guard).

A run directory received from someone else, or one under a shared directory, may hold
links to any file of the user: a write, a truncation or a delete that followed them would
land on the link's target. :func:`inside` checks a path below the run directory before
the store writes or deletes it; :func:`check_no_links` scans the directories the store
writes before a run starts. The run directory itself may be a link: the user named it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

__all__ = ["LinkedPath", "check_no_links", "inside", "link_message"]


class LinkedPath(OSError):
    """A path inside a run directory that is a symbolic link (or not a directory where one
    is needed): zoo writes nothing through it. An :class:`OSError`, so that a cell that
    cannot be stored because of it is kept and named like one on a full disk."""


def link_message(path: Path) -> str:
    """What the user reads about a link at ``path``, with the fix."""
    return (
        f"{path} is a symbolic link; zoo writes nothing through a link in a run "
        "directory. Remove the link, or give another --out (a new directory)"
    )


def inside(root: Path, rel: str | os.PathLike[str]) -> Path:
    """``root/rel`` once no existing part of it below ``root`` is a link.

    Raises
    ------
    ValueError
        ``rel`` is absolute or climbs out of the run directory (a bug, not bad input).
    LinkedPath
        A part is a symbolic link, or a part that should be a directory is not one.
    """
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise ValueError(f"{rel!r} is not a path inside the run directory")
    path = root
    for i, part in enumerate(parts):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            break
        if stat.S_ISLNK(mode):
            raise LinkedPath(errno.ELOOP, link_message(path))
        if i < len(parts) - 1 and not stat.S_ISDIR(mode):
            raise LinkedPath(errno.ENOTDIR, f"{path} is not a directory")
    return root.joinpath(*parts)


def check_no_links(root: Path, folders: Iterable[str]) -> None:
    """Raise :class:`LinkedPath` naming the first link among the entries of ``root`` and
    of its sub-directories ``folders`` (those that exist).

    Raises
    ------
    LinkedPath
        A link (or a ``folders`` entry that is a link itself).
    OSError
        A directory cannot be read.
    """
    for folder in (root, *(inside(root, name) for name in folders)):
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.is_symlink():
                raise LinkedPath(errno.ELOOP, link_message(Path(entry.path)))
