"""Bounds of the spec's numbers: what a cell can really compute with.

A spec that validates must run. Numbers are therefore bounded where the libraries or a
large machine stop: seeds by what NumPy and scikit-learn accept, floats by float32 (the
precision the cells compute in by default), sizes (layers, units, parameters, data points,
draws, steps) by what fits in the memory and time of one large machine. The field
descriptions name each bound; pydantic's messages say it when a value crosses one.
No torch import here.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic.types import FiniteFloat

__all__ = [
    "F32_MAX",
    "F32_TINY",
    "MAX_AXIS_VALUES",
    "MAX_CELLS",
    "MAX_CHAINS",
    "MAX_CHEES_CHAINS",
    "MAX_DEPTH",
    "MAX_DRAWS",
    "MAX_EPOCHS",
    "MAX_LEAPFROG",
    "METHOD_NAME",
    "MAX_NAME",
    "MAX_PARAMS",
    "MAX_POINTS",
    "MAX_SEED",
    "MAX_STEPS",
    "MAX_WIDTH",
    "Real",
    "SEED_HEADROOM",
    "finite_float32",
]

#: Largest finite float32.
F32_MAX = 3.4028234663852886e38
#: Smallest positive normal float32; smaller nonzero magnitudes lose precision or vanish.
F32_TINY = 1.1754943508222875e-38

#: The cells derive per-purpose seeds ``seed + k`` (:class:`zoo.seeds.Stream`; the single
#: offsets lie below this headroom); every seed leaves room for them below 2**32, the range
#: NumPy's legacy generators and scikit-learn accept.
SEED_HEADROOM = 1024
#: Largest seed (of the spec, of a data section, of a UCI split).
MAX_SEED = 2**32 - 1 - SEED_HEADROOM

#: Most hidden layers of an mlp.
MAX_DEPTH = 1_000
#: Most units of a hidden layer (or filters of a convolution, or rank of a k-tied guide).
MAX_WIDTH = 100_000
#: Most weights and biases of a network (and largest ``param_budget``).
MAX_PARAMS = 100_000_000
#: Most data points of a training or test set.
MAX_POINTS = 10_000_000
#: Most optimizer steps (and step counts of schedules and study checkpoints).
MAX_STEPS = 1_000_000_000
#: Most passes over the training data.
MAX_EPOCHS = 1_000_000
#: Most draws (posterior, predictive, per chain, of a study).
MAX_DRAWS = 1_000_000
#: Most chains of a sampler that runs its chains one by one or with per-chain adaptation
#: (nuts, hmc).
MAX_CHAINS = 1_024
#: Most chains of a sampler that runs them as one batch on a device (chees): 8192 chains of a
#: 1000-parameter network are 8192 x 1000 floats per leapfrog step, little for a GPU.
MAX_CHEES_CHAINS = 8_192
#: Most leapfrog steps of one trajectory (NUTS at max_tree_depth 15 takes 2**15 - 1).
MAX_LEAPFROG = 32_768
#: Most values of one sweep axis.
MAX_AXIS_VALUES = 1_000
#: Most cells of a spec (the product of its axes, times its methods).
MAX_CELLS = 10_000
#: Longest spec or method name.
MAX_NAME = 100

#: The ``name`` field of every inference method: its key in ``--set inference.NAME...``,
#: sweep axes and ``studies[].methods``.
METHOD_NAME = Field(
    min_length=1,
    max_length=MAX_NAME,
    pattern=r"^[A-Za-z0-9_\-]+$",
    description="Method name (unique): letters, digits, '_' and '-'.",
)


def finite_float32(v: float) -> float:
    """``v`` if it is finite and float32 represents it (0 or a magnitude in
    [:data:`F32_TINY`, :data:`F32_MAX`]).

    Raises
    ------
    ValueError
        Saying the bound otherwise.
    """
    if not math.isfinite(v):
        raise ValueError(f"{v!r} is not a finite number")
    if abs(v) > F32_MAX:
        raise ValueError(
            f"{v!r} overflows float32: the cells compute in float32, whose largest "
            f"magnitude is {F32_MAX:.4g}"
        )
    if v != 0 and abs(v) < F32_TINY:
        raise ValueError(
            f"{v!r} underflows float32: nonzero magnitudes must be at least {F32_TINY:.4g} "
            "(the cells compute in float32)"
        )
    return v


#: A finite float that float32 represents (0 or a magnitude in [F32_TINY, F32_MAX]);
#: field constraints (``gt=0``, ``le=1``) add to it.
Real = Annotated[FiniteFloat, AfterValidator(finite_float32)]
