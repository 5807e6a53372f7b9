"""The one link between the spec's guide sections and the :mod:`guides` package.

:data:`GUIDES` maps a guide section class (:mod:`zoo.spec.sections.inference`) to a builder
``(model, section, init_values) -> AutoGuide``. A new guide is a class in ``guides/``, a
section in the spec and one entry here; ``tests/zoo/inference/test_inference_conformance.py`` fails
while a member of the spec's guide union has no entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from pyro.infer.autoguide import AutoGuide, init_to_value

import guides
from zoo.spec.base import registered
from zoo.spec.sections.inference import (
    FixedVarianceGuide,
    FullRankGuide,
    KTiedGuide,
    MatrixNormalGuide,
    MeanFieldGuide,
)

__all__ = ["GUIDES", "build_guide"]

Builder = Callable[[Callable, Any, Mapping[str, torch.Tensor]], AutoGuide]


def _start(init: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    return {"init_loc_fn": init_to_value(values=dict(init))}


GUIDES: dict[type, Builder] = {
    MeanFieldGuide: lambda model, g, init: guides.AutoMeanField(
        model, scale_transform=g.scale_transform, init_scale=g.init_scale, **_start(init)
    ),
    KTiedGuide: lambda model, g, init: guides.AutoKTiedNormal(
        model, rank=g.rank, init_scale=g.init_scale, **_start(init)
    ),
    MatrixNormalGuide: lambda model, g, init: guides.AutoMatrixNormal(
        model, row_cov=g.row_cov, col_cov=g.col_cov, init_scale=g.init_scale, **_start(init)
    ),
    FullRankGuide: lambda model, g, init: guides.AutoFullRankNormal(
        model, blocks=g.blocks, init_scale=g.init_scale, **_start(init)
    ),
    FixedVarianceGuide: lambda model, g, init: guides.AutoFixedVarianceNormal(
        model, scale=g.scale, **_start(init)
    ),
}


def build_guide(model: Callable, section: Any, init: Mapping[str, torch.Tensor]) -> AutoGuide:
    """The guide of guide section ``section`` for ``model``, its means starting at ``init``.

    Raises
    ------
    TypeError
        If no builder is registered for the section's class.
    """
    builder = registered(GUIDES, section, "guide", "zoo.inference.guides.GUIDES")
    return builder(model, section, init)
