"""Stochastic variational inference: maximize the ELBO over a guide with (clipped) Adam.

:func:`fit_svi` is the optimization loop for any Pyro model and AutoGuide, with its
settings in an :class:`~zoo.spec.sections.inference.SVIMethod` section (steps or epochs,
batch size, learning rates, KL weight and annealing, ELBO estimator, local
reparameterization). :func:`fit_svi_method` is the method of :data:`zoo.inference.METHODS`:
initial means, optional pretraining, the guide, then :func:`fit_svi`. Same inputs and seed
give the same numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO
from pyro.infer.autoguide import AutoGuide
from pyro.optim import ClippedAdam, PyroOptim
from pyro.optim.clipped_adam import ClippedAdam as _TorchClippedAdam

import guides
from guides.local_reparam import LocalReparameterization
from zoo.inference.base import NO_HOOKS, Fit, FitContext, Hooks, TrainingData, progress_bar
from zoo.inference.fused_svi import FusedMeanFieldStep, fused_step_applies
from zoo.inference.guides import build_guide
from zoo.inference.init import initial_locs, learns_noise, minibatches, pretrain_mle
from zoo.models.base import BayesianNet
from zoo.spec.sections.inference import SVIMethod

__all__ = [
    "EVAL_PARTICLES",
    "KLWeight",
    "VIPosterior",
    "fit_svi",
    "fit_svi_method",
    "kl_weight_at",
]

#: Particles of the final -ELBO estimate on the full training set.
EVAL_PARTICLES = 10


def kl_weight_at(step: int, kl_weight: float, warmup_steps: int, every: int = 1) -> float:
    """KL weight of 0-based ``step`` under linear, step-wise annealing (used by fit_svi).

    ``kl_weight * min(1, s / warmup_steps)`` with ``s = (step + 1)`` rounded down to a
    multiple of ``every``: the weight rises by ``every / warmup_steps`` after every
    ``every`` batches (Swiatkowski et al. 2020, D.4: a coefficient of 5e-5 per batch raised
    every 100 batches is ``warmup_steps = 20000, every = 100``). No annealing when
    ``warmup_steps == 0``.
    """
    if warmup_steps == 0:
        return kl_weight
    s = (step + 1) // every * every
    return kl_weight * min(1.0, s / warmup_steps)


class KLWeight(pyro.poutine.messenger.Messenger):
    """Scale every latent (non-observed) sample site by ``weight``.

    Applied to both model and guide, it multiplies the KL part of the ELBO (closed-form or
    sampled) by ``weight`` and leaves the expected log-likelihood alone. ``weight`` may be
    changed between steps (KL annealing).
    """

    def __init__(self, weight: float = 1.0) -> None:
        super().__init__()
        self.weight = float(weight)

    def _process_message(self, msg: dict) -> None:
        if msg["type"] == "sample" and not msg["is_observed"]:
            msg["scale"] = self.weight * msg["scale"]


@dataclass(frozen=True)
class VIPosterior:
    """A fitted variational posterior: the guide and the model arguments it is called with.

    ``sample(n, seed)`` returns ``{site: tensor of shape (n, *site_shape)}``, drawn with
    torch's generators seeded by ``seed`` and restored afterwards.
    """

    guide: AutoGuide
    model_args: tuple = ()

    def sample(self, n: int, seed: int) -> dict[str, torch.Tensor]:
        first = self.model_args[0] if self.model_args else None
        cuda = [first.device] if isinstance(first, torch.Tensor) and first.is_cuda else []
        with torch.random.fork_rng(devices=cuda), torch.no_grad():
            torch.manual_seed(seed)
            draws = [self.guide(*self.model_args) for _ in range(n)]
        return {k: torch.stack([d[k] for d in draws]) for k in draws[0]}

    def median(self) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return self.guide.median(*self.model_args)


def _fit_loop(model, guide, x, y, m, seed, gen, hooks, fused, progress, desc):
    """``(losses, seconds)`` of :func:`fit_svi`'s optimization: Pyro's seed set, the KL
    weight, the optimizer and the step function built, then every step taken and timed."""
    n = x.shape[0]
    bs = n if m.batch_size is None else min(m.batch_size, n)
    total = m.steps if m.steps is not None else m.epochs * -(-n // bs)
    pyro.set_rng_seed(seed)
    scale = KLWeight(m.kl_weight if m.kl_warmup_steps == 0 else 0.0)
    optim, tap = _optimizer(guide, m, total, hooks)
    svi_step, pyro_local_reparam = _step_function(model, guide, m, scale, optim, n, fused)
    t0 = time.perf_counter()
    losses = _train(
        svi_step,
        x,
        y,
        guide,
        m,
        total=total,
        batch_size=bs,
        gen=gen,
        scale=scale,
        tap=tap,
        pyro_local_reparam=pyro_local_reparam,
        hooks=hooks,
        desc=desc if progress else None,
    )
    return losses, time.perf_counter() - t0


def fit_svi(
    model: Callable,
    guide: AutoGuide,
    x: torch.Tensor,
    y: torch.Tensor,
    method: SVIMethod,
    *,
    gen: torch.Generator,
    seed: int,
    hooks: Hooks = NO_HOOKS,
    progress: bool = False,
    desc: str = "svi",
    eval_particles: int = EVAL_PARTICLES,
    fused: bool = True,
) -> Fit:
    """Maximize the ELBO of ``model(x, y, n_total)`` over ``guide`` with Adam.

    Parameters
    ----------
    model, guide
        A Pyro model with signature ``model(x, y=None, n_total=None)`` and an AutoGuide.
    x, y : Tensor
        Training data.
    method : SVIMethod
        The settings: ``steps`` or ``epochs`` (an epoch is ``ceil(n / batch_size)`` steps),
        ``batch_size`` (None: full batch), Adam's ``lr``, ``lr_decay`` (ClippedAdam's
        ``lrd = lr_decay ** (1 / steps)``) and ``betas``; ``scale_lr``, the learning rate of
        the guide's standard-deviation parameters (:func:`guides.is_std_param`; None: ``lr``);
        ``kl_weight``, ``kl_warmup_steps`` and ``kl_warmup_every`` (the KL term is multiplied
        by :func:`kl_weight_at`); ``closed_form_kl`` (``TraceMeanField_ELBO`` instead of
        ``Trace_ELBO``); ``num_particles``; and the guide's ``local_reparam`` (each step
        inside :class:`guides.local_reparam.LocalReparameterization`).
    gen : torch.Generator
        Draws the minibatch order.
    seed : int
        Seeds Pyro and torch's global generators (the ELBO's draws).
    hooks : Hooks
        ``on_step(step, guide, loss_per_point)`` after every step and ``on_grads(step,
        {param name: grad})`` before the optimizer applies a step's gradients.
    progress, desc : bool, str
        A tqdm bar (off when stderr is not a terminal) and its label.
    eval_particles : int
        Particles of the final -ELBO on the full training set.
    fused : bool
        Take each step with :class:`~zoo.inference.fused_svi.FusedMeanFieldStep` where it
        applies (:func:`~zoo.inference.fused_svi.fused_step_applies`: a mean-field,
        fixed-variance or k-tied guide on an MLP, closed-form KL, one particle, with or
        without local reparameterization, fixed or learned Gaussian noise): the same
        losses, gradients and parameters as Pyro's ``SVI.step`` to the bit, without its
        traces. False: always Pyro's step.

    Returns
    -------
    Fit
        ``VIPosterior`` posterior, the loss per step and point, ``stats`` with ``neg_elbo``
        (-ELBO per data set, KL weight 1), ``final_loss`` (mean of the last 10 losses) and
        ``n_var_params``.
    """
    m = method
    losses, seconds = _fit_loop(model, guide, x, y, m, seed, gen, hooks, fused, progress, desc)
    return Fit(
        VIPosterior(guide, (x[:1],)),
        seconds,
        losses,
        _final_stats(model, guide, x, y, losses, m.closed_form_kl, eval_particles),
        predictive_draws=m.predictive_samples,
        save_draws=m.save_draws,
    )


def _optimizer(
    guide: AutoGuide, m: SVIMethod, total: int, hooks: Hooks
) -> tuple[Any, _GradTap | None]:
    """ClippedAdam with the method's learning rate, its decay over ``total`` steps
    (``lrd = lr_decay ** (1 / total)``), betas and the scale parameters' own rate; wrapped
    in a :class:`_GradTap` (also returned) when ``hooks.on_grads`` wants each step's
    gradients."""
    optim_args: dict | Callable = {
        "lr": m.lr,
        "lrd": m.lr_decay ** (1.0 / max(total, 1)),
        "betas": tuple(m.betas),
    }
    if m.scale_lr is not None:
        optim_args = _per_param_lr(guide, optim_args, m.scale_lr)
    tap = _GradTap(optim_args, hooks.on_grads) if hooks.on_grads is not None else None
    return tap or ClippedAdam(optim_args), tap


def _step_function(
    model: Callable,
    guide: AutoGuide,
    m: SVIMethod,
    scale: KLWeight,
    optim: Any,
    n: int,
    fused: bool,
) -> tuple[Callable[[torch.Tensor, torch.Tensor], float], bool]:
    """One SVI step on a minibatch, returning its loss, and whether the caller must wrap it
    in Pyro's local reparameterization: the fused mean-field step where it applies (it does
    its own local reparameterization), else Pyro's ``SVI.step`` on the KL-scaled model and
    guide with ``Trace_ELBO`` (``TraceMeanField_ELBO`` for a closed-form KL)."""
    local_reparam = getattr(m.guide, "local_reparam", False)
    if fused and fused_step_applies(
        model,
        guide,
        particles=m.num_particles,
        closed_form_kl=m.closed_form_kl,
        local_reparam=local_reparam,
    ):
        fused_step = FusedMeanFieldStep(model, guide, optim, local_reparam=local_reparam)
        return (lambda xb, yb: fused_step.step(xb, yb, n, scale.weight)), False
    elbo_cls = TraceMeanField_ELBO if m.closed_form_kl else Trace_ELBO
    svi = SVI(scale(model), scale(guide), optim, loss=elbo_cls(num_particles=m.num_particles))
    return (lambda xb, yb: svi.step(xb, yb, n)), local_reparam


def _train(
    svi_step: Callable[[torch.Tensor, torch.Tensor], float],
    x: torch.Tensor,
    y: torch.Tensor,
    guide: AutoGuide,
    m: SVIMethod,
    *,
    total: int,
    batch_size: int,
    gen: torch.Generator,
    scale: KLWeight,
    tap: _GradTap | None,
    pyro_local_reparam: bool,
    hooks: Hooks,
    desc: str | None,
) -> np.ndarray:
    """Take ``total`` steps over minibatches of ``batch_size`` drawn by ``gen`` (epoch after
    epoch), the KL weight following its warm-up, with a progress bar labelled ``desc`` (None:
    no bar); the loss of each step per data point."""
    n = x.shape[0]
    losses = np.empty(total)
    bar = progress_bar(total, desc) if desc is not None else None
    step = 0
    while step < total:
        for idx in minibatches(n, batch_size, gen):
            if step >= total:
                break
            if m.kl_warmup_steps:
                scale.weight = kl_weight_at(step, m.kl_weight, m.kl_warmup_steps, m.kl_warmup_every)
            if tap is not None:
                tap.step = step
            with LocalReparameterization(strict=True) if pyro_local_reparam else nullcontext():
                losses[step] = _checked(svi_step(x[idx], y[idx]), step) / n
            if hooks.on_step is not None:
                hooks.on_step(step, guide, losses[step])
            step += 1
            _advance(bar, step, losses)
    if bar is not None:
        bar.close()
    return losses


def _checked(loss: float, step: int) -> float:
    """A step's loss, refused when it is not finite (the fit has diverged)."""
    if not np.isfinite(loss):
        raise FloatingPointError(
            f"SVI loss is {loss} at step {step}; lower inference.lr or raise guide.init_scale"
        )
    return loss


def _advance(bar: Any, step: int, losses: np.ndarray) -> None:
    """Move the progress bar (if any) one step; every 50 steps, show the last loss."""
    if bar is not None:
        bar.update(1)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{losses[step - 1]:.4f}")


def _final_stats(
    model: Callable,
    guide: AutoGuide,
    x: torch.Tensor,
    y: torch.Tensor,
    losses: np.ndarray,
    closed_form_kl: bool,
    particles: int,
) -> dict[str, float | int]:
    """``neg_elbo`` (the -ELBO on the full training set, KL weight 1, with ``particles``
    particles), ``final_loss`` (mean of the last 10 per-point losses) and ``n_var_params``."""
    elbo_cls = TraceMeanField_ELBO if closed_form_kl else Trace_ELBO
    with torch.no_grad():
        neg = elbo_cls(num_particles=particles).loss(model, guide, x, y, x.shape[0])
    return {
        "neg_elbo": float(neg),
        "final_loss": float(np.mean(losses[-10:])),
        "n_var_params": int(getattr(guide, "num_variational_params", 0)),
    }


def fit_svi_method(
    method: SVIMethod, model: BayesianNet, data: TrainingData, ctx: FitContext, hooks: Hooks
) -> Fit:
    """The ``svi`` method: initial means, pretraining, the guide, then :func:`fit_svi`.

    ``hooks.on_start(guide)`` is called once the guide is built.
    """
    x, y = data.x_train, data.y_train
    init = initial_locs(model, method.guide.init_loc, data, ctx.seed, ctx.runtime)
    if method.pretrain_epochs:
        init = pretrain_mle(
            model.log_likelihood,
            init,
            x,
            y,
            gen=ctx.runtime.generator(ctx.seed),
            epochs=method.pretrain_epochs,
            batch_size=method.batch_size,
            lr=method.lr,
            noise=learns_noise(model),
        )
    guide = build_guide(model, method.guide, init)
    if hooks.on_start is not None:
        hooks.on_start(guide)
    return fit_svi(
        model,
        guide,
        x,
        y,
        method,
        gen=ctx.runtime.generator(ctx.seed),
        seed=ctx.seed,
        hooks=hooks,
        progress=ctx.progress,
        desc=ctx.desc,
    )


def _per_param_lr(guide: AutoGuide, optim_args: dict, scale_lr: float) -> Callable[[str], dict]:
    """Pyro per-parameter optimizer arguments: ``scale_lr`` for std parameters, else ``lr``."""
    scale_args = dict(optim_args, lr=scale_lr)

    def args(name: str) -> dict:
        return scale_args if guides.is_std_param(guide, name) else optim_args

    return args


class _GradTap(PyroOptim):
    """Clipped Adam that hands each step's gradients to a callback, then applies them."""

    def __init__(self, optim_args: dict | Callable, fn: Callable[[int, Any], None]) -> None:
        super().__init__(_TorchClippedAdam, optim_args)
        self.fn, self.step = fn, 0

    def __call__(self, params, *args, **kwargs):
        store = pyro.get_param_store()
        grads = {store.param_name(p): p.grad.detach().clone() for p in params if p.grad is not None}
        self.fn(self.step, grads)
        return super().__call__(params, *args, **kwargs)
