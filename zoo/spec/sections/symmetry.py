"""The samplers' ``symmetry_moves`` setting: exact Gibbs moves along an MLP's hidden-unit
symmetries after every transition (:mod:`zoo.inference.mcmc.symmetry`).

A base of every sampler section (:mod:`zoo.spec.sections.samplers`); whether the network's
units have the symmetry is the spec's cross-section check (the model section's
``symmetries``). No torch import here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from zoo.spec.base import Section

__all__ = ["SymmetryMoves"]


class SymmetryMoves(Section):
    """The ``symmetry_moves`` field of a sampler section and its own checks."""

    symmetry_moves: Literal["off", "auto", "rescale", "sign"] = Field(
        "off",
        description="After every transition, an exact Gibbs move along the hidden units' "
        "weight-space symmetries (zoo.inference.mcmc.symmetry): 'rescale' draws each relu or "
        "leaky_relu unit's scale (incoming weights and bias times c, outgoing over c) from its "
        "generalised inverse Gaussian conditional; 'sign' flips each tanh unit with "
        "probability 1/2; 'auto' the moves of the model's activation; 'off' none. MLPs only; "
        "batched chains only (nuts and hmc: vectorize_chains and chains >= 2). YAML's "
        "false and true read as 'off' and 'auto'.",
    )

    @field_validator("symmetry_moves", mode="before")
    @classmethod
    def _yaml_booleans(cls, v: Any) -> Any:
        """YAML 1.1 reads an unquoted ``off`` as false: false is 'off', true 'auto'."""
        if isinstance(v, bool):
            return "auto" if v else "off"
        return v

    @model_validator(mode="after")
    def _moves_need_the_batch(self):
        """NUTS and HMC run one chain after another unless ``vectorize_chains`` and two
        chains or more; the moves run in the batched loop only."""
        if self.symmetry_moves == "off" or "vectorize_chains" not in type(self).model_fields:
            return self
        if not (self.vectorize_chains and self.chains >= 2):
            raise ValueError(
                f"symmetry_moves: {self.symmetry_moves} runs in the batched loop; set "
                f"vectorize_chains: true and chains >= 2 (got {self.vectorize_chains} and "
                f"{self.chains}), or symmetry_moves: off"
            )
        return self
