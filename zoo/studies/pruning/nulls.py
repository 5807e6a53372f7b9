r"""The rule-free measure's nulls (Trippe & Turner 2018's over-pruning, read
against what an untrained network and a network without unit structure give).

The effective number of units (:func:`reports.pruning.effective_units`) is far below the
layer's width for an untrained network: a tanh layer of 50 units with N(0, 1) weights has
about 15-18 (random outgoing weights alone give about n/3: the participation ratio of
:math:`w_j^2` with :math:`w_j` i.i.d. normal is :math:`n\,(\mathbb E w^2)^2 / \mathbb E w^4
= n/3`). A value of the measure is therefore evidence of pruning only below its nulls:

- the **prior null**: the same measure on networks drawn from the prior, one network at a
  time (:func:`prior_draws`, :func:`reports.pruning.effective_units_per_draw`), against the
  posterior's draws one at a time (pooling draws of the prior, whose units are
  exchangeable, evens the shares out);
- the **shuffled-unit null**: the posterior's draws with the layer's weights permuted over
  all positions (:func:`shuffled_units_eff`), which keeps every weight and removes the unit
  structure that pruning is.

The activations are :func:`hidden_activations` (also the probe's).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from reports.pruning import (
    contribution_variance,
    effective_units,
    effective_units_per_draw,
    variance_shares,
)
from zoo.models.base import BayesianNet
from zoo.runtime import Runtime

__all__ = [
    "NULL_DRAWS",
    "functional_nulls",
    "hidden_activations",
    "prior_draws",
    "shuffled_units_eff",
]


def hidden_activations(
    model: BayesianNet, x: torch.Tensor, draws: Mapping[str, torch.Tensor]
) -> list[torch.Tensor]:
    """Activations of every hidden layer, each of shape ``(S, len(x), width)``."""
    acts = []
    h = x
    with torch.no_grad():
        for w, b in model.layer_sites()[:-1]:
            h = model.act(torch.matmul(h, draws[w].transpose(-1, -2)) + draws[b].unsqueeze(-2))
            acts.append(h)
    return acts


def prior_draws(
    model: BayesianNet, like: Mapping[str, torch.Tensor], n: int, seed: int
) -> dict[str, torch.Tensor]:
    """``n`` draws of the layer sites from the model's Normal prior, shaped, typed and placed
    as the sites of ``like`` (a posterior's draws), from a generator seeded with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for w, b in model.layer_sites():
        for site in (w, b):
            loc, scale = model.prior_params[site]
            z = torch.randn(
                (n, *like[site].shape[1:]), generator=g, dtype=torch.float64, device="cpu"
            )
            out[site] = (loc + scale * z).to(like[site])
    return out


def _shuffle_entries(w: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """``w`` ``(S, ...)`` with its entries permuted over all positions, the same permutation
    in every draw."""
    flat = w.reshape(w.shape[0], -1)
    perm = torch.randperm(flat.shape[1], generator=g, device="cpu").to(w.device)
    return flat[:, perm].reshape(w.shape)


def shuffled_units_eff(
    model: BayesianNet,
    x: torch.Tensor,
    draws: Mapping[str, torch.Tensor],
    k: int,
    *,
    shuffles: int = 10,
    seed: int = 0,
) -> tuple[float, float]:
    """The shuffled-unit null of hidden layer ``k``'s ``units_eff``: mean and sd over
    ``shuffles`` networks whose layer-``k`` incoming weights, biases and outgoing weights have
    their entries permuted over all positions (the same permutation in every draw), the
    layer's input kept.

    Pruning is a property of whole units (a row of incoming and a column of outgoing weights
    small together); the shuffle keeps every weight's value and removes that unit structure,
    so a layer that pruned units has fewer effective units than its shuffles, and one
    without unit structure about as many.
    """
    g = torch.Generator().manual_seed(seed)
    h = x if k == 0 else hidden_activations(model, x, draws)[k - 1]
    w_site, b_site = model.layer_sites()[k]
    out_site = model.layer_sites()[k + 1][0]
    effs = []
    with torch.no_grad():
        for _ in range(shuffles):
            w = _shuffle_entries(draws[w_site], g)
            b = _shuffle_entries(draws[b_site], g)
            w_out = _shuffle_entries(draws[out_site], g)
            a = model.act(torch.matmul(h, w.transpose(-1, -2)) + b.unsqueeze(-2))
            within, between = contribution_variance(
                Runtime.numpy(a.double()), Runtime.numpy(w_out.double())
            )
            effs.append(effective_units(variance_shares(within + between)))
    e = np.asarray(effs)
    return float(np.nanmean(e)), float(np.nanstd(e, ddof=1)) if e.size > 1 else float("nan")


#: Posterior draws the shuffled-unit null uses (the first ones): each shuffle recomputes the
#: layer's activations, so the null's cost is bounded on large networks.
NULL_DRAWS = 16


def functional_nulls(
    model: BayesianNet,
    x: torch.Tensor,
    draws: Mapping[str, torch.Tensor],
    prior: Mapping[str, torch.Tensor],
    seed: int,
) -> dict[str, float]:
    """The rule-free measure beside its nulls, per hidden layer ``k``:

    - ``units_eff_draw.layer{k}``: the effective units of each posterior draw on its own,
      averaged (one network's function, as the prior null is);
    - ``units_eff_prior.layer{k}`` and ``units_eff_prior_sd.layer{k}``: the same over
      networks drawn from the prior (untrained), mean and spread
      (:func:`reports.pruning.effective_units_per_draw`);
    - ``units_eff_shuffled.layer{k}`` and ``units_eff_shuffled_sd.layer{k}``: the pooled
      ``units_eff`` of the first :data:`NULL_DRAWS` draws with the layer's weights shuffled
      over units (:func:`shuffled_units_eff`, 10 shuffles), beside ``units_eff_sub.layer{k}``,
      the unshuffled measure of the same draws.
    """
    acts = hidden_activations(model, x, draws)
    prior_acts = hidden_activations(model, x, prior)
    sub = {name: v[:NULL_DRAWS] for name, v in draws.items()}
    out: dict[str, float] = {}
    for k in range(model.depth):
        w_site = model.layer_sites()[k + 1][0]
        a = Runtime.numpy(acts[k].double())
        w = Runtime.numpy(draws[w_site].double())
        out[f"units_eff_draw.layer{k}"] = float(np.nanmean(effective_units_per_draw(a, w)))
        pe = effective_units_per_draw(
            Runtime.numpy(prior_acts[k].double()), Runtime.numpy(prior[w_site].double())
        )
        out[f"units_eff_prior.layer{k}"] = float(np.nanmean(pe))
        out[f"units_eff_prior_sd.layer{k}"] = float(np.nanstd(pe, ddof=1))
        n = min(NULL_DRAWS, a.shape[0])
        out[f"units_eff_sub.layer{k}"] = effective_units(
            variance_shares(np.sum(contribution_variance(a[:n], w[:n]), 0))
        )
        mean, sd = shuffled_units_eff(model, x, sub, k, seed=seed + k)
        out[f"units_eff_shuffled.layer{k}"] = mean
        out[f"units_eff_shuffled_sd.layer{k}"] = sd
    return out
