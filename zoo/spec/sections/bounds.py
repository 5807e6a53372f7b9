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
from pathlib import Path
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
    "MIN_PRIOR_SCALE",
    "PriorScale",
    "MAX_PARAMS",
    "MAX_PATH",
    "MAX_PATH_PART",
    "MAX_PRIOR_SCALE",
    "MAX_TEACHER_SCALE",
    "MIN_TEACHER_SCALE",
    "TeacherScale",
    "teacher_scale",
    "MAX_POINTS",
    "MAX_SEED",
    "MAX_STEPS",
    "MAX_WIDTH",
    "Real",
    "SEED_HEADROOM",
    "file_path",
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
#: Widest and narrowest prior standard deviation: a Normal's log density squares its scale,
#: and the square must stay a normal float32 (1.2e-38 to 3.4e38) for the cells' losses to
#: be finite (a scale of 1e30 gave an infinite loss at step 0, 1e-25 a NaN one).
MAX_PRIOR_SCALE = 1e18
MIN_PRIOR_SCALE = 1e-18
#: Widest and narrowest scale of the teacher's weights and noise: the targets are about
#: sqrt(width) x that scale and the likelihood squares them in float32 (1e18 made every
#: cell fail at its first step; 1e15 ran).
MAX_TEACHER_SCALE = 1e12
MIN_TEACHER_SCALE = 1e-12
#: Longest file path, in bytes (Linux's PATH_MAX less its NUL), and longest part of one
#: (NAME_MAX): the system refuses longer ones, so validation says so first.
MAX_PATH = 4095
MAX_PATH_PART = 255

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


def prior_scale(v: float) -> float:
    """``v`` if it lies in [:data:`MIN_PRIOR_SCALE`, :data:`MAX_PRIOR_SCALE`].

    Raises
    ------
    ValueError
        Saying why: the prior's log density squares the scale in float32.
    """
    if not MIN_PRIOR_SCALE <= v <= MAX_PRIOR_SCALE:
        raise ValueError(
            f"prior scale {v!r}: give {MIN_PRIOR_SCALE:g} to {MAX_PRIOR_SCALE:g}; the prior's "
            "log density squares the scale, which float32 cannot hold beyond that (every cell "
            "would fail at its first step)"
        )
    return v


#: A prior standard deviation: a positive :data:`Real` whose square float32 holds.
PriorScale = Annotated[Real, AfterValidator(prior_scale)]


def teacher_scale(v: float) -> float:
    """``v`` if it lies in [:data:`MIN_TEACHER_SCALE`, :data:`MAX_TEACHER_SCALE`].

    Raises
    ------
    ValueError
        Saying why: the targets scale with it and the likelihood squares them in float32.
    """
    if not MIN_TEACHER_SCALE <= v <= MAX_TEACHER_SCALE:
        raise ValueError(
            f"{v!r}: give {MIN_TEACHER_SCALE:g} to {MAX_TEACHER_SCALE:g}; the teacher's "
            "targets grow with this scale and the likelihood squares them in float32 (every "
            "cell would fail at its first step)"
        )
    return v


#: A scale of the teacher data (its weights' prior, its noise).
TeacherScale = Annotated[Real, AfterValidator(teacher_scale)]


def file_path(v: str, base: str | Path = ".") -> Path:
    """The path ``v`` of a spec field (``~`` expanded, relative to ``base``), not resolved.

    Raises
    ------
    ValueError
        ``v`` holds a NUL byte, names an unknown ``~user``, or is longer than the system
        allows (:data:`MAX_PATH` bytes, :data:`MAX_PATH_PART` per part): the message says
        which, so validation reports it at the field instead of the system raising later.
    """
    if "\0" in v:
        raise ValueError("the path holds a NUL byte (\\0), which no file name may contain")
    try:
        p = Path(v).expanduser()
    except RuntimeError:
        raise ValueError(f"{v.split('/')[0]!r}: no such user to expand") from None
    p = p if p.is_absolute() else Path(base) / p
    size = len(str(p).encode("utf-8", "surrogateescape"))
    longest = max((len(part.encode("utf-8", "surrogateescape")) for part in p.parts), default=0)
    if size > MAX_PATH or longest > MAX_PATH_PART:
        raise ValueError(
            f"the path is too long ({size} bytes, a part of {longest}); a path has at most "
            f"{MAX_PATH} bytes and each part at most {MAX_PATH_PART}"
        )
    return p
