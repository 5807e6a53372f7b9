"""The ``vsbc`` study section: variational simulation-based calibration of an svi method
(Yao, Vehtari, Simpson & Gelman 2018). No torch import here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from zoo.spec.sections.bounds import MAX_STEPS
from zoo.spec.sections.studies.base import StudySection

__all__ = ["MAX_REPLICATIONS", "VSBCStudy"]

#: Most replications: each has its own seed ``seed + Stream.VSBC + r`` inside the seeds'
#: headroom, below the k-tied study's streams.
MAX_REPLICATIONS = 400


class VSBCStudy(StudySection):
    """Variational simulation-based calibration (VSBC) of an svi method.

    Yao et al. (2018), "Yes, but did it work?", section 3: ``replications`` times, draw the
    weights from the prior and targets from the likelihood at the training inputs, refit the
    method's guide to them (same settings; ``steps`` replaces its steps), and take q's
    marginal CDF at the true weights, per weight. Exact posteriors give uniform p-values.
    The cell records the share of weights whose p-values fail the symmetry test at 5%
    (``vsbc_asym_frac``: q biased) and the uniformity test at 5% (``vsbc_nonuniform_frac``:
    q biased, too narrow or too wide); the report draws their histograms per site.
    """

    families: ClassVar[frozenset[str]] = frozenset({"svi"})

    kind: Literal["vsbc"] = Field(description="Study kind.")
    replications: int = Field(
        50,
        ge=2,
        le=MAX_REPLICATIONS,
        description="Simulated data sets, each with a refit of the guide.",
    )
    steps: int | None = Field(
        None,
        gt=0,
        le=MAX_STEPS,
        description="Optimizer steps of each refit; null: the method's own steps or epochs.",
    )

    def method_problems(self, method: Any) -> list[tuple[str, str]]:
        guide = getattr(method, "guide", None)
        if getattr(guide, "init_loc", None) == "teacher":
            return [
                (
                    "guide.init_loc",
                    "the vsbc study refits on data simulated from the prior, which has no "
                    "teacher: use init_loc he, prior or zero, or leave this method out of "
                    "the study's methods",
                )
            ]
        return []
