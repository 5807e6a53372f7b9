"""NUTS and HMC as inference methods: the spec's sampler sections around the MCMC driver.

The chains start at a prior draw or at the posterior median of a variational method of the
same spec (``init_from``), as Farquhar et al. (2020) start NUTS at the MF-VI solution. That
method is refitted here with the cell's seed, which gives the same posterior as its own
cell (same configuration, same seed) while keeping cells independent of each other. The
sampling itself is :func:`zoo.inference.mcmc.driver.run_nuts` / ``run_hmc`` on the
model's :class:`~zoo.inference.mcmc.potential.FlatPotential`; a stopping rule in
``hooks.stop_when`` extends the chains until it holds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from zoo.inference.base import Fit, FitContext, Hooks, TrainingData
from zoo.inference.mcmc.driver import MCMCResult, run_hmc, run_nuts
from zoo.inference.mcmc.potential import FlatPotential
from zoo.models.base import BayesianNet
from zoo.spec.sections.inference import HMCMethod, NUTSMethod

__all__ = ["SampledPosterior", "fit_hmc", "fit_nuts", "sampler_fit", "thin"]


def thin(draws: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """At most ``n`` draws, evenly spaced over all chains (chain-major), ``(n, *site_shape)``."""
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in draws.items()}
    total = next(iter(flat.values())).shape[0]
    idx = np.unique(np.linspace(0, total - 1, min(n, total)).round().astype(int))
    return {k: v[idx] for k, v in flat.items()}


@dataclass(frozen=True)
class SampledPosterior:
    """The draws of a sampler.

    Attributes
    ----------
    draws : dict of str to ndarray
        Constrained draws per site, ``(chain, draw, *site_shape)``.
    device : torch.device
        Where :meth:`sample` and :meth:`all` put their tensors.

    ``sample(n, seed)`` returns ``n`` draws evenly spaced over all chains (:func:`thin`; the
    seed is not used: the draws are already random).
    """

    draws: Mapping[str, np.ndarray]
    device: torch.device = torch.device("cpu")

    @property
    def chains(self) -> int:
        """Number of chains."""
        return int(next(iter(self.draws.values())).shape[0])

    def sample(self, n: int, seed: int) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(v, device=self.device) for k, v in thin(self.draws, n).items()}

    def all(self) -> dict[str, torch.Tensor]:
        """Every draw, ``(chains * draws, *site_shape)`` chain-major."""
        return {k: torch.as_tensor(v.reshape((-1,) + v.shape[2:]), device=self.device)
                for k, v in self.draws.items()}  # fmt: skip

    def median(self) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(np.median(v.reshape((-1,) + v.shape[2:]), 0),
                                   device=self.device) for k, v in self.draws.items()}  # fmt: skip


def _stopping(pot: FlatPotential, hooks: Hooks) -> dict[str, Any]:
    """The driver's ``until`` and ``max_draws`` of ``hooks.stop_when`` (nothing without one)."""
    if hooks.stop_when is None:
        return {}
    stop = hooks.stop_when

    def until(flat: np.ndarray) -> bool:
        with torch.no_grad():
            sites = pot.unravel(torch.from_numpy(flat))
        return bool(stop({k: v.numpy() for k, v in sites.items()}))

    return {"until": until, "max_draws": hooks.max_draws}


def _nuts(method: NUTSMethod) -> Callable[..., MCMCResult]:
    """NUTS with adapted step size and mass matrix."""
    return functools.partial(run_nuts, max_tree_depth=method.max_tree_depth,
                             mass_matrix=method.mass_matrix)  # fmt: skip


def _hmc(method: HMCMethod) -> Callable[..., MCMCResult]:
    """HMC: a fixed number of leapfrog steps per draw, adapted step size."""
    return functools.partial(run_hmc, num_steps=method.num_steps,
                             adapt_mass_matrix=method.adapt_mass_matrix)  # fmt: skip


def sampler_fit(kernel: Callable[[Any], Callable[..., MCMCResult]]) -> Callable[..., Fit]:
    """The fit function of a sampler whose driver call with its own settings bound is
    ``kernel(method)`` (e.g. :func:`run_nuts` with the method's tree depth): one entry of
    :data:`zoo.inference.METHODS` registers a sampler, kernel included.

    The driver call takes ``(potential, *, seed, warmup, draws, chains, target_accept,
    step_size, init, progress, vectorize_chains[, until, max_draws])`` and returns an
    :class:`~zoo.inference.mcmc.driver.MCMCResult`.
    """

    def fit(method: Any, model: BayesianNet, data: TrainingData, ctx: FitContext,
            hooks: Hooks) -> Fit:  # fmt: skip
        return _fit_sampler(kernel(method), method, model, data, ctx, hooks)

    fit.__doc__ = f"Sample with the kernel of :func:`{kernel.__name__}`."
    return fit


def _fit_sampler(
    run: Callable[..., MCMCResult],
    method: Any,
    model: BayesianNet,
    data: TrainingData,
    ctx: FitContext,
    hooks: Hooks,
) -> Fit:
    """A sampler method: start (refitting ``init_from`` if asked), sample with ``run``.

    Returns
    -------
    Fit
        ``SampledPosterior`` posterior; ``stats`` with ``n_divergent``, ``draws_per_chain``
        (more than ``draws`` under a stopping rule), ``warmup_seconds`` and, with
        ``init_from``, ``init_seconds``; ``sample_stats``; ``init``, the starting fit.
    """
    init_fit, init, stats = None, None, {}
    if method.init_from != "prior":
        init_fit = ctx.refit(method.init_from, f"{method.init_from} (init)")
        init = {k: v.detach() for k, v in init_fit.posterior.median().items()}
        stats["init_seconds"] = init_fit.seconds
    pot = FlatPotential(model, data.x_train, data.y_train)
    result = run(pot, seed=ctx.seed, warmup=method.warmup, draws=method.draws,
                 chains=method.chains, target_accept=method.target_accept,
                 step_size=method.step_size, init=init, progress=ctx.progress,
                 vectorize_chains=method.vectorize_chains, **_stopping(pot, hooks))  # fmt: skip
    stats.update(
        n_divergent=int(result.n_divergent),
        draws_per_chain=int(result.settings["draws"]),
        warmup_seconds=result.warmup_seconds,
    )
    return Fit(
        SampledPosterior(result.draws, ctx.runtime.device), result.seconds, stats=stats,
        predictive_draws=method.predictive_draws, save_draws=True,
        sample_stats=result.sample_stats, init=init_fit,
    )  # fmt: skip


#: The ``nuts`` method: NUTS with adapted step size and mass matrix.
fit_nuts = sampler_fit(_nuts)
#: The ``hmc`` method: a fixed number of leapfrog steps per draw, adapted step size.
fit_hmc = sampler_fit(_hmc)
