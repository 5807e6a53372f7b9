"""UCI regression data sets, vendored as compressed CSV tables under ``zoo/data/tables/``.

- :func:`load_uci`: Boston housing (506 x 13) and concrete compressive strength (1030 x 8),
  the same numbers as R's ``MASS::Boston`` and ``modeldata::concrete`` (and the UCI files),
  split by the UCI protocol: split ``k`` is a random 90/10 train/test permutation seeded by
  ``k`` alone, so every method and seed of a sweep sees the same split ``k``; inputs and
  targets are standardized on the training part.
- The tables, their sources, licences (Boston: PDDL-1.0 / CC0-1.0 from StatLib via stdlib;
  concrete: MIT from modeldata, after Yeh 1998, CC BY 4.0 at UCI) and checksums are in
  ``zoo/data/tables/README.md``. Each file is checked against its SHA-256 when it is read.
- That protocol lives in :mod:`zoo.data.splits` (shared with the ``csv`` kind); the
  teacher data of Trippe & Turner (2018) in :mod:`zoo.data.teacher`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from zoo.data.dataset import Dataset
from zoo.data.errors import DataError
from zoo.data.splits import (
    check_split_sizes,
    split_indices,
    standardize_split,
    validation_indices,
)
from zoo.data.table import read_table, read_text
from zoo.spec.sections.data import UciData

__all__ = ["TABLES_DIR", "UCI_SETS", "UciTable", "load_uci", "uci_arrays", "uci_frame"]

#: Where the vendored tables are (package data of ``zoo.data``).
TABLES_DIR = Path(__file__).resolve().parent / "tables"


class UciTable(NamedTuple):
    """A vendored table: its file, target column, UCI shape and the SHA-256 of its CSV text."""

    file: str
    target: str
    shape: tuple[int, int]  # rows, inputs
    sha256: str  # of the decompressed CSV text


#: name -> its vendored table.
UCI_SETS: dict[str, UciTable] = {
    "boston": UciTable(
        "boston.csv.gz",
        "medv",
        (506, 13),
        "dabe774132cf1f35464a048f213b1d4f39f64ad9efb1157d64d457702f72e19b",
    ),
    "concrete": UciTable(
        "concrete.csv.gz",
        "compressive_strength",
        (1030, 8),
        "431e0b0b8bab99794c905cb45440a089c32c8f6d14bfd2602d1449727db92222",
    ),
}


def uci_arrays(name: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """The inputs ``(n, d)``, target ``(n,)`` (float64) and input names of UCI set ``name``.

    Raises
    ------
    DataError
        If ``name`` is unknown, or the vendored file is missing, changed (its checksum) or
        not of the UCI shape.
    """
    if name not in UCI_SETS:
        raise DataError(f"data.name: unknown UCI set {name!r}; use one of {sorted(UCI_SETS)}")
    entry = UCI_SETS[name]
    path = TABLES_DIR / entry.file
    digest = hashlib.sha256(read_text(path, "data.name").encode()).hexdigest()
    if digest != entry.sha256:
        raise DataError(
            f"data.name: {path} is not the table shipped with bnn-zoo (SHA-256 "
            f"{digest[:12]}..., expected {entry.sha256[:12]}...); reinstall "
            "bnn-zoo"
        )
    t = read_table(path, entry.target, field="data.name")
    if t.x.shape != entry.shape:
        raise DataError(
            f"data.name: {path} is {t.x.shape[0]} x {t.x.shape[1]}, expected "
            f"the UCI shape {entry.shape[0]} x {entry.shape[1]}"
        )
    return t.x, t.y, t.inputs


def uci_frame(name: str) -> Any:
    """The table of UCI set ``name`` as a pandas frame: the input columns, then the target.

    Raises
    ------
    DataError
        As :func:`uci_arrays`.
    """
    import pandas as pd  # pandas is slow to import: only when used

    x, y, inputs = uci_arrays(name)
    return pd.DataFrame(np.column_stack([x, y]), columns=[*inputs, UCI_SETS[name].target])


def load_uci(spec: UciData, seed: int) -> Dataset:
    """UCI set ``spec.name``, split ``spec.split`` (90/10 by default), standardized on train.

    ``seed`` is not used: the split index alone fixes the split, so all seeds and methods of
    a sweep share it. With ``validation_fraction`` (a tuning cell) the training part is
    split again (:func:`~zoo.data.splits.validation_indices`) and the held-out part takes
    the place of the test part, which is not used; the scaling is computed on the reduced
    training part only, so nothing of the validation part leaks into it.
    """
    x, y, _ = uci_arrays(spec.name)
    check_split_sizes(len(x), spec.test_fraction, f"data.name: {spec.name}")
    train, test = split_indices(len(x), spec.split, spec.test_fraction)
    if spec.validation_fraction is not None:
        train, test = validation_indices(train, spec.validation_fraction)
    return standardize_split(x, y, train, test, spec.standardize)
