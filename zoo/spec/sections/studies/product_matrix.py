"""The ``product_matrix`` study section: the covariance of the product matrix of a deep
linear network (Farquhar, Smith & Gal 2020). No torch import here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from zoo.spec.base import Section
from zoo.spec.sections.bounds import MAX_DRAWS
from zoo.spec.sections.studies.base import StudySection

__all__ = ["PixelPatch", "ProductBlock", "ProductMatrixStudy"]

#: Most entries (outputs x inputs) a block may hold: its covariance has this many squared.
MAX_BLOCK = 4096


class PixelPatch(Section):
    """A rectangle of pixels of a row-major image ``width`` pixels wide: the input indices
    ``r * width + c`` for ``rows[0] <= r < rows[1]`` and ``cols[0] <= c < cols[1]``."""

    rows: tuple[int, int] = Field(description="First and one-past-last pixel row.")
    cols: tuple[int, int] = Field(description="First and one-past-last pixel column.")
    width: int = Field(gt=0, description="Image width in pixels (28 for Fashion-MNIST).")

    @model_validator(mode="after")
    def _range(self) -> PixelPatch:
        for name, (lo, hi) in (("rows", self.rows), ("cols", self.cols)):
            if not 0 <= lo < hi:
                raise ValueError(f"{name} must be [first, one past last] with 0 <= first < last")
        if self.cols[1] > self.width:
            raise ValueError(f"cols end {self.cols[1]} exceeds the image width {self.width}")
        return self

    def indices(self) -> list[int]:
        """The input indices of the patch, row-major."""
        return [r * self.width + c for r in range(*self.rows) for c in range(*self.cols)]


class ProductBlock(Section):
    """A block of the product matrix W (outputs x inputs): rows ``outputs``, columns ``inputs``."""

    outputs: list[int] = Field(min_length=1, description="Output (class) indices: rows of W.")
    inputs: list[int] | PixelPatch = Field(
        description="Input (pixel) indices: columns of W; a list or a pixel patch "
        "{rows: [r0, r1], cols: [c0, c1], width: w}."
    )

    @field_validator("outputs")
    @classmethod
    def _outputs(cls, v: list[int]) -> list[int]:
        return _unique_nonneg("outputs", v)

    @model_validator(mode="after")
    def _size(self) -> ProductBlock:
        cols = self.input_indices()
        _unique_nonneg("inputs", cols)
        if len(self.outputs) * len(cols) > MAX_BLOCK:
            raise ValueError(
                f"the block has {len(self.outputs)} x {len(cols)} entries, more than "
                f"{MAX_BLOCK}; choose fewer outputs or inputs"
            )
        return self

    def input_indices(self) -> list[int]:
        """The input indices as a list."""
        return self.inputs.indices() if isinstance(self.inputs, PixelPatch) else list(self.inputs)


def _unique_nonneg(name: str, v: list[int]) -> list[int]:
    if min(v) < 0 or len(set(v)) != len(v):
        raise ValueError(f"{name} must be distinct indices >= 0, got {v}")
    return v


class ProductMatrixStudy(StudySection):
    """Covariance of the product matrix W_L ... W_1 of a deep linear network.

    Farquhar, Smith & Gal (2020): posterior draws of the product of the weight matrices of
    an svi fit; its covariance is stored and drawn as a heat map. Only linear networks
    (``model.activation: linear``) have a product matrix. ``block`` restricts it to some
    outputs x inputs (784 inputs x 10 outputs would give a 7840^2 covariance);
    ``method: exact`` computes it in closed form from a mean-field guide's locations and
    scales, ``both`` beside the Monte Carlo estimate.
    """

    families: ClassVar[frozenset[str]] = frozenset({"svi"})

    kind: Literal["product_matrix"] = Field(description="Study kind.")
    draws: int = Field(
        10_000, ge=2, le=MAX_DRAWS, description="Posterior draws of the product matrix."
    )
    block: ProductBlock | None = Field(
        None, description="Entries of W whose covariance is computed; null: all of them."
    )
    method: Literal["mc", "exact", "both"] = Field(
        "mc",
        description="mc: from posterior draws; exact: the closed form for independent "
        "Gaussian (mean-field) layers; both: the two side by side with their agreement.",
    )

    def applies_to_model(self, model: Any) -> bool:
        return bool(getattr(model, "linear", False))

    def needs(self) -> str:
        return "svi methods on a linear network (model.activation: linear)"

    def method_problems(self, method: Any) -> list[tuple[str, str]]:
        guide = getattr(getattr(method, "guide", None), "kind", None)
        if self.method != "mc" and guide != "mean_field":
            return [
                (
                    "guide.kind",
                    f"the product_matrix study's method {self.method} needs independent "
                    f"Gaussian layers (guide.kind: mean_field), got {guide}: use method: mc "
                    "or leave this method out of the study's methods",
                )
            ]
        return []
