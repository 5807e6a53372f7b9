"""Where a fit starts: initial weight means and their maximum-likelihood pretraining.

``init_loc`` of a guide or point method names one of :data:`INIT_LOCS`: He-normal draws
for the weights with zero biases (``he``), draws from the prior (``prior``), zeros
(``zero``), or the weights that generated the data (``teacher``, teacher data only). Draws
come from one generator seeded with the fit's seed, site by site in model order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import torch

from zoo.inference.base import TrainingData
from zoo.models.base import BayesianNet
from zoo.models.likelihoods import GaussianLikelihood
from zoo.runtime import Runtime

__all__ = [
    "INIT_LOCS",
    "LOG_NOISE",
    "constrained",
    "initial_locs",
    "learns_noise",
    "minibatches",
    "pretrain_mle",
]

#: The unconstrained parameter of a learned Gaussian noise in a point fit: ``log noise``.
LOG_NOISE = "log_noise"

Locs = dict[str, torch.Tensor]


def _he(model: BayesianNet, data: TrainingData, gen: torch.Generator, rt: Runtime) -> Locs:
    """He-normal weights N(0, 2 / fan_in) (He et al. 2015), zero biases."""
    biases = {b for _, b in model.layer_sites()}
    out = {}
    for site, (shape, fan_in) in model.site_info().items():
        if site in biases:
            out[site] = rt.zeros(shape)
        else:
            out[site] = _randn(shape, gen, rt) * (2.0 / fan_in) ** 0.5
    return out


def _prior(model: BayesianNet, data: TrainingData, gen: torch.Generator, rt: Runtime) -> Locs:
    """One draw from the prior of every site."""
    out = {}
    for site, (shape, _) in model.site_info().items():
        loc, scale = model.prior_params[site]
        out[site] = loc + scale * _randn(shape, gen, rt)
    return out


def _zero(model: BayesianNet, data: TrainingData, gen: torch.Generator, rt: Runtime) -> Locs:
    """Zeros."""
    return {site: rt.zeros(shape) for site, (shape, _) in model.site_info().items()}


def _teacher(model: BayesianNet, data: TrainingData, gen: torch.Generator, rt: Runtime) -> Locs:
    """The weights that generated the data, checked against the model's shapes."""
    if data.true_params is None:
        raise ValueError(
            "guide.init_loc: 'teacher' needs data that come with their generating "
            "weights (data.kind teacher); use he, prior or zero"
        )
    out = {}
    for site, (shape, _) in model.site_info().items():
        t = data.true_params.get(site)
        got = tuple(t.shape) if t is not None else (0,)
        if got != tuple(shape):
            raise ValueError(
                f"guide.init_loc: 'teacher': the data's {site} has shape {got}, "
                f"the model's {tuple(shape)}; make model.width and depth match the "
                "teacher (data.width, depth 1)"
            )
        out[site] = t.clone()
    return out


def _randn(shape: tuple[int, ...], gen: torch.Generator, rt: Runtime) -> torch.Tensor:
    return torch.randn(shape, generator=gen, device=rt.device, dtype=rt.dtype)


#: ``init_loc`` -> ``(model, data, generator, runtime) -> {site: initial mean}``.
INIT_LOCS: dict[str, Callable[[BayesianNet, TrainingData, torch.Generator, Runtime], Locs]] = {
    "he": _he,
    "prior": _prior,
    "zero": _zero,
    "teacher": _teacher,
}


def initial_locs(
    model: BayesianNet, init_loc: str, data: TrainingData, seed: int, runtime: Runtime
) -> Locs:
    """Initial weight means ``{site: tensor}`` of the rule ``init_loc`` (see :data:`INIT_LOCS`)."""
    return INIT_LOCS[init_loc](model, data, runtime.generator(seed), runtime)


def minibatches(n: int, batch_size: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Index tensors of one pass over ``n`` points in a random order (one epoch)."""
    perm = torch.randperm(n, generator=gen, device=gen.device)
    for i in range(0, n, batch_size):
        yield perm[i : i + batch_size]


def learns_noise(model: BayesianNet) -> bool:
    """Whether ``model`` has a learned Gaussian noise, the site ``noise``."""
    lik = model.likelihood
    return isinstance(lik, GaussianLikelihood) and lik.noise is None


def constrained(raw: Mapping[str, torch.Tensor]) -> Locs:
    """Point parameters as the model reads them: :data:`LOG_NOISE` becomes ``noise``."""
    return {
        ("noise" if k == LOG_NOISE else k): (v.exp() if k == LOG_NOISE else v)
        for k, v in raw.items()
    }


def pretrain_mle(
    log_likelihood: Callable[
        [torch.Tensor, torch.Tensor, Mapping[str, torch.Tensor]], torch.Tensor
    ],
    init: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    gen: torch.Generator,
    epochs: int,
    batch_size: int | None,
    lr: float,
    noise: bool = False,
) -> Locs:
    """Maximum-likelihood training of point weights (the means' pretraining of Farquhar et al.).

    ``log_likelihood(x, y, params)`` returns pointwise log-likelihoods; Adam minimizes their
    negative mean over minibatches (in the order drawn from ``gen``) for ``epochs`` passes.
    With ``noise`` (a learned Gaussian noise, :func:`learns_noise`) the likelihood needs
    the site ``noise`` too: it is trained with the weights, as ``log noise`` from 0 (noise
    1, as :func:`zoo.inference.point.fit_point` starts it), and returned as ``noise``, where
    the guide then starts its noise.
    """
    raw = {k: v.detach().clone().requires_grad_(True) for k, v in init.items()}
    if noise:
        raw[LOG_NOISE] = torch.zeros((), dtype=x.dtype, device=x.device, requires_grad=True)
    opt = torch.optim.Adam(raw.values(), lr=lr)
    n = x.shape[0]
    bs = n if batch_size is None else min(batch_size, n)
    for _ in range(epochs):
        for idx in minibatches(n, bs, gen):
            opt.zero_grad()
            loss = -log_likelihood(x[idx], y[idx], constrained(raw)).mean()
            loss.backward()
            opt.step()
    return {k: v.detach() for k, v in constrained(raw).items()}
