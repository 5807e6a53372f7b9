"""The ``ktied`` study section: spectra, rank-k truncation, gradient SNR and -ELBO of a
variational fit (Swiatkowski et al. 2020). No torch import here.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from zoo.spec.sections.bounds import MAX_DRAWS, MAX_STEPS, MAX_WIDTH
from zoo.spec.sections.studies.base import StudySection

__all__ = ["KTiedStudy"]


def _positive_sorted(v: list[int], what: str, most: int) -> list[int]:
    if any(k < 1 for k in v):
        raise ValueError(f"{what} must be >= 1, got {v}")
    if any(k > most for k in v):
        raise ValueError(f"{what} must be <= {most}, got {max(v)}")
    return sorted(set(v))


class KTiedStudy(StudySection):
    """Extra outputs of an svi fit for the k-tied study (Swiatkowski et al. 2020).

    Spectra of the posterior mean and standard-deviation matrices (Figures 3, 5, 12),
    post-training rank-k truncation of the std matrices (Tables 2, 3), gradient
    signal-to-noise ratios of the std parameters (Figure 6 top right) and -ELBO at chosen
    steps (Figure 6 bottom right, Figure 7), stored as cell artifacts.
    """

    families: ClassVar[frozenset[str]] = frozenset({"svi"})

    kind: Literal["ktied"] = Field(description="Study kind.")
    truncation_ranks: list[int] = Field(
        default_factory=lambda: [1, 2, 3],
        description="Ranks k of the post-training truncation of every std matrix (SVD, "
        "clamped at 0); each is evaluated like the method itself. Empty: none.",
    )
    truncation_draws: int = Field(
        100,
        gt=0,
        le=MAX_DRAWS,
        description="Posterior draws per truncated (and untruncated) evaluation.",
    )
    snr_steps: list[int] = Field(
        default_factory=list,
        description="Training steps (1-based) at which the gradient SNR E[g]^2 / Var[g] of "
        "the std parameters is taken over the last snr_window batches.",
    )
    snr_window: int = Field(
        10, ge=2, le=10_000, description="Batches in the SNR window (paper: 10)."
    )
    elbo_steps: list[int] = Field(
        default_factory=list,
        description="Training steps (1-based) at which -ELBO per example is evaluated on the "
        "validation split (the test split if the data has none).",
    )
    elbo_draws: int = Field(4, gt=0, le=MAX_DRAWS, description="Weight draws per -ELBO evaluation.")
    heatmap_site: str | None = Field(
        None,
        description="Weight site whose std matrix and its rank-1 and rank-2 approximations "
        "are drawn as heat maps (Figure 4); null: the first weight site.",
    )

    @field_validator("truncation_ranks")
    @classmethod
    def _ranks(cls, v: list[int]) -> list[int]:
        return _positive_sorted(v, "truncation_ranks", MAX_WIDTH)

    @field_validator("snr_steps", "elbo_steps")
    @classmethod
    def _steps(cls, v: list[int]) -> list[int]:
        return _positive_sorted(v, "steps", MAX_STEPS)
