"""Data sets shipped with scikit-learn: two moons and the 8x8 digits."""

from __future__ import annotations

import numpy as np

from zoo.data.dataset import Dataset
from zoo.spec.sections.data import DigitsData, TwoMoonsData

__all__ = ["load_digits", "load_two_moons"]


def load_two_moons(spec: TwoMoonsData, seed: int) -> Dataset:
    """Two moons from ``sklearn.datasets.make_moons``; train and test are independent draws."""
    from sklearn.datasets import make_moons  # sklearn is slow to import: only when used

    rng = np.random.default_rng(spec.seed if spec.seed is not None else seed)
    s1, s2 = (int(v) for v in rng.integers(0, 2**31 - 1, size=2))
    xtr, ytr = make_moons(spec.n_train, noise=spec.noise, random_state=s1)
    xte, yte = make_moons(spec.n_test, noise=spec.noise, random_state=s2)
    return Dataset(
        xtr.astype(np.float32),
        ytr.astype(np.int64),
        xte.astype(np.float32),
        yte.astype(np.int64),
        2,
    )


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
        xtr.astype(np.float32),
        ytr.astype(np.int64),
        xte.astype(np.float32),
        yte.astype(np.int64),
        10,
    )
