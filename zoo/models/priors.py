"""Weight priors: a prior section -> a factory ``fan_in -> (loc, scale)`` of a Normal.

Every network puts an independent ``Normal(loc, scale)`` on each weight and bias; a prior
decides ``(loc, scale)`` from the fan-in of the layer (a conv kernel's fan-in is
``in_channels * kh * kw``).

Add a prior: its section in the spec's prior union, a factory here, an entry in
:data:`PRIORS`.

A network's ``(loc, scale)`` are buffers of its layers (:func:`attach_normal_prior`), so
``model.to(device)`` moves its priors as it would move a torch module's weights: the
model's sites are drawn and scored on the device of its data (a prior made of Python floats
would put CPU tensors next to CUDA data).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pyro.distributions as dist
import torch
from pyro.nn import PyroSample
from torch import nn

from zoo.spec.base import registered
from zoo.spec.sections.priors import HeBias, HePrior, NormalBias, NormalPrior

__all__ = [
    "PRIORS",
    "LayerPrior",
    "PriorFn",
    "attach_normal_prior",
    "he_prior",
    "normal_prior",
    "prior_fn",
    "prior_fns",
]

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


class LayerPrior:
    """The prior of one site of a layer, ``Normal(loc, scale)`` over ``shape``, for
    :class:`pyro.nn.PyroSample`.

    ``loc`` and ``scale`` are read from the layer's buffers ``{name}_prior_loc`` and
    ``{name}_prior_scale`` each time the site is drawn, so they are on the layer's device.
    A class rather than a lambda: models pickle (worker processes, Ray tasks).
    """

    def __init__(self, name: str, shape: Sequence[int]) -> None:
        self.name = name
        self.shape = tuple(int(s) for s in shape)

    def __call__(self, layer: nn.Module) -> dist.Distribution:
        loc = getattr(layer, f"{self.name}_prior_loc")
        scale = getattr(layer, f"{self.name}_prior_scale")
        return dist.Normal(loc, scale).expand(self.shape).to_event(len(self.shape))


def attach_normal_prior(
    layer: nn.Module, name: str, loc: float, scale: float, shape: Sequence[int]
) -> None:
    """Make ``layer.<name>`` a :class:`~pyro.nn.PyroSample` site with an independent
    ``Normal(loc, scale)`` on each of its ``shape`` entries, ``loc`` and ``scale`` held as
    buffers (torch's default dtype, as ``dist.Normal(float, float)`` would make them), made
    on the CPU whatever torch's default device, that move with ``layer.to(device)``."""
    layer.register_buffer(f"{name}_prior_loc", torch.tensor(float(loc), device="cpu"))
    layer.register_buffer(f"{name}_prior_scale", torch.tensor(float(scale), device="cpu"))
    setattr(layer, name, PyroSample(LayerPrior(name, shape)))
