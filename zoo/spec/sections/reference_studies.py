"""Study sections whose numbers are references for the sampled price of mean field:
``laplace`` (no sampling: the Laplace / GGN Gaussian at a mode) and ``predictive`` (the
price in predictions, on the test set and out of distribution). No torch import here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from zoo.spec.sections.bounds import MAX_DRAWS, Real
from zoo.spec.sections.study_base import GaussianFitSpec, _Study

__all__ = ["FAR_MAX_FEATURES", "LaplaceStudy", "PredictiveStudy"]


#: Most input features for which the predictive study's ``ood: auto`` means ``far``.
FAR_MAX_FEATURES = 10

#: The predictive study's kinds of out-of-distribution inputs.
OodKind = Literal["auto", "far", "noise", "holdout_class"]


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
        500,
        gt=0,
        le=100_000,
        description="Number of OOD inputs (of a held-out class: its "
        "first this many images, test split first).",
    )
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
                raise ValueError(
                    f"ood must be one kind or a list of distinct kinds ('auto' alone), got {v}"
                )
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
            fits = (
                "digits or idx data"
                if "holdout_class" not in type(data).model_fields
                else (f"data.holdout_class on this {data.kind} data")
            )
            return [
                (
                    "ood",
                    "'holdout_class' reads the class the data section holds out: set "
                    f"{fits}, or use ood: noise",
                )
            ]
        return []
