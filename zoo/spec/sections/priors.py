"""The ``prior`` section of a spec: the weight prior, and optionally a separate bias prior.

Every prior is an independent Normal per weight: N(0, scale^2) (``normal``) or the
He-scaled N(0, 2 / fan_in) (``he``); ``bias`` gives the biases a prior of their own. No
torch import here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from zoo.spec.base import Section
from zoo.spec.sections.bounds import PriorScale

__all__ = ["BiasPriorSpec", "HeBias", "HePrior", "NormalBias", "NormalPrior", "PriorSpec"]


class NormalBias(Section):
    """Bias prior N(0, scale^2)."""

    kind: Literal["normal"] = Field(description="Prior kind.")
    scale: PriorScale = Field(
        1.0, gt=0, description="Prior standard deviation (1e-18 to 1e18: its square is a float32)."
    )


class HeBias(Section):
    """Bias prior N(0, 2 / fan_in)."""

    kind: Literal["he"] = Field(description="Prior kind.")


BiasPriorSpec = Annotated[NormalBias | HeBias, Field(discriminator="kind")]


class NormalPrior(NormalBias):
    """Independent N(0, scale^2) on every weight (and bias unless ``bias`` is given)."""

    bias: BiasPriorSpec | None = Field(
        None, description="Separate prior for the biases; null uses the weight prior."
    )


class HePrior(HeBias):
    """He-scaled prior N(0, 2 / fan_in) on every weight (and bias unless ``bias`` is given)."""

    bias: BiasPriorSpec | None = Field(
        None, description="Separate prior for the biases; null uses the weight prior."
    )


PriorSpec = Annotated[NormalPrior | HePrior, Field(discriminator="kind")]
