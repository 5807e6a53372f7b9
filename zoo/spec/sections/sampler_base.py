"""What every sampler section shares: the fields of :class:`Sampler` (warm-up, draws,
chains, the start, the symmetry moves), how a method starts and holds its chains
(:class:`ChainPlan`), and the checks of the batched kernels' pooled mass matrices and
trajectory floor. The sections themselves are in :mod:`zoo.spec.sections.samplers`. No torch
import here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import Field, model_validator

from zoo.spec.sections.bounds import MAX_CHAINS, MAX_DRAWS, METHOD_NAME, Real
from zoo.spec.sections.symmetry import SymmetryMoves

__all__ = [
    "BATCHED_ONLY",
    "MAX_INIT_FITS",
    "MIN_TRAJECTORY",
    "ChainPlan",
    "Sampler",
    "mass_matrix_problem",
    "number_or_prior",
]

#: Most independent fits of init_from that start one chees cell's chains (init_fits).
MAX_INIT_FITS = 64


class ChainPlan(NamedTuple):
    """How the one fit of every sampler (:func:`zoo.inference.sampling.fit_sampler`) starts,
    holds and watches a method's chains (each section's :meth:`Sampler.plan`): ``fits``
    independent fits of ``init_from`` the chains are split among, each chain at its own draw
    of its fit (``spread: posterior``) or all at its median (``mode``); ``held`` draws per
    chain, thinned evenly (None: all); every draw streamed into moments kept apart in
    ``moment_groups`` groups (None: none); ``compile`` the batched potential first; sample
    with the cell's torch threads (``cell_threads``) or one (a few chains' small operations).
    """

    fits: int = 1
    spread: Literal["posterior", "mode"] = "mode"
    held: int | None = None
    moment_groups: int | None = None
    compile: bool = False
    cell_threads: bool = False


class Sampler(SymmetryMoves):
    family: ClassVar[str] = "sampler"
    starts_samplers: ClassVar[bool] = False
    needs_samplable_model: ClassVar[bool] = True
    #: The method's own field that holds its stopping rule (None: a study's rule, through
    #: ``Hooks.stop_when``, may extend its chains).
    stopping_rule: ClassVar[str | None] = None

    name: str = METHOD_NAME
    warmup: int = Field(
        200, ge=0, le=MAX_DRAWS, description="Warmup (adaptation) iterations per chain."
    )
    draws: int = Field(500, gt=0, le=MAX_DRAWS, description="Kept draws per chain.")
    chains: int = Field(
        1,
        ge=1,
        le=MAX_CHAINS,
        description="Chains, run one after the other (unless vectorize_chains).",
    )
    target_accept: float = Field(
        0.8, gt=0, lt=1, description="Target acceptance probability of step-size adaptation."
    )
    step_size: Real | None = Field(
        None, gt=0, description="Initial step size; null finds one heuristically."
    )
    init_from: str = Field(
        "prior",
        description="'prior' (a prior draw) or the name of a variational method of this spec "
        "whose posterior mean starts the chains (refitted in this cell, same seed).",
    )
    predictive_draws: int = Field(
        200,
        gt=0,
        le=MAX_DRAWS,
        description="Draws (evenly thinned) used for the predictive metrics.",
    )

    def kept_per_chain(self) -> tuple[str, int]:
        """``(field, draws held per chain)``: what the draws bound multiplies by chains."""
        return "draws", self.draws

    def draws_cap(self) -> int:
        """Most draws per chain the method draws on its own (a study's stopping rule may
        extend them: :meth:`PriceOfMeanFieldStudy.draws_cap`)."""
        return self.draws

    def transition_gradients(self) -> int:
        """The most gradients one chain's transition can take (one for a kernel without a
        trajectory): what an upper bound of a cell's work multiplies
        (:func:`zoo.execution.order.work_bound`)."""
        return 1

    def plan(self) -> ChainPlan:
        """One fit's median starts all chains, every draw held, one thread."""
        return ChainPlan()

    @model_validator(mode="after")
    def _kept_draws(self):
        field, kept = self.kept_per_chain()
        if kept * self.chains > MAX_DRAWS:
            raise ValueError(
                f"{field} x chains = {kept * self.chains:,} kept draws; at most "
                f"{MAX_DRAWS:,} fit one machine: lower {field} or chains"
            )
        return self


#: The mass matrices only the batched kernels adapt (one metric pooled over the chains).
BATCHED_ONLY = ("fisher_diag", "fisher_low_rank")


def mass_matrix_problem(mass_matrix: str, vectorize_chains: bool, chains: int) -> str | None:
    """Why ``mass_matrix`` does not go with how the chains run (None: it does): the one-chain
    path adapts diag, dense and block matrices, the batched one diag (per chain), dense and
    the Fisher metrics (pooled over the chains)."""
    batched = vectorize_chains and chains > 1
    if batched and mass_matrix == "block":
        return (
            "mass_matrix: block is adapted on the one-chain path only; use mass_matrix: "
            "dense (pooled over the chains) or vectorize_chains: false"
        )
    if not batched and mass_matrix in BATCHED_ONLY:
        return (
            f"mass_matrix: {mass_matrix} is pooled over the chains of a batch; set "
            "vectorize_chains: true with chains >= 2, or mass_matrix: diag or dense"
        )
    return None


#: What ``min_trajectory`` means, for every sampler section that has it.
MIN_TRAJECTORY = (
    "A floor on the trajectory length (integration time, step size x steps; "
    "batched chains only): NUTS builds its tree at least to the depth that reaches it, "
    "HMC and ChEES take at least that many steps' worth. 'prior': Izmailov et al.'s (2021) "
    "pi/2 x the prior's largest standard deviation, under the adapted metric's widest "
    "coordinate (zoo.inference.mcmc.trajectory_floor). null: no floor."
)


def number_or_prior(v: Any) -> Any:
    """``min_trajectory``'s check before its type's: a number or ``prior``."""
    if isinstance(v, str) and v != "prior":
        raise ValueError(
            f"{v!r} is neither a number nor 'prior': give the floor's time (step size x "
            "steps) or prior"
        )
    if isinstance(v, float | int) and not isinstance(v, bool) and v <= 0:
        raise ValueError(f"min_trajectory ({float(v)}) must be > 0")
    return v
