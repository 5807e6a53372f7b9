"""Every sampler as an inference method: one fit, :func:`fit_sampler`, for the spec's sampler
sections (``nuts``, ``hmc``, ``chees``, ``mclmc``, ``mams``).

The frozen section is the sampler's settings, as :func:`zoo.inference.svi.fit_svi` takes its
method: the kernel's program is built from it
(:func:`zoo.inference.mcmc.samplers.program_for`) and how the chains start, are held and
watched is the section's :class:`~zoo.spec.sections.samplers.ChainPlan`. The chains start
at a prior draw or at the posterior of a variational method of the same spec
(``init_from``), as Farquhar et al. (2020) start NUTS at the MF-VI solution: its median for
all chains, or (ChEES, ``init_spread`` and ``init_fits``) each chain at its own draw of one
of several independent fits. That method is refitted here with the cell's seed, which gives
the same posterior as its own cell (same configuration, same seed) while keeping cells
independent of each other. The potential is the model's
(:func:`~zoo.inference.mcmc.functional.potential_for`: the hand-written
:class:`~zoo.inference.mcmc.potential.FlatPotential` of an MLP, the ``torch.func`` one of
any other network). A stopping rule extends the chains until it holds: a study's
(``hooks.stop_when``) or the method's own (ChEES's ``target_ess`` on the moments into which
every post-warm-up draw streams, :class:`~zoo.inference.mcmc.streaming.StreamingMoments`,
while only ``keep_draws`` per chain are held).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from zoo.inference.base import Fit, FitContext, Hooks, TrainingData
from zoo.inference.checkpoint import current_checkpoint_channel
from zoo.inference.mcmc.functional import potential_for
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import MCMCResult
from zoo.inference.mcmc.samplers import run_method
from zoo.inference.mcmc.streaming import Moments, StreamingMoments, group_sizes
from zoo.models.base import BayesianNet
from zoo.seeds import INIT_FIT_STRIDE, Stream, seed_for
from zoo.spec.sections.samplers import ChainPlan

__all__ = [
    "SampledPosterior",
    "fit_sampler",
    "mass_ratio",
    "superchains",
    "thin",
    "trajectory_at_cap",
    "trajectory_facts",
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


def fit_sampler(
    method: Any, model: BayesianNet, data: TrainingData, ctx: FitContext, hooks: Hooks
) -> Fit:
    """Every sampler method (``nuts``, ``hmc``, ``chees``, ``mclmc``, ``mams``): start,
    sample, and the facts a report needs.

    The section is the sampler's settings (its program:
    :func:`~zoo.inference.mcmc.programs.program_for`); its
    :class:`~zoo.spec.sections.samplers.ChainPlan` says how the chains start (:func:`_start`),
    how many draws are held and whether every draw streams into
    :class:`~zoo.inference.mcmc.streaming.StreamingMoments`. The stopping rule is the
    method's own (ChEES's ``target_ess`` on the streamed moments) or a study's
    (``hooks.stop_when``).

    Returns
    -------
    Fit
        :class:`SampledPosterior` (with ``moments`` and ``site_slices`` when streamed);
        ``stats`` (:func:`_sampler_stats`; with ``init_from`` ``init_seconds`` and, with
        more than one fit, ``init_fits``; with ``compile`` ``compile_seconds``);
        ``sample_stats``; ``init``, the starting fit.

    Raises
    ------
    ValueError
        If the method has its own stopping rule and ``hooks`` carry one too (a study's
        ``kl_target_draws``); the spec's validation refuses the combination first.
    """
    if method.stopping_rule is not None and hooks.stop_when is not None:
        raise ValueError(
            f"{method.name}: {method.kind} stops on its streamed moments "
            f"({method.stopping_rule}), not on a study's rule over held draws: remove the "
            "price_of_mean_field study's kl_target_draws and set the method's "
            f"{method.stopping_rule}"
        )
    plan = method.plan()
    stats: dict[str, Any] = {}
    pot = potential_for(model, data.x_train, data.y_train)
    if method.init_from == "prior" and plan.fits > 1:
        init_fit, init = None, _prior_superchains(method.chains, plan.fits, pot, ctx, stats)
    else:
        init_fit, init = _start(method, plan, ctx, stats)
    if plan.compile:  # compiled for the chains' batch now, so sampling times only sampling
        stats["compile_seconds"] = pot.compile(rows=method.chains)
    moments = None
    if plan.moment_groups is not None:
        moments = StreamingMoments(
            pot.dim, method.chains, groups=plan.moment_groups, device=ctx.runtime.device
        )
    result = run_method(
        method,
        pot,
        seed=ctx.seed,
        init=init,
        progress=ctx.progress,
        threads=None if plan.cell_threads else 1,
        keep=plan.held,
        checkpoint=current_checkpoint_channel(),  # a resumable cell (zoo.inference.checkpoint)
        **_watch(method, pot, hooks, moments),
    )
    summary = None if moments is None or moments.n < 2 else moments.summary()
    stats.update(_sampler_stats(method, pot, result, moments, summary))
    posterior = SampledPosterior(
        result.draws,
        ctx.runtime.device,
        moments=summary,
        site_slices=None if moments is None else dict(pot.site_slices),
        # the init_fits blocks (of fits, or of prior draws); with init_from: prior and one
        # block every chain starts at its own prior draw: no superchains
        superchain_ids=superchains(method.chains, plan.fits) if init is not None else None,
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


def _watch(
    method: Any, pot: FlatPotential, hooks: Hooks, moments: StreamingMoments | None
) -> dict[str, Any]:
    """The loop's ``on_draw``, ``carry`` and stopping rule: the streamed moments (saved with
    the loop's state), then the method's own rule or a study's."""
    out: dict[str, Any] = {}
    if moments is not None:
        out.update(on_draw=moments.update, carry={"moments": moments})
    if method.stopping_rule is None:
        return {**out, **_stopping(pot, hooks)}
    target = getattr(method, method.stopping_rule)  # the field the section names
    if target is None or moments is None:
        return out
    return {
        **out,
        "until": lambda drawn, kept: moments.n_eff() >= target,
        "max_draws": method.draws_cap(),
    }


def _sampler_stats(
    method: Any,
    pot: FlatPotential,
    result: MCMCResult,
    moments: StreamingMoments | None,
    summary: Moments | None,
) -> dict[str, Any]:
    """What the fit records of a run, for every sampler: ``n_divergent`` (over all
    post-warm-up transitions), ``draws_per_chain`` (drawn: more than ``draws`` under a
    stopping rule), ``warmup_seconds``, the facts of :func:`trajectory_facts`
    (``trajectory_cap``, ``saturated_frac``, ``trajectory_at_cap``) and :func:`mass_ratio`'s
    (against the streamed moments' variance, else the held draws'); with streamed moments
    also ``kept_per_chain`` (held: between ``held / 2`` and ``held`` once the stream
    outgrew them), ``step_size``, ``trajectory_length``, ``n_steps_mean`` (leapfrog steps
    per draw), ``n_eff`` (median between-chain ESS of the streamed moments) and
    ``max_r_hat_stream`` (Gelman-Rubin of all streamed draws, no splitting)."""
    stats: dict[str, Any] = {
        "n_divergent": int(result.n_divergent),
        "draws_per_chain": result.drawn,
        "warmup_seconds": result.warmup_seconds,
        **trajectory_facts(result),  # gold gates (reports.grade)
        **result.facts,  # the program's own (a tempering ladder's)
    }
    adapted = result.adapted
    if moments is None:
        flat = pot.ravel(result.draws).detach()  # (C, S, D), unconstrained as the mass is
        variance = flat.reshape(-1, flat.shape[-1]).double().var(0).cpu().numpy()
        return {**stats, **mass_ratio(adapted.inverse_mass_matrix, variance)}
    stats.update(
        kept_per_chain=result.kept,
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
    return stats


def _start(
    method: Any, plan: ChainPlan, ctx: FitContext, stats: dict[str, Any]
) -> tuple[Fit | None, dict[str, torch.Tensor] | None]:
    """The starting fit and the chains' starts: one draw each of the ``init_from``
    posterior (stream :attr:`~zoo.seeds.Stream.INIT_DRAWS`, ``spread: posterior``), its
    median for all (``mode``), or None (each chain its own prior draw). With ``plan.fits``
    K > 1 the chains are split into K contiguous blocks
    (:func:`~zoo.inference.mcmc.streaming.group_sizes`), block k started from the fit with
    seed ``seed + k *`` :data:`zoo.seeds.INIT_FIT_STRIDE`; the first fit (the cell's seed) is
    the one returned (the agreement with the sampler is measured against it)."""
    if method.init_from == "prior":
        return None, None
    sizes = group_sizes(method.chains, plan.fits)
    # Pyro's guides read their parameters from the global param store by name, so a fit's
    # posterior shows the values of the LAST fit of the same method: the starts are drawn
    # right after each fit, and the cell's own fit (k = 0, returned) comes last
    fits: dict[int, Fit] = {}
    starts: dict[int, dict[str, torch.Tensor]] = {}
    for k in [*range(1, len(sizes)), 0]:
        label = f"{method.init_from} (init{'' if len(sizes) == 1 else f' {k + 1}'})"
        f = fits[k] = ctx.refit(method.init_from, label, ctx.seed + k * INIT_FIT_STRIDE)
        post = f.posterior
        if plan.spread == "mode":  # the median: shared by all chains with one fit
            med = post.median()
            starts[k] = (
                med
                if len(sizes) == 1
                else {s: v.expand(sizes[k], *v.shape) for s, v in med.items()}
            )
        else:
            starts[k] = post.sample(sizes[k], seed_for(ctx.seed, Stream.INIT_DRAWS))
    stats["init_seconds"] = sum(f.seconds for f in fits.values())
    if len(sizes) == 1:
        start = starts[0]
    else:
        stats["init_fits"] = len(sizes)
        start = {s: torch.cat([starts[k][s] for k in range(len(sizes))]) for s in starts[0]}
    return fits[0], {s: v.detach() for s, v in start.items()}


def _prior_superchains(
    chains: int, blocks: int, pot: FlatPotential, ctx: FitContext, stats: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """Over-dispersed starts in superchains: ``blocks`` independent prior draws, block ``k`` of
    the chains (:func:`~zoo.inference.mcmc.streaming.group_sizes`, contiguous) all at draw
    ``k``, made with the seed ``seed + k *`` :data:`~zoo.seeds.INIT_FIT_STRIDE` on stream
    :attr:`~zoo.seeds.Stream.INIT_DRAWS` (the same draws on every device). The nested R-hat
    of Margossian et al. (2024) reads the superchains (:func:`superchains`): a control
    beside the starts from variational fits, whose answer does not depend on a fit."""
    sizes = group_sizes(chains, blocks)
    starts = []
    for k, size in enumerate(sizes):
        gen = torch.Generator().manual_seed(
            seed_for(ctx.seed + k * INIT_FIT_STRIDE, Stream.INIT_DRAWS)
        )
        starts.append(pot.prior_draw(gen).expand(size, -1))
    stats["init_fits"] = len(sizes)
    return {s: v.detach() for s, v in pot.unravel(torch.cat(starts)).items()}


def trajectory_at_cap(steps: np.ndarray | None, cap: int | None) -> float | None:
    r"""The fraction of chains whose adapted mean trajectory sits at its cap: ChEES's
    :math:`T/\epsilon` (one value for all chains: 1.0 or 0.0) against ``max_leapfrog``,
    MAMS's :math:`L/\epsilon` per chain against ``max_steps``; None where the sampler adapts
    no trajectory length (NUTS, HMC, MCLMC).

    The per-transition count (:func:`trajectory_facts`' ``saturated_frac``) cannot see a
    clipped adaptation: ChEES's jitter draws each transition's length uniformly below the
    adapted :math:`T`, so only about one transition in ``max_leapfrog`` reaches the cap even
    when the adaptation wanted a longer :math:`T` and was clipped to :math:`L_{\max}\epsilon`
    (:mod:`zoo.inference.mcmc.chees_adaptation`); MAMS draws each length uniformly below
    about twice :math:`L/\epsilon`. Measured on Trippe & Turner's UCI networks
    (docs/results/overpruning.md): ChEES's :math:`T` pinned at 64 and then at 256 steps while
    the chains failed. The comparison allows a relative rounding of 1e-9 (a :math:`T` clipped to
    :math:`L_{\max}\epsilon` reads back as :math:`L_{\max}` only up to rounding).
    """
    if cap is None or steps is None:
        return None
    return float(np.mean(np.asarray(steps, dtype=float) >= cap * (1 - 1e-9)))


def trajectory_facts(result: MCMCResult) -> dict[str, float | int | None]:
    """What a report needs of a run's trajectories, for every sampler.

    Returns
    -------
    dict
        ``trajectory_cap`` (the kernel's cap on one trajectory in its own unit: NUTS's
        ``max_tree_depth``, ChEES's ``max_leapfrog``, MAMS's ``max_steps``; None for HMC's
        fixed steps and MCLMC's one step per draw), ``saturated_frac`` (the post-warm-up
        transitions of all chains cut at the cap, over all drawn; NUTS: trees that reached
        ``max_tree_depth`` instead of a U-turn) and ``trajectory_at_cap``
        (:func:`trajectory_at_cap`).
    """
    cap, n = result.trajectory_cap, result.chains * result.drawn
    return {
        "trajectory_cap": cap,
        "saturated_frac": None if cap is None or n <= 0 else result.saturated / n,
        "trajectory_at_cap": trajectory_at_cap(result.adapted.steps(), cap),
    }


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
    the variance of the post-warm-up draws is then well below 1 for them.

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
