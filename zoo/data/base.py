"""Seeded data sets: spec data section -> :class:`Dataset` of float32/int64 numpy arrays.

Add a data set by writing a loader ``(spec, seed) -> Dataset`` and registering it in
:data:`zoo.run.cell.DATA_LOADERS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from zoo.spec.schema import CsvData, DigitsData, TwoMoonsData

__all__ = ["Dataset", "load_csv", "load_digits", "load_two_moons"]


class Dataset(NamedTuple):
    """A train/test split.

    Attributes
    ----------
    x_train, x_test : ndarray, float32, shape (n, d)
    y_train, y_test : ndarray, int64 labels (classification) or float32 targets
    n_classes : int
        Number of classes; 0 for regression.
    y_shift, y_scale : float
        Regression targets were standardized as ``(y - y_shift) / y_scale``; metrics in
        original units undo it. 0 and 1 for classification.
    true_params : dict of str to ndarray, optional
        The weights that generated the data (teacher data), by model site name.
    x_val, y_val : ndarray or None
        A validation split held out of training (IDX data), or None.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    y_shift: float = 0.0
    y_scale: float = 1.0
    true_params: dict[str, np.ndarray] | None = None
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None

    @property
    def in_dim(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def out_dim(self) -> int:
        return self.n_classes if self.n_classes > 0 else 1


def load_two_moons(spec: TwoMoonsData, seed: int) -> Dataset:
    """Two moons from ``sklearn.datasets.make_moons``; train and test are independent draws."""
    from sklearn.datasets import make_moons

    rng = np.random.default_rng(spec.seed if spec.seed is not None else seed)
    s1, s2 = (int(v) for v in rng.integers(0, 2**31 - 1, size=2))
    xtr, ytr = make_moons(spec.n_train, noise=spec.noise, random_state=s1)
    xte, yte = make_moons(spec.n_test, noise=spec.noise, random_state=s2)
    return Dataset(
        xtr.astype(np.float32), ytr.astype(np.int64), xte.astype(np.float32),
        yte.astype(np.int64), 2,
    )  # fmt: skip


def load_digits(spec: DigitsData, seed: int) -> Dataset:
    """sklearn's 8x8 digits, pixels scaled to [0, 1], stratified seeded split."""
    from sklearn.datasets import load_digits as _load
    from sklearn.model_selection import train_test_split

    x, y = _load(return_X_y=True)
    s = spec.seed if spec.seed is not None else seed
    xtr, xte, ytr, yte = train_test_split(
        x / 16.0, y, test_size=spec.test_fraction, random_state=s, stratify=y
    )
    return Dataset(
        xtr.astype(np.float32), ytr.astype(np.int64), xte.astype(np.float32),
        yte.astype(np.int64), 10,
    )  # fmt: skip


def load_csv(spec: CsvData, seed: int) -> Dataset:
    """A delimited file with a header; inputs (and regression targets) standardized on train.

    Raises
    ------
    ValueError
        If the file has no column ``spec.target`` or non-numeric inputs.
    """
    import pandas as pd

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
        from zoo.data.uci import split_indices, standardize_split

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
