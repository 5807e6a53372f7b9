"""Plain Pyro models, data and helpers shared by the guide tests (no zoo import)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import SVI, Predictive, TraceMeanField_ELBO
from pyro.optim import Adam, ClippedAdam
from torch.distributions import Normal, TransformedDistribution

# --------------------------------------------------------------------------------------
# Conjugate Bayesian linear regression (Gaussian prior, known noise): exact answers.
# --------------------------------------------------------------------------------------

N_LR, D_LR, ALPHA, SIGMA = 50, 3, 1.0, 0.5


def regression() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Data ``x, y`` with correlated columns, and the exact posterior mean and covariance."""
    gen = torch.Generator().manual_seed(0)
    common = torch.randn(N_LR, 1, generator=gen)
    x = common + 0.4 * torch.randn(N_LR, D_LR, generator=gen)  # columns correlated ~0.86
    y = x @ torch.tensor([1.0, -0.5, 0.3]) + SIGMA * torch.randn(N_LR, generator=gen)
    precision = ALPHA * torch.eye(D_LR) + x.T @ x / SIGMA**2
    cov = torch.linalg.inv(precision)
    return x, y, cov @ x.T @ y / SIGMA**2, cov


def regression_model(x: torch.Tensor, y: torch.Tensor) -> None:
    w = pyro.sample("w", dist.Normal(torch.zeros(D_LR), ALPHA**-0.5).to_event(1))
    with pyro.plate("data", x.shape[0]):
        # (x * w).sum(-1) rather than x @ w so that vectorized particles broadcast.
        pyro.sample("y", dist.Normal((x * w).sum(-1), SIGMA), obs=y)


def fit_and_average(
    model: Callable,
    guide: Callable,
    args: Sequence[torch.Tensor],
    record: Callable[[Callable], Sequence[torch.Tensor]],
    steps: int,
    window: int,
    lr0: float,
    lr1: float,
    *,
    particles: int = 16,
    max_plate_nesting: int = 1,
) -> tuple[torch.Tensor, ...]:
    """Fit ``guide`` by SVI for ``steps`` steps and average ``record(guide)`` over the last
    ``window`` of them (Polyak-Ruppert averages, one per tensor that ``record`` returns).

    ``TraceMeanField_ELBO`` with ``particles`` vectorized particles, and ``ClippedAdam``
    whose learning rate decays geometrically from ``lr0`` to ``lr1`` over the ``steps``.
    """
    optim = ClippedAdam({"lr": lr0, "lrd": (lr1 / lr0) ** (1 / steps)})
    elbo = TraceMeanField_ELBO(
        num_particles=particles, vectorize_particles=True, max_plate_nesting=max_plate_nesting
    )
    svi = SVI(model, guide, optim, elbo)
    records = []
    for step in range(steps):
        svi.step(*args)
        if step >= steps - window:
            with torch.no_grad():
                records.append([t.detach().clone() for t in record(guide)])
    return tuple(torch.stack(column).mean(0) for column in zip(*records, strict=True))


def train_and_save(
    model: Callable, guide: Callable, args: Sequence[torch.Tensor], path: Path
) -> None:
    """Run 20 SVI steps (``TraceMeanField_ELBO``, Adam with lr 0.05), then save the guide's
    ``state_dict`` to ``path``."""
    svi = SVI(model, guide, Adam({"lr": 0.05}), TraceMeanField_ELBO())
    for _ in range(20):
        svi.step(*args)
    torch.save(guide.state_dict(), path)


def diag_normal_kl(loc: torch.Tensor, scale: torch.Tensor, prior_scale: float = 1.0) -> float:
    """KL(N(loc, scale^2) || N(0, prior_scale^2)), summed."""
    ratio = scale / prior_scale
    return float((0.5 * (ratio**2 + (loc / prior_scale) ** 2 - 1) - ratio.log()).sum())


# --------------------------------------------------------------------------------------
# A plain Pyro model: matrix weight, vector bias, local latent in a plate, positive site.
# --------------------------------------------------------------------------------------

N_DATA, BATCH, D_IN, D_OUT = 30, 10, 4, 2
PLAIN_SHAPES = {"layer.weight": (D_OUT, D_IN), "layer.bias": (D_OUT,), "noise": (), "z": (N_DATA,)}


def plain_data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(N_DATA, D_IN, generator=gen)
    y = x @ torch.randn(D_IN, D_OUT, generator=gen) + 0.3 * torch.randn(N_DATA, D_OUT)
    return x, y


def plain_model(x: torch.Tensor, y: torch.Tensor | None = None) -> None:
    w = pyro.sample("layer.weight", dist.Normal(0.0, 1.0).expand([D_OUT, D_IN]).to_event(2))
    b = pyro.sample("layer.bias", dist.Normal(0.0, 1.0).expand([D_OUT]).to_event(1))
    noise = pyro.sample("noise", dist.LogNormal(-1.0, 0.5))
    with pyro.plate("data", N_DATA, subsample_size=BATCH) as i:
        z = pyro.sample("z", dist.Normal(0.0, 0.1))
        mean = (x[i] @ w.mT + b) + z.unsqueeze(-1)
        obs = None if y is None else y[i]
        pyro.sample("y", dist.Normal(mean, noise.unsqueeze(-1)).to_event(1), obs=obs)


def check_plain_model_guide(
    guide: Callable, matrix_dist: type, x: torch.Tensor, y: torch.Tensor
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Check a fitted guide of :func:`plain_model` whose weight is a ``matrix_dist``.

    Checks the sampled distributions and shapes, the shapes of medians and quantiles, and
    ``Predictive`` on ``x``; returns the median and the quantiles ``[0.1, 0.5, 0.9]``.
    """
    trace = poutine.trace(guide).get_trace(x, y)
    assert isinstance(trace.nodes["layer.weight"]["fn"], matrix_dist)
    assert isinstance(trace.nodes["z"]["fn"], Normal)
    assert trace.nodes["z"]["value"].shape == (BATCH,)
    assert isinstance(trace.nodes["noise"]["fn"], TransformedDistribution)

    median = guide.median()
    assert {k: tuple(v.shape) for k, v in median.items()} == PLAIN_SHAPES
    qs = guide.quantiles([0.1, 0.5, 0.9])
    expected = {k: (3,) + s for k, s in PLAIN_SHAPES.items()}
    assert {k: tuple(v.shape) for k, v in qs.items()} == expected

    pred = Predictive(plain_model, guide=guide, num_samples=6)(x)
    assert pred["y"].shape == (6, BATCH, D_OUT)
    assert pred["layer.weight"].shape[-2:] == (D_OUT, D_IN)
    return median, qs
