"""Any delimited text file with a header row: one column is the target, the rest inputs."""

from __future__ import annotations

import numpy as np

from zoo.data.dataset import Dataset
from zoo.data.splits import check_split_sizes, n_test_rows, split_indices, standardize_split
from zoo.data.table import read_table
from zoo.spec.sections.data import CsvData

__all__ = ["load_csv"]


def load_csv(spec: CsvData, seed: int) -> Dataset:
    """A delimited file with a header; inputs (and regression targets) standardized on train.

    The file is read by :func:`zoo.data.table.read_table`: every input and regression
    target a finite number, class labels the integers ``0..K-1`` (each with a row), unique
    column names. With ``spec.split`` (regression) the split follows the UCI protocol of
    :mod:`zoo.data.splits`; otherwise a permutation seeded by ``spec.seed`` (or ``seed``).

    Raises
    ------
    DataError
        If the file cannot be trained on; the message names the file, line and column.
    """
    t = read_table(spec.path, spec.target, task=spec.task, delimiter=spec.delimiter)
    x, y = t.x, t.y
    check_split_sizes(len(x), spec.test_fraction, f"data.path: {spec.path}")
    if spec.split is not None and spec.task == "regression":  # the UCI protocol
        tr, te = split_indices(len(x), spec.split, spec.test_fraction)
        return standardize_split(x, y, tr, te, spec.standardize)
    rng = np.random.default_rng(spec.seed if spec.seed is not None else seed)
    perm = rng.permutation(len(x))
    n_test = n_test_rows(len(x), spec.test_fraction)
    te, tr = perm[:n_test], perm[n_test:]
    xtr, xte = x[tr], x[te]
    if spec.standardize:
        mu, sd = xtr.mean(0), xtr.std(0)
        sd[sd == 0] = 1.0
        xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
    if spec.task == "classification":
        return Dataset(
            xtr.astype(np.float32),
            y[tr],
            xte.astype(np.float32),
            y[te],
            t.n_classes,
        )
    shift, scale = 0.0, 1.0
    if spec.standardize:
        shift, scale = float(y[tr].mean()), float(y[tr].std() or 1.0)
    return Dataset(
        xtr.astype(np.float32),
        ((y[tr] - shift) / scale).astype(np.float32),
        xte.astype(np.float32),
        ((y[te] - shift) / scale).astype(np.float32),
        0,
        shift,
        scale,
    )
