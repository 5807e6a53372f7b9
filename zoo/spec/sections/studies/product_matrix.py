"""The ``product_matrix`` study section: the covariance of the product matrix of a deep
linear network (Farquhar, Smith & Gal 2020). No torch import here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from zoo.spec.sections.bounds import MAX_DRAWS
from zoo.spec.sections.studies.base import StudySection

__all__ = ["ProductMatrixStudy"]


class ProductMatrixStudy(StudySection):
    """Covariance of the product matrix W_L ... W_1 of a deep linear network.

    Farquhar, Smith & Gal (2020): posterior draws of the product of the weight matrices of
    an svi fit; its covariance is stored and drawn as a heat map. Only linear networks
    (``model.activation: linear``) have a product matrix.
    """

    families: ClassVar[frozenset[str]] = frozenset({"svi"})

    kind: Literal["product_matrix"] = Field(description="Study kind.")
    draws: int = Field(
        10_000, ge=2, le=MAX_DRAWS, description="Posterior draws of the product matrix."
    )

    def applies_to_model(self, model: Any) -> bool:
        return bool(getattr(model, "linear", False))

    def needs(self) -> str:
        return "svi methods on a linear network (model.activation: linear)"
