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

from zoo.spec.base import Section
from zoo.spec.sections.bounds import MAX_DRAWS, MAX_STEPS, MAX_WIDTH, Real

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


#: Most input features for which the predictive study's ``ood: auto`` means ``far``.
FAR_MAX_FEATURES = 10

#: The predictive study's kinds of out-of-distribution inputs.
OodKind = Literal["auto", "far", "noise", "holdout_class"]


def _positive_sorted(v: list[int], what: str, most: int) -> list[int]:
    if any(k < 1 for k in v):
        raise ValueError(f"{what} must be >= 1, got {v}")
    if any(k > most for k in v):
        raise ValueError(f"{what} must be <= {most}, got {max(v)}")
    return sorted(set(v))


class _Study(Section):
    families: ClassVar[frozenset[str]]

    methods: list[str] | None = Field(
        None,
        description="Names of the inference methods this study records; null: every "
        "method of the spec it applies to.",
    )

    @field_validator("methods")
    @classmethod
    def _unique(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"methods must not repeat a name, got {v}")
        return v

    def applies_to_model(self, model: Any) -> bool:
        """Whether the study means anything for the network section ``model``."""
        return True

    def needs(self) -> str:
        """What the study applies to, in words, for error messages."""
        return " or ".join(sorted(self.families)) + " methods"

    def method_problems(self, method: Any) -> list[tuple[str, str]]:
        """(field of ``method``, message) for each reason the study cannot record it."""
        return []

    def data_problems(self, data: Any) -> list[tuple[str, str]]:
        """(field of the study, message) for each reason the data section ``data`` cannot
        serve it."""
        return []


# --------------------------------------------------------------------------- price of MF


class GaussianFitSpec(Section):
    """How q_full (the Gaussian fit to the draws) is estimated for the diag-vs-full report."""

    cov: Literal["empirical", "ledoit_wolf"] = Field(
        "ledoit_wolf", description="Covariance estimate: sample covariance or Ledoit-Wolf."
    )
    jitter: Real = Field(1e-6, ge=0, description="Added to the covariance diagonal.")


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
                raise ValueError("max_draws applies only with kl_target_draws; remove it or "
                                 "set kl_target_draws")  # fmt: skip
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
            out.append(("chains" if method.chains < 2 else "vectorize_chains",
                        "kl_target_draws extends all chains together: it needs "
                        "vectorize_chains: true and chains >= 2 (got "
                        f"{method.vectorize_chains} and {method.chains})"))  # fmt: skip
        if self.max_draws is not None and self.max_draws < method.draws:
            out.append(("draws",
                        f"max_draws ({self.max_draws}) must be >= draws ({method.draws}): "
                        "draws is the minimum, max_draws the cap"))  # fmt: skip
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
    the std. Sampler cells get the statistics from their draws.
    """

    families: ClassVar[frozenset[str]] = frozenset({"svi", "sampler"})

    kind: Literal["pruning"] = Field(description="Study kind.")
    out_snr_max: Real = Field(
        2.0, gt=0, description="Outgoing weights count as near zero when |mean|/std is below "
        "this (2: zero inside the central ~95% interval).",
    )  # fmt: skip
    in_kl_max: Real = Field(
        0.1, gt=0, description="Incoming weights sit at the prior when their mean KL "
        "(nats per weight) to it is at most this.",
    )  # fmt: skip
    in_std_ratio_min: Real = Field(
        0.8, gt=0, le=1, description="... and their mean std is at least this fraction of "
        "the prior std (their code: within 20%).",
    )  # fmt: skip
    draws: int = Field(
        50,
        gt=1,
        le=MAX_DRAWS,
        description="Posterior draws for the activation variances (and NUTS stats).",
    )
    trajectory_every: int = Field(
        0, ge=0, le=MAX_STEPS, description="Record KL, ELBO, train and test NLL of svi methods every this "
        "many steps (their Figure 4); 0 records none.",
    )  # fmt: skip
    trajectory_draws: int = Field(
        20, gt=0, le=MAX_DRAWS, description="Posterior draws per trajectory point (fixed seed, so the "
        "optimization itself is unchanged).",
    )  # fmt: skip


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


# --------------------------------------------------------------------------- Laplace


class LaplaceStudy(_Study):
    """The price of mean field for the Laplace approximation at a mode: no sampling.

    At the mode m of the posterior over all weights and biases (the point of a ``map`` or
    ``mle`` method, or the posterior mean of an svi method, refined by ``refine_steps``
    full-batch L-BFGS iterations on the negative log posterior), with H its Hessian
    (``curvature: hessian``) or generalized Gauss-Newton matrix J^T Lambda J plus the prior
    precision (``curvature: ggn``): q_full = N(m, H^-1), q_diag the KL-closest diagonal
    Gaussian (precisions H_ii), KL(q_diag || q_full) = (sum_i log H_ii - log det H) / 2 and
    the closed-form W2 between them, for the whole network and per layer (MacKay 1992;
    Farquhar, Smith & Gal 2020 measure the same KL on HMC draws). A learned noise is held at
    its estimate.
    """

    families: ClassVar[frozenset[str]] = frozenset({"point", "svi"})

    kind: Literal["laplace"] = Field(description="Study kind.")
    curvature: Literal["ggn", "hessian"] = Field(
        "ggn",
        description="H: the generalized Gauss-Newton matrix (positive definite at any point) "
        "or the exact Hessian of the negative log posterior (positive definite only at a "
        "strict local minimum; otherwise the KL is NaN and laplace_min_eig says why).",
    )
    refine_steps: int = Field(
        100,
        ge=0,
        description="Full-batch L-BFGS iterations (float64, strong Wolfe line search) from "
        "the method's point (MAP estimate, svi posterior mean) to the mode; 0 uses the "
        "point as it is (laplace_grad_norm then says how far from a mode it is).",
    )
    max_params: int = Field(
        5000,
        gt=0,
        description="Cells of networks with more weights and biases than this record no "
        "Laplace metrics (H has D^2 entries and its factorization costs D^3).",
    )
    save_precision: bool = Field(
        False,
        description="Store H (float64, D x D, the precision of q_full; weights and biases in "
        "model order) as the cell artifact cells/<cell id>.laplace_precision.npy: a "
        "ground-truth target for `simulation: {kind: gaussian, cov_file: ..., file_holds: "
        "precision}` (8 D^2 bytes: 8 MB at D = 1000).",
    )


# --------------------------------------------------------------------------- predictive


class PredictiveStudy(_Study):
    """The price of mean field in predictions, on a sampler's cell.

    The draws' posterior predictive is the reference. Against it, on the test set and on
    out-of-distribution inputs: the predictive of q_full (the Gaussian fit to the draws of
    all weights and biases, as in ``price_of_mean_field``), of q_diag (its KL-closest
    diagonal Gaussian), of q_marg (the diagonal Gaussian with the draws' marginal
    variances) and of the variational posterior the chains started from (``init_from``),
    each by its mean total variation, agreement of the predicted class and KL(samples ||
    approximation); on the test set also each one's NLL and ECE. Classification only.
    """

    families: ClassVar[frozenset[str]] = frozenset({"sampler"})

    kind: Literal["predictive"] = Field(description="Study kind.")
    gaussian_fit: GaussianFitSpec = Field(
        default_factory=GaussianFitSpec, description="How q_full is fitted to the draws."
    )
    draws: int = Field(
        500,
        ge=2,
        le=MAX_DRAWS,
        description="Weight draws per predictive: of each approximation, and of the sampler "
        "(evenly thinned over all chains).",
    )
    ood: OodKind | list[OodKind] = Field(
        "auto",
        description="Out-of-distribution inputs, one kind or a list: 'far', points in random "
        "directions from the training inputs' mean at ood_radius times their RMS distance "
        "from it (a ring for two moons); 'noise', every input uniform in its training range "
        "(noise images); 'holdout_class', the images of the class the data section holds "
        "out (data.holdout_class: digits, IDX); 'auto': [holdout_class, noise] when the "
        "data holds a class out, else far for at most 10 input features and noise above. "
        "The first kind's metrics end in _ood, each further kind's in _ood_<kind>.",
    )
    ood_points: int = Field(
        500, gt=0, le=100_000, description="Number of OOD inputs (of a held-out class: its "
        "first this many images, test split first).",
    )  # fmt: skip
    ood_radius: tuple[Real, Real] = Field(
        (3.0, 5.0),
        description="Range of the 'far' radius, in units of the training inputs' RMS "
        "distance from their mean (uniform in it).",
    )
    max_params: int = Field(
        5000,
        gt=0,
        description="Cells of networks with more weights and biases than this record nothing "
        "(q_full has D^2 entries and its Cholesky factor costs D^3).",
    )

    @field_validator("ood_radius")
    @classmethod
    def _radius(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0 < v[0] <= v[1]:
            raise ValueError(f"ood_radius must be [low, high] with 0 < low <= high, got {v}")
        return v

    @field_validator("ood")
    @classmethod
    def _ood(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list):
            if not v or len(set(v)) != len(v) or ("auto" in v and len(v) > 1):
                raise ValueError(f"ood must be one kind or a list of distinct kinds ('auto' "
                                 f"alone), got {v}")  # fmt: skip
        return v

    def ood_kinds(self, data: Any, n_features: int | None = None) -> list[str]:
        """The OOD kinds for data section ``data`` (``auto`` resolved), first = ``_ood``.

        ``n_features`` (the inputs' dimension) decides ``auto`` between far and noise; None
        takes it as more than :data:`FAR_MAX_FEATURES` unless the data is two moons.
        """
        kinds = [self.ood] if isinstance(self.ood, str) else list(self.ood)
        if kinds != ["auto"]:
            return kinds
        if getattr(data, "holdout_class", None) is not None:
            return ["holdout_class", "noise"]
        if n_features is None:
            n_features = 2 if getattr(data, "kind", None) == "two_moons" else FAR_MAX_FEATURES + 1
        return ["far" if n_features <= FAR_MAX_FEATURES else "noise"]

    def data_problems(self, data: Any) -> list[tuple[str, str]]:
        """(field, message) for each OOD kind that data section ``data`` cannot give."""
        kinds = [self.ood] if isinstance(self.ood, str) else self.ood
        if "holdout_class" in kinds and getattr(data, "holdout_class", None) is None:
            fits = "digits or idx data" if "holdout_class" not in type(data).model_fields else (
                f"data.holdout_class on this {data.kind} data")  # fmt: skip
            return [("ood", "'holdout_class' reads the class the data section holds out: set "
                            f"{fits}, or use ood: noise")]  # fmt: skip
        return []


StudySpec = Annotated[
    PriceOfMeanFieldStudy
    | KTiedStudy
    | PruningStudy
    | ProductMatrixStudy
    | LaplaceStudy
    | PredictiveStudy,
    Field(discriminator="kind"),
]
