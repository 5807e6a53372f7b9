"""Variational inference runners (NUTS and HMC are in :mod:`zoo.inference.mcmc.driver`), with explicit seeds.

A runner takes a Pyro model, data tensors and settings, and returns a frozen result. Same
inputs and seed give the same numbers on CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import pyro
import torch
from pyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO
from pyro.infer.autoguide import AutoGuide
from pyro.optim import ClippedAdam, PyroOptim
from pyro.optim.clipped_adam import ClippedAdam as _TorchClippedAdam

from guides.local_reparam import LocalReparameterization

__all__ = ["KLWeight", "SVIResult", "VIPosterior", "fit_svi", "kl_weight_at", "pretrain_mle"]


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
    """A fitted variational posterior: the guide and the model it belongs to.

    ``sample(n, seed)`` returns ``{site: tensor of shape (n, *site_shape)}``.
    """

    guide: AutoGuide
    model_args: tuple = ()

    def sample(self, n: int, seed: int) -> dict[str, torch.Tensor]:
        state = torch.random.get_rng_state()
        try:
            torch.manual_seed(seed)
            with torch.no_grad():
                draws = [self.guide(*self.model_args) for _ in range(n)]
        finally:
            torch.random.set_rng_state(state)
        return {k: torch.stack([d[k] for d in draws]) for k in draws[0]}

    def median(self) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return self.guide.median(*self.model_args)


@dataclass(frozen=True)
class SVIResult:
    """Result of :func:`fit_svi`.

    Attributes
    ----------
    posterior : VIPosterior
    losses : ndarray
        The (KL-weighted) loss per step, per training point.
    neg_elbo : float
        -ELBO (KL weight 1) on the full training set, averaged over ``eval_particles``.
    seconds : float
        Wall time of the optimization.
    """

    posterior: VIPosterior
    losses: np.ndarray = field(repr=False)
    neg_elbo: float
    seconds: float


def _batches(n: int, batch_size: int, gen: torch.Generator):
    perm = torch.randperm(n, generator=gen)
    for i in range(0, n, batch_size):
        yield perm[i : i + batch_size]


def fit_svi(
    model: Callable,
    guide: AutoGuide,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    seed: int,
    steps: int | None = None,
    epochs: int | None = None,
    batch_size: int | None = None,
    lr: float = 1e-2,
    lr_decay: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.999),
    kl_weight: float = 1.0,
    kl_warmup_steps: int = 0,
    closed_form_kl: bool = True,
    num_particles: int = 1,
    eval_particles: int = 10,
    progress: bool = False,
    desc: str = "svi",
    local_reparam: bool = False,
    kl_warmup_every: int = 1,
    callback: Callable[[int, float, torch.Tensor], None] | None = None,
    grad_callback: Callable[[int, dict[str, torch.Tensor]], None] | None = None,
    scale_lr: float | None = None,
) -> SVIResult:
    """Maximize the ELBO of ``model(x, y, n_total)`` over ``guide`` with Adam.

    Parameters
    ----------
    model, guide
        A Pyro model with signature ``model(x, y=None, n_total=None)`` and an AutoGuide.
    x, y : Tensor
        Training data.
    seed : int
        Seeds Pyro/torch and the minibatch order.
    steps, epochs : int
        Length of training; give one. An epoch is ``ceil(n / batch_size)`` steps.
    batch_size : int, optional
        Minibatch size; ``None`` is full batch.
    lr, lr_decay : float
        Adam learning rate and its total decay (``ClippedAdam`` ``lrd = lr_decay ** (1/steps)``).
    betas : tuple of float
        Adam's ``(beta1, beta2)``.
    scale_lr : float, optional
        Learning rate of the guide's standard-deviation parameters (see
        :func:`is_std_param`); ``None`` uses ``lr`` for every parameter.
    kl_weight, kl_warmup_steps, kl_warmup_every
        The KL term is multiplied by ``kl_weight * min(1, s / kl_warmup_steps)`` where ``s``
        is the step count rounded down to a multiple of ``kl_warmup_every`` (1: raised every
        batch; 100: step-wise every 100 batches, as in Swiatkowski et al. 2020, D.4).
    closed_form_kl : bool
        ``TraceMeanField_ELBO`` (analytic KL where registered) instead of ``Trace_ELBO``.
    local_reparam : bool
        Run each step inside :class:`guides.local_reparam.LocalReparameterization`: the
        model's linear layers sample their outputs instead of the weights (exact for
        guides with independent Gaussian weights; others fall back to weight sampling).
    callback : callable, optional
        ``callback(step, loss_per_point, batch_index)`` after every step (0-based ``step``);
        use it for trajectories (ELBO, KL, NLL at chosen steps). It must not draw from
        torch's global generator if results are to stay identical with and without it.
    grad_callback : callable, optional
        ``grad_callback(step, {param_name: grad})`` with this step's gradients, before the
        optimizer applies them (gradient signal-to-noise ratios).

    Returns
    -------
    SVIResult
    """
    n = x.shape[0]
    bs = n if batch_size is None else min(batch_size, n)
    per_epoch = -(-n // bs)
    if (steps is None) == (epochs is None):
        raise ValueError("give exactly one of steps and epochs")
    total = steps if steps is not None else epochs * per_epoch
    pyro.set_rng_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    scale = KLWeight(kl_weight if kl_warmup_steps == 0 else 0.0)
    smodel, sguide = scale(model), scale(guide)
    elbo_cls = TraceMeanField_ELBO if closed_form_kl else Trace_ELBO
    optim_args: dict | Callable = {
        "lr": lr, "lrd": lr_decay ** (1.0 / max(total, 1)), "betas": tuple(betas)
    }  # fmt: skip
    if scale_lr is not None:
        optim_args = _per_param_lr(optim_args, scale_lr)
    if kl_warmup_every < 1:
        raise ValueError("kl_warmup_every must be >= 1")
    tap = _GradTap(optim_args, grad_callback) if grad_callback is not None else None
    svi = SVI(
        smodel, sguide, tap or ClippedAdam(optim_args), loss=elbo_cls(num_particles=num_particles)
    )
    losses = np.empty(total)
    t0 = time.perf_counter()
    bar = _progress(total, desc) if progress else None
    step = 0
    while step < total:
        for idx in _batches(n, bs, gen):
            if step >= total:
                break
            if kl_warmup_steps:
                scale.weight = kl_weight_at(step, kl_weight, kl_warmup_steps, kl_warmup_every)
            if tap is not None:
                tap.step = step
            with LocalReparameterization(strict=True) if local_reparam else nullcontext():
                loss = svi.step(x[idx], y[idx], n)
            if not np.isfinite(loss):
                raise FloatingPointError(
                    f"SVI loss is {loss} at step {step}; lower inference.lr or raise "
                    "guide.init_scale"
                )
            losses[step] = loss / n
            if callback is not None:
                callback(step, losses[step], idx)
            step += 1
            if bar is not None:
                bar.update(1)
                if step % 50 == 0:
                    bar.set_postfix(loss=f"{losses[step - 1]:.4f}")
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        neg = elbo_cls(num_particles=eval_particles).loss(model, guide, x, y, n)
    return SVIResult(VIPosterior(guide, (x[:1],)), losses, float(neg), seconds)


# containers of the guides' standard-deviation parameters (guides/: mean field, k-tied,
# full rank, matrix normal)
STD_PARAM_CONTAINERS = frozenset(
    {"scales", "log_u", "log_v", "scale_trils", "log_scale", "row", "col"}
)


def is_std_param(name: str) -> bool:
    """Whether a param-store name belongs to a guide's standard-deviation parameters."""
    return not STD_PARAM_CONTAINERS.isdisjoint(name.split("."))


def _per_param_lr(optim_args: dict, scale_lr: float) -> Callable[[str], dict]:
    """Pyro per-parameter optimizer arguments: ``scale_lr`` for std parameters, else ``lr``."""
    scale_args = dict(optim_args, lr=scale_lr)

    def args(name: str) -> dict:
        return scale_args if is_std_param(name) else optim_args

    return args


class _GradTap(PyroOptim):
    """Clipped Adam that hands each step's gradients to a callback, then applies them."""

    def __init__(
        self, optim_args: dict | Callable, fn: Callable[[int, dict[str, torch.Tensor]], None]
    ):
        super().__init__(_TorchClippedAdam, optim_args)
        self.fn, self.step = fn, 0

    def __call__(self, params, *args, **kwargs):
        store = pyro.get_param_store()
        grads = {store.param_name(p): p.grad.detach().clone() for p in params if p.grad is not None}
        self.fn(self.step, grads)
        return super().__call__(params, *args, **kwargs)


def pretrain_mle(
    log_likelihood: Callable[
        [torch.Tensor, torch.Tensor, Mapping[str, torch.Tensor]], torch.Tensor
    ],
    init: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    seed: int,
    epochs: int,
    batch_size: int | None,
    lr: float,
) -> dict[str, torch.Tensor]:
    """Maximum-likelihood training of point weights (the means' pretraining of Farquhar et al.).

    ``log_likelihood(x, y, params)`` returns pointwise log-likelihoods; Adam minimizes their
    negative mean over minibatches for ``epochs`` passes.
    """
    params = {k: v.detach().clone().requires_grad_(True) for k, v in init.items()}
    opt = torch.optim.Adam(params.values(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    n = x.shape[0]
    bs = n if batch_size is None else min(batch_size, n)
    for _ in range(epochs):
        for idx in _batches(n, bs, gen):
            opt.zero_grad()
            loss = -log_likelihood(x[idx], y[idx], params).mean()
            loss.backward()
            opt.step()
    return {k: v.detach() for k, v in params.items()}


def _progress(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False, unit="step", dynamic_ncols=True, disable=None)
