"""A class held out of training: the out-of-distribution set of an image data set.

``data.holdout_class: k`` (digits, IDX data) removes class ``k`` from the training,
validation and test splits and renumbers the classes above it (``c -> c - 1``), so the
network has one output fewer and has never seen the class. Its images, test split first,
then validation and training, become :attr:`~zoo.data.dataset.Dataset.x_ood`: inputs from
the same sensor and preprocessing as the data, but of a kind the model was never trained
on (the "leave one class out" protocol of open-set and OOD-detection work, e.g. Ahmed &
Courville 2020, "Detecting semantic anomalies"). The predictive study reads them with
``ood: holdout_class``; noise images are its ``ood: noise``.
"""

from __future__ import annotations

import numpy as np

from zoo.data.dataset import Dataset
from zoo.data.errors import DataError

__all__ = ["hold_out_class"]


def hold_out_class(ds: Dataset, k: int, where: str = "data.holdout_class") -> Dataset:
    """``ds`` without class ``k`` (classes above it renumbered), its images in ``x_ood``.

    Raises
    ------
    DataError
        Starting with ``where``: if ``ds`` is not a classification set of at least 3
        classes (2 would leave one), or ``k`` is not one of its classes.
    """
    if ds.n_classes < 3:
        what = "regression data" if ds.n_classes == 0 else f"{ds.n_classes} classes"
        raise DataError(
            f"{where}: holding out a class needs at least 3 classes (one is "
            f"left to train on with 2); this data set has {what}"
        )
    if not 0 <= k < ds.n_classes:
        raise DataError(f"{where}: {k} is not a class of this data set (0..{ds.n_classes - 1})")

    def keep(x: np.ndarray | None, y: np.ndarray | None):
        if x is None or y is None:
            return x, y
        m = y != k
        return x[m], np.where(y[m] > k, y[m] - 1, y[m]).astype(y.dtype)

    held = [
        x[y == k]
        for x, y in ((ds.x_test, ds.y_test), (ds.x_val, ds.y_val), (ds.x_train, ds.y_train))
        if x is not None
    ]
    (xtr, ytr), (xte, yte), (xv, yv) = (
        keep(ds.x_train, ds.y_train),
        keep(ds.x_test, ds.y_test),
        keep(ds.x_val, ds.y_val),
    )
    return ds._replace(
        x_train=xtr,
        y_train=ytr,
        x_test=xte,
        y_test=yte,
        x_val=xv,
        y_val=yv,
        n_classes=ds.n_classes - 1,
        x_ood=np.concatenate(held),
    )
