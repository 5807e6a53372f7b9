"""What every data set must satisfy before a network is trained on it.

:func:`check_dataset` runs on the :class:`Dataset` of every loader (``zoo.data.load``, and so
``zoo validate`` and the check before ``zoo run``): finite inputs, finite regression targets,
class labels ``0..K-1``, at least :data:`MIN_TRAIN_ROWS` training rows and at least two classes
in the training split, one test row. The loaders of files check the file itself first
(:mod:`zoo.data.table`, :mod:`zoo.data.idx`) and name its lines; this check names the split
and its rows, so a split that goes wrong (a seeded subset of one class) is caught too.

Why at least 2 training rows and no more: one row has no spread (standardization divides by
the training standard deviation, a learned noise scale has nothing to fit) and cannot hold two
classes. More rows than inputs or parameters is *not* required: small data is where Bayesian
networks are studied (Trippe & Turner 2018 fit 5 points with 50 hidden units; an MNIST run may
train on a 100-image subset of 784 pixels), and the prior keeps the posterior proper.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zoo.data.dataset import Dataset
from zoo.data.errors import DataError

__all__ = ["MAX_LISTED", "MIN_TRAIN_ROWS", "check_dataset", "class_count", "list_items"]

#: The fewest training rows a data set may have (see the module docstring for why 2).
MIN_TRAIN_ROWS = 2
#: How many offending rows a message lists before it only counts the rest.
MAX_LISTED = 5


def list_items(items: Sequence[str], limit: int = MAX_LISTED) -> str:
    """``items`` joined by ``"; "``, the first ``limit`` of them and a count of the rest."""
    shown = "; ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown}; and {len(items) - limit} more"


def class_count(labels: np.ndarray, where: str) -> int:
    """The number of classes ``K`` of integer ``labels`` that must be exactly ``0..K-1``.

    Raises
    ------
    DataError
        If a label is negative, a class in ``0..K-1`` has no row (labels numbered from 1
        would leave class 0 empty), or there is only one class; the message starts with
        ``where``.
    """
    labels = np.asarray(labels)
    present = np.unique(labels)
    if len(present) and present[0] < 0:
        raise DataError(
            f"{where}: class labels must be the integers 0..K-1; found {int(present[0])}"
        )
    k = int(present[-1]) + 1 if len(present) else 0
    if len(present) < 2:
        only = f"only class {int(present[0])}" if len(present) else "no labels"
        raise DataError(f"{where}: {only}; a classifier needs at least 2 classes")
    n_missing = k - len(present)
    if n_missing:
        missing: list[int] = []  # the first few, without building range(k) (labels may be huge)
        prev = -1
        for v in present.tolist():
            missing.extend(range(prev + 1, min(v, prev + 1 + MAX_LISTED - len(missing))))
            prev = v
            if len(missing) >= MAX_LISTED:
                break
        shown = ", ".join(map(str, missing)) + (", ..." if n_missing > len(missing) else "")
        which = f"class {shown} has" if n_missing == 1 else f"classes {shown} have"
        hint = " (labels numbered from 1?)" if missing == [0] and n_missing == 1 else ""
        raise DataError(
            f"{where}: class labels must be the integers 0..K-1 with a row for every class; "
            f"the labels go up to {k - 1} but {which} no rows{hint}: renumber the "
            f"{len(present)} classes 0..{len(present) - 1}"
        )
    return k


def _nonfinite_rows(a: np.ndarray) -> np.ndarray:
    ok = np.isfinite(np.asarray(a))
    return np.flatnonzero(~ok.all(axis=tuple(range(1, ok.ndim))) if ok.ndim > 1 else ~ok)


def check_dataset(ds: Dataset, source: str) -> None:
    """Raise :class:`DataError` unless ``ds`` can be trained on; messages start with ``source``.

    Checks the shapes of every split, finite inputs (and regression targets), integer class
    labels in ``0..n_classes-1``, at least :data:`MIN_TRAIN_ROWS` training rows, at least one
    test row, and at least two classes among the training labels (a classifier trained on one
    class predicts it everywhere, and scores accuracy 1 on a test set of that class).
    """
    classify = ds.n_classes > 0
    d = ds.x_train.shape[1] if ds.x_train.ndim == 2 else None
    splits = [("train", ds.x_train, ds.y_train), ("test", ds.x_test, ds.y_test)]
    if ds.x_val is not None:
        splits.append(("validation", ds.x_val, ds.y_val))
    for name, x, y in splits:
        if x.ndim != 2 or y is None or y.shape != (len(x),) or x.shape[1] != d:
            raise DataError(
                f"{source}: the {name} split has inputs of shape {x.shape} and "
                f"targets of shape {None if y is None else y.shape}; expected "
                f"(n, {d}) and (n,)"
            )
        rows = _nonfinite_rows(x)
        if len(rows):
            raise DataError(
                f"{source}: the {name} split has non-finite inputs in rows "
                f"{list_items([str(r) for r in rows])} (of {len(x)})"
            )
        if classify:
            if not np.issubdtype(y.dtype, np.integer):
                raise DataError(f"{source}: the {name} labels are {y.dtype}, not integers")
            out = np.flatnonzero((y < 0) | (y >= ds.n_classes))
            if len(out):
                items = [f"row {i}: {int(y[i])}" for i in out]
                raise DataError(
                    f"{source}: {name} labels outside the classes "
                    f"0..{ds.n_classes - 1}: {list_items(items)}"
                )
        else:
            rows = _nonfinite_rows(y)
            if len(rows):
                raise DataError(
                    f"{source}: the {name} split has non-finite targets in rows "
                    f"{list_items([str(r) for r in rows])} (of {len(y)})"
                )
    x_ood = getattr(ds, "x_ood", None)
    if x_ood is not None and (
        x_ood.ndim != 2 or x_ood.shape[1] != d or len(x_ood) < 1 or len(_nonfinite_rows(x_ood))
    ):
        raise DataError(
            f"{source}: the held-out class has inputs of shape {x_ood.shape} "
            f"(finite, at least one row of {d} features expected)"
        )
    n, n_test = len(ds.x_train), len(ds.x_test)
    if n < MIN_TRAIN_ROWS:
        raise DataError(
            f"{source}: {n} training row{'s' * (n != 1)} ({n_test} held out for "
            f"testing); at least {MIN_TRAIN_ROWS} are needed: give more rows or "
            "hold out fewer"
        )
    if n_test < 1:
        raise DataError(f"{source}: no test rows; hold out at least one")
    if classify:
        present = np.unique(ds.y_train)
        if len(present) < 2:
            raise DataError(
                f"{source}: the training split has only class {int(present[0])} ({n} rows); a "
                "classifier needs at least 2 classes in its training data"
            )
    elif not (np.isfinite(ds.y_shift) and np.isfinite(ds.y_scale) and ds.y_scale > 0):
        raise DataError(
            f"{source}: the target scaling (shift {ds.y_shift}, scale "
            f"{ds.y_scale}) is not finite and positive"
        )
