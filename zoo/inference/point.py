"""Point estimates: MAP (log prior + log likelihood) and MLE with early stopping.

These are the baselines of Trippe & Turner (2018): "ES" is maximum likelihood stopped early
on a validation split, MAP adds the log prior. Both work on the pure network function
(:meth:`zoo.models.base.BayesianNet.log_likelihood`), with no Pyro trace per step. A learned
Gaussian noise is optimized as ``log noise``. :func:`fit_map` and :func:`fit_mle` are the
methods of :data:`zoo.inference.METHODS`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from zoo.inference.base import Fit, FitContext, Hooks, TrainingData, progress_bar
from zoo.inference.init import LOG_NOISE, constrained, initial_locs, learns_noise, minibatches
from zoo.models.base import BayesianNet
from zoo.seeds import Stream, seed_for
from zoo.spec.sections.inference import MAPMethod, MLEMethod

__all__ = ["EarlyStopping", "PointPosterior", "fit_map", "fit_mle", "fit_point", "log_prior"]


@dataclass(frozen=True)
class PointPosterior:
    """A point estimate as a posterior: every draw is the estimate itself.

    ``params`` are constrained (``noise`` is a standard deviation).
    """

    params: Mapping[str, torch.Tensor]

    def sample(self, n: int, seed: int) -> dict[str, torch.Tensor]:
        return {k: v[None].expand((n, *v.shape)) for k, v in self.params.items()}

    def median(self) -> dict[str, torch.Tensor]:
        return dict(self.params)


class EarlyStopping(NamedTuple):
    """A validation split and when to stop on it.

    The validation NLL is computed every ``eval_every`` steps; training stops after
    ``patience`` evaluations without improvement and returns the best estimate.
    """

    x: torch.Tensor
    y: torch.Tensor
    patience: int
    eval_every: int


def log_prior(model: BayesianNet, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Sum of the model's log prior densities at ``params`` (weights, biases, noise)."""
    like = next(iter(params.values()))
    total = torch.zeros((), dtype=like.dtype, device=like.device)
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


def fit_point(
    model: BayesianNet,
    x: torch.Tensor,
    y: torch.Tensor,
    init: Mapping[str, torch.Tensor],
    method: MAPMethod | MLEMethod,
    *,
    gen: torch.Generator,
    seed: int,
    prior: bool,
    stopping: EarlyStopping | None = None,
    progress: bool = False,
    desc: str = "point",
) -> Fit:
    """Fit point weights with Adam: MAP (``prior=True``) or maximum likelihood.

    The loss per step is ``-mean log p(y_b | x_b, w) - log p(w) / n`` over a minibatch
    (without the prior term for maximum likelihood). ``method`` gives ``steps`` or
    ``epochs``, ``batch_size``, ``lr``, ``lr_decay`` (total, exponential) and ``betas``;
    ``gen`` the minibatch order. With ``stopping`` the best estimate on its validation split
    is kept and training stops early.

    Returns
    -------
    Fit
        ``PointPosterior`` posterior, the loss per step, ``stats`` with ``final_loss`` (mean
        of the last 10 losses), ``best_step`` (step of the returned estimate; the last step
        without early stopping) and ``n_var_params``; ``predictive_draws`` 1;
        ``history["val_nll"]``, the validation NLL per point at each evaluation (empty
        without ``stopping``).
    """
    m = method
    n = x.shape[0]
    bs = n if m.batch_size is None else min(m.batch_size, n)
    total = m.steps if m.steps is not None else m.epochs * -(-n // bs)
    torch.manual_seed(seed)
    raw = {k: v.detach().clone().requires_grad_(True) for k, v in init.items()}
    if learns_noise(model):
        raw[LOG_NOISE] = torch.zeros((), dtype=x.dtype, device=x.device, requires_grad=True)
    opt = torch.optim.Adam(raw.values(), lr=m.lr, betas=tuple(m.betas))
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, m.lr_decay ** (1.0 / max(total, 1)))
    watch = _BestSoFar(stopping, total, best_step=total)
    losses = np.empty(total)
    bar = progress_bar(total, desc) if progress else None
    t0 = time.perf_counter()
    step = 0
    while step < total and watch.going():
        for idx in minibatches(n, bs, gen):
            if step >= total or not watch.going():
                break
            opt.zero_grad()
            loss = _point_loss(model, x[idx], y[idx], constrained(raw), prior, n)
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"{desc}: loss is {loss.item()} at step {step}; lower the method's lr"
                )
            loss.backward()
            opt.step()
            sched.step()
            losses[step] = loss.item()
            step += 1
            if bar is not None:
                bar.update(1)
            watch.after_step(step, model, raw)
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - t0
    return _point_fit(watch, raw, losses[:step], step, seconds)


def _point_loss(
    model: BayesianNet,
    xb: torch.Tensor,
    yb: torch.Tensor,
    params: dict[str, torch.Tensor],
    prior: bool,
    n: int,
) -> torch.Tensor:
    """``-mean log p(y_b | x_b, w)`` over a minibatch, less ``log p(w) / n`` with ``prior``."""
    loss = -model.log_likelihood(xb, yb, params).mean()
    if prior:
        loss = loss - log_prior(model, params) / n
    return loss


@dataclass
class _BestSoFar:
    """Early stopping's bookkeeping: the validation NLL per point at each evaluation, the
    best estimate so far, its step, and the evaluations since it (none without
    ``stopping``: training then runs all its steps)."""

    stopping: EarlyStopping | None
    total: int
    best_step: int
    val: list[float] = field(default_factory=list)
    best: dict[str, torch.Tensor] | None = None
    best_val: float = math.inf
    waited: int = 0

    def going(self) -> bool:
        """Whether the patience is not used up."""
        return self.waited < (self.stopping.patience if self.stopping is not None else 1)

    def after_step(self, step: int, model: BayesianNet, raw: dict[str, torch.Tensor]) -> None:
        """Every ``eval_every`` steps and at the last: score ``raw`` on the validation
        split and keep it if it is the best so far."""
        s = self.stopping
        if s is None or not (step % s.eval_every == 0 or step == self.total):
            return
        with torch.no_grad():
            v = -model.log_likelihood(s.x, s.y, constrained(raw))
            v = v.mean().item()
        self.val.append(v)
        if v < self.best_val:
            self.best_val, self.best_step, self.waited = v, step, 0
            self.best = {k: t.detach().clone() for k, t in raw.items()}
        else:
            self.waited += 1


def _point_fit(
    watch: _BestSoFar,
    raw: dict[str, torch.Tensor],
    losses: np.ndarray,
    step: int,
    seconds: float,
) -> Fit:
    """The :class:`Fit` of the best estimate (the last without early stopping)."""
    final = (
        watch.best if watch.best is not None else {k: t.detach().clone() for k, t in raw.items()}
    )
    params = constrained(final)
    stats: dict[str, Any] = {
        "final_loss": float(np.mean(losses[-10:])),
        "best_step": watch.best_step if watch.best is not None else step,
        "n_var_params": sum(v.numel() for v in params.values()),
    }
    return Fit(
        PointPosterior(params),
        seconds,
        losses,
        stats,
        predictive_draws=1,
        history={"val_nll": np.array(watch.val)},
    )


def fit_map(
    method: MAPMethod, model: BayesianNet, data: TrainingData, ctx: FitContext, hooks: Hooks
) -> Fit:
    """The ``map`` method: maximize the log joint from the method's initial weights."""
    init = initial_locs(model, method.init_loc, data, ctx.seed, ctx.runtime)
    return fit_point(
        model,
        data.x_train,
        data.y_train,
        init,
        method,
        gen=ctx.runtime.generator(ctx.seed),
        seed=ctx.seed,
        prior=True,
        progress=ctx.progress,
        desc=ctx.desc,
    )


def fit_mle(
    method: MLEMethod, model: BayesianNet, data: TrainingData, ctx: FitContext, hooks: Hooks
) -> Fit:
    """The ``mle`` method: maximum likelihood stopped early on a seeded validation split.

    ``validation_fraction`` of the training points (at least one), drawn with the seed
    :attr:`~zoo.seeds.Stream.HOLDOUT_SPLIT`, are held out.
    """
    x, y = data.x_train, data.y_train
    perm = torch.randperm(
        len(x),
        generator=ctx.runtime.generator(seed_for(ctx.seed, Stream.HOLDOUT_SPLIT)),
        device=ctx.runtime.device,
    )
    n_val = max(1, round(method.validation_fraction * len(x)))
    stopping = EarlyStopping(x[perm[:n_val]], y[perm[:n_val]], method.patience, method.eval_every)
    x, y = x[perm[n_val:]], y[perm[n_val:]]
    init = initial_locs(model, method.init_loc, data, ctx.seed, ctx.runtime)
    return fit_point(
        model,
        x,
        y,
        init,
        method,
        gen=ctx.runtime.generator(ctx.seed),
        seed=ctx.seed,
        prior=False,
        stopping=stopping,
        progress=ctx.progress,
        desc=ctx.desc,
    )
