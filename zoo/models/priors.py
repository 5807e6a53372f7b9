"""Weight priors: a prior section -> a factory ``fan_in -> (loc, scale)`` of a Normal.

Every network puts an independent ``Normal(loc, scale)`` on each weight and bias; a prior
decides ``(loc, scale)`` from the fan-in of the layer (a conv kernel's fan-in is
``in_channels * kh * kw``).

Add a prior: its section in the spec's prior union, a factory here, an entry in
:data:`PRIORS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from zoo.spec.base import registered
from zoo.spec.sections.priors import HeBias, HePrior, NormalBias, NormalPrior

__all__ = ["PRIORS", "PriorFn", "he_prior", "normal_prior", "prior_fn", "prior_fns"]

#: A prior factory: fan_in -> (loc, scale) of an independent Normal.
PriorFn = Callable[[int], tuple[float, float]]


def normal_prior(scale: float) -> PriorFn:
    """N(0, scale^2) whatever the fan-in."""
    return lambda fan_in: (0.0, float(scale))


def he_prior() -> PriorFn:
    """He-scaled N(0, 2 / fan_in) (He et al. 2015)."""
    return lambda fan_in: (0.0, math.sqrt(2.0 / fan_in))


#: Prior section class (weight priors and the bias priors nested in them) -> PriorFn maker.
PRIORS: dict[type, Callable[[Any], PriorFn]] = {
    NormalPrior: lambda p: normal_prior(p.scale),
    HePrior: lambda p: he_prior(),
    NormalBias: lambda p: normal_prior(p.scale),
    HeBias: lambda p: he_prior(),
}


def prior_fn(section: Any) -> PriorFn:
    """The :data:`PriorFn` of one prior section.

    Raises
    ------
    TypeError
        If no entry of :data:`PRIORS` is registered for the section's class.
    """
    make = registered(PRIORS, section, "prior", "zoo.models.priors.PRIORS")
    return make(section)


def prior_fns(section: Any) -> tuple[PriorFn, PriorFn | None]:
    """Weight and bias priors of a spec's ``prior`` section (bias None: the weight prior)."""
    bias = getattr(section, "bias", None)
    return prior_fn(section), prior_fn(bias) if bias is not None else None
