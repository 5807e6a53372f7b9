"""NUTS, HMC and ChEES-HMC as inference methods: the spec's sampler sections around the samplers.

The chains start at a prior draw or at the posterior median of a variational method of the
same spec (``init_from``), as Farquhar et al. (2020) start NUTS at the MF-VI solution. That
method is refitted here with the cell's seed, which gives the same posterior as its own
cell (same configuration, same seed) while keeping cells independent of each other. The
sampling itself is :func:`zoo.inference.mcmc.samplers.run_nuts` / ``run_hmc`` on the
model's potential (:func:`~zoo.inference.mcmc.functional.potential_for`: the hand-written
:class:`~zoo.inference.mcmc.potential.FlatPotential` of an MLP, the ``torch.func`` one of
any other network); a stopping rule in
``hooks.stop_when`` extends the chains until it holds.

ChEES-HMC (:func:`fit_chees`, :func:`zoo.inference.mcmc.samplers.run_chees`) runs many chains
as one batch on the runtime's device: every chain can start at its own draw of the
``init_from`` posterior (``init_spread``), every post-warm-up draw streams into
:class:`~zoo.inference.mcmc.streaming.StreamingMoments` and only ``keep_draws`` per chain
are held; its stopping rule is its own ``target_ess`` on the streamed moments.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from zoo.inference.base import Fit, FitContext, Hooks, TrainingData
from zoo.inference.checkpoint import current_checkpoint_channel
from zoo.inference.mcmc.functional import potential_for
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import MCMCResult
from zoo.inference.mcmc.samplers import run_chees, run_hmc, run_mams, run_mclmc, run_nuts
from zoo.inference.mcmc.streaming import Moments, StreamingMoments, group_sizes
from zoo.models.base import BayesianNet
from zoo.seeds import INIT_FIT_STRIDE, Stream, seed_for
from zoo.spec.sections.inference import (
    ChEESMethod,
    HMCMethod,
    MAMSMethod,
    MCLMCMethod,
    NUTSMethod,
)

__all__ = [
    "SampledPosterior",
    "fit_chees",
    "fit_hmc",
    "fit_mams",
    "fit_mclmc",
    "fit_nuts",
    "mass_ratio",
    "sampler_fit",
    "superchains",
    "thin",
    "trajectory_at_cap",
]


def thin(draws: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """At most ``n`` draws, evenly spaced over all chains (chain-major), ``(n, *site_shape)``."""
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in draws.items()}
    total = next(iter(flat.values())).shape[0]
    idx = np.unique(np.linspace(0, total - 1, min(n, total)).round().astype(int))
    return {k: v[idx] for k, v in flat.items()}


def superchains(chains: int, init_fits: int) -> tuple[int, ...] | None:
    """The superchain id of each chain when ``chains`` are split among ``init_fits`` starts.

    The blocks are :func:`~zoo.inference.mcmc.streaming.group_sizes`'s (contiguous, the
    larger first), the ones :func:`fit_chees` starts from the ``init_fits`` fits; None with
    one block (every chain from the same fit: one superchain).
    """
    sizes = group_sizes(chains, init_fits)
    if len(sizes) < 2:
        return None
    return tuple(int(k) for k in np.repeat(np.arange(len(sizes)), sizes))


@dataclass(frozen=True)
class SampledPosterior:
    """The draws of a sampler.

    Attributes
    ----------
    draws : dict of str to ndarray
        Constrained draws per site, ``(chain, draw, *site_shape)``: every draw, or (ChEES)
        the draws held, thinned evenly over all drawn ones.
    device : torch.device
        Where :meth:`sample` and :meth:`all` put their tensors.
    moments : Moments, optional
        The streamed moments of ALL draws of all chains over the flat unconstrained vector
        (ChEES; :class:`~zoo.inference.mcmc.streaming.Moments`); None for the other samplers.
    site_slices : dict of str to slice, optional
        Where each site sits in the flat vector of ``moments`` (``FlatPotential.site_slices``;
        ``noise`` as its log); None without moments.
    superchain_ids : tuple of int, optional
        The superchain of each chain (Margossian et al. 2024): chains started from the same
        independent fit of ``init_from`` share an id (ChEES with ``init_fits`` K > 1: the K
        contiguous blocks, :func:`superchains`). None where all chains come from one start
        (one superchain: nested R-hat does not apply). NUTS and HMC have None: their chains
        all start at the ``init_from`` fit's median, or each at its own prior draw (then
        one chain per superchain, where nested R-hat is the classic R-hat without splitting,
        Margossian et al. 2024, which the split R-hat already covers).

    ``sample(n, seed)`` returns ``n`` draws evenly spaced over all chains (:func:`thin`; the
    seed is not used: the draws are already random).
    """

    draws: Mapping[str, np.ndarray]
    device: torch.device = torch.device("cpu")
    moments: Moments | None = None
    site_slices: Mapping[str, slice] | None = None
    superchain_ids: tuple[int, ...] | None = None

    @property
    def chains(self) -> int:
        """Number of chains."""
        return int(next(iter(self.draws.values())).shape[0])

    def subset(self, chains: np.ndarray) -> SampledPosterior:
        """The posterior of the chains ``chains`` only (their superchain ids with them)."""
        ids = self.superchain_ids
        return SampledPosterior(
            {k: v[chains] for k, v in self.draws.items()},
            self.device,
            superchain_ids=None if ids is None else tuple(ids[int(c)] for c in chains),
        )

    def sample(self, n: int, seed: int) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(v, device=self.device) for k, v in thin(self.draws, n).items()}

    def all(self) -> dict[str, torch.Tensor]:
        """Every draw, ``(chains * draws, *site_shape)`` chain-major."""
        return {
            k: torch.as_tensor(v.reshape((-1,) + v.shape[2:]), device=self.device)
            for k, v in self.draws.items()
        }

    def median(self) -> dict[str, torch.Tensor]:
        return {
            k: torch.as_tensor(np.median(v.reshape((-1,) + v.shape[2:]), 0), device=self.device)
            for k, v in self.draws.items()
        }


def _stopping(pot: FlatPotential, hooks: Hooks) -> dict[str, Any]:
    """The driver's ``until`` and ``max_draws`` of ``hooks.stop_when`` (nothing without one)."""
    if hooks.stop_when is None:
        return {}
    stop = hooks.stop_when

    def until(drawn: int, flat: np.ndarray) -> bool:
        with torch.no_grad():
            sites = pot.unravel(torch.from_numpy(flat))
        return bool(stop({k: v.numpy() for k, v in sites.items()}))

    return {"until": until, "max_draws": hooks.max_draws}


def _nuts(method: NUTSMethod) -> Callable[..., MCMCResult]:
    """NUTS with adapted step size and mass matrix."""
    return functools.partial(
        run_nuts, max_tree_depth=method.max_tree_depth, mass_matrix=method.mass_matrix
    )


def _hmc(method: HMCMethod) -> Callable[..., MCMCResult]:
    """HMC: a fixed number of leapfrog steps per draw, adapted step size."""
    return functools.partial(
        run_hmc,
        num_steps=method.num_steps,
        adapt_mass_matrix=method.adapt_mass_matrix,
        mass_matrix="diag",
    )


def _mclmc(method: MCLMCMethod) -> Callable[..., MCMCResult]:
    """MCLMC with BlackJAX's tuning of the step size and L, each chain on its own."""
    return functools.partial(
        run_mclmc,
        adapt_mass_matrix=method.adapt_mass_matrix,
        desired_energy_var=method.desired_energy_var,
    )


def _mams(method: MAMSMethod) -> Callable[..., MCMCResult]:
    """Adjusted MCLMC (MAMS) with BlackJAX's tuning, each chain on its own."""
    return functools.partial(
        run_mams, adapt_mass_matrix=method.adapt_mass_matrix, max_steps=method.max_steps
    )


def sampler_fit(kernel: Callable[[Any], Callable[..., MCMCResult]]) -> Callable[..., Fit]:
    """The fit function of a sampler whose driver call with its own settings bound is
    ``kernel(method)`` (e.g. :func:`run_nuts` with the method's tree depth): one entry of
    :data:`zoo.inference.METHODS` registers a sampler, kernel included.

    The driver call takes ``(potential, *, seed, warmup, draws, chains, target_accept,
    step_size, init, progress, vectorize_chains[, until, max_draws])`` and returns an
    :class:`~zoo.inference.mcmc.loop.MCMCResult`.
    """

    def fit(
        method: Any, model: BayesianNet, data: TrainingData, ctx: FitContext, hooks: Hooks
    ) -> Fit:
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
    pot = potential_for(model, data.x_train, data.y_train)
    result = run(
        pot,
        seed=ctx.seed,
        warmup=method.warmup,
        draws=method.draws,
        chains=method.chains,
        target_accept=method.target_accept,
        step_size=method.step_size,
        init=init,
        progress=ctx.progress,
        vectorize_chains=method.vectorize_chains,
        checkpoint=current_checkpoint_channel(),  # batched samplers resume inside a cell
        **_stopping(pot, hooks),
    )
    stats.update(
        n_divergent=int(result.n_divergent),
        draws_per_chain=result.drawn,
        warmup_seconds=result.warmup_seconds,
    )
    flat = pot.ravel(result.draws).detach()  # (C, S, D), unconstrained as the mass is
    variance = flat.reshape(-1, flat.shape[-1]).double().var(0).cpu().numpy()
    stats.update(mass_ratio(result.adapted.inverse_mass_matrix, variance))
    return Fit(
        SampledPosterior(result.draws, ctx.runtime.device),
        result.seconds,
        stats=stats,
        predictive_draws=method.predictive_draws,
        save_draws=True,
        sample_stats=result.sample_stats,
        init=init_fit,
    )


def _chees_start(
    method: ChEESMethod, ctx: FitContext, stats: dict[str, Any]
) -> tuple[Fit | None, dict[str, torch.Tensor] | None]:
    """The starting fit and the chains' starts: one draw each of the ``init_from``
    posterior (stream :attr:`~zoo.seeds.Stream.INIT_DRAWS`), its median for all
    (``init_spread: mode``), or None (each chain its own prior draw). With ``init_fits``
    K > 1 the chains are split into K contiguous blocks
    (:func:`~zoo.inference.mcmc.streaming.group_sizes`), block k started from the fit with
    seed ``seed + k *`` :data:`zoo.seeds.INIT_FIT_STRIDE`; the first fit (the cell's seed) is
    the one returned (the agreement with the sampler is measured against it)."""
    if method.init_from == "prior":
        return None, None
    sizes = group_sizes(method.chains, method.init_fits)
    # Pyro's guides read their parameters from the global param store by name, so a fit's
    # posterior shows the values of the LAST fit of the same method: the starts are drawn
    # right after each fit, and the cell's own fit (k = 0, returned) comes last
    fits: dict[int, Fit] = {}
    starts: dict[int, dict[str, torch.Tensor]] = {}
    for k in [*range(1, len(sizes)), 0]:
        label = f"{method.init_from} (init{'' if len(sizes) == 1 else f' {k + 1}'})"
        f = fits[k] = ctx.refit(method.init_from, label, ctx.seed + k * INIT_FIT_STRIDE)
        post = f.posterior
        if method.init_spread == "mode":
            starts[k] = {s: v.expand(sizes[k], *v.shape) for s, v in post.median().items()}
        else:
            starts[k] = post.sample(sizes[k], seed_for(ctx.seed, Stream.INIT_DRAWS))
    stats["init_seconds"] = sum(f.seconds for f in fits.values())
    if len(sizes) == 1:
        start = starts[0] if method.init_spread != "mode" else fits[0].posterior.median()
    else:
        stats["init_fits"] = len(sizes)
        start = {s: torch.cat([starts[k][s] for k in range(len(sizes))]) for s in starts[0]}
    return fits[0], {s: v.detach() for s, v in start.items()}


def trajectory_at_cap(method: Any, stats: Mapping[str, Any]) -> float | None:
    r"""ChEES: 1.0 when the adapted trajectory length sits at its cap, ``max_leapfrog``
    steps of the adapted step size, else 0.0; None for the other samplers.

    NUTS's saturation gate counts transitions stopped by the tree depth, not by a U-turn:
    the sampler wanted longer. ChEES's jitter draws each transition's length uniformly below
    the adapted :math:`T`, so only about one transition in ``max_leapfrog`` reaches the cap
    even when the adaptation wanted a longer :math:`T` and was clipped to
    :math:`L_{\max}\epsilon` (:mod:`zoo.inference.mcmc.chees_adaptation`); the per-transition
    count cannot see that, this metric does. Measured on Trippe & Turner's UCI networks
    (docs/results.md): :math:`T` pinned at 64 and then at 256 steps while the chains failed.
    """
    cap = getattr(method, "max_leapfrog", None)
    t, eps = stats.get("trajectory_length"), stats.get("step_size")
    if cap is None or t is None or not eps:
        return None
    return float(float(t) / float(eps) >= cap * (1 - 1e-9))


def fit_chees(
    method: ChEESMethod, model: BayesianNet, data: TrainingData, ctx: FitContext, hooks: Hooks
) -> Fit:
    """The ``chees`` method: ChEES-HMC on all chains as one batch, draws streamed.

    Every post-warm-up draw of every chain goes into a
    :class:`~zoo.inference.mcmc.streaming.StreamingMoments` on the runtime's device
    (``stream_groups`` groups); with ``target_ess`` the chains draw on (in rounds, after
    ``draws``) until the moments' median between-chain ESS reaches it or ``max_draws``.
    ``keep_draws`` per chain, thinned evenly over all drawn, are the posterior's draws.
    Torch's thread setting is the cell's (a batch of chains uses them, unlike NUTS's small
    one-chain operations).

    Returns
    -------
    Fit
        :class:`SampledPosterior` with ``moments`` and ``site_slices``; ``stats`` with
        ``draws_per_chain`` (drawn), ``kept_per_chain`` (held: between ``keep_draws / 2`` and
        ``keep_draws`` once the stream outgrew them, see :func:`run_chees`), ``n_divergent``
        (over all post-warm-up transitions, not only the kept ones), ``warmup_seconds``,
        ``step_size``, ``trajectory_length``, ``n_steps_mean`` (leapfrog steps per draw),
        ``max_r_hat_stream`` (Gelman-Rubin of all streamed draws, no splitting),
        ``n_eff`` (median between-chain ESS of the streamed moments, over the whole flat
        vector), ``trajectory_at_cap`` (:func:`trajectory_at_cap`), with ``init_from``
        ``init_seconds`` and with ``compile`` ``compile_seconds``.

    Raises
    ------
    ValueError
        If ``hooks`` carry a stopping rule (a study's ``kl_target_draws``): ChEES stops by
        its own ``target_ess``; the spec's validation refuses the combination first.
    """
    if hooks.stop_when is not None:
        raise ValueError(
            f"{method.name}: chees stops on its streamed moments (target_ess), not on a "
            "study's rule over held draws: remove the price_of_mean_field study's "
            "kl_target_draws and set the method's target_ess"
        )
    stats: dict[str, Any] = {}
    init_fit, init = _chees_start(method, ctx, stats)
    pot = potential_for(model, data.x_train, data.y_train)
    if method.compile:  # compiled for the chains' batch now, so sampling times only sampling
        stats["compile_seconds"] = pot.compile(rows=method.chains)
    moments = StreamingMoments(
        pot.dim, method.chains, groups=method.stream_groups, device=ctx.runtime.device
    )
    target = method.target_ess
    until = None if target is None else (lambda drawn, kept: moments.n_eff() >= target)
    result = run_chees(
        pot,
        seed=ctx.seed,
        warmup=method.warmup,
        draws=method.draws,
        chains=method.chains,
        target_accept=method.target_accept,
        step_size=method.step_size,
        init=init,
        progress=ctx.progress,
        threads=None,
        keep=method.keep_draws,
        on_draw=moments.update,
        until=until,
        max_draws=None if until is None else method.draws_cap(),
        max_leapfrog=method.max_leapfrog,
        checkpoint=current_checkpoint_channel(),  # a resumable cell (zoo.inference.checkpoint)
        carry={"moments": moments},
    )
    summary = moments.summary() if moments.n >= 2 else None
    adapted = result.adapted
    stats.update(
        n_divergent=result.divergences,
        draws_per_chain=result.drawn,
        kept_per_chain=result.kept,
        warmup_seconds=result.warmup_seconds,
        step_size=float(adapted.step_size[0]),
        trajectory_length=float(adapted.trajectory_length),
        n_steps_mean=float(result.n_steps_mean),
        n_eff=None if summary is None else float(summary.n_eff),  # NaN: a coordinate never moved
        # Gelman-Rubin of every streamed draw (not only the kept ones the ArviZ file holds)
        max_r_hat_stream=_max_finite(None if summary is None else summary.rhat()),
        **mass_ratio(
            adapted.inverse_mass_matrix, None if summary is None else np.diag(summary.cov)
        ),
    )
    stats["trajectory_at_cap"] = trajectory_at_cap(method, stats)  # a gold gate
    posterior = SampledPosterior(
        result.draws,
        ctx.runtime.device,
        moments=summary,
        site_slices=dict(pot.site_slices),
        # the init_fits blocks; with init_from: prior every chain starts at its own prior
        # draw, but not from a fit: one superchain (the spec refuses init_fits > 1 there)
        superchain_ids=superchains(method.chains, method.init_fits) if init is not None else None,
    )
    return Fit(
        posterior,
        result.seconds,
        stats=stats,
        predictive_draws=method.predictive_draws,
        save_draws=True,
        sample_stats=result.sample_stats,
        init=init_fit,
    )


def mass_ratio(
    inverse_mass: np.ndarray | None, variance: np.ndarray | None
) -> dict[str, float | None]:
    r"""How far the adapted mass matrix is from the spread the chains then reached.

    A diagonal inverse mass matrix is the sampler's estimate of each coordinate's posterior
    variance, taken from the warm-up's draws (Stan's windowed adaptation; ChEES pools it
    across chains). When the chains start under-dispersed (from a variational fit) and the
    estimate is frozen before they have spread, the slowest coordinates get a mass far too
    heavy for their true scale and take tiny steps: the ratio
    :math:`r_d = M^{-1}_{dd} / \widehat{\mathrm{Var}}(z_d)` of the adapted inverse mass to
    the variance of the post-warm-up draws is then well below 1 for them (issue 26).

    Parameters
    ----------
    inverse_mass : np.ndarray or None
        ``(C, D)`` per chain (averaged over chains) or ``(D,)``; None: not reported.
    variance : np.ndarray or None
        ``(D,)``: the post-warm-up draws' variance of each unconstrained coordinate.

    Returns
    -------
    dict
        ``mass_ratio_q05`` and ``mass_ratio_median``: the 5% quantile and the median of
        :math:`r_d` over the coordinates with a positive, finite variance (None where there
        is nothing to compare).
    """
    none = {"mass_ratio_q05": None, "mass_ratio_median": None}
    if inverse_mass is None or variance is None:
        return none
    m = np.asarray(inverse_mass, dtype=float)
    m = m.mean(0) if m.ndim == 2 else m
    v = np.asarray(variance, dtype=float)
    ok = np.isfinite(m) & np.isfinite(v) & (v > 0)
    if m.shape != v.shape or not ok.any():
        return none
    r = m[ok] / v[ok]
    return {
        "mass_ratio_q05": float(np.quantile(r, 0.05)),
        "mass_ratio_median": float(np.median(r)),
    }


def _max_finite(values: np.ndarray | None) -> float | None:
    """The largest finite value, None when there is none."""
    if values is None or not np.isfinite(values).any():
        return None
    return float(values[np.isfinite(values)].max())


#: The ``nuts`` method: NUTS with adapted step size and mass matrix.
fit_nuts = sampler_fit(_nuts)
#: The ``hmc`` method: a fixed number of leapfrog steps per draw, adapted step size.
fit_hmc = sampler_fit(_hmc)
#: The ``mclmc`` method: microcanonical Langevin Monte Carlo, BlackJAX's tuning.
fit_mclmc = sampler_fit(_mclmc)
#: The ``mams`` method: Metropolis-adjusted microcanonical HMC, BlackJAX's tuning.
fit_mams = sampler_fit(_mams)
