"""The sampler sections of the spec's ``inference`` list: ``nuts``, ``hmc``, ``chees``,
``mclmc`` and ``mams``.

- ``nuts`` and ``hmc``: Hamiltonian Monte Carlo (:mod:`zoo.inference.mcmc`), one chain
  after the other or (``vectorize_chains``) a few chains as one batched computation, each
  with its own adaptation;
- ``chees``: ChEES-HMC (Hoffman, Radul & Sountsov 2021), hundreds to thousands of chains
  as one batch on the runtime's device, sharing one step size and one jittered trajectory
  length adapted across chains; the draws stream into running moments (mean, covariance,
  between-chain ESS) and only a thinned ``keep_draws`` per chain are held;
- ``mclmc`` and ``mams``: microcanonical Langevin Monte Carlo (Robnik et al. 2023) and its
  Metropolis-adjusted form (Robnik, Cohn-Gordon & Seljak 2025), BlackJAX's kernels and
  tunings ported to the zoo's batched loop, each chain tuned on its own.

Every sampler can start at the posterior of an earlier variational method of the same cell
(``init_from``). The sections are re-exported by :mod:`zoo.spec.sections.inference`, whose
``InferenceSpec`` union holds them. No torch import here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from zoo.spec.sections.bounds import (
    MAX_CHEES_CHAINS,
    MAX_DRAWS,
    MAX_LEAPFROG,
    MAX_STEPS,
    Real,
)
from zoo.spec.sections.sampler_base import (
    MAX_INIT_FITS,
    MIN_TRAJECTORY,
    ChainPlan,
    Sampler,
    mass_matrix_problem,
    number_or_prior,
)
from zoo.spec.sections.tempering import TEMPERING, Tempering, tempering_problems

__all__ = [
    "ChEESMethod",
    "ChainPlan",
    "HMCMethod",
    "MAMSMethod",
    "MCLMCMethod",
    "NUTSMethod",
    "mass_matrix_problem",
]


class _PerChainSampler(Sampler):
    vectorize_chains: bool = Field(
        False,
        description="Run the chains as one batched computation (each keeps its own seed and "
        "step size; the mass matrix as mass_matrix says).",
    )
    min_trajectory: Real | Literal["prior"] | None = Field(None, description=MIN_TRAJECTORY)
    tempering: Tempering | None = Field(None, description=TEMPERING)

    check_min_trajectory = field_validator("min_trajectory", mode="before")(number_or_prior)

    @model_validator(mode="after")
    def _batched_settings(self):
        problems = []
        mass = getattr(self, "mass_matrix", "diag")
        problem = mass_matrix_problem(mass, self.vectorize_chains, self.chains)
        if problem is not None:
            problems.append(problem)
        if self.min_trajectory is not None and not (self.vectorize_chains and self.chains > 1):
            problems.append(
                "min_trajectory is a setting of the batched kernels; set vectorize_chains: "
                "true with chains >= 2, or remove min_trajectory"
            )
        if self.tempering is not None:
            problems += tempering_problems(self.vectorize_chains, self.chains, mass)
        if problems:
            raise ValueError("; ".join(problems))
        return self


class NUTSMethod(_PerChainSampler):
    """The No-U-Turn sampler (Hoffman & Gelman 2014) with adapted step size and mass matrix."""

    kind: Literal["nuts"] = Field(description="Inference kind.")
    max_tree_depth: int = Field(10, ge=1, le=15, description="Maximum tree depth.")

    def transition_gradients(self) -> int:
        """A full tree: ``2^max_tree_depth - 1`` leapfrog steps."""
        return 2**self.max_tree_depth - 1

    mass_matrix: Literal["diag", "dense", "block", "fisher_diag", "fisher_low_rank"] = Field(
        "diag",
        description="Adapted mass matrix, in Stan's windows: diag (each chain its own); "
        "dense (one chain at a time: each its own; vectorize_chains: one for all chains, from "
        "the pooled within-chain covariance of the window's draws); block (dense per layer, "
        "one chain at a time); fisher_diag and fisher_low_rank (vectorize_chains only: one "
        "for all chains, the Fisher-divergence diagonal sqrt(var(draws) / var(gradients)) "
        "and its low-rank correction, Seyboldt, Carlson & Carpenter 2026, as nutpie).",
    )


class HMCMethod(_PerChainSampler):
    """HMC with a fixed number of leapfrog steps and adapted step size (hamiltorch-style)."""

    kind: Literal["hmc"] = Field(description="Inference kind.")
    num_steps: int = Field(20, ge=1, le=10_000, description="Leapfrog steps per draw.")

    def transition_gradients(self) -> int:
        return self.num_steps

    adapt_mass_matrix: bool = Field(False, description="Also adapt a mass matrix.")
    mass_matrix: Literal["diag", "dense", "fisher_diag", "fisher_low_rank"] = Field(
        "diag",
        description="The mass matrix adapt_mass_matrix adapts, as nuts's mass_matrix: diag "
        "(each chain its own), dense, fisher_diag or fisher_low_rank (batched: one for all "
        "chains).",
    )

    @model_validator(mode="after")
    def _mass_needs_adaptation(self):
        if self.mass_matrix != "diag" and not self.adapt_mass_matrix:
            raise ValueError(
                f"mass_matrix: {self.mass_matrix} is adapted only with adapt_mass_matrix: "
                "true; set it or remove mass_matrix"
            )
        return self


class ChEESMethod(Sampler):
    """ChEES-HMC: many chains as one batch, jittered trajectory length adapted across chains.

    Hoffman, Radul & Sountsov (2021), "An Adaptive-MCMC Scheme for Setting Trajectory
    Lengths in Hamiltonian Monte Carlo" (AISTATS): one step size (dual averaging towards
    ``target_accept``) and one trajectory length, jittered per draw, adapted to maximize the
    change in the estimated squared distance of the chains from their centre; a diagonal mass
    matrix from the chains' spread. Every post-warm-up draw of every chain is streamed into
    running moments (mean, covariance, between-chain ESS); ``keep_draws`` per chain, thinned
    evenly over the whole stream, are held for the diagnostics, the predictive metrics and
    the ArviZ file. The chains always run as one batch (no ``vectorize_chains``).
    """

    #: Always one batched computation; a fact studies ask (no field: it cannot be turned off).
    vectorize_chains: ClassVar[bool] = True
    stopping_rule: ClassVar[str | None] = "target_ess"

    kind: Literal["chees"] = Field(description="Inference kind.")
    draws: int = Field(
        500,
        gt=0,
        le=MAX_DRAWS,
        description="Draws per chain after warm-up, all streamed into the moments (only "
        "keep_draws of them are held); with target_ess the minimum before the ESS is asked.",
    )
    chains: int = Field(
        64,
        ge=2,
        le=MAX_CHEES_CHAINS,
        description=f"Chains, run as one batch on the runtime's device (2 to "
        f"{MAX_CHEES_CHAINS:,}). The adaptation and the ESS read across them: use 64 or more.",
    )
    target_accept: float = Field(
        0.651,
        gt=0,
        lt=1,
        description="Target of the step-size adaptation for the harmonic mean of the chains' "
        "acceptance probabilities; 0.651 is optimal for HMC in high dimension (Beskos et al. "
        "2013).",
    )
    keep_draws: int = Field(
        100,
        ge=1,
        le=MAX_DRAWS,
        description="Draws held per chain, thinned evenly over all drawn ones: what the "
        "diagnostics, the predictive metrics and the ArviZ file see (keep_draws x chains "
        f"<= {MAX_DRAWS:,}).",
    )
    target_ess: int | None = Field(
        None,
        gt=0,
        le=MAX_STEPS,
        description="Stopping rule: after `draws`, draw on in rounds of 25 until the streamed "
        "moments' median between-chain ESS (Moments.n_eff) reaches this, or max_draws; null: "
        "exactly `draws`. The price of mean field's KL bias at this n is then the same in "
        "every cell (use this instead of the study's kl_target_draws).",
    )
    max_draws: int | None = Field(
        None,
        gt=0,
        le=MAX_DRAWS,
        description="Cap on draws per chain with target_ess; null: 4 x draws.",
    )
    max_leapfrog: int = Field(
        1024,
        ge=1,
        le=MAX_LEAPFROG,
        description="Most leapfrog steps of one trajectory (caps the adapted length / step "
        "size and so the time of a draw).",
    )
    min_trajectory: Real | Literal["prior"] | None = Field(None, description=MIN_TRAJECTORY)
    init_spread: Literal["posterior", "mode"] = Field(
        "posterior",
        description="Where the chains start: 'posterior', each at its own draw of the "
        "init_from posterior (of the prior with init_from: prior); 'mode', all at that "
        "posterior's median (with init_from: prior and init_fits K >= 2: each block of "
        "chains at its own prior draw, superchains from over-dispersed starts).",
    )
    compile: bool = Field(
        False,
        description="Run the batched potential and its gradient through torch.compile "
        "(compiled once per cell, before the warm-up; a CPU needs a C++ compiler).",
    )
    init_fits: int = Field(
        1,
        ge=1,
        le=MAX_INIT_FITS,
        description="Independent fits of init_from (seeds seed, seed + 100003, ...) the chains "
        "are split among, in contiguous blocks as stream_groups splits them: each chain starts "
        "at its own draw of its block's fit (init_spread: posterior) or at that fit's median "
        "(mode). 1: every chain from the same fit, so that they sample one mode; more: an "
        "ensemble of starts in different modes, whose R-hat shows how far apart the modes "
        "are (set stream_groups to the same number to keep each fit's moments apart). With "
        "init_from: prior and init_spread: mode, K independent prior draws instead of fits "
        "(a control that no fit chose).",
    )
    stream_groups: int = Field(
        8,
        ge=1,
        le=256,
        description="Groups of contiguous chains whose means and covariances are also kept "
        "apart (the spread of the covariance estimate between independent sets of chains); "
        "8 D^2 bytes each (8 MB at D = 1000); lowered to chains when more.",
    )

    check_min_trajectory = field_validator("min_trajectory", mode="before")(number_or_prior)

    @model_validator(mode="before")
    @classmethod
    def _no_vectorize_field(cls, data: Any) -> Any:
        if isinstance(data, dict) and "vectorize_chains" in data:
            raise ValueError(
                "vectorize_chains: chees always runs its chains as one batch on the runtime's "
                "device; remove the field"
            )
        return data

    def kept_per_chain(self) -> tuple[str, int]:
        return "keep_draws", self.keep_draws

    def transition_gradients(self) -> int:
        return self.max_leapfrog

    def plan(self) -> ChainPlan:
        """Its fields' (``init_fits``, ``init_spread``, ``keep_draws``, ...); cell threads."""
        own = self.init_fits, self.init_spread, self.keep_draws, self.stream_groups
        return ChainPlan(*own, self.compile, True)

    def draws_cap(self) -> int:
        """Most draws per chain: ``max_draws`` (or 4 x ``draws``) with ``target_ess``, else
        ``draws``."""
        if self.target_ess is None:
            return self.draws
        return self.max_draws if self.max_draws is not None else 4 * self.draws

    @model_validator(mode="after")
    def _consistent(self):
        problems = []
        if self.target_ess is None and self.max_draws is not None:
            problems.append("max_draws applies only with target_ess; remove it or set target_ess")
        elif self.max_draws is not None and self.max_draws < self.draws:
            problems.append(
                f"max_draws ({self.max_draws}) must be >= draws ({self.draws}): "
                "draws is the minimum, max_draws the cap"
            )
        if self.keep_draws > self.draws:
            problems.append(
                f"keep_draws ({self.keep_draws}) must be <= draws ({self.draws}): "
                "the held draws are a thinning of the drawn ones; lower "
                "keep_draws or raise draws"
            )
        cap = self.chains * self.draws_cap()
        if self.target_ess is not None and self.target_ess > cap:
            problems.append(
                f"target_ess ({self.target_ess:,}) is more than chains x "
                f"max_draws = {cap:,} draws can give; lower target_ess or raise "
                "chains or max_draws"
            )
        if self.init_fits > 1 and self.init_from == "prior" and self.init_spread != "mode":
            problems.append(
                f"init_fits: {self.init_fits} with init_from: prior starts superchains at "
                f"{self.init_fits} prior draws, each shared by its block: set init_spread: "
                "mode (or init_fits: 1 for a prior draw per chain, or init_from: a method "
                "of this spec)"
            )
        if self.init_fits > self.chains:
            problems.append(
                f"init_fits ({self.init_fits}) must be <= chains ({self.chains}): "
                "each fit starts a block of chains"
            )
        if self.init_spread == "mode" and self.init_from == "prior" and self.init_fits < 2:
            problems.append(
                "init_spread: mode with init_from: prior needs init_fits >= 2 (superchains "
                "at independent prior draws; the prior's median, all weights 0, is a saddle "
                "of every network); set init_fits, init_from: a variational method, or "
                "init_spread: posterior (each chain its own prior draw)"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self


class _Microcanonical(Sampler):
    #: Always one batched computation (each chain tuned on its own); no field.
    vectorize_chains: ClassVar[bool] = True

    chains: int = Field(
        4,
        ge=1,
        le=MAX_CHEES_CHAINS,
        description=f"Chains, run as one batch on the runtime's device (1 to "
        f"{MAX_CHEES_CHAINS:,}), each with its own tuning.",
    )
    adapt_mass_matrix: bool = Field(
        True,
        description="Tune each chain's diagonal preconditioner (inverse mass matrix) from "
        "the warm-up's moments, as BlackJAX's diagonal_preconditioning.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_vectorize_field(cls, data: Any) -> Any:
        if isinstance(data, dict) and "vectorize_chains" in data:
            raise ValueError(
                f"vectorize_chains: {data.get('kind', 'this sampler')} always runs its chains "
                "as one batch; remove the field"
            )
        return data


class MCLMCMethod(_Microcanonical):
    """Microcanonical Langevin Monte Carlo (Robnik, De Luca, Silverstein & Seljak 2023).

    Unit-speed (isokinetic) dynamics with partial momentum refreshment, integrated with
    McLachlan's scheme and no Metropolis test: its bias is held down by tuning the step size
    to a small energy error per dimension (``desired_energy_var``), and the momentum
    decoherence length L to the chains' autocorrelation, as BlackJAX's
    ``mclmc_find_L_and_step_size`` (``zoo.inference.mcmc.mclmc_adaptation``).
    """

    #: No Metropolis test: nothing to target (the loop's argument check reads this).
    target_accept: ClassVar[float] = 0.5

    kind: Literal["mclmc"] = Field(description="Inference kind.")
    step_size: Real | None = Field(
        None, gt=0, description="Initial step size; null: BlackJAX's sqrt(D) / 4."
    )
    desired_energy_var: float = Field(
        5e-4,
        gt=0,
        lt=1,
        description="Target variance of the energy error per dimension, which the step size "
        "is tuned to (BlackJAX's default 5e-4; smaller: smaller steps, less bias).",
    )

    def transition_gradients(self) -> int:
        """One McLachlan step: two gradients."""
        return 2


class MAMSMethod(_Microcanonical):
    """Metropolis-adjusted microcanonical sampler (Robnik, Cohn-Gordon & Seljak 2025).

    Isokinetic trajectories of a random number of McLachlan steps (mean L / step size)
    from a fresh unit momentum, accepted by a Metropolis test, so exact at any step size;
    step size by dual averaging, L from the chains' autocorrelation, as BlackJAX's
    ``adjusted_mclmc_find_L_and_step_size`` (``zoo.inference.mcmc.mams``).
    """

    kind: Literal["mams"] = Field(description="Inference kind.")
    target_accept: float = Field(
        0.9, gt=0, lt=1, description="Target acceptance rate of the step-size adaptation."
    )
    step_size: Real | None = Field(
        None, gt=0, description="Initial step size; null: BlackJAX's 0.2 sqrt(D)."
    )
    max_steps: int = Field(
        1024,
        ge=1,
        le=MAX_LEAPFROG,
        description="Most integration steps of one trajectory (two gradients each).",
    )

    def transition_gradients(self) -> int:
        return 2 * self.max_steps
