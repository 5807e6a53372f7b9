"""Delimited text tables, read strictly: every value a finite number, or a :class:`DataError`.

A table is a text file with a header row of unique column names; one column is the target,
every other column an input. :func:`read_table` refuses what pandas would let through
silently or turn into a raw error at run time, each with a message naming the file, the
line and the column (the first offending rows, and how many there are):

- a file that is missing, empty, binary (a NUL byte), not UTF-8, a ``.gz`` / ``.bz2`` /
  ``.xz`` file that does not decompress, or one over the ceiling of
  :data:`~zoo.data.files.MAX_DATA_BYTES` (decompressed);
- a row with more fields than the header (pandas' tokenizer error, with its line);
- a header with an unnamed or a duplicate column (pandas would rename ``a`` to ``a.1``), or
  without the target column;
- an input or regression target that is empty, not a number (``"cat"``), NaN, infinite or
  beyond the float32 range;
- a class label that is not an integer ``0..K-1`` (NaN, ``"cat"``, ``0.5``, ``-1``), a class
  in ``0..K-1`` without a row (labels ``1..K`` would give an empty class 0), or a single
  class. Labels written as ``2.0`` are read as 2; no other mapping is made, so class ``k``
  of a result is the label ``k`` of the file.

Blank lines are skipped; line numbers are the file's own (the header is line 1). A message
names the file, the line and the column, never a cell's content; column names appear only
once the header holds the target column (a file that is not the table the spec meant, a
system file say, is not echoed by the error that refuses it).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from zoo.data.checks import class_count, list_items
from zoo.data.errors import DataError, DataFilesMissing
from zoo.data.files import MAX_DATA_BYTES, read_data_file
from zoo.spec.errors import did_you_mean

__all__ = ["Table", "read_table", "read_text"]

_DELIMITERS = (",", ";", "\t", "|")
#: Networks compute in float32 (or float64): a larger value is infinite there, and squaring
#: it in the training standard deviation overflows even float64.
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: Labels above this cannot be classes (every class 0..K-1 needs a row).
_MAX_LABEL = 2**31 - 1


class Table(NamedTuple):
    """The rows of a table that can be trained on.

    Attributes
    ----------
    x : ndarray, float64, shape (n, d)
        The input columns, in file order.
    y : ndarray, shape (n,)
        float64 regression targets, or int64 class labels ``0..n_classes-1``.
    inputs : tuple of str
        The names of the input columns.
    target : str
        The name of the target column.
    lines : ndarray of int, shape (n,)
        The file line of each row (the header is line 1).
    n_classes : int
        Number of classes (every one has a row); 0 for regression.
    """

    x: np.ndarray
    y: np.ndarray
    inputs: tuple[str, ...]
    target: str
    lines: np.ndarray
    n_classes: int


def read_text(path: str | Path, field: str = "data.path", limit: int = MAX_DATA_BYTES) -> str:
    """The text of ``path`` (decompressed by its suffix), refusing what is not a text table.

    At most ``limit`` bytes (decompressed) are read (:func:`zoo.data.files.read_data_file`).

    Raises
    ------
    DataFilesMissing
        If there is no such file.
    DataError
        If it cannot be read, does not decompress, holds more than ``limit`` bytes, is
        empty, binary, or not UTF-8.
    """
    path = Path(path)
    if not path.is_file():
        raise DataFilesMissing(f"{field}: {path} does not exist (or is not a file)")
    raw = read_data_file(path, f"{field}: ", limit)
    if not raw.strip():
        raise DataError(f"{field}: {path} is empty; give a table with a header row")
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise DataError(
            f"{field}: {path} is a binary file (a NUL byte at byte {nul}), not delimited text"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{field}: {path} is not UTF-8 text (byte {e.start}: 0x{raw[e.start]:02x}); save "
            "it as UTF-8"
        ) from None


def _parse(text: str, path: Path, delimiter: str, field: str) -> np.ndarray:
    """The cells of ``text`` as an object array of stripped strings, one row per line."""
    import pandas as pd  # pandas is slow to import: only when a table is read

    try:
        df = pd.read_csv(
            io.StringIO(text),
            sep=delimiter,
            header=None,
            dtype=str,
            keep_default_na=False,
            skip_blank_lines=False,
        )
    except pd.errors.ParserError as e:
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e))
        if m:
            want, line, got = m.groups()
            raise DataError(
                f"{field}: {path}:{line}: {got} fields, but the header has {want} "
                f"(delimiter {delimiter!r})"
            ) from None
        m = re.search(r"EOF inside string starting at row (\d+)", str(e))
        if m:
            line = int(m.group(1)) + 1
            raise DataError(f"{field}: {path}:{line}: a quoted field is never closed") from None
        raise DataError(f"{field}: {path}: not a table: {str(e).strip()}") from None
    except ValueError as e:  # e.g. a delimiter pandas cannot use
        raise DataError(f"{field}: {path}: not a table with delimiter {delimiter!r}: {e}") from None
    cells = df.to_numpy(dtype=object)
    return np.vectorize(lambda v: str(v).strip(), otypes=[object])(cells) if cells.size else cells


def _numbers(cells: np.ndarray) -> np.ndarray:
    """The cells as float64, NaN where a cell is not a number."""
    import pandas as pd

    cols = [pd.to_numeric(pd.Series(c), errors="coerce").to_numpy(np.float64) for c in cells.T]
    return np.column_stack(cols)


def _describe(raw: str, value: float, label: bool) -> str:
    """What is wrong with a cell, without its content (the line and column say where)."""
    if raw == "":
        return "empty"
    if np.isnan(value):
        return "NaN" if raw.lower() in ("nan", "-nan", "+nan") else "not a number"
    if np.isinf(value):
        return "infinite"
    if abs(value) > _FLOAT32_MAX:
        return "beyond the float32 range"
    if label and value != np.round(value):
        return "not an integer class label"
    if label and value < 0:
        return "a negative class label"
    if label and value > _MAX_LABEL:
        return "too large for a class label"
    return "not usable"  # pragma: no cover - only bad values are described


def read_table(
    path: str | Path,
    target: str,
    *,
    task: str = "regression",
    delimiter: str = ",",
    field: str = "data.path",
) -> Table:
    """The inputs and target of a delimited table with a header row, checked value by value.

    Parameters
    ----------
    path : str or Path
        The file; ``.gz``, ``.bz2`` and ``.xz`` files are decompressed.
    target : str
        The name of the target column; every other column is an input.
    task : {"regression", "classification"}
        Regression targets must be finite numbers; class labels the integers ``0..K-1``
        with a row for every class and at least 2 classes.
    delimiter : str
        Field delimiter.
    field : str
        The spec field the file came from, for the messages.

    Raises
    ------
    DataFilesMissing
        If there is no such file.
    DataError
        For anything that cannot be trained on (see the module docstring); the message
        names the file, the line and the column.
    """
    path = Path(path)
    cells = _parse(read_text(path, field), path, delimiter, field)
    lines = np.arange(1, len(cells) + 1)
    keep = (cells != "").any(axis=1) if cells.size else np.zeros(0, bool)
    cells, lines = cells[keep], lines[keep]
    if len(cells) == 0:
        raise DataError(f"{field}: {path} has no header row")
    names = [str(v) for v in cells[0]]
    hline, cells, lines = int(lines[0]), cells[1:], lines[1:]
    _check_header(names, path, hline, target, delimiter, field)
    if len(cells) == 0:
        raise DataError(f"{field}: {path} has a header but no rows")
    values = _numbers(cells)
    j_target = names.index(target)
    label = task == "classification"
    _check_values(values, cells, lines, names, j_target, label, f"{field}: {path}")
    x = np.delete(values, j_target, axis=1)
    y = values[:, j_target]
    n_classes = 0
    if label:
        y = y.astype(np.int64)
        n_classes = class_count(y, f"{field}: {path}: column {target!r}")
    inputs = tuple(n for n in names if n != target)
    return Table(x, y, inputs, target, lines, n_classes)


def _check_header(
    names: list[str], path: Path, hline: int, target: str, delimiter: str, field: str
) -> None:
    """Every column named, no name twice, the target among them and at least one input.

    Raises
    ------
    DataError
        Naming the header's line and the column.
    """
    where = f"{field}: {path}:{hline}"
    unnamed = [j + 1 for j, n in enumerate(names) if n == ""]
    if unnamed:
        raise DataError(
            f"{where}: column {unnamed[0]} of the header has no name; name every "
            "column (an unnamed first column is often an index written by "
            "pandas: write the file with index=False)"
        )
    dups = {n: [j + 1 for j, m in enumerate(names) if m == n] for n in names if names.count(n) > 1}
    if dups:
        what = "; ".join(" and ".join(map(str, js)) for js in dups.values())
        raise DataError(
            f"{where}: columns {what} of the header have the same name; column names must be unique"
        )
    if target not in names:
        hint = ""
        if len(names) == 1:
            seps = [d for d in _DELIMITERS if d != delimiter and d in names[0]]
            hint = f" (one column: is the delimiter {seps[0]!r}?)" if seps else ""
        raise DataError(
            f"data.target: {path}:{hline}: has no column {target!r} ({len(names)} "
            f"column{'s' * (len(names) != 1)} in the header, delimiter {delimiter!r})"
            f"{hint}{did_you_mean(target, names)}"
        )
    if len(names) < 2:
        raise DataError(f"{where}: the only column is the target {target!r}; no inputs")


def _check_values(
    values: np.ndarray,
    cells: np.ndarray,
    lines: np.ndarray,
    names: list[str],
    j_target: int,
    label: bool,
    where: str,
) -> None:
    """Every value a finite number within float32's range and, for class labels
    (``label``), the target column's values integers in ``0..``:data:`_MAX_LABEL`.

    Raises
    ------
    DataError
        Listing per column the lines that cannot be used and why (``where`` first).
    """
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(values) <= _FLOAT32_MAX)  # NaN, infinite, or beyond float32
    if label:
        y = values[:, j_target]
        with np.errstate(invalid="ignore"):
            bad[:, j_target] |= (y != np.round(y)) | (y < 0) | (y > _MAX_LABEL)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))
        out = []
        for j in np.flatnonzero(bad.any(axis=0)):
            is_label = label and j == j_target
            items = [
                f"line {lines[i]}: {_describe(cells[i, j], values[i, j], is_label)}"
                for i in np.flatnonzero(bad[:, j])
            ]
            out.append(f"  column {names[j]!r}: {list_items(items)}")
        need = (
            "inputs must be finite numbers; class labels the integers 0..K-1"
            if label
            else "inputs and targets must be finite numbers"
        )
        raise DataError(
            f"{where}: {len(rows)} of {len(cells)} rows cannot be used ({need}; fix "
            "or remove these rows):\n" + "\n".join(out)
        )
