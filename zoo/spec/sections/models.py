"""Spec sections of the model: network families (``model``), priors and likelihoods.

A network section declares ``samplable`` (whether the samplers of :mod:`zoo.inference.mcmc`
can run on it) and ``linear`` (no nonlinearity: the product matrix exists); a likelihood
declares the ``task`` it fits, the number of classes it needs (``n_classes``, None: any) and
the test ``metrics`` that apply to it. No torch import here.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from zoo.spec.base import Section

__all__ = [
    "BernoulliLikelihood",
    "BiasPriorSpec",
    "CategoricalLikelihood",
    "GaussianLikelihood",
    "HeBias",
    "HePrior",
    "LeNetModel",
    "LikelihoodSpec",
    "MLPModel",
    "ModelSpec",
    "NormalBias",
    "NormalPrior",
    "PriorSpec",
    "mlp_num_params",
    "width_from_budget",
]


def mlp_num_params(in_dim: int, out_dim: int, depth: int, width: int) -> int:
    """Number of weights and biases of an MLP with ``depth`` hidden layers of ``width`` units."""
    if depth == 0:
        return (in_dim + 1) * out_dim
    return (in_dim + 1) * width + (depth - 1) * (width + 1) * width + (width + 1) * out_dim


def width_from_budget(in_dim: int, out_dim: int, depth: int, budget: int) -> int:
    """Largest width whose MLP has at most ``budget`` weights and biases.

    This is the rule of Farquhar, Smith & Gal (2020), Appendix B: every depth gets the
    largest width that keeps the parameter count under the budget, so that deeper models
    do not simply have more parameters.

    Raises
    ------
    ValueError
        If even width 1 exceeds the budget.
    """
    if depth == 0:
        return 0
    if mlp_num_params(in_dim, out_dim, depth, 1) > budget:
        raise ValueError(
            f"param_budget {budget} is too small for depth {depth}: width 1 already needs "
            f"{mlp_num_params(in_dim, out_dim, depth, 1)} parameters; raise the budget"
        )
    lo, hi = 1, 2
    while mlp_num_params(in_dim, out_dim, depth, hi) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # invariant: params(lo) <= budget < params(hi)
        mid = (lo + hi) // 2
        if mlp_num_params(in_dim, out_dim, depth, mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------- networks


class MLPModel(Section):
    """Fully connected network; ``depth`` hidden layers (0 gives linear/logistic regression)."""

    samplable: ClassVar[bool] = True

    kind: Literal["mlp"] = Field(description="Model kind.")
    depth: int = Field(ge=0, description="Number of hidden layers (0: linear model).")
    width: int | None = Field(
        None, gt=0, description="Units per hidden layer. Give width or param_budget, not both."
    )
    param_budget: int | None = Field(
        None,
        gt=0,
        description="Use the largest width whose weights+biases fit in this budget.",
    )
    activation: Literal["relu", "leaky_relu", "tanh", "linear"] = Field(
        "relu", description="Hidden-layer nonlinearity."
    )
    negative_slope: float = Field(
        0.01, ge=0, description="Slope of leaky_relu for negative inputs."
    )

    @model_validator(mode="after")
    def _width_xor_budget(self) -> MLPModel:
        if self.depth > 0 and (self.width is None) == (self.param_budget is None):
            raise ValueError("give exactly one of model.width and model.param_budget")
        return self

    @property
    def linear(self) -> bool:
        """No nonlinearity between the layers: the network is a product of matrices."""
        return self.activation == "linear"


class LeNetModel(Section):
    """LeNet-style CNN: 3x3 convolutions (ReLU, 2x2 max-pool), a dense layer, the output.

    Swiatkowski et al. (2020, D.1): convolutions of 32 and 64 filters, dense 512. Inputs are
    viewed as square images with ``channels`` channels.
    """

    samplable: ClassVar[bool] = False  # the samplers' flat potential covers MLPs only
    linear: ClassVar[bool] = False

    kind: Literal["lenet"] = Field(description="Model kind.")
    channels: int = Field(1, gt=0, description="Input channels of the (square) images.")
    conv: list[int] = Field(
        default_factory=lambda: [32, 64], min_length=1, description="Filters per convolution."
    )
    dense: int = Field(512, gt=0, description="Units of the dense hidden layer.")
    kernel_size: int = Field(3, gt=0, description="Side of the square convolution kernels.")
    padding: int = Field(0, ge=0, description="Zero padding of each convolution.")
    pool: bool = Field(True, description="2x2 max-pool after each convolution.")


ModelSpec = Annotated[MLPModel | LeNetModel, Field(discriminator="kind")]

# --------------------------------------------------------------------------- priors


class NormalBias(Section):
    """Bias prior N(0, scale^2)."""

    kind: Literal["normal"] = Field(description="Prior kind.")
    scale: float = Field(1.0, gt=0, description="Prior standard deviation.")


class HeBias(Section):
    """Bias prior N(0, 2 / fan_in)."""

    kind: Literal["he"] = Field(description="Prior kind.")


BiasPriorSpec = Annotated[NormalBias | HeBias, Field(discriminator="kind")]


class NormalPrior(NormalBias):
    """Independent N(0, scale^2) on every weight (and bias unless ``bias`` is given)."""

    bias: BiasPriorSpec | None = Field(
        None, description="Separate prior for the biases; null uses the weight prior."
    )


class HePrior(HeBias):
    """He-scaled prior N(0, 2 / fan_in) on every weight (and bias unless ``bias`` is given)."""

    bias: BiasPriorSpec | None = Field(
        None, description="Separate prior for the biases; null uses the weight prior."
    )


PriorSpec = Annotated[NormalPrior | HePrior, Field(discriminator="kind")]

# --------------------------------------------------------------------------- likelihoods


class CategoricalLikelihood(Section):
    """Categorical likelihood on softmax outputs (classification)."""

    task: ClassVar[str] = "classification"
    n_classes: ClassVar[int | None] = None
    metrics: ClassVar[tuple[str, ...]] = ("accuracy", "nll", "brier", "ece")

    kind: Literal["categorical"] = Field(description="Likelihood kind.")


class BernoulliLikelihood(Section):
    """Bernoulli likelihood on one logit (binary classification): p(y = 1) = sigmoid(f(x)).

    The network has one output unit. Unlike a 2-logit softmax, whose likelihood is
    unchanged when the same constant is added to both logits (so each hidden unit's summed
    output weights are unidentified), every direction of the output layer here is seen by
    the data.
    """

    task: ClassVar[str] = "classification"
    n_classes: ClassVar[int | None] = 2
    metrics: ClassVar[tuple[str, ...]] = ("accuracy", "nll", "brier", "ece")

    kind: Literal["bernoulli"] = Field(description="Likelihood kind.")


class GaussianLikelihood(Section):
    """Gaussian likelihood (regression) with fixed or learned noise standard deviation."""

    task: ClassVar[str] = "regression"
    n_classes: ClassVar[int | None] = None
    metrics: ClassVar[tuple[str, ...]] = ("rmse", "nll")

    kind: Literal["gaussian"] = Field(description="Likelihood kind.")
    noise: float | Literal["learned"] = Field(
        1.0, description="Noise standard deviation, or 'learned' to infer it."
    )
    noise_prior_scale: float = Field(
        1.0, gt=0, description="Scale of the HalfNormal prior on a learned noise."
    )

    @field_validator("noise")
    @classmethod
    def _positive(cls, v: float | str) -> float | str:
        if not isinstance(v, str) and v <= 0:
            raise ValueError("noise must be > 0 (or 'learned')")
        return v


LikelihoodSpec = Annotated[
    CategoricalLikelihood | GaussianLikelihood | BernoulliLikelihood, Field(discriminator="kind")
]
