"""The ``pruning`` study section: per-unit pruning statistics, the pruning rule and
optimization trajectories (Trippe & Turner 2018). No torch import here.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from zoo.spec.sections.bounds import MAX_DRAWS, MAX_STEPS, Real
from zoo.spec.sections.studies.base import StudySection

__all__ = ["PruningStudy"]


class PruningStudy(StudySection):
    """Per-unit pruning statistics, the pruning rule and optimization trajectories.

    Trippe & Turner (2018). A hidden unit is pruned when its outgoing weights are
    confidently near zero (every outgoing weight has ``|mean| / std < out_snr_max``) and its
    incoming weights and bias sit at the prior (their mean KL to the prior is at most
    ``in_kl_max`` nats and their mean posterior std is at least ``in_std_ratio_min`` times
    the prior std). The defaults follow the paper's description and its code's 20% rule on
    the std. Sampler cells get the statistics from their draws. Every method (point
    estimates included) also gets the rule-free functional measure: each hidden unit's share
    of output variance and the effective number of units per layer (reports.pruning).
    """

    families: ClassVar[frozenset[str]] = frozenset({"point", "svi", "sampler"})

    kind: Literal["pruning"] = Field(description="Study kind.")
    out_snr_max: Real = Field(
        2.0,
        gt=0,
        description="Outgoing weights count as near zero when |mean|/std is below "
        "this (2: zero inside the central ~95% interval).",
    )
    in_kl_max: Real = Field(
        0.1,
        gt=0,
        description="Incoming weights sit at the prior when their mean KL "
        "(nats per weight) to it is at most this.",
    )
    in_std_ratio_min: Real = Field(
        0.8,
        gt=0,
        le=1,
        description="Incoming weights sit at the prior only when their mean std is also at "
        "least this fraction of the prior std (Trippe & Turner's code: within 20%).",
    )
    draws: int = Field(
        50,
        gt=1,
        le=MAX_DRAWS,
        description="Posterior draws for the activation variances (and NUTS stats).",
    )
    trajectory_every: int = Field(
        0,
        ge=0,
        le=MAX_STEPS,
        description="Record KL, ELBO, train and test NLL of svi methods every this "
        "many steps (their Figure 4); 0 records none.",
    )
    trajectory_draws: int = Field(
        20,
        gt=0,
        le=MAX_DRAWS,
        description="Posterior draws per trajectory point (fixed seed, so the "
        "optimization itself is unchanged).",
    )
