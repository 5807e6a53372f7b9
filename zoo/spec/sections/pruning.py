"""The ``metrics.pruning`` section of a spec: the over-pruning study of Trippe & Turner (2018).

Like :mod:`zoo.spec.schema`, this module never imports torch.
"""

from __future__ import annotations

from pydantic import Field

from zoo.spec.sections.inference import Strict

__all__ = ["PruningSpec"]


class PruningSpec(Strict):
    """Per-unit pruning statistics, the pruning rule and optimization trajectories.

    A hidden unit is pruned when its outgoing weights are confidently near zero (every
    outgoing weight has ``|mean| / std < out_snr_max``) and its incoming weights and bias
    sit at the prior (their mean KL to the prior is at most ``in_kl_max`` nats and their
    mean posterior std is at least ``in_std_ratio_min`` times the prior std). The defaults
    follow the paper's description and its code's 20% rule on the std.
    """

    out_snr_max: float = Field(
        2.0, gt=0, description="Outgoing weights count as near zero when |mean|/std is below "
        "this (2: zero inside the central ~95% interval).",
    )  # fmt: skip
    in_kl_max: float = Field(
        0.1, gt=0, description="Incoming weights sit at the prior when their mean KL "
        "(nats per weight) to it is at most this.",
    )  # fmt: skip
    in_std_ratio_min: float = Field(
        0.8, gt=0, le=1, description="... and their mean std is at least this fraction of "
        "the prior std (their code: within 20%).",
    )  # fmt: skip
    draws: int = Field(
        50, gt=1, description="Posterior draws for the activation variances (and NUTS stats)."
    )
    trajectory_every: int = Field(
        0, ge=0, description="Record KL, ELBO, train and test NLL of svi methods every this "
        "many steps (their Figure 4); 0 records none.",
    )  # fmt: skip
    trajectory_draws: int = Field(
        20, gt=0, description="Posterior draws per trajectory point (fixed seed, so the "
        "optimization itself is unchanged).",
    )  # fmt: skip
