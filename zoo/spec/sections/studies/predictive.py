"""The ``predictive`` study section: the price of mean field in predictions, on a sampler's
cell, on the test set and out of distribution. No torch import here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from zoo.spec.sections.bounds import MAX_DRAWS, Real
from zoo.spec.sections.studies.base import GaussianFitSpec, StudySection

__all__ = ["FAR_MAX_FEATURES", "PredictiveStudy"]


#: Most input features for which the predictive study's ``ood: auto`` means ``far``.
FAR_MAX_FEATURES = 10

#: The predictive study's kinds of out-of-distribution inputs.
OodKind = Literal["auto", "far", "noise", "holdout_class"]


class PredictiveStudy(StudySection):
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
    per_chain: int = Field(
        0,
        ge=0,
        le=256,
        description="Also fit q_full to each of this many chains alone (evenly spaced; 0: "
        "off), as Farquhar et al. (2020, App. B) fit q_full to one chain's draws: "
        "pred_tv_qchain and pred_agree_qchain (and _ood) are the medians over those chains "
        "of the TV and agreement between that Gaussian's predictive and the chain's own "
        "draws'. A chain needs more held draws than weights (else pred_qchain_skipped).",
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
