"""Seeded data sets: a spec's data section -> :class:`Dataset` of float32/int64 NumPy arrays.

Dependency rule: this package imports :mod:`zoo.spec` (its section classes), NumPy and
the libraries that ship data (scikit-learn, pandas) and nothing else of ``zoo``; torch only
inside :meth:`Dataset.to_torch`, where the cell's runtime makes the tensors. The UCI tables
are vendored under ``zoo/data/tables/`` (sources and licences in its README).

Bad data is one error type, :class:`DataError` (a ``ValueError``; :class:`DataFilesMissing`
is one), whose message names the spec field, the file, and the line, column or item.
:func:`load` checks every data set it returns (:func:`zoo.data.checks.check_dataset`) after
the loader has checked its files; :func:`check` runs the same, for ``zoo validate`` and
before ``zoo run``.

Add a data set: write its section in :mod:`zoo.spec.sections.data` (and add it to the
``DataSpec`` union), write a loader ``(section, seed) -> Dataset`` in a module of this
package (raising :class:`DataError` for files it cannot use), and register it in
:data:`LOADERS`. ``tests/test_conformance_tables.py`` fails until the entry is there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zoo.data.checks import MIN_TRAIN_ROWS, check_dataset
from zoo.data.csv import load_csv
from zoo.data.dataset import Dataset, TensorMaker, TorchData
from zoo.data.errors import DataError, DataFilesMissing
from zoo.data.holdout import hold_out_class
from zoo.data.idx import load_idx
from zoo.data.sklearn_sets import load_digits, load_two_moons
from zoo.data.splits import hold_out_validation
from zoo.data.teacher import load_teacher
from zoo.data.uci import load_uci
from zoo.spec.base import registered
from zoo.spec.sections.data import CsvData, DigitsData, IdxData, TeacherData, TwoMoonsData, UciData

__all__ = [
    "LOADERS",
    "MIN_TRAIN_ROWS",
    "SPLITS_VALIDATION",
    "DataError",
    "DataFilesMissing",
    "Dataset",
    "TensorMaker",
    "TorchData",
    "check",
    "describe",
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

#: Data sections whose loader applies ``validation_fraction`` itself, before it standardizes.
SPLITS_VALIDATION: frozenset[type] = frozenset({UciData})


def describe(section: Any, seed: int) -> str:
    """Where a data set comes from, for messages: its file, directory or name, and the seed."""
    for field in ("path", "dir", "name"):
        value = getattr(section, field, None)
        if isinstance(value, str):
            return f"data.{field}: {value} (seed {seed})"
    return f"data.kind: {getattr(section, 'kind', type(section).__name__)} (seed {seed})"


def load(section: Any, seed: int) -> Dataset:
    """The data set of data section ``section``, seeded by ``seed`` unless it has its own.

    Raises
    ------
    TypeError
        If no loader is registered for the section's class.
    DataError
        If the data cannot be trained on (:class:`DataFilesMissing` if its files are not
        there); the message names the file and the line, column or item.

    Notes
    -----
    A section with ``holdout_class: k`` (digits, IDX) gets the loader's data set without
    class ``k``, whose images become ``x_ood`` (:func:`zoo.data.holdout.hold_out_class`).
    A section with ``validation_fraction`` (a tuning cell of the spec's ``tune``) gets a
    part of its training rows as its test part (:func:`zoo.data.splits.hold_out_validation`)
    unless its loader splits them itself (:data:`SPLITS_VALIDATION`).
    """
    loader = registered(LOADERS, section, "data loader", "zoo.data.LOADERS")
    ds = loader(section, seed)
    fraction = getattr(section, "validation_fraction", None)
    if fraction is not None and type(section) not in SPLITS_VALIDATION:
        ds = hold_out_validation(ds, fraction)
    holdout = getattr(section, "holdout_class", None)
    if holdout is not None:
        ds = hold_out_class(ds, holdout)
    check_dataset(ds, describe(section, seed))
    return ds


def check(section: Any, seed: int = 0) -> None:
    """Raise :class:`DataError` if the data of ``section`` cannot be trained on.

    Runs exactly what :func:`load` runs (the loader's file checks, then
    :func:`~zoo.data.checks.check_dataset`) and drops the data set: ``zoo validate`` and
    ``zoo run`` call it once per distinct data section, before any cell.
    """
    load(section, seed)
