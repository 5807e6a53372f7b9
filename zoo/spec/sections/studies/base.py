"""What every study section shares: :class:`StudySection` (families, ``methods``, the
questions the schema asks a study) and :class:`GaussianFitSpec`, the Gaussian fit to
draws that the ``price_of_mean_field`` and ``predictive`` studies (and the Gaussian
simulation) use. No torch import here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from zoo.spec.base import Section
from zoo.spec.sections.bounds import Real

__all__ = ["GaussianFitSpec", "StudySection"]


class StudySection(Section):
    """The base of every study section: the families it applies to and ``methods``.

    A study section declares ``families``, the method families whose cells it can record
    (``svi``, ``point``, ``sampler``), and answers the questions the schema asks of it:
    which networks it means anything for, which methods it cannot record and why, and which
    data cannot serve it.
    """

    families: ClassVar[frozenset[str]]
    #: Dense D x D float64 matrices over all weights the study holds at once (D the weights
    #: and biases): what :mod:`zoo.spec.memory` counts for it.
    dense_matrices: ClassVar[int] = 0

    methods: list[str] | None = Field(
        None,
        description="Names of the inference methods this study records; null: every "
        "method of the spec it applies to.",
    )

    @field_validator("methods")
    @classmethod
    def _unique(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"methods must not repeat a name, got {v}")
        return v

    def applies_to_model(self, model: Any) -> bool:
        """Whether the study means anything for the network section ``model``."""
        return True

    def needs(self) -> str:
        """What the study applies to, in words, for error messages."""
        return " or ".join(sorted(self.families)) + " methods"

    def method_problems(self, method: Any) -> list[tuple[str, str]]:
        """(field of ``method``, message) for each reason the study cannot record it."""
        return []

    def data_problems(self, data: Any) -> list[tuple[str, str]]:
        """(field of the study, message) for each reason the data section ``data`` cannot
        serve it."""
        return []


class GaussianFitSpec(Section):
    """How q_full (the Gaussian fit to the draws) is estimated for the diag-vs-full report."""

    cov: Literal["empirical", "ledoit_wolf"] = Field(
        "ledoit_wolf", description="Covariance estimate: sample covariance or Ledoit-Wolf."
    )
    jitter: Real = Field(1e-6, ge=0, description="Added to the covariance diagonal.")
