"""The UCI train/test protocol: seeded split indices and standardization on the train part.

Shared by the ``uci`` loader and the ``csv`` loader when it is given a ``split``: split
``k`` is a random permutation seeded by ``k`` (and the number of rows) alone, so every
method and seed of a sweep sees the same split ``k``.
"""

from __future__ import annotations

import numpy as np

from zoo.data.checks import MIN_TRAIN_ROWS
from zoo.data.dataset import Dataset
from zoo.data.errors import DataError

__all__ = [
    "check_split_sizes",
    "hold_out_validation",
    "MIN_VALIDATION_ROWS",
    "n_test_rows",
    "split_indices",
    "standardize_split",
    "validation_indices",
]


#: The fewest validation rows a tuning cell scores on: one row's score is that row's noise, and
#: no spread of it tells the grid values apart.
MIN_VALIDATION_ROWS = 2


def n_test_rows(n: int, test_fraction: float) -> int:
    """The number of test rows of ``n`` at ``test_fraction``: ``round(test_fraction * n)``, >= 1."""
    return max(1, int(round(test_fraction * n)))


def check_split_sizes(n: int, test_fraction: float, where: str) -> None:
    """Raise :class:`DataError` (starting with ``where``) if too few rows are left to train on.

    At least :data:`~zoo.data.checks.MIN_TRAIN_ROWS` rows must remain after
    :func:`n_test_rows` are held out.
    """
    n_test = n_test_rows(n, test_fraction)
    if n - n_test < MIN_TRAIN_ROWS:
        raise DataError(
            f"{where}: {n} rows, of which test_fraction {test_fraction} holds out {n_test}, "
            f"leave {max(n - n_test, 0)} to train on; at least {MIN_TRAIN_ROWS} are needed"
        )


def split_indices(n: int, split: int, test_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices of UCI split number ``split`` (a permutation seeded by it).

    Returns
    -------
    train, test : ndarray of int
        Disjoint, together ``range(n)``, ``len(test) = round(test_fraction * n)`` (at least
        1); the same ``(n, split, test_fraction)`` always gives the same indices.
    """
    perm = np.random.default_rng([split, n]).permutation(n)
    n_test = n_test_rows(n, test_fraction)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def validation_indices(
    train: np.ndarray, fraction: float, where: str = "tune.validation_fraction"
) -> tuple[np.ndarray, np.ndarray]:
    """Split the training indices ``train`` into kept-training and validation indices.

    The validation part is ``round(fraction * len(train))`` rows (at least 1) of a
    permutation seeded by the training rows alone, so every method, seed and grid value
    scored on the same training part gets the same validation part (what a tuning cell of
    the spec's ``tune`` section needs to compare them).

    Raises
    ------
    DataError
        Starting with ``where``, if fewer than :data:`~zoo.data.checks.MIN_TRAIN_ROWS`
        rows are left to train on, or fewer than :data:`MIN_VALIDATION_ROWS` are held out.
    """
    train = np.asarray(train)
    n_val = n_test_rows(len(train), fraction)
    if n_val < MIN_VALIDATION_ROWS:
        raise DataError(
            f"{where}: {fraction} of the {len(train)} training rows holds out {n_val} for "
            f"validation; at least {MIN_VALIDATION_ROWS} are needed to compare the grid "
            "values (on one row the choice is that row's noise): use a larger fraction or "
            "more training data"
        )
    n_kept = len(train) - n_val
    if n_kept < MIN_TRAIN_ROWS:
        raise DataError(
            f"{where}: {fraction} of the {len(train)} training rows held out for validation "
            f"leaves {max(n_kept, 0)} to train on; at least {MIN_TRAIN_ROWS} are needed: "
            "use a smaller fraction or more training data"
        )
    seed = [len(train), int(train.sum()) % (2**31), 1]
    perm = np.random.default_rng(seed).permutation(len(train))
    return np.sort(train[perm[n_val:]]), np.sort(train[perm[:n_val]])


def hold_out_validation(ds: Dataset, fraction: float) -> Dataset:
    """``ds`` with ``fraction`` of its training rows as its test part (the test part dropped).

    The rows are chosen by :func:`validation_indices`. For loaders that standardize, the
    scaling stays the one computed on the whole training part (the UCI loader instead
    splits before it standardizes, :func:`zoo.data.uci.load_uci`).
    """
    kept, val = validation_indices(np.arange(len(ds.x_train)), fraction)
    return ds._replace(
        x_train=ds.x_train[kept],
        y_train=ds.y_train[kept],
        x_test=ds.x_train[val],
        y_test=ds.y_train[val],
    )


def standardize_split(
    x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, standardize: bool = True
) -> Dataset:
    """A regression :class:`Dataset`, inputs and targets standardized on ``train`` only.

    Metrics in original units undo the target scaling through ``y_shift`` and ``y_scale``.
    """
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    xtr, xte = x[train], x[test]
    shift, scale = 0.0, 1.0
    if standardize:
        mu, sd = xtr.mean(0), xtr.std(0)
        sd[sd == 0] = 1.0
        xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
        shift, scale = float(y[train].mean()), float(y[train].std() or 1.0)
    return Dataset(
        xtr.astype(np.float32),
        ((y[train] - shift) / scale).astype(np.float32),
        xte.astype(np.float32),
        ((y[test] - shift) / scale).astype(np.float32),
        0,
        shift,
        scale,
    )
