"""The ``simulation`` section of a spec: a simulation instead of a sweep of trained networks.

No torch import here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from zoo.spec.base import Section
from zoo.spec.sections.bounds import MAX_DEPTH, MAX_DRAWS, Real, file_path
from zoo.spec.sections.known_answers import PermutationTargetSimulation, RidgeTargetSimulation
from zoo.spec.sections.studies import GaussianFitSpec

__all__ = [
    "GaussianGroundTruthSimulation",
    "PermutationTargetSimulation",
    "ProductMatrixSimulation",
    "RidgeTargetSimulation",
    "SimulationSpec",
]


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
            raise ValueError(
                f"n_draws x sum(depths) = {self.n_draws * sum(self.depths):,} "
                "layer draws; at most 100,000,000 finish in minutes: lower n_draws "
                "or the depths"
            )
        return self


class GaussianGroundTruthSimulation(Section):
    """The price-of-mean-field pipeline on N(0, S) with a known S: its ground truth.

    For each dimension D, a random covariance S = Q diag(lambda) Q^T (Q Haar-orthogonal,
    lambda log-spaced over [1, condition]; ``structure: diagonal`` keeps S = diag(lambda), whose
    true KL is 0: the control) is sampled by the study's batched sampler, and the draws go
    through the same Gaussian fit, shift null and excess as a network's weights. The report
    sets the recovered KL beside the exact KL(q_diag || q_full) of S, with the spread over
    groups of chains, and the KL on fractions of the draws against 1/n_eff.
    """

    kind: Literal["gaussian"] = Field(description="Simulation kind.")
    dims: list[int] = Field(
        default_factory=lambda: [100],
        min_length=1,
        max_length=10,
        description="Dimensions D of the target, one row each.",
    )
    condition: Real = Field(
        100.0, ge=1, le=1e8, description="Ratio of the largest to the smallest eigenvalue of S."
    )
    structure: Literal["rotated", "diagonal"] = Field(
        "rotated",
        description="rotated: S = Q diag(lambda) Q^T (correlated, KL > 0); diagonal: "
        "S = diag(lambda) in random order (true KL 0, the control).",
    )
    cov_file: str | None = Field(
        None,
        description="A .npy file with S itself (or its inverse, see file_holds), e.g. the "
        "inverse Laplace Hessian of a network; relative to the spec. Replaces dims, "
        "condition and structure: one row of the file's dimension.",
    )
    file_holds: Literal["covariance", "precision"] = Field(
        "covariance", description="Whether cov_file holds S or S^-1 (a Hessian)."
    )
    sampler: Literal["nuts", "hmc"] = Field("nuts", description="The batched sampler.")
    chains: int = Field(8, ge=2, le=64, description="Chains, run as one batch.")
    warmup: int = Field(500, ge=0, le=MAX_DRAWS, description="Warm-up iterations per chain.")
    draws: int = Field(1000, ge=8, le=MAX_DRAWS, description="Kept draws per chain.")
    target_accept: Real = Field(0.8, gt=0, lt=1, description="Step-size adaptation target.")
    max_tree_depth: int = Field(10, ge=1, le=15, description="NUTS: at most 2^depth - 1 steps.")
    num_steps: int = Field(16, ge=1, le=1024, description="HMC: leapfrog steps per draw.")
    groups: int = Field(
        4, ge=2, le=64, description="The chains split into this many groups for the spread."
    )
    fractions: list[Real] = Field(
        default_factory=lambda: [0.25, 0.5, 1.0],
        min_length=2,
        max_length=10,
        description="Leading fractions of every chain's draws for the KL against 1/n_eff.",
    )
    null_reps: int = Field(8, ge=2, le=100, description="Shifted copies for the shift null.")
    gaussian_fit: GaussianFitSpec = Field(
        default_factory=lambda: GaussianFitSpec(cov="empirical"),
        description="q_full estimate, as the price_of_mean_field study's.",
    )

    @field_validator("dims")
    @classmethod
    def _dims(cls, v: list[int]) -> list[int]:
        if any(d < 2 or d > 5000 for d in v):
            raise ValueError(f"dims must lie in 2..5000, got {v}")
        return v

    @field_validator("cov_file")
    @classmethod
    def _resolve(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return None
        return str(file_path(v, (info.context or {}).get("base_dir", ".")).resolve())

    @field_validator("fractions")
    @classmethod
    def _fractions(cls, v: list[float]) -> list[float]:
        if any(not 0 < f <= 1 for f in v) or sorted(set(v)) != list(v):
            raise ValueError(f"fractions must increase strictly within (0, 1], got {v}")
        return v

    @model_validator(mode="after")
    def _split(self) -> GaussianGroundTruthSimulation:
        given = self.model_fields_set & {"dims", "condition", "structure"}
        if self.cov_file is not None and given:
            raise ValueError(f"cov_file gives S: remove {', '.join(sorted(given))}")
        if self.chains % self.groups:
            raise ValueError(
                f"chains ({self.chains}) must split into groups ({self.groups}) of equal size"
            )
        return self


SimulationSpec = Annotated[
    ProductMatrixSimulation
    | GaussianGroundTruthSimulation
    | RidgeTargetSimulation
    | PermutationTargetSimulation,
    Field(discriminator="kind"),
]
