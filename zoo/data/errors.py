"""The one error type of bad data: :class:`DataError`, and :class:`DataFilesMissing`.

Every check of :mod:`zoo.data` raises :class:`DataError` (a ``ValueError``) with a message
that names the spec field, the file, and where in it (line and column of a table, item of an
IDX file), so the command line can print it as bad input (exit 2) and a cell that meets it
fails with the same message.
"""

from __future__ import annotations

__all__ = ["DataError", "DataFilesMissing"]


class DataError(ValueError):
    """The data of a spec cannot be trained on; the message says which file, column and row."""


class DataFilesMissing(DataError, FileNotFoundError):
    """The data files of a spec are not where the spec says; the message says how to get them.

    A :class:`DataError` (so one ``except DataError`` catches every data problem) and a
    ``FileNotFoundError`` (what callers caught before).
    """
