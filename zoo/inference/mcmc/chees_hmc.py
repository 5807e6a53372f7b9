"""ChEES-HMC's driver: the kernel of :mod:`~zoo.inference.mcmc.chees` with the adaptation of
:mod:`~zoo.inference.mcmc.chees_adaptation`, all chains as one batch.

Randomness: one ``torch.Generator`` on the potential's device, seeded from ``seed``, draws
the momenta and Metropolis uniforms of all chains as ``(C, D)`` and ``(C,)`` tensors, and one
CPU generator seeded from ``seed`` draws the prior starts (``init=None``). Chains are thus not
seeded one by one (chain ``c`` of a run with ``C`` chains is not chain ``c`` of another
``C``); the kernel is row-independent given its noise. The warm-up reads two statistics per
transition back to the host, the sampling phase only the kept draws.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import numpy as np
import torch

from zoo.inference.mcmc.adaptation import build_schedule
from zoo.inference.mcmc.chees import chees_transition, find_shared_step_size, halton, num_steps
from zoo.inference.mcmc.chees_adaptation import (
    ADAM_RESTART,
    BETA1_ONE_CHAIN,
    CENTRE_WINDOW,
    LEARNING_RATE,
    TARGET_ACCEPT,
    chees_adaptation,
    chees_statistics,
)
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import EXTEND_EVERY, MCMCResult, check_init, progress_bar, result
from zoo.inference.mcmc.welford import chan_merge, regularized_variance, welford_init

__all__ = ["run_chees"]


def _seeds(seed: int) -> tuple[int, int]:
    s = np.random.SeedSequence([seed]).generate_state(2, np.uint64) >> np.uint64(1)
    return int(s[0]), int(s[1])


def _start(
    pot: FlatPotential,
    init: Mapping[str, torch.Tensor] | None,
    chains: int,
    gen: torch.Generator,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, str]:
    """Initial unconstrained points ``(C, D)`` and how they were made."""
    if init is None:
        z = torch.stack([pot.prior_draw(gen) for _ in range(chains)])
        return z.to(device=device, dtype=dtype), "prior"
    z = pot.ravel(init).detach().to(device=device, dtype=dtype)
    if z.dim() == 1:
        return z.expand(chains, -1).clone(), "shared"
    if z.dim() == 2 and z.shape[0] == chains:
        return z.clone(), "per chain"
    raise ValueError(
        f"init has batch shape {tuple(z.shape[:-1])}; give each site its own shape (one start "
        f"shared by all chains) or a leading dimension of chains={chains} (one start per chain)"
    )


def _check_start(
    pot: FlatPotential, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor, where: str
) -> None:
    bad = ~(torch.isfinite(u) & torch.isfinite(g).all(1))
    if not bool(bad.any()):
        return
    c = int(bad.nonzero()[0, 0])
    check_init(pot, z[c], f"{where}, chain {c}")  # raises, naming the sites
    raise FloatingPointError(
        f"the potential at the initial point ({where}, chain {c}) is {float(u[c])} in the "
        "batched evaluation; pass init= a finite point (e.g. the MF-VI posterior mean)"
    )


class _Thinned:
    """At most ``capacity`` draws of a stream, evenly thinned over all of it.

    Draw ``j`` (from 0) is kept when ``j`` is a multiple of the stride ``k`` (initially
    ``ceil(expected / capacity)``). When a draw is due and the buffer is full, ``k`` doubles
    and every other kept draw is dropped (those at odd multiples of the old ``k``), so the
    kept draws are always draws ``0, k, 2k, ...``: between half of ``capacity`` and
    ``capacity`` of them once the buffer has filled, whatever the stream's final length.
    Buffers live on the CPU (one copy of the draw and its statistics per kept draw).
    """

    def __init__(
        self, chains: int, dim: int, capacity: int, expected: int, dtype: torch.dtype
    ) -> None:
        self.z = torch.empty(chains, capacity, dim, dtype=dtype, device="cpu")
        self.stats = torch.empty(chains, capacity, 4, dtype=torch.float64, device="cpu")
        self.n_steps: list[int] = []
        self.index: list[int] = []
        self.stride = max(1, math.ceil(expected / capacity))

    def due(self, j: int) -> bool:
        if j % self.stride:
            return False
        m = len(self.index)
        if m == self.z.shape[1]:
            self.stride *= 2
            half = (m + 1) // 2
            self.z[:, :half] = self.z[:, 0:m:2].clone()
            self.stats[:, :half] = self.stats[:, 0:m:2].clone()
            self.index, self.n_steps = self.index[::2], self.n_steps[::2]
        return j % self.stride == 0

    def add(self, j: int, z: torch.Tensor, stats: torch.Tensor, n_steps: int) -> None:
        m = len(self.index)
        self.z[:, m] = z.to("cpu")
        self.stats[:, m] = stats.to("cpu").T
        self.index.append(j)
        self.n_steps.append(n_steps)


def run_chees(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    target_accept: float = TARGET_ACCEPT,
    step_size: float | None = None,
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    keep: int | None = None,
    on_draw: Callable[[torch.Tensor], None] | None = None,
    until: Callable[[int], bool] | None = None,
    max_draws: int | None = None,
    max_leapfrog: int = 1024,
    adapt_mass_matrix: bool = True,
    trajectory_length: float | None = None,
    learning_rate: float = LEARNING_RATE,
    adam_restart: int | None = ADAM_RESTART,
) -> MCMCResult:
    """Sample ``potential`` with ChEES-HMC: ``chains`` chains as one batch (module docstring).

    Parameters
    ----------
    potential : FlatPotential
        Its device and dtype (those of ``potential.x``) are the sampler's.
    seed : int
        Seeds the device generator (momenta, Metropolis tests) and the CPU generator of the
        prior starts; chains are not seeded one by one.
    warmup, draws, chains : int
        Warm-up iterations (discarded), post-warm-up draws per chain (the minimum with
        ``until``), number of chains. The adaptation is meant for many chains; one chain
        works with running estimates in place of the cross-chain ones, noisier, and needs a
        longer warm-up (module docstring).

        How many chains (measured, issue 17). The update of :math:`\\log T` has no
        small-:math:`C` bias of its own: on a stationary :math:`\\mathcal N(0,
        \\mathrm{diag}(s^2))`, :math:`D = 100`, :math:`s` from 0.1 to 10, metric
        :math:`M^{-1} = s^2`, 400 iterations from :math:`T = \\epsilon`, 5 seeds, the adapted
        :math:`T` has median 1.82, 1.87, 1.90, 1.86, 1.85, 1.86 at :math:`C` = 2, 4, 8, 16,
        64, 256 (the discretized optimum; 2.25 in continuous time), and the same within
        :math:`\\pm 0.2` with BlackJAX's/TFP's update (:math:`u_t T` for :math:`n_t\\epsilon`,
        no division by :math:`s_t^2`); the full driver (windowed mass matrix) gives 1.6 to
        2.3 at every :math:`C \\ge 4`. What few chains break is the step size, on a
        posterior with stuck or multimodal chains: on the depth-2 two-moons network
        (:math:`D = 954`, :math:`N = 1000`, one shared MLE start, 500 warm-up iterations)
        the harmonic-mean acceptance of 8 chains swings between 0 and 1 from one
        iteration to the next (one chain at a bad point sets it), the step size between
        0.003 and 0.18, and the iterations with near-zero acceptance give large negative
        ChEES gradients that dominate Adam's normalization: :math:`T` falls from 0.15 to
        0.03 before the last window and is 0.08 adapted (1.3 leapfrog steps per draw, max
        R-hat 5.3), as it does with BlackJAX's/TFP's update (0.07, R-hat 5.7); 16 chains
        gave :math:`T` = 0.19 (ours) or 2.1 (TFP's update, R-hat 1.16, one seed each):
        chance, not a rule. With MF-VI starts on the 93-parameter
        network of ``specs/two_moons_depth_gpu_cpu.yaml`` (depth 2, 300 warm-up iterations)
        :math:`T` grows (16 chains: 2.5, 37 leapfrog steps per draw; 64: 2.9, 66 steps) and
        is still growing at the end of the warm-up (gradient positive in 92 to 95 % of the
        last 150 iterations), yet max R-hat is 1.74 (16) and 1.45 (64) where batched NUTS
        from the same 16 starts reaches 1.16 (252 steps per draw). Use per-chain starts
        (MF-VI draws), at least 64 chains on a network (the paper uses 128 and more) and
        check R-hat: 8 to 16 chains are not enough there.

        Trajectory length at depth 2 and 3 (measured, issue 17; ReLU networks of
        ``specs/two_moons_depth_gpu_cpu.yaml``, :math:`D` = 85 and 81, 64 chains from its
        MF-VI draws, 300 warm-up iterations, 400 draws, ``max_leapfrog=256``, sampler seeds
        0 to 2, rank R-hat and bulk ESS of ``arviz_stats`` over all draws of the
        unconstrained vector). Before the Adam restart at iteration 30 and the cap
        at :math:`10 L_{\\max}\\epsilon_0` (module docstring), :math:`T` was 1.4 to 2.2 at
        depth 2 and 1.1 to 1.2 at depth 3 (13 to 35 leapfrog steps per draw), max R-hat
        1.53 to 1.59 and 1.68 to 1.92, minimum ESS 91 to 118. The chains are not stuck: the
        log density mixes (R-hat 1.01, ESS over 4000), the slowest coordinates are the
        first layer's weights and biases, whose chain means spread evenly (not in clusters)
        over the posterior, and R-hat falls with more draws (1500 per chain: 1.21 and 1.33,
        minimum ESS 218 and 156). :math:`T` is too short for them: held fixed at 3
        (``learning_rate=0``) the same warm-up gives max R-hat 1.03 and 1.05 (169 and 266
        steps per draw, minimum ESS 1496 and 914; at depth 2 :math:`T` = 6 gives 1.01,
        ESS 4959, 385 steps). With the two changes :math:`T` is 3.2 to 3.4 and 2.9 to 3.4
        (79 to 117 steps), max R-hat 1.13 to 1.19 and 1.19 to 1.35, minimum ESS 251 to 344
        and 153 to 245 and median ESS 3781 to 6113 and 1239 to 3533 (from 489 to 790 and
        160 to 318); minimum ESS per 1000 gradients of a chain's sampling phase stays
        about the same (0.12 to 0.15 at depth 2, 0.07 to 0.09 at depth 3 from 0.12 to
        0.28), the median rises from 0.6 to 0.9 to 1.9 to 2.8 at depth 2. Either change
        alone helps less (Adam restart: R-hat 1.25 to 1.40 and 1.48 to 1.61; the cap: it
        binds in one run of three at depth 2). At depth 1 (:math:`D` = 97) both agree within
        the seeds' spread: R-hat 1.06 to 1.09 (1.04 to 1.08 before), minimum ESS 494 to
        871 (568 to 1145), :math:`T` 2.4 to 2.7 (2.1 to 2.5). The harmonic-mean
        acceptance is 0 or above 0.9 in 90 % of the warm-up iterations at every depth (one
        chain at a time sets it), so dual averaging's iterate swings by a factor of 50 and
        the step size is the worst chain's (mean acceptance 0.93 to 0.95 when sampling).
        The numbers above are at TFP's learning rate 0.025, where :math:`T` is still growing
        at the end of the warm-up (gradient positive in 86 to 100 % of the last 50
        iterations) and the chains, started from MF-VI's underdispersed posterior, have not
        spread when the windows estimate the metric (first-layer inverse mass 0.5 where the
        posterior variance is about 2.4). At 0.05 (the default since) depth 2 reaches max
        R-hat 1.04 to 1.06 (seeds 0 to 2; minimum ESS 770 to 1369, 0.23 to 0.42 per 1000
        gradients), depth 3 1.12 to 1.20 (232 to 393; 0.07 to 0.12), depth 1 1.01 and
        1.03 (seeds 0, 1; 5784 and 1719; 3.0 and 1.4, from 0.4 and 0.7), at about twice the
        warm-up's gradients (9000 to 18000 per chain). The step size falls (0.005 to 0.014) and
        :math:`T/\\epsilon` reaches ``max_leapfrog=256`` at depths 2 and 3: raise it there.
        A 600-iteration warm-up at 0.025 gives the same (depth 2: R-hat 1.04, ESS 1039;
        depth 3: 1.17, ESS 281; seed 0) at 29000 to 38000 warm-up gradients per chain.
    target_accept : float
        Target of dual averaging for the harmonic mean of the chains' acceptance probabilities.
    step_size : float, optional
        Initial step size; ``None`` searches one (:func:`find_shared_step_size` from 1).
    init : dict, optional
        Constrained values per site (``noise`` as sigma), with a leading dimension of
        ``chains`` (one start per chain) or with the site's shape (all chains start there;
        nothing is added: the mass matrix stays the identity during the initial buffer, while
        the chains spread); ``None``: each chain starts at its own prior draw.
    progress : bool
        One bar for all chains.
    threads : int, optional
        torch intra-op threads while sampling (restored afterwards); ``None`` keeps torch's.
    keep : int, optional
        Keep at most this many draws per chain in the result, thinned evenly over the whole
        post-warm-up stream: every ``k``-th draw from draw 0, ``k = ceil(draws / keep)`` at
        first, doubled (dropping every other kept draw) whenever the buffer is full, so
        between ``keep / 2`` and ``keep`` are kept once it has filled;
        ``settings["kept_index"]`` lists the post-warm-up indices kept. ``None``: keep all.
    on_draw : callable, optional
        ``on_draw(z)`` with every post-warm-up draw ``z`` of shape ``(chains, D)`` on the
        device, before thinning (e.g. a streaming moment estimate); the sampler goes on from
        that tensor, so ``on_draw`` must not modify it in place.
    until, max_draws : optional
        Stopping rule: after ``draws`` draws per chain, and then every :data:`EXTEND_EVERY`,
        ``until(n)`` is asked with ``n`` the draws per chain so far; sampling stops when it
        returns true or at ``max_draws`` (required, ``>= draws``). ``settings["draws"]`` is
        the number drawn.
    max_leapfrog : int
        :math:`L_{\\max}`, at most this many leapfrog steps per transition.
    adapt_mass_matrix : bool
        Estimate the diagonal inverse mass matrix in Stan's windows (pooled across chains);
        otherwise it stays the identity.
    trajectory_length : float, optional
        Initial :math:`T`; ``None`` starts at the step size (one leapfrog step), as BlackJAX.
    learning_rate : float
        Adam's rate on :math:`\\log T` (TFP's is 0.025; measured above).
    adam_restart : int, optional
        Restart Adam's moments at this dual-averaging iteration after the start and after
        each restart (module docstring); None: only at the restarts.

    Returns
    -------
    MCMCResult
        ``draws``: the kept draws, ``(chain, kept, *site_shape)``; ``sample_stats`` (``lp``,
        ``step_size``, ``n_steps``, ``diverging``, ``energy``, ``acceptance_rate``) of the kept
        draws; ``settings`` with ``step_size``, ``trajectory_length``, ``n_steps_mean`` (over
        all post-warm-up transitions), ``draws`` (drawn per chain), ``kept``, ``kept_index``,
        ``thin`` (the final stride), ``divergences`` (over all post-warm-up transitions and
        chains) and ``warmup_divergences``, ``inverse_mass_matrix`` (the ``D`` diagonal
        entries, one vector for all chains) and ``inverse_mass_min`` / ``_median`` / ``_max``,
        ``init`` (``"per chain"``, ``"shared"`` or ``"prior"``); with ``until`` also
        ``min_draws`` and ``max_draws``.

    Raises
    ------
    FloatingPointError
        A chain's start has a non-finite potential or gradient (the sites are named), or the
        adapted step size collapsed.
    """
    if warmup < 0 or draws < 1 or chains < 1 or not 0 < target_accept < 1:
        raise ValueError(
            "chees: need warmup >= 0, draws >= 1, chains >= 1 and 0 < target_accept < 1; "
            f"got {warmup}, {draws}, {chains}, {target_accept}"
        )
    if max_leapfrog < 1 or (keep is not None and keep < 1):
        raise ValueError(f"chees: need max_leapfrog >= 1 and keep >= 1; got {max_leapfrog}, {keep}")
    if step_size is not None and not (math.isfinite(step_size) and step_size > 0):
        raise ValueError(f"chees: step_size must be a positive number, got {step_size}")
    if until is not None and (max_draws is None or max_draws < draws):
        raise ValueError(
            f"chees: with a stopping rule max_draws must be >= draws ({draws}), got {max_draws}"
        )
    pot = potential
    device, dtype = pot.x.device, pot.x.dtype
    cap = draws if until is None else int(max_draws)
    s_dev, s_cpu = _seeds(seed)
    gen = torch.Generator(device=device).manual_seed(s_dev)
    t0 = time.perf_counter()
    z, how = _start(pot, init, chains, torch.Generator().manual_seed(s_cpu), device, dtype)
    u, g = pot.value_and_grad_batch(z)
    u = u.to(torch.float64)
    _check_start(pot, z, u, g, "a prior draw (init=None)" if init is None else "init")
    minv = torch.ones(pot.dim, dtype=dtype, device=device)
    eps0 = step_size
    if eps0 is None:
        eps0 = find_shared_step_size(pot, z, u, g, minv, 1.0, gen)
    ad = chees_adaptation(
        target_accept=target_accept,
        max_leapfrog=max_leapfrog,
        learning_rate=learning_rate,
        adam_restart=adam_restart,
        beta1=0.0 if chains > 1 else BETA1_ONE_CHAIN,
    )
    state = ad.init(eps0, trajectory_length)
    schedule = build_schedule(warmup) if warmup > 0 else ()
    welford = welford_init((pot.dim,), device=device)
    centre = None
    if chains == 1:
        centre = (z[0].to(torch.float64), torch.zeros((), dtype=torch.float64, device=device))
    buf = _Thinned(chains, pot.dim, cap if keep is None else min(keep, cap), draws, dtype)
    bar = progress_bar(warmup + cap, f"chees {chains} chains", warmup) if progress else None
    saved = torch.get_num_threads()
    threads = saved if threads is None else threads
    warm_div, div_total, steps_total, drawn, window = 0, None, 0, 0, 0
    try:
        torch.set_num_threads(threads)
        for t in range(warmup):
            jitter = halton(t)
            n = num_steps(jitter, state.log_trajectory_length, state.log_step_size, max_leapfrog)
            noise = torch.randn(z.shape, generator=gen, dtype=dtype, device=device)
            logu = torch.rand(chains, generator=gen, dtype=torch.float64, device=device).log()
            z0, eps_t = z, math.exp(state.log_step_size)
            z, u, g, info = chees_transition(pot, z, u, g, eps_t, minv, n, noise, logu)
            if centre is not None:  # one chain: running mean and spread of its states
                wt = 1.0 / min(t + 2, CENTRE_WINDOW)
                mean = centre[0] + wt * (z[0].to(torch.float64) - centre[0])
                dev = z[0].to(torch.float64) - mean
                centre = (mean, centre[1] + wt * ((dev * dev).sum() - centre[1]))
            hm, grad, nd = chees_statistics(z0, info, n * eps_t, centre).tolist()
            warm_div += int(nd)
            state = ad.update(state, hm, grad)
            while window < len(schedule) and schedule[window].end < t:
                window += 1
            w = schedule[window]
            if adapt_mass_matrix and w.kind == "slow":
                welford = chan_merge(welford, z.to(torch.float64))
                if t == w.end:
                    minv = regularized_variance(welford).to(dtype)
                    welford = welford_init((pot.dim,), device=device)
                    eps = find_shared_step_size(
                        pot, z, u, g, minv, math.exp(state.log_step_size), gen
                    )
                    state = ad.restart(state, eps)
            if bar is not None:
                bar.update(1)
                if t % 10 == 0:
                    bar.set_postfix(eps=f"{math.exp(state.log_step_size):.2e}", n_steps=n)
        eps, traj = ad.final(state)
        t_warm = time.perf_counter() - t0
        if not (math.isfinite(eps) and eps > 1e-8):
            raise FloatingPointError(
                f"chees: the adapted step size (shared by all {chains} chains) collapsed to "
                f"{eps:.3g} (target_accept={target_accept}, diagonal mass matrix, warmup="
                f"{warmup}); start from a better point (init= the MF-VI posterior mean), warm "
                "up longer or lower target_accept"
            )
        log_eps, log_traj = math.log(eps), math.log(traj)
        for j in range(cap):
            jitter = halton(warmup + j)
            n = num_steps(jitter, log_traj, log_eps, max_leapfrog)
            noise = torch.randn(z.shape, generator=gen, dtype=dtype, device=device)
            logu = torch.rand(chains, generator=gen, dtype=torch.float64, device=device).log()
            z, u, g, info = chees_transition(pot, z, u, g, eps, minv, n, noise, logu)
            if on_draw is not None:
                on_draw(z)
            nd = info.diverging.sum()
            div_total = nd if div_total is None else div_total + nd
            steps_total += n
            if buf.due(j):
                st = torch.stack(
                    [-u, info.energy, info.acceptance_rate, info.diverging.to(torch.float64)]
                )
                buf.add(j, z, st, n)
            if bar is not None:
                bar.update(1)
            drawn = j + 1
            if until is not None and drawn >= draws and (drawn - draws) % EXTEND_EVERY == 0:
                if drawn == cap or until(drawn):
                    break
    finally:
        torch.set_num_threads(saved)
        if bar is not None:
            bar.close()
    kept = len(buf.index)
    flat = buf.z[:, :kept].clone()
    st = buf.stats[:, :kept].numpy()
    stats = {
        "lp": st[..., 0].copy(),
        "step_size": np.full((chains, kept), eps),
        "n_steps": np.broadcast_to(np.array(buf.n_steps, dtype=np.int64), (chains, kept)).copy(),
        "diverging": st[..., 3] > 0,
        "energy": st[..., 1].copy(),
        "acceptance_rate": st[..., 2].copy(),
    }
    mv = minv.to("cpu", torch.float64)
    settings = {
        "method": "chees",
        "seed": seed,
        "warmup": warmup,
        "draws": drawn,
        "kept": kept,
        "chains": chains,
        "target_accept": target_accept,
        "initial_step_size": step_size,
        "step_size": eps,
        "trajectory_length": traj,
        "n_steps_mean": steps_total / drawn,
        "max_leapfrog": max_leapfrog,
        "kept_index": list(buf.index),
        "thin": buf.stride,
        "divergences": int(div_total),
        "warmup_divergences": warm_div,
        "mass_matrix": "diag",
        "adapt_mass_matrix": adapt_mass_matrix,
        "mass_estimate": "pooled across chains, Stan windows" if adapt_mass_matrix else "identity",
        "inverse_mass_matrix": mv.tolist(),
        "inverse_mass_min": float(mv.min()),
        "inverse_mass_median": float(mv.median()),
        "inverse_mass_max": float(mv.max()),
        "init": how,
        "threads": threads,
        "learning_rate": learning_rate,
        "adam_restart": adam_restart,
    }
    if until is not None:
        settings.update(min_draws=draws, max_draws=cap)
    seconds = time.perf_counter() - t0
    return result(pot, flat, stats, settings, seconds, t_warm)
