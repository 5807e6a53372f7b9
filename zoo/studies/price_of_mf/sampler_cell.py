"""One NUTS or HMC cell: start, sample, evaluate, compare with mean-field, store.

The chains start at the prior or at the posterior mean of a variational method of the same
spec (``init_from``), as Farquhar et al. (2020) start NUTS at the MF-VI solution. That
method is refitted inside this cell with the cell's seed, which gives the same posterior as
its own cell (same configuration, same seed) while keeping cells independent of each other,
so any executor may run them in any order.

Besides the predictive metrics, a sampled cell records:

- convergence: the worst r_hat (two or more chains), the smallest ess_bulk and ess_tail,
  divergences, and which gates failed (:func:`reports.diagnostics.diagnostic_gates`);
- the price of the mean-field assumption on its draws of the weights and biases
  (:func:`reports.gaussian.diag_vs_full`): KL(q_diag || q_full) for the whole network and
  per layer, the closed-form W2 between them, and the blog's Wasserstein error; and the
  shift null of that KL (:func:`reports.kl_null.kl_shift_null`): the KL that the same
  chains would show with independent parameters, and the excess over it; and, for a
  classifier, ``kl_output_columns``: the KLs of the output layer's columns, block by block,
  the part that the softmax's invariance to shifting all logits alone explains;
- function space, when started from a variational method: agreement and total variation
  distance between that method's predictive distribution and the sampler's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from zoo.data import base as zdata
from zoo.models import mlp as zm
from zoo.run.evaluate import datatree_bytes, evaluate, posterior_datatree, predictive_probs
from zoo.spec.schema import Cell

__all__ = ["run_sampler_cell"]


def _thin(draws: dict[str, np.ndarray], n: int) -> dict[str, torch.Tensor]:
    """At most ``n`` draws, evenly spaced over all chains (chain-major)."""
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in draws.items()}
    total = next(iter(flat.values())).shape[0]
    idx = np.unique(np.linspace(0, total - 1, min(n, total)).round().astype(int))
    return {k: torch.as_tensor(v[idx]) for k, v in flat.items()}


def _kl_output_columns(flat, fit) -> float:
    """Sum of the KLs of the output layer's columns (and bias), each block on its own.

    With a softmax, the C weights from a hidden unit to the C outputs are correlated by the
    likelihood's invariance to adding a constant to every logit, at any depth. Each block's
    KL is computed on its own (as ``kl_diag_full.<layer>`` is); the sum says how much of
    KL(q_diag || q_full) these blocks carry by themselves, and it shrinks with the width of
    the last hidden layer.
    """
    from reports.draws import column_blocks
    from reports.gaussian import fit_gaussian, kl_diag_full

    layers = [k for k in flat.blocks if k.startswith("layer") and k[5:].isdigit()]
    if not layers:
        return float("nan")
    last = max(layers, key=lambda k: int(k[5:]))
    bias = f"{last}.bias" if any(lab.startswith(f"{last}.bias") for lab in flat.labels) else None
    blocks = column_blocks(flat.labels, f"{last}.weight", bias)
    g = fit_gaussian(flat.draws, cov=fit.cov, jitter=fit.jitter)
    kls = kl_diag_full(g.cov, blocks)
    return float(sum(v for k, v in kls.items() if k != "total"))


def _kl_draws_rule(pot, method, seed: int) -> Callable[[np.ndarray], bool]:
    """The stopping rule of ``kl_target_draws``: true once the weights' draws are worth that
    many independent draws to the covariance estimate (a 4-rotation shift null)."""
    from reports.kl_null import kl_shift_null

    cols = np.concatenate([np.arange(sl.start, sl.stop) for name, sl in pot.site_slices.items()
                           if name.startswith("layer")])  # fmt: skip
    fit = method.gaussian_fit

    def enough(draws: np.ndarray) -> bool:
        null = kl_shift_null(draws[..., cols], cov=fit.cov, jitter=fit.jitter, reps=4,
                             seed=seed + 4)  # fmt: skip
        return null.iid_draws >= method.kl_target_draws

    return enough


def run_sampler_cell(
    cell: Cell,
    model: zm.BayesianMLP,
    ds: zdata.Dataset,
    progress: bool,
    fit_vi: Callable[..., Any],
    attrs: dict[str, Any],
) -> dict[str, Any]:
    """Run the cell's ``nuts``/``hmc`` method; metrics plus the ``.nc`` artifact."""
    from reports.diagnostics import diagnostic_gates
    from reports.draws import flatten_sites
    from reports.gaussian import diag_vs_full
    from reports.kl_null import kl_shift_null
    from reports.predictive import predictive_agreement, predictive_tv
    from zoo.inference.mcmc.driver import FlatPotential, run_hmc, run_nuts

    m = cell.method
    seed = cell.spec.seed
    x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
    out: dict[str, Any] = {}
    init = None
    vi_probs = None
    if m.init_from != "prior":
        vi_method = cell.spec.method(m.init_from)
        res = fit_vi(cell.spec, vi_method, model, ds, progress, desc=f"{m.init_from} (init)")
        init = {k: v.detach() for k, v in res.posterior.median().items()}
        out["init_seconds"] = res.seconds
        if ds.n_classes > 0:
            vi_draws = res.posterior.sample(m.predictive_draws, seed=seed + 1)
            vi_probs = predictive_probs(model, ds, vi_draws)
    pot = FlatPotential(model, x, y)
    common = dict(seed=seed, warmup=m.warmup, draws=m.draws, chains=m.chains,
                  target_accept=m.target_accept, step_size=m.step_size, init=init,
                  progress=progress, vectorize_chains=m.vectorize_chains)  # fmt: skip
    if m.kl_target_draws is not None:
        common.update(max_draws=m.draws_cap, until=_kl_draws_rule(pot, m, seed))
    if m.kind == "nuts":
        result = run_nuts(pot, max_tree_depth=m.max_tree_depth, mass_matrix=m.mass_matrix,
                          **common)  # fmt: skip
    else:
        result = run_hmc(pot, num_steps=m.num_steps, adapt_mass_matrix=m.adapt_mass_matrix,
                         **common)  # fmt: skip
    thinned = _thin(result.draws, m.predictive_draws)
    out.update(evaluate(model, ds, thinned, cell.spec.metrics))
    if vi_probs is not None:
        probs = predictive_probs(model, ds, thinned)
        out["agreement_vi"] = predictive_agreement(vi_probs, probs)
        out["tv_vi"] = predictive_tv(vi_probs, probs)

    weights = {k: v for k, v in result.draws.items() if k.startswith("layer")}
    flat = flatten_sites(weights)
    fit = m.gaussian_fit
    gauss = diag_vs_full(flat.draws, flat.blocks, cov=fit.cov, jitter=fit.jitter, seed=seed)
    out.update({k: v for k, v in gauss.items() if isinstance(v, int | float)})
    null = kl_shift_null(flat.draws, chains=m.chains, cov=fit.cov, jitter=fit.jitter,
                         reps=8, seed=seed + 3)  # fmt: skip
    out.update(kl_null=null.null_mean, kl_null_sd=null.null_sd, kl_excess=null.excess,
               kl_null_draws=null.iid_draws, draws_per_chain=int(result.settings["draws"]))  # fmt: skip
    if ds.n_classes > 1:
        out["kl_output_columns"] = _kl_output_columns(flat, fit)

    full = {k: torch.as_tensor(v.reshape((-1,) + v.shape[2:])) for k, v in result.draws.items()}
    dt = posterior_datatree(model, ds, full, chains=m.chains, seed=seed + 2,
                            sample_stats=result.sample_stats, attrs=attrs)  # fmt: skip
    gates = diagnostic_gates(dt)
    out.update(
        max_r_hat=gates.max_r_hat if gates.max_r_hat is not None else float("nan"),
        min_ess_bulk=gates.min_ess_bulk,
        min_ess_tail=gates.min_ess_tail,
        ess_bulk_q05=gates.ess_bulk_quantiles[0],
        ess_bulk_q50=gates.ess_bulk_quantiles[1],
        worst_ess_bulk=gates.worst_ess_bulk[0][0] if gates.worst_ess_bulk else "",
        n_divergent=int(result.n_divergent),
        mean_tree_steps=float(np.mean(result.sample_stats["n_steps"])),
        step_size=float(np.median(result.sample_stats["step_size"])),
        gates_failed=",".join(gates.failed),
        fit_seconds=result.seconds,
        warmup_seconds=result.warmup_seconds,
    )
    out["_artifacts"] = {".nc": datatree_bytes(dt)}
    pspec = cell.spec.metrics.pruning
    if pspec is not None and model.depth:  # over-pruning statistics from the draws
        from zoo.studies.pruning.probe import draw_moments, pruning_outputs

        metrics, data = pruning_outputs(model, ds, draw_moments(full, model),
                                        _thin(result.draws, pspec.draws), pspec)  # fmt: skip
        out.update(metrics)
        out["_artifacts"][".pruning.npz"] = data
    return out
