"""The ``inference`` section of a spec: variational guides and inference methods.

Each method is one entry of the spec's ``inference`` list, discriminated by ``kind``:

- ``svi``: stochastic variational inference with one of the guides of :mod:`guides`
  (``guide.kind``: mean_field, k_tied, matrix_normal, full_rank, fixed_variance);
- ``map``: a point estimate maximizing the log joint (prior and likelihood);
- ``mle``: a point estimate maximizing the likelihood alone, stopped early on a validation
  split (Trippe & Turner's "ES" baseline);
- ``nuts``, ``hmc``, ``chees``, ``mclmc`` and ``mams``: Hamiltonian and microcanonical
  Monte Carlo (:mod:`zoo.inference.mcmc`),
  optionally started at the posterior of an earlier variational method of the same cell
  (``init_from``); their sections live in :mod:`zoo.spec.sections.samplers`.

Each method declares the facts other code asks instead of switching on its kind:
``family`` (``"svi"``, ``"point"`` or ``"sampler"``: which studies can apply to it),
``starts_samplers`` (its posterior mean can start a sampler's chains) and
``needs_samplable_model`` (the network must declare ``samplable``). What a method records
besides its metrics is configured in the spec's ``studies`` list
(:mod:`zoo.spec.sections.studies`), not here. No torch import here.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from zoo.spec.base import Section
from zoo.spec.sections.bounds import (
    MAX_DRAWS,
    MAX_EPOCHS,
    MAX_POINTS,
    MAX_STEPS,
    MAX_WIDTH,
    METHOD_NAME,
    Real,
)
from zoo.spec.sections.samplers import (
    ChEESMethod,
    HMCMethod,
    MAMSMethod,
    MCLMCMethod,
    NUTSMethod,
)

__all__ = [
    "ChEESMethod",
    "FixedVarianceGuide",
    "FullRankGuide",
    "GuideSpec",
    "HMCMethod",
    "InferenceSpec",
    "KTiedGuide",
    "MAMSMethod",
    "MAPMethod",
    "MCLMCMethod",
    "MLEMethod",
    "MatrixNormalGuide",
    "MeanFieldGuide",
    "NUTSMethod",
    "SVIMethod",
]

# --------------------------------------------------------------------------- guides


class _Guide(Section):
    init_scale: Real = Field(1e-3, gt=0, description="Initial posterior standard deviation.")
    init_loc: Literal["he", "prior", "zero", "teacher"] = Field(
        "he",
        description="Initial means: He-normal draws, prior draws, zeros, or the weights "
        "that generated the data (teacher: teacher data only).",
    )


class MeanFieldGuide(_Guide):
    """Fully factorized Gaussian q (``guides.AutoMeanField``)."""

    kind: Literal["mean_field"] = Field(description="Guide kind.")
    scale_transform: Literal["softplus", "exp"] = Field(
        "softplus", description="Map from the unconstrained scale parameter to the std."
    )
    local_reparam: bool = Field(
        False, description="Sample pre-activations instead of weights (Kingma et al. 2015)."
    )


class KTiedGuide(_Guide):
    """k-tied Normal on every weight matrix, std matrix U V^T of rank k (Swiatkowski et al.)."""

    kind: Literal["k_tied"] = Field(description="Guide kind.")
    rank: int = Field(
        2, ge=1, le=MAX_WIDTH, description="k: rank of the matrix of standard deviations."
    )
    local_reparam: bool = Field(
        False, description="Sample pre-activations instead of weights (Kingma et al. 2015)."
    )


class MatrixNormalGuide(_Guide):
    """Matrix-normal q on every weight matrix, covariance V (x) U (Louizos & Welling 2016)."""

    kind: Literal["matrix_normal"] = Field(description="Guide kind.")
    row_cov: Literal["diag", "full"] = Field("diag", description="Row covariance U.")
    col_cov: Literal["diag", "full"] = Field("diag", description="Column covariance V.")


class FullRankGuide(_Guide):
    """Full-covariance Gaussian per layer (site) or over all weights (global)."""

    #: Dense D x D matrices held while it trains (its factor, the gradient, two Adam
    #: moments), counted over all weights by :mod:`zoo.spec.memory` (an upper bound with
    #: per-site blocks).
    dense_matrices: ClassVar[int] = 4

    kind: Literal["full_rank"] = Field(description="Guide kind.")
    blocks: Literal["site", "global"] = Field(
        "site", description="One full covariance per layer (site) or one over all (global)."
    )


class FixedVarianceGuide(Section):
    """Mean-field with fixed, not learned, standard deviations (Trippe & Turner's GD)."""

    kind: Literal["fixed_variance"] = Field(description="Guide kind.")
    scale: Real = Field(gt=0, description="The fixed posterior standard deviation.")
    init_loc: Literal["he", "prior", "zero", "teacher"] = Field(
        "he",
        description="Initial means: He-normal draws, prior draws, zeros, or the weights "
        "that generated the data (teacher: teacher data only).",
    )
    local_reparam: bool = Field(
        False, description="Sample pre-activations instead of weights (Kingma et al. 2015)."
    )


GuideSpec = Annotated[
    MeanFieldGuide | KTiedGuide | MatrixNormalGuide | FullRankGuide | FixedVarianceGuide,
    Field(discriminator="kind"),
]

# --------------------------------------------------------------------------- optimizers


class _Method(Section):
    family: ClassVar[str]
    starts_samplers: ClassVar[bool] = False
    #: The method's target has the weight prior (``tune`` grids ``prior.*`` only over these).
    uses_prior: ClassVar[bool] = True
    needs_samplable_model: ClassVar[bool] = False


class _Optimized(_Method):
    epochs: int | None = Field(
        None,
        gt=0,
        le=MAX_EPOCHS,
        description="Passes over the training data (give epochs or steps).",
    )
    steps: int | None = Field(
        None, gt=0, le=MAX_STEPS, description="Optimizer steps (give epochs or steps)."
    )
    batch_size: int | None = Field(
        None, gt=0, le=MAX_POINTS, description="Minibatch size; null uses the full training set."
    )
    lr: Real = Field(1e-2, gt=0, description="Adam learning rate.")
    lr_decay: Real = Field(
        1.0, gt=0, le=1, description="Total multiplicative learning-rate decay over training."
    )
    betas: tuple[Real, Real] = Field(
        (0.9, 0.999),
        description="Adam's (beta1, beta2); Trippe & Turner (2018) use (0.9, 0.99).",
    )

    @model_validator(mode="after")
    def _betas_in_range(self):
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must lie in [0, 1), got {list(self.betas)}")
        return self

    @model_validator(mode="after")
    def _epochs_xor_steps(self):
        if (self.epochs is None) == (self.steps is None):
            raise ValueError("give exactly one of epochs and steps")
        return self


class SVIMethod(_Optimized):
    """Stochastic variational inference with Adam."""

    family: ClassVar[str] = "svi"
    starts_samplers: ClassVar[bool] = True

    name: str = METHOD_NAME
    kind: Literal["svi"] = Field(description="Inference kind.")
    guide: GuideSpec = Field(description="Variational family.")
    kl_weight: Real = Field(1.0, ge=0, description="Weight of the KL term (1 is the ELBO).")
    scale_lr: Real | None = Field(
        None,
        gt=0,
        description="Adam learning rate of the standard-deviation parameters (log sigma, "
        "k-tied factors, Cholesky factors, matrix-normal row/column scales); null: lr.",
    )
    kl_warmup_steps: int = Field(
        0,
        ge=0,
        le=MAX_STEPS,
        description="Anneal the KL weight linearly from 0 over this many steps.",
    )
    kl_warmup_every: int = Field(
        1,
        ge=1,
        le=MAX_STEPS,
        description="Raise the annealed KL weight step-wise every this many batches "
        "(Swiatkowski et al. 2020, D.4: 100); 1 raises it every batch.",
    )
    closed_form_kl: bool = Field(
        True, description="Use TraceMeanField_ELBO (analytic KL) instead of Trace_ELBO."
    )
    num_particles: int = Field(1, gt=0, le=10_000, description="ELBO samples per step.")
    pretrain_epochs: int = Field(
        0,
        ge=0,
        le=MAX_EPOCHS,
        description="Epochs of maximum-likelihood training of the means first.",
    )
    predictive_samples: int = Field(
        100, gt=0, le=MAX_DRAWS, description="Posterior draws for predictive metrics."
    )
    save_draws: bool = Field(
        True,
        description="Store the predictive_samples posterior draws (weights and pointwise "
        "predictions) in the cell's ArviZ file (cells/<id>.nc); false writes no file. The "
        "file grows as draws x (weights + data points).",
    )


class MAPMethod(_Optimized):
    """Maximum a posteriori point estimate (log prior + log likelihood, Adam)."""

    family: ClassVar[str] = "point"

    name: str = METHOD_NAME
    kind: Literal["map"] = Field(description="Inference kind.")
    init_loc: Literal["he", "prior", "zero"] = Field("he", description="Initial weights.")


class MLEMethod(_Optimized):
    """Maximum likelihood (no prior) with early stopping on a validation split."""

    family: ClassVar[str] = "point"
    uses_prior: ClassVar[bool] = False

    name: str = METHOD_NAME
    kind: Literal["mle"] = Field(description="Inference kind.")
    init_loc: Literal["he", "prior", "zero"] = Field("he", description="Initial weights.")
    validation_fraction: float = Field(
        0.1, gt=0, lt=1, description="Fraction of the training set held out for stopping."
    )
    patience: int = Field(
        20,
        ge=1,
        le=MAX_STEPS,
        description="Stop after this many evaluations without improvement.",
    )
    eval_every: int = Field(
        10, ge=1, le=MAX_STEPS, description="Optimizer steps between evaluations."
    )


InferenceSpec = Annotated[
    SVIMethod
    | MAPMethod
    | MLEMethod
    | NUTSMethod
    | HMCMethod
    | ChEESMethod
    | MCLMCMethod
    | MAMSMethod,
    Field(discriminator="kind"),
]
