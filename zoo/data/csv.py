"""Any delimited text file with a header row: one column is the target, the rest inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from zoo.data.dataset import Dataset
from zoo.data.splits import split_indices, standardize_split
from zoo.spec.sections.data import CsvData

__all__ = ["load_csv"]


def load_csv(spec: CsvData, seed: int) -> Dataset:
    """A delimited file with a header; inputs (and regression targets) standardized on train.

    With ``spec.split`` (regression) the split follows the UCI protocol of
    :mod:`zoo.data.splits`; otherwise a permutation seeded by ``spec.seed`` (or ``seed``).

    Raises
    ------
    ValueError
        If the file has no column ``spec.target`` or non-numeric inputs.
    """
    import pandas as pd  # pandas is slow to import: only when used

    path = Path(spec.path)
    df = pd.read_csv(path, sep=spec.delimiter)
    if spec.target not in df.columns:
        raise ValueError(
            f"data.target: {path} has no column {spec.target!r}; columns: {', '.join(df.columns)}"
        )
    xdf = df.drop(columns=[spec.target])
    bad = [c for c in xdf.columns if not np.issubdtype(xdf[c].dtype, np.number)]
    if bad:
        raise ValueError(f"data.path: {path}: non-numeric input columns {bad}; encode them first")
    x = xdf.to_numpy(np.float64)
    y = df[spec.target].to_numpy()
    if spec.split is not None and spec.task == "regression":  # the UCI protocol
        tr, te = split_indices(len(x), spec.split, spec.test_fraction)
        return standardize_split(x, y, tr, te, spec.standardize)
    rng = np.random.default_rng(spec.seed if spec.seed is not None else seed)
    perm = rng.permutation(len(x))
    n_test = max(1, int(round(spec.test_fraction * len(x))))
    te, tr = perm[:n_test], perm[n_test:]
    xtr, xte = x[tr], x[te]
    if spec.standardize:
        mu, sd = xtr.mean(0), xtr.std(0)
        sd[sd == 0] = 1.0
        xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
    if spec.task == "classification":
        classes, yi = np.unique(y, return_inverse=True)
        return Dataset(
            xtr.astype(np.float32), yi[tr].astype(np.int64), xte.astype(np.float32),
            yi[te].astype(np.int64), len(classes),
        )  # fmt: skip
    y = y.astype(np.float64)
    shift, scale = (float(y[tr].mean()), float(y[tr].std() or 1.0)) if spec.standardize else (
        0.0, 1.0,
    )  # fmt: skip
    return Dataset(
        xtr.astype(np.float32), ((y[tr] - shift) / scale).astype(np.float32),
        xte.astype(np.float32), ((y[te] - shift) / scale).astype(np.float32), 0, shift, scale,
    )  # fmt: skip
