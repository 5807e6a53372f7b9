"""The zoo's batched NUTS and ChEES-HMC on a user's own Pyro model, with an ArviZ DataTree out.

:func:`sample_nuts` and :func:`sample_chees` take any Pyro model (a function or a
:class:`pyro.nn.PyroModule` network) and its data, as Pyro's ``MCMC(NUTS(model)).run(*args)``
does, and run all chains as one batch through the zoo's one sampler loop: the model's
potential is :class:`~zoo.inference.mcmc.pyro_potential.PyroPotential` (Pyro's potential,
vmapped over the chains), NUTS is :func:`~zoo.inference.mcmc.samplers.run_batched`'s (Stan's
window adaptation per chain, a diagonal mass matrix), ChEES is
:func:`~zoo.inference.mcmc.samplers.run_chees` (one step size and trajectory length for all
chains, Hoffman et al. 2021). The draws come back as an ArviZ ``DataTree`` with the groups
``posterior`` (every latent site, constrained, ``(chain, draw, ...)``) and ``sample_stats``
(arviz-base's NumPyro names: ``lp``, ``step_size``, ``n_steps``, ``diverging``, ``energy``,
``acceptance_rate``, NUTS's ``tree_depth``), ready for ``arviz_stats`` (R-hat, ESS).

It lives in the inference layer because it needs only the samplers, Pyro and the defaults of
the spec's sampler sections: no data set, run directory or report (``docs/samplers.md`` has
the example).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import xarray as xr
from arviz_base import from_dict

from zoo.inference.mcmc.pyro_potential import PyroPotential
from zoo.inference.mcmc.result import MCMCResult
from zoo.inference.mcmc.samplers import default_of, run_batched, run_chees
from zoo.models.dims import site_dims
from zoo.spec.sections.samplers import ChEESMethod, NUTSMethod

__all__ = ["sample_chees", "sample_nuts", "to_datatree"]


def to_datatree(result: MCMCResult, sampler: str) -> xr.DataTree:
    """The ArviZ DataTree of a sampler run: ``posterior`` and ``sample_stats`` groups, the
    run's settings (``sampler``, seconds, adapted step size) as root attributes. A linear
    layer's sites are named as the zoo's cells name them (``linear_out``, ``linear_in``:
    :func:`zoo.models.dims.site_dims`)."""
    attrs = {
        "sampler": sampler,
        "inference_library": "bnn-zoo",
        "seconds": float(result.seconds),
        "warmup_seconds": float(result.warmup_seconds),
        "divergences": int(result.divergences),
        "step_size": [float(e) for e in result.adapted.step_size],
    }
    if result.adapted.trajectory_length is not None:
        attrs["trajectory_length"] = float(result.adapted.trajectory_length)
    dims = {k: site_dims(k, np.ndim(v) - 2) for k, v in result.draws.items()}
    tree = from_dict(
        {"posterior": dict(result.draws), "sample_stats": dict(result.sample_stats)},
        dims=dims,
    )
    tree.attrs.update(attrs)
    return tree


def sample_nuts(
    model: Callable[..., Any],
    *model_args: Any,
    chains: int = 4,
    warmup: int = 500,
    draws: int = 500,
    seed: int = 0,
    target_accept: float = default_of(NUTSMethod, "target_accept"),
    max_tree_depth: int = default_of(NUTSMethod, "max_tree_depth"),
    model_kwargs: Mapping[str, Any] | None = None,
    init: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> xr.DataTree:
    """NUTS (Pyro's multinomial variant, Hoffman & Gelman 2014) on ``model(*model_args,
    **model_kwargs)``, all ``chains`` as one batch.

    Each chain adapts its own step size (dual averaging) and diagonal mass matrix (Stan's
    windows) during ``warmup``, then keeps ``draws`` draws.

    Parameters
    ----------
    model : callable
        A Pyro model or PyroModule; every latent site continuous.
    *model_args
        Its arguments (the data, conditioned through its ``obs=``).
    chains, warmup, draws, seed, target_accept, max_tree_depth
        As in Pyro's ``NUTS``/``MCMC``; ``seed`` makes the run reproducible.
    model_kwargs : mapping, optional
        Keyword arguments of ``model``.
    init : mapping, optional
        Constrained starting values per site (the site's shape: all chains; a leading
        ``chains`` dimension: one each); None: each chain uniform in (-2, 2) on the
        unconstrained scale (Pyro's ``init_to_uniform``).
    progress : bool
        Show a progress bar.

    Returns
    -------
    xarray.DataTree
        ``posterior`` and ``sample_stats`` (module docstring).
    """
    pot = PyroPotential(model, model_args, model_kwargs)
    result = run_batched(
        "nuts",
        pot,
        seed=seed,
        warmup=warmup,
        draws=draws,
        chains=chains,
        target_accept=target_accept,
        step_size=None,
        adapt_mass_matrix=True,
        init=init,
        progress=progress,
        max_tree_depth=max_tree_depth,
    )
    return to_datatree(result, "nuts")


def sample_chees(
    model: Callable[..., Any],
    *model_args: Any,
    chains: int = 64,
    warmup: int = 500,
    draws: int = 500,
    seed: int = 0,
    target_accept: float = default_of(ChEESMethod, "target_accept"),
    max_leapfrog: int = default_of(ChEESMethod, "max_leapfrog"),
    model_kwargs: Mapping[str, Any] | None = None,
    init: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> xr.DataTree:
    """ChEES-HMC (Hoffman, Radul & Sountsov 2021) on ``model(*model_args, **model_kwargs)``,
    all ``chains`` as one batch.

    The warm-up adapts one step size (to ``target_accept`` of the chains' harmonic-mean
    acceptance), one trajectory length (Adam on the ChEES criterion) and a diagonal mass
    matrix for all chains; ChEES estimates its criterion across the chains, so it wants
    many (the default 64). Other parameters as in :func:`sample_nuts`; ``max_leapfrog``
    caps the leapfrog steps of one trajectory.

    Returns
    -------
    xarray.DataTree
        ``posterior`` (every draw kept) and ``sample_stats``.
    """
    if chains < 2:
        raise ValueError(f"chains={chains}: ChEES estimates its criterion across chains; use 2+")
    pot = PyroPotential(model, model_args, model_kwargs)
    result = run_chees(
        pot,
        seed=seed,
        warmup=warmup,
        draws=draws,
        chains=chains,
        target_accept=target_accept,
        max_leapfrog=max_leapfrog,
        step_size=None,
        init=init,
        progress=progress,
    )
    return to_datatree(result, "chees")
