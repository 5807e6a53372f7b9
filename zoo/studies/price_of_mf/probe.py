"""The price of the mean-field assumption, measured on the draws of a sampler.

On the draws of all weights and biases of a sampled cell, :class:`PriceOfMeanFieldProbe`
records (Farquhar, Smith & Gal 2020):

- KL(q_diag || q_full) for the whole network and per layer, the closed-form W2 between them
  and the blog's Wasserstein error (:func:`reports.gaussian.diag_vs_full`), q_full being the
  Gaussian fit of the section's ``gaussian_fit``;
- the shift null of that KL (:func:`reports.kl_null.kl_shift_null`): the KL the same chains
  would show with independent parameters, and the excess over it;
- for a softmax classifier (more than one output), ``kl_output_columns``: the KLs of the output layer's columns, block by
  block, the part that the softmax's invariance to shifting all logits alone explains;
- with ``kl_target_draws``, the stopping rule of the sampler (``Hooks.stop_when``): draw
  until the draws are worth that many independent draws to the covariance estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from reports.draws import FlatDraws, column_blocks, flatten_sites
from reports.gaussian import diag_vs_full, fit_gaussian, kl_diag_full
from reports.kl_null import kl_shift_null
from zoo.inference.base import Fit, Hooks
from zoo.inference.sampling import SampledPosterior
from zoo.studies.base import CellContext

__all__ = ["PriceOfMeanFieldProbe", "kl_output_columns", "weight_draws"]


def weight_draws(model: Any, draws: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The draws of the weight and bias sites, in model order (no noise)."""
    return {name: draws[name] for pair in model.layer_sites() for name in pair}


def kl_output_columns(flat: FlatDraws, fit: Any) -> float | None:
    """Sum of the KLs of the output layer's columns (and bias), each block on its own.

    With a softmax, the C weights from a hidden unit to the C outputs are correlated by the
    likelihood's invariance to adding a constant to every logit, at any depth. Each block's
    KL is computed on its own (as ``kl_diag_full.<layer>`` is); the sum says how much of
    KL(q_diag || q_full) these blocks carry by themselves, and it shrinks with the width of
    the last hidden layer. ``fit`` is the study's ``gaussian_fit`` (``cov``, ``jitter``).
    None (not applicable) when the draws have no ``layer<k>`` blocks.
    """
    layers = [k for k in flat.blocks if k.startswith("layer") and k[5:].isdigit()]
    if not layers:
        return None
    last = max(layers, key=lambda k: int(k[5:]))
    bias = f"{last}.bias" if any(lab.startswith(f"{last}.bias") for lab in flat.labels) else None
    blocks = column_blocks(flat.labels, f"{last}.weight", bias)
    g = fit_gaussian(flat.draws, cov=fit.cov, jitter=fit.jitter)
    kls = kl_diag_full(g.cov, blocks)
    return float(sum(v for k, v in kls.items() if k != "total"))


def kl_draws_rule(
    model: Any, section: Any, seed: int
) -> Callable[[Mapping[str, np.ndarray]], bool]:
    """The stopping rule of ``kl_target_draws``: true once the weights' draws are worth that
    many independent draws to the covariance estimate (a 4-rotation shift null, seed
    ``seed + 4``)."""
    fit = section.gaussian_fit

    def enough(draws: Mapping[str, np.ndarray]) -> bool:
        parts = [v.reshape(v.shape[:2] + (-1,)) for v in weight_draws(model, draws).values()]
        null = kl_shift_null(np.concatenate(parts, -1), cov=fit.cov, jitter=fit.jitter, reps=4,
                             seed=seed + 4)  # fmt: skip
        return null.iid_draws is not None and null.iid_draws >= section.kl_target_draws

    return enough


class PriceOfMeanFieldProbe:
    """KL(q_diag || q_full), its shift null and the Wasserstein errors of one sampled cell."""

    def __init__(self, section: Any, ctx: CellContext) -> None:
        self.section, self.ctx = section, ctx

    @property
    def hooks(self) -> Hooks:
        s = self.section
        if s.kl_target_draws is None:
            return Hooks()
        return Hooks(stop_when=kl_draws_rule(self.ctx.model, s, self.ctx.seed),
                     max_draws=s.draws_cap(self.ctx.cell.method))  # fmt: skip

    def finish(self, fit: Fit) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The KL, null and Wasserstein metrics (no artifacts); nothing without draws.

        A metric that does not apply is None (``kl_null_draws`` and ``shrinkage`` of another
        covariance estimate than they are defined for), never NaN.
        """
        post = fit.posterior
        if not isinstance(post, SampledPosterior):
            return {}, {}
        seed, gf = self.ctx.seed, self.section.gaussian_fit
        flat = flatten_sites(weight_draws(self.ctx.model, post.draws))
        gauss = diag_vs_full(flat.draws, flat.blocks, cov=gf.cov, jitter=gf.jitter, seed=seed)
        out: dict[str, Any] = {k: v for k, v in gauss.items()
                               if v is None or isinstance(v, int | float)}  # fmt: skip
        null = kl_shift_null(flat.draws, chains=post.chains, cov=gf.cov, jitter=gf.jitter,
                             reps=8, seed=seed + 3)  # fmt: skip
        out.update(kl_null=null.null_mean, kl_null_sd=null.null_sd, kl_excess=null.excess,
                   kl_null_draws=null.iid_draws)  # fmt: skip
        if self.ctx.ds.n_classes > 1 and self.ctx.model.dims[-1] > 1:  # softmax, not one logit
            out["kl_output_columns"] = kl_output_columns(flat, gf)
        return out, {}
