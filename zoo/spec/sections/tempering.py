"""The batched NUTS and HMC sections' ``tempering`` setting: parallel tempering over a
geometric ladder of likelihood temperatures (:mod:`zoo.inference.mcmc.tempering`).

A ``tempering`` block runs ``chains`` ladders of ``rungs`` chains each: the likelihood
raised to :math:`\\beta_k = \\beta_{\\min}^{k/(K-1)}`, the prior kept, neighbouring rungs'
states swapped by the even-odd scheme of non-reversible parallel tempering (Syed et al.
2022). Only the cold rung's ``chains`` chains are the run's draws; a transition costs
``rungs`` times the untempered one's gradients. No torch import here.
"""

from __future__ import annotations

from pydantic import Field

from zoo.spec.base import Section

__all__ = ["TEMPERING", "Tempering", "tempering_problems"]

#: The ``tempering`` field's description in the NUTS and HMC sections.
TEMPERING = (
    "Parallel tempering (zoo.inference.mcmc.tempering): rungs x chains chains, the "
    "likelihood of rung k to the power beta_min^(k / (rungs - 1)), neighbours' states "
    "swapped after every transition; the draws are the cold rung's. Batched chains with a "
    "per-chain diagonal mass matrix only. None: off."
)


class Tempering(Section):
    """A ladder of inverse temperatures for the likelihood, from 1 down to ``beta_min``."""

    rungs: int = Field(
        ge=2,
        le=32,
        description="Temperatures in the ladder, the posterior's (beta = 1) included; each "
        "rung runs as many chains as the section's chains.",
    )
    beta_min: float = Field(
        gt=0.0,
        lt=1.0,
        description="The hottest rung's inverse temperature: the likelihood to this power "
        "times the prior. Low enough that chains at that power alone cross between the "
        "posterior's modes (the default's depth-4 network: 0.2), the rungs close enough that "
        "neighbours swap (the fit records the lowest pair's rate, tempering_swap_rate_min).",
    )


def tempering_problems(vectorize: bool, chains: int, mass: str) -> list[str]:
    """Tempering runs in the batched loop, each rung with its own diagonal metric."""
    out = []
    if not (vectorize and chains > 1):
        out.append(
            "tempering is a setting of the batched kernels; set vectorize_chains: true "
            "with chains >= 2, or remove tempering"
        )
    if mass != "diag":
        out.append(
            f"tempering adapts each rung's own diagonal mass matrix; mass_matrix: {mass} "
            "is one metric for all chains: set mass_matrix: diag or remove tempering"
        )
    return out
