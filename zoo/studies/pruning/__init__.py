"""The over-pruning study (Trippe & Turner 2018): which hidden units a posterior switches off."""

from typing import Any

from zoo.studies.base import CellContext, StudyPlugin
from zoo.studies.pruning.probe import PruningProbe
from zoo.studies.pruning.report import pruning_sections

__all__ = ["STUDY"]


def _probe(section: Any, ctx: CellContext) -> PruningProbe | None:
    """A probe for networks with hidden units (none without hidden layers)."""
    return PruningProbe(section, ctx) if ctx.model.depth else None


STUDY = StudyPlugin("pruning", _probe, pruning_sections)
