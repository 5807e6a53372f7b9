"""Teacher-network regression data of Trippe & Turner (2018, Figure 3).

Inputs from a simple distribution, outputs from a one-hidden-layer tanh network whose
weights are drawn from the prior, plus Gaussian noise; the true weights travel with the
data set (:attr:`Dataset.true_params`) so they can initialize the variational means.
"""

from __future__ import annotations

import numpy as np

from zoo.data.dataset import Dataset
from zoo.spec.sections.data import TeacherData

__all__ = ["load_teacher", "teacher_params"]


def teacher_params(in_dim: int, width: int, prior_scale: float, seed: int) -> dict[str, np.ndarray]:
    """Weights of the teacher network drawn from N(0, prior_scale^2), site names of the model."""
    rng = np.random.default_rng([seed, 7])
    shapes = {
        "layer0.weight": (width, in_dim),
        "layer0.bias": (width,),
        "layer1.weight": (1, width),
        "layer1.bias": (1,),
    }
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
        xtr.astype(np.float32),
        ytr.astype(np.float32),
        xte.astype(np.float32),
        yte.astype(np.float32),
        0,
        0.0,
        1.0,
        params,
        noise=float(spec.noise),
    )
