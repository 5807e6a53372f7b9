"""The ``metrics`` and ``report`` sections of a spec: test metrics and the report's layout.

No torch import here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from zoo.spec.base import Section

__all__ = ["MetricsSpec", "ReportSpec"]


class MetricsSpec(Section):
    """Which test metrics to compute."""

    names: list[Literal["accuracy", "nll", "brier", "ece", "rmse"]] | None = Field(
        None, description="Metrics to report; null picks those of the likelihood."
    )
    ece_bins: int = Field(
        15, gt=0, le=10_000, description="Equal-width confidence bins of the ECE."
    )


class ReportSpec(Section):
    """Shape of the report."""

    x: str = Field("model.depth", description="Column on the x axis of the figures.")
    hue: str = Field("method", description="Column that gets one line per value.")
    figures: list[str] = Field(
        default_factory=lambda: ["accuracy", "nll", "neg_elbo"],
        description="Metrics plotted against x.",
    )
