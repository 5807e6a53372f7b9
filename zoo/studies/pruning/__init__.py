"""The over-pruning study (Trippe & Turner 2018): which hidden units a posterior switches off.

The study's table entry: its probe, its report sections and the words of its columns.
"""

from typing import Any

from zoo.studies.base import CellContext, StudyPlugin
from zoo.studies.pruning.probe import PruningProbe
from zoo.studies.pruning.report import pruning_sections

__all__ = ["LABELS", "STUDY"]

#: The study's columns for people: metric -> (what it is; unit or None). ``<metric>.layerK``
#: is the metric within hidden layer K.
LABELS: dict[str, tuple[str, str | None]] = {
    "pruned_frac": ("fraction of hidden units pruned", None),
    "n_pruned": ("hidden units pruned", "units"),
    "in_at_prior_frac": ("fraction of hidden units whose incoming weights stay at the prior", None),
    "units_eff": ("effective number of hidden units (participation ratio)", "units"),
    "units_eff_frac": ("effective fraction of hidden units", None),
    "pruned_var_share": ("share of output variance on rule-pruned units", None),
    "units_eff_draw": ("effective units of one posterior draw's network, mean over draws", "units"),
    "units_eff_prior": ("null: effective units of a network drawn from the prior", "units"),
    "units_eff_prior_sd": ("spread of the prior null over prior draws", "units"),
    "units_eff_shuffled": (
        "null: effective units with the layer's weights shuffled over all positions",
        "units",
    ),
    "units_eff_shuffled_sd": ("spread of the shuffled-unit null over shuffles", "units"),
    "units_eff_sub": (
        "effective units of the draws the shuffled-unit null uses (its unshuffled value)",
        "units",
    ),
}


def _probe(section: Any, ctx: CellContext) -> PruningProbe | None:
    """A probe for networks with hidden units (none without hidden layers)."""
    return PruningProbe(section, ctx) if ctx.model.depth else None


STUDY = StudyPlugin(
    "pruning", _probe, pruning_sections, labels=LABELS, headline=("pruned_frac", "units_eff_frac")
)
