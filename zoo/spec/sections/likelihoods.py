"""The ``likelihood`` section of a spec: categorical, Bernoulli or Gaussian.

A likelihood declares the ``task`` it fits, the number of classes it needs (``n_classes``,
None: any) and the test ``metrics`` that apply to it. No torch import here.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from zoo.spec.base import Section
from zoo.spec.sections.bounds import Real, finite_float32

__all__ = [
    "BernoulliLikelihood",
    "CategoricalLikelihood",
    "GaussianLikelihood",
    "LikelihoodSpec",
]


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
    #: Network outputs (None elsewhere: the classes, or one for regression).
    out_dim: ClassVar[int | None] = 1
    metrics: ClassVar[tuple[str, ...]] = ("accuracy", "nll", "brier", "ece")

    kind: Literal["bernoulli"] = Field(description="Likelihood kind.")


class GaussianLikelihood(Section):
    """Gaussian likelihood (regression) with fixed or learned noise standard deviation."""

    task: ClassVar[str] = "regression"
    n_classes: ClassVar[int | None] = None
    metrics: ClassVar[tuple[str, ...]] = ("rmse", "nll")

    kind: Literal["gaussian"] = Field(description="Likelihood kind.")
    noise: float | Literal["learned", "data"] = Field(
        1.0,
        description="Noise standard deviation, 'learned' to infer it, or 'data' for the "
        "data's own noise (teacher data: the correctly specified model, which a sweep over "
        "data.noise keeps).",
    )
    noise_prior_scale: Real = Field(
        1.0, gt=0, description="Scale of the HalfNormal prior on a learned noise."
    )

    @field_validator("noise")
    @classmethod
    def _positive(cls, v: float | str) -> float | str:
        if not isinstance(v, str):
            finite_float32(v)
            if v <= 0:
                raise ValueError("noise must be > 0 (or 'learned' or 'data')")
        return v


LikelihoodSpec = Annotated[
    CategoricalLikelihood | GaussianLikelihood | BernoulliLikelihood, Field(discriminator="kind")
]
