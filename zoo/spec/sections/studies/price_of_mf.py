"""The ``price_of_mean_field`` study section: the price of the mean-field assumption on a
sampler's draws (Farquhar, Smith & Gal 2020). No torch import here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from zoo.spec.sections.bounds import MAX_DRAWS
from zoo.spec.sections.studies.base import GaussianFitSpec, StudySection

__all__ = ["PriceOfMeanFieldStudy", "cell_draws_cap"]


class PriceOfMeanFieldStudy(StudySection):
    """The price of the mean-field assumption on a sampler's draws of the weights.

    KL(q_diag || q_full) between the Gaussian fit q_full to the draws and its closest
    diagonal Gaussian, whole network and per layer, the closed-form W2 between them, and
    the shift null of that KL: the KL the same chains show with independent parameters.
    """

    families: ClassVar[frozenset[str]] = frozenset({"sampler"})
    #: The draws' covariance, its factor and the two Gaussians compared.
    dense_matrices: ClassVar[int] = 4

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
    stop_at_grade: Literal["silver", "gold"] | None = Field(
        None,
        description="With kl_target_draws, a second stopping rule: once the draws are worth "
        "kl_target_draws, draw on (in the same rounds, up to max_draws) until an MLP's "
        "weights aligned modulo unit permutations pass this grade's R-hat and bulk-ESS "
        "gates, the KL's own R-hat gate and, for ReLU networks, the orbit coordinates' "
        "R-hat gate "
        "(zoo.studies.price_of_mf.stopping); the cell is still graded by its own record. "
        "null: stop on kl_target_draws alone.",
    )

    @model_validator(mode="after")
    def _stopping_rule(self) -> PriceOfMeanFieldStudy:
        if self.kl_target_draws is None:
            for name in ("max_draws", "stop_at_grade"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name} applies only with kl_target_draws; remove it or set "
                        "kl_target_draws"
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


def cell_draws_cap(method: Any, studies: Any) -> tuple[int, PriceOfMeanFieldStudy | None]:
    """Most draws per chain a sampler ``method`` draws in a cell recording ``studies``, and
    the study that sets it when one does: a price-of-mean-field study's cap where its
    stopping rule extends the chains (``kl_target_draws`` with ``max_draws``), else the
    method's own (``draws``, or ChEES's ``max_draws`` with ``target_ess``) and None."""
    cap, by = method.draws_cap(), None
    for study in studies:
        if isinstance(study, PriceOfMeanFieldStudy) and study.draws_cap(method) > cap:
            cap, by = study.draws_cap(method), study
    return cap, by
