"""Point estimates: MAP (log prior + log likelihood) and MLE with early stopping.

These are the baselines of Trippe & Turner (2018): "ES" is maximum likelihood stopped early
on a validation split, MAP adds the log prior. Both work on the pure network function
(:meth:`zoo.models.mlp.BayesianMLP.log_likelihood`), with no Pyro trace per step, and return
a frozen :class:`PointResult`. A learned Gaussian noise is optimized as ``log noise``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from zoo.inference.svi import _batches, _progress
from zoo.models.mlp import BayesianMLP

__all__ = ["PointResult", "fit_point", "log_prior"]


@dataclass(frozen=True)
class PointResult:
    """Result of :func:`fit_point`.

    Attributes
    ----------
    params : dict of str to Tensor
        The estimate (constrained: ``noise`` is a standard deviation).
    losses : ndarray
        Training loss per step (negative log joint or log likelihood per training point).
    val_nll : ndarray
        Validation NLL per point at each evaluation (empty without a validation split).
    best_step : int
        Step of the returned estimate (the last step without early stopping).
    seconds : float
    """

    params: dict[str, torch.Tensor]
    losses: np.ndarray = field(repr=False)
    val_nll: np.ndarray = field(repr=False)
    best_step: int
    seconds: float


def log_prior(model: BayesianMLP, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Sum of the model's log prior densities at ``params`` (weights, biases, noise)."""
    total = torch.zeros(())
    for site, (loc, scale) in model.prior_params.items():
        z = (params[site] - loc) / scale
        total = (
            total
            - 0.5 * (z * z).sum()
            - z.numel() * (math.log(scale) + 0.5 * math.log(2 * math.pi))
        )
    if "noise" in params:
        s = model.likelihood.prior_scale
        total = total + torch.distributions.HalfNormal(s).log_prob(params["noise"]).sum()
    return total


def _constrained(raw: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {("noise" if k == "log_noise" else k): (v.exp() if k == "log_noise" else v)
            for k, v in raw.items()}  # fmt: skip


def fit_point(
    model: BayesianMLP,
    x: torch.Tensor,
    y: torch.Tensor,
    init: Mapping[str, torch.Tensor],
    *,
    seed: int,
    prior: bool,
    steps: int | None = None,
    epochs: int | None = None,
    batch_size: int | None = None,
    lr: float = 1e-2,
    lr_decay: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.999),
    validation: tuple[torch.Tensor, torch.Tensor] | None = None,
    patience: int = 20,
    eval_every: int = 10,
    progress: bool = False,
    desc: str = "point",
) -> PointResult:
    """Fit point weights with Adam: MAP (``prior=True``) or maximum likelihood.

    The loss per step is ``-mean log p(y_b | x_b, w) - log p(w) / n`` over a minibatch
    (without the prior term for maximum likelihood). With ``validation`` the validation
    NLL is computed every ``eval_every`` steps; the best estimate is kept and training stops
    after ``patience`` evaluations without improvement (early stopping).
    """
    n = x.shape[0]
    bs = n if batch_size is None else min(batch_size, n)
    if (steps is None) == (epochs is None):
        raise ValueError("give exactly one of steps and epochs")
    total = steps if steps is not None else epochs * -(-n // bs)
    torch.manual_seed(seed)
    raw = {k: v.detach().clone().requires_grad_(True) for k, v in init.items()}
    if (
        model.likelihood.__class__.__name__ == "GaussianLikelihood"
        and model.likelihood.noise is None
    ):
        raw["log_noise"] = torch.zeros((), requires_grad=True)
    opt = torch.optim.Adam(raw.values(), lr=lr, betas=tuple(betas))
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, lr_decay ** (1.0 / max(total, 1)))
    gen = torch.Generator().manual_seed(seed)
    losses, val = np.empty(total), []
    best, best_step, best_val, waited = None, total, math.inf, 0
    bar = _progress(total, desc) if progress else None
    t0 = time.perf_counter()
    step = 0
    while step < total and waited < patience:
        for idx in _batches(n, bs, gen):
            if step >= total or waited >= patience:
                break
            opt.zero_grad()
            params = _constrained(raw)
            loss = -model.log_likelihood(x[idx], y[idx], params).mean()
            if prior:
                loss = loss - log_prior(model, params) / n
            if not torch.isfinite(loss):
                raise FloatingPointError(f"{desc}: loss is {loss.item()} at step {step}; "
                                         "lower the method's lr")  # fmt: skip
            loss.backward()
            opt.step()
            sched.step()
            losses[step] = loss.item()
            step += 1
            if bar is not None:
                bar.update(1)
            if validation is not None and (step % eval_every == 0 or step == total):
                with torch.no_grad():
                    v = -model.log_likelihood(*validation, _constrained(raw)).mean().item()
                val.append(v)
                if v < best_val:
                    best_val, best_step, waited = v, step, 0
                    best = {k: t.detach().clone() for k, t in raw.items()}
                else:
                    waited += 1
    if bar is not None:
        bar.close()
    final = best if best is not None else {k: t.detach().clone() for k, t in raw.items()}
    return PointResult(_constrained(final), losses[:step], np.array(val),
                       best_step if best is not None else step, time.perf_counter() - t0)  # fmt: skip
