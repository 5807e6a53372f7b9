"""The ``studies`` section of a spec: what the cells record besides their test metrics.

``studies`` is a top-level list, each entry discriminated by ``kind``:

- ``price_of_mean_field``: on a sampler's draws, KL(q_diag || q_full) and the Wasserstein
  distances between the closest diagonal and the full Gaussian fit, with the shift null of
  that KL (Farquhar, Smith & Gal 2020); optionally draws until the chains are worth
  ``kl_target_draws`` independent draws to the covariance estimate;
- ``ktied``: spectra, rank-k truncation, gradient SNR and -ELBO at steps of a variational
  fit (Swiatkowski et al. 2020);
- ``pruning``: per-unit pruning statistics, pruned fractions and optimization trajectories
  (Trippe & Turner 2018);
- ``product_matrix``: the covariance of the product matrix W_L ... W_1 of a deep linear
  network (Farquhar, Smith & Gal 2020);
- ``laplace``: the price of mean field with no sampling: at a mode (a MAP estimate, or an
  MF-VI mean refined to a mode), KL(q_diag || q_full) and W2 for the Laplace Gaussian
  q_full = N(mode, H^-1), H the Hessian or generalized Gauss-Newton of the negative log
  posterior;
- ``predictive``: the price of mean field in predictions: on a sampler's cell, the
  predictive distributions of q_diag, q_full (the Gaussian fits to the draws), the MF-VI
  posterior the chains started from and the draws themselves, compared on the test set and
  on out-of-distribution inputs (total variation, agreement, KL; NLL, ECE, entropy).

Each study says which method families it applies to (``families``) and, where it needs one,
which networks (:meth:`applies_to_model`); ``methods`` narrows it to named methods of the
spec (null: every method it applies to). No torch import here.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from zoo.spec.sections.bounds import MAX_DRAWS, MAX_STEPS, MAX_WIDTH, Real
from zoo.spec.sections.reference_studies import FAR_MAX_FEATURES, LaplaceStudy, PredictiveStudy
from zoo.spec.sections.study_base import GaussianFitSpec, _positive_sorted, _Study

__all__ = [
    "FAR_MAX_FEATURES",
    "GaussianFitSpec",
    "KTiedStudy",
    "LaplaceStudy",
    "PredictiveStudy",
    "PriceOfMeanFieldStudy",
    "ProductMatrixStudy",
    "PruningStudy",
    "StudySpec",
]


# --------------------------------------------------------------------------- price of MF


class PriceOfMeanFieldStudy(_Study):
    """The price of the mean-field assumption on a sampler's draws of the weights.

    KL(q_diag || q_full) between the Gaussian fit q_full to the draws and its closest
    diagonal Gaussian, whole network and per layer, the closed-form W2 between them, and
    the shift null of that KL: the KL the same chains show with independent parameters.
    """

    families: ClassVar[frozenset[str]] = frozenset({"sampler"})

    kind: Literal["price_of_mean_field"] = Field(description="Study kind.")
    gaussian_fit: GaussianFitSpec = Field(
        default_factory=GaussianFitSpec, description="q_full estimate for the KL report."
    )
    kl_target_draws: int | None = Field(
        None,
        gt=1,
        le=MAX_DRAWS,
        description="Stopping rule for the KL report: after `draws` draws per chain, go on in "
        "rounds of 25 until the draws are worth this many independent draws to the "
        "covariance estimate (the shift null's kl_null_draws, reports.kl_null), or until "
        "max_draws. Every cell then carries the same sampling bias in its KL, about D^2 / 4n "
        "for this n. Needs samplers with vectorize_chains: true and chains >= 2, and "
        "gaussian_fit.cov: empirical; null: exactly `draws` draws.",
    )
    max_draws: int | None = Field(
        None,
        gt=0,
        le=MAX_DRAWS,
        description="Cap on draws per chain with kl_target_draws; null: 4 x draws.",
    )

    @model_validator(mode="after")
    def _stopping_rule(self) -> PriceOfMeanFieldStudy:
        if self.kl_target_draws is None:
            if self.max_draws is not None:
                raise ValueError(
                    "max_draws applies only with kl_target_draws; remove it or set kl_target_draws"
                )
            return self
        if self.gaussian_fit.cov != "empirical":
            raise ValueError(
                "kl_target_draws measures the bias of the sample covariance: set "
                f"gaussian_fit.cov: empirical (got {self.gaussian_fit.cov})"
            )
        return self

    def method_problems(self, method: Any) -> list[tuple[str, str]]:
        if self.kl_target_draws is None:
            return []
        out = []
        if not (method.vectorize_chains and method.chains >= 2):
            out.append(
                (
                    "chains" if method.chains < 2 else "vectorize_chains",
                    "kl_target_draws extends all chains together: it needs "
                    "vectorize_chains: true and chains >= 2 (got "
                    f"{method.vectorize_chains} and {method.chains})",
                )
            )
        if self.max_draws is not None and self.max_draws < method.draws:
            out.append(
                (
                    "draws",
                    f"max_draws ({self.max_draws}) must be >= draws ({method.draws}): "
                    "draws is the minimum, max_draws the cap",
                )
            )
        return out

    def draws_cap(self, method: Any) -> int:
        """Most draws per chain of ``method``: ``max_draws`` (or 4 x ``draws``) with a
        target, else ``draws``."""
        if self.kl_target_draws is None:
            return method.draws
        return self.max_draws if self.max_draws is not None else 4 * method.draws


# --------------------------------------------------------------------------- k-tied


class KTiedStudy(_Study):
    """Extra outputs of an svi fit for the k-tied study (Swiatkowski et al. 2020).

    Spectra of the posterior mean and standard-deviation matrices (Figures 3, 5, 12),
    post-training rank-k truncation of the std matrices (Tables 2, 3), gradient
    signal-to-noise ratios of the std parameters (Figure 6 top right) and -ELBO at chosen
    steps (Figure 6 bottom right, Figure 7), stored as cell artifacts.
    """

    families: ClassVar[frozenset[str]] = frozenset({"svi"})

    kind: Literal["ktied"] = Field(description="Study kind.")
    truncation_ranks: list[int] = Field(
        default_factory=lambda: [1, 2, 3],
        description="Ranks k of the post-training truncation of every std matrix (SVD, "
        "clamped at 0); each is evaluated like the method itself. Empty: none.",
    )
    truncation_draws: int = Field(
        100,
        gt=0,
        le=MAX_DRAWS,
        description="Posterior draws per truncated (and untruncated) evaluation.",
    )
    snr_steps: list[int] = Field(
        default_factory=list,
        description="Training steps (1-based) at which the gradient SNR E[g]^2 / Var[g] of "
        "the std parameters is taken over the last snr_window batches.",
    )
    snr_window: int = Field(
        10, ge=2, le=10_000, description="Batches in the SNR window (paper: 10)."
    )
    elbo_steps: list[int] = Field(
        default_factory=list,
        description="Training steps (1-based) at which -ELBO per example is evaluated on the "
        "validation split (the test split if the data has none).",
    )
    elbo_draws: int = Field(4, gt=0, le=MAX_DRAWS, description="Weight draws per -ELBO evaluation.")
    heatmap_site: str | None = Field(
        None,
        description="Weight site whose std matrix and its rank-1 and rank-2 approximations "
        "are drawn as heat maps (Figure 4); null: the first weight site.",
    )

    @field_validator("truncation_ranks")
    @classmethod
    def _ranks(cls, v: list[int]) -> list[int]:
        return _positive_sorted(v, "truncation_ranks", MAX_WIDTH)

    @field_validator("snr_steps", "elbo_steps")
    @classmethod
    def _steps(cls, v: list[int]) -> list[int]:
        return _positive_sorted(v, "steps", MAX_STEPS)


# --------------------------------------------------------------------------- pruning


class PruningStudy(_Study):
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
        description="... and their mean std is at least this fraction of "
        "the prior std (their code: within 20%).",
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


# --------------------------------------------------------------------------- product matrix


class ProductMatrixStudy(_Study):
    """Covariance of the product matrix W_L ... W_1 of a deep linear network.

    Farquhar, Smith & Gal (2020): posterior draws of the product of the weight matrices of
    an svi fit; its covariance is stored and drawn as a heat map. Only linear networks
    (``model.activation: linear``) have a product matrix.
    """

    families: ClassVar[frozenset[str]] = frozenset({"svi"})

    kind: Literal["product_matrix"] = Field(description="Study kind.")
    draws: int = Field(
        10_000, ge=2, le=MAX_DRAWS, description="Posterior draws of the product matrix."
    )

    def applies_to_model(self, model: Any) -> bool:
        return bool(getattr(model, "linear", False))

    def needs(self) -> str:
        return "svi methods on a linear network (model.activation: linear)"


StudySpec = Annotated[
    PriceOfMeanFieldStudy
    | KTiedStudy
    | PruningStudy
    | ProductMatrixStudy
    | LaplaceStudy
    | PredictiveStudy,
    Field(discriminator="kind"),
]
