"""The ``tune`` section of a spec: hyper-parameters chosen on a validation split.

Trippe & Turner (2018, appendix A) tuned each method's prior standard deviation (ES: its
learning rate; GD: also its posterior standard deviation) on one train/test split. Here a
small grid is searched instead of their Bayesian optimization: for each tuned method and
each grid combination, a *tuning cell* fits the method at the ``at`` sweep values with
``validation_fraction`` of the training part held out, and scores it on that held-out part
(never on the test part). The main cells of the method then run with the grid values of
the best score (:mod:`zoo.spec.tuning` makes the cells, :mod:`zoo.execution.tune` chooses).
No torch import here.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from zoo.spec.base import Section

__all__ = ["HIGHER_IS_BETTER", "TUNING_CELL", "TuneSpec"]

#: Metrics for which a higher value is better; every other metric is a loss (lower wins).
HIGHER_IS_BETTER = frozenset({"accuracy"})

#: The validation context of a tuning cell's spec (:func:`zoo.spec.tuning.tuning_cells`): the
#: one spec that may have ``data.validation_fraction``. Any other spec (a spec file, a sweep
#: or main cell) is refused with it, since its cells would score on held-out training rows
#: and report them as test metrics.
TUNING_CELL = {"tuning_cell": True}


class TuneSpec(Section):
    """A grid search of hyper-parameters on a validation part of the training data."""

    grid: dict[str, list[Any]] = Field(
        description="Spec field path -> values to try, e.g. {prior.scale: [0.1, 0.3, 1.0], "
        "inference.GD.guide.scale: [0.01, 0.05]}. A path inference.<method>.<field> applies "
        "to that method only; any other path to every tuned method that uses it (prior.* "
        "is not gridded for methods without a prior, e.g. kind mle). The grid combinations "
        "are the product of the values that apply to a method."
    )
    methods: list[str] | None = Field(
        None,
        description="The methods tuned; null: every method that some grid path applies to.",
    )
    at: dict[str, Any] = Field(
        default_factory=dict,
        description="Sweep axis -> the value the grid is searched at (e.g. {split: 0}, as "
        "the paper tuned on one split); the other sweep axes are searched separately, "
        "one search per combination of their values. Empty: one search per sweep cell. "
        "(Named at, not on: YAML reads a bare on as true.)",
    )
    validation_fraction: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="Fraction of the cell's training part held out to score the grid "
        "(a seeded split, the same for every method and grid value); the test part is "
        "never used for tuning.",
    )
    metric: str = Field(
        "nll",
        description="The validation metric that picks the grid values: one the cells "
        "compute (metrics.names); lower wins except for accuracy. Ties: the first grid "
        "value.",
    )
