"""``simulation`` sections of the known-answer targets: exact answers with a network's pathologies.

Two controls whose posterior has the symmetries that make a network's reference hard and
whose answer is known exactly (``docs/notes/known_answers.md``):

- :class:`RidgeTargetSimulation`: bilinear pairs ``a_k b_k = y_k`` on a hyperbola ridge
  with a sign symmetry, plus a correlated Gaussian block (:class:`reports.ridge_target.RidgeTarget`),
  sampled by the zoo's NUTS in superchains started from over-dispersed prior draws;
- :class:`PermutationTargetSimulation`: a Gaussian over hidden units whose draws are
  relabelled at random (:mod:`reports.targets`), aligned and debiased as a network's are.

No torch import here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from zoo.spec.base import Section
from zoo.spec.sections.bounds import MAX_DRAWS, Real

__all__ = ["UNIT_KINDS", "VARIANTS", "PermutationTargetSimulation", "RidgeTargetSimulation"]

#: The ridge target's run variants, in the order of the results' rows.
VARIANTS = ("long", "short", "separated", "one_branch")
#: The permutation target's unit kinds, in the order of the results' rows.
UNIT_KINDS = ("distinct", "near_identical", "dead_at_prior")


def _once(v: list[str]) -> list[str]:
    """A list of names, each at most once (a variant or kind run twice is a typo)."""
    if len(set(v)) != len(v):
        raise ValueError(f"an entry is listed twice: {v}")
    return v


class RidgeTargetSimulation(Section):
    """The zoo's NUTS on bilinear pairs on a hyperbola ridge and a correlated Gaussian block.

    ``K`` pairs ``a_k, b_k ~ N(prior_mean, prior_sd^2)``, ``y_k ~ N(a_k b_k, noise_sd^2)``
    observed, and ``z ~ N(block_mean, S)`` with ``S`` a random covariance of condition
    number ``block_condition`` (seeded ``block_seed``). Exact moments by quadrature, so the
    exact KL(q_diag || q_full) of the moment-matched Gaussian is known. ``chains`` chains run
    as one batch, in ``superchains`` superchains each started from one prior draw with the
    prior's standard deviations times ``start_scale``. One result row per variant: ``long``
    (the full run on ``y``), ``short`` (the same cut short), ``separated`` (the full run on
    ``separated_y``, branches behind a barrier of about ``y^2 / 2 noise_sd^2`` nats) and
    ``one_branch`` (the separated run with the starts folded into the positive branch).
    """

    kind: Literal["ridge_target"] = Field(description="Simulation kind.")
    y: list[Real] = Field(
        default_factory=lambda: [0.5, 0.8],
        min_length=1,
        max_length=20,
        description="Observations of the pairs of the long and short runs (branches joined "
        "through the origin when y / noise_sd is small).",
    )
    separated_y: list[Real] = Field(
        default_factory=lambda: [3.0],
        min_length=1,
        max_length=20,
        description="Observations of the separated and one_branch runs (two branches behind "
        "a barrier of about y^2 / 2 noise_sd^2 nats: 18 at y = 3).",
    )
    noise_sd: Real = Field(0.5, gt=0, le=100, description="s: y_k ~ N(a_k b_k, s^2).")
    prior_mean: tuple[Real, Real] = Field((0.0, 0.0), description="Prior means of a and b.")
    prior_sd: tuple[Real, Real] = Field(
        (1.0, 1.0), description="Prior standard deviations of a and b (positive)."
    )
    block_mean: list[Real] = Field(
        default_factory=lambda: [1.0, -1.0, 0.5],
        min_length=1,
        max_length=50,
        description="Mean of the Gaussian block z; its length is the block's size.",
    )
    block_condition: Real = Field(
        10.0, ge=1, le=1e6, description="Condition number of the block's covariance S."
    )
    block_seed: int = Field(1, ge=0, description="Seeds the block's random covariance S.")
    chains: int = Field(16, ge=4, le=256, description="Chains, run as one batch.")
    superchains: int = Field(
        4, ge=2, le=64, description="Groups of chains sharing one start; must divide chains."
    )
    start_scale: Real = Field(
        2.0, gt=0, le=100, description="Starts: prior draws with the sd times this."
    )
    warmup: int = Field(300, ge=0, le=MAX_DRAWS, description="Warm-up of the full runs.")
    draws: int = Field(500, ge=8, le=MAX_DRAWS, description="Kept draws of the full runs.")
    max_tree_depth: int = Field(10, ge=1, le=15, description="NUTS of the full runs.")
    short_warmup: int = Field(10, ge=0, le=MAX_DRAWS, description="Warm-up of the short run.")
    short_draws: int = Field(30, ge=8, le=MAX_DRAWS, description="Kept draws of the short run.")
    short_max_tree_depth: int = Field(
        2, ge=1, le=15, description="NUTS of the short run: at most 2^depth - 1 steps."
    )
    variants: Annotated[
        list[Literal["long", "short", "separated", "one_branch"]], AfterValidator(_once)
    ] = Field(
        default_factory=lambda: list(VARIANTS),
        min_length=1,
        max_length=4,
        description="The runs, one result row each.",
    )
    kl_groups: int = Field(
        8, ge=2, le=256, description="Chain groups of the debiased KL's error (<= chains)."
    )
    nested_rhat_max: Real = Field(1.01, gt=1, description="Gate: nested R-hat at most this.")
    split_rhat_max: Real = Field(1.05, gt=1, description="Gate: split R-hat at most this.")

    @field_validator("prior_sd")
    @classmethod
    def _positive_sd(cls, v: tuple[float, float]) -> tuple[float, float]:
        if min(v) <= 0:
            raise ValueError(f"prior standard deviations must be positive, got {list(v)}")
        return v

    @model_validator(mode="after")
    def _chains(self) -> RidgeTargetSimulation:
        if self.chains % self.superchains:
            raise ValueError(
                f"chains ({self.chains}) must split into superchains ({self.superchains}) "
                "of equal size: make chains a multiple of superchains"
            )
        if self.kl_groups > self.chains:
            raise ValueError(f"kl_groups ({self.kl_groups}) exceeds chains ({self.chains})")
        return self


class PermutationTargetSimulation(Section):
    """The alignment pipeline on a symmetrised Gaussian over hidden units, with its exact KL.

    For each unit kind (``distinct``: every unit a signature of its own, the last one dead
    with a direction of its own; ``near_identical``: units 0 and 1 ``near_identical`` sd
    apart; ``dead_at_prior``: the dead unit's incoming weights at a centred prior) and each
    of ``seeds`` seeds, exact AR(1) chains of the Gaussian with every draw's units
    relabelled at random go through the Stephens pivot, the alignment, the debiased KL and
    the alignment null, beside the exact quotient KL.
    """

    kind: Literal["permutation_target"] = Field(description="Simulation kind.")
    kinds: Annotated[
        list[Literal["distinct", "near_identical", "dead_at_prior"]], AfterValidator(_once)
    ] = Field(
        default_factory=lambda: list(UNIT_KINDS),
        min_length=1,
        max_length=3,
        description="The unit kinds, one summary row each.",
    )
    inputs: int = Field(2, ge=1, le=64, description="F: incoming weights per unit.")
    hidden: int = Field(4, ge=3, le=32, description="H: units (one near-identical pair, one dead).")
    outputs: int = Field(1, ge=1, le=16, description="O: outgoing weights per unit.")
    separation: Real = Field(
        6.0, gt=0, le=100, description="Length of a unit's mean incoming vector, in sd."
    )
    near_identical: Real = Field(
        0.3, gt=0, le=100, description="Distance of the near-identical pair's means, in sd."
    )
    dead_sd: Real = Field(0.1, gt=0, le=1, description="sd of a dead unit's outgoing weights.")
    target_seed: int = Field(0, ge=0, description="Seeds the target's directions and covariances.")
    seeds: int = Field(6, ge=1, le=100, description="Draw seeds per kind: seed, seed + 1, ...")
    chains: int = Field(16, ge=2, le=256, description="AR(1) chains per seed.")
    draws: int = Field(500, ge=8, le=MAX_DRAWS, description="Draws per chain.")
    rho: Real = Field(0.5, ge=0, lt=1, description="Lag-one correlation of the chains.")
    groups: int = Field(8, ge=2, le=256, description="Chain groups of the debiased KL (<= chains).")
    strength: Real = Field(
        0.0,
        ge=0,
        le=10,
        description="Weight of the units' log strength in the alignment's signatures "
        "(reports.alignment.unit_signatures); 0: by direction alone, as the "
        "price_of_mean_field study aligns. 0.5 places the dead unit at a centred prior.",
    )
    pivot_iterations: int = Field(
        5,
        ge=1,
        le=1000,
        description="Cap on Stephens' pivot iteration (reports.alignment.pivot_from_draws); 5 "
        "as the price_of_mean_field study; a near-identical pair needs 20-30 rounds to reach "
        "the fixed point that rule_draws' answer is computed at.",
    )
    rule_draws: int = Field(
        200_000,
        ge=1_000,
        le=10_000_000,
        description="Independent draws of the rule's own answer per kind "
        "(reports.targets.rule_answer: the quotient KL that aligning defines, pivot iterated "
        "to its fixed point).",
    )

    @model_validator(mode="after")
    def _sizes(self) -> PermutationTargetSimulation:
        if self.groups > self.chains:
            raise ValueError(f"groups ({self.groups}) exceeds chains ({self.chains})")
        d = self.hidden * (self.inputs + 1 + self.outputs)
        if self.chains * self.draws <= d + 1:
            raise ValueError(
                f"chains x draws ({self.chains * self.draws}) must exceed the {d} weights "
                "plus one for a debiased KL: raise draws"
            )
        return self
