"""The ``simulation`` section of a spec: a simulation instead of a sweep of trained networks.

No torch import here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from zoo.spec.base import Section
from zoo.spec.sections.bounds import MAX_DEPTH, MAX_DRAWS, Real

__all__ = ["ProductMatrixSimulation", "SimulationSpec"]


class ProductMatrixSimulation(Section):
    """Covariance of the product of L random mean-field layers (Farquhar et al. 2020, Fig. 1).

    Each layer is K x K with means U(mean_low, mean_high) and standard deviation ``std``;
    the covariance of the product matrix W_L ... W_1 is estimated from ``n_draws`` draws
    (``method: mc``, as in the paper) or computed exactly (``method: exact``).
    """

    kind: Literal["product_matrix"] = Field(description="Simulation kind.")
    width: int = Field(4, ge=1, le=32, description="K: every layer is K x K.")
    depths: list[int] = Field(
        default_factory=lambda: [1, 2, 3, 5, 20],
        min_length=1,
        max_length=100,
        description="Numbers of layers L.",
    )
    n_draws: int = Field(
        10_000, ge=2, le=MAX_DRAWS, description="Monte Carlo draws of the product."
    )
    mean_low: Real = Field(-0.1, description="Layer means are U(mean_low, mean_high).")
    mean_high: Real = Field(0.1, description="Layer means are U(mean_low, mean_high).")
    std: Real = Field(0.5, gt=0, description="Standard deviation of every weight.")
    method: Literal["mc", "exact"] = Field(
        "mc", description="Monte Carlo covariance (the paper's figure) or the exact one."
    )

    @field_validator("depths")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(d < 1 or d > MAX_DEPTH for d in v):
            raise ValueError(f"depths must lie in 1..{MAX_DEPTH}, got {v}")
        return v

    @model_validator(mode="after")
    def _range(self) -> ProductMatrixSimulation:
        if self.mean_low > self.mean_high:
            raise ValueError("mean_low must be <= mean_high")
        if self.n_draws * sum(self.depths) > 100_000_000:
            raise ValueError(f"n_draws x sum(depths) = {self.n_draws * sum(self.depths):,} "
                             "layer draws; at most 100,000,000 finish in minutes: lower n_draws "
                             "or the depths")  # fmt: skip
        return self


SimulationSpec = Annotated[ProductMatrixSimulation, Field(discriminator="kind")]
