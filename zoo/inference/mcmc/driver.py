"""NUTS and HMC for :class:`~zoo.models.mlp.BayesianMLP` over one flat parameter vector.

:class:`~zoo.inference.mcmc.potential.FlatPotential` is the potential energy
:math:`U(z) = -\\log p(z \\mid x, y) + c` of the model as one function of a flat
unconstrained vector ``z`` (sites concatenated in model order, ``noise`` as
:math:`\\log\\sigma` with its Jacobian), computed from :meth:`BayesianMLP.apply` /
:meth:`BayesianMLP.log_likelihood` and the Normal prior parameters, never through a Pyro
trace.

The samplers are a thin kernel (the functional core in :mod:`zoo.inference.mcmc.kernel`: leapfrog,
NUTS and HMC transitions over its ``Point`` NamedTuple) driven by Pyro's own
:class:`~pyro.infer.mcmc.adaptation.WarmupAdapter`: dual-averaging step size, Stan's
windowed Welford mass matrix (:class:`~pyro.infer.mcmc.adaptation.BlockMassMatrix`, blocks
named by tuples of site names like Pyro's ``full_mass``) and Pyro's step-size heuristic.
The NUTS transition is Pyro's (multinomial sampling, biased progressive sampling between
doublings, Pyro's U-turn criterion, divergence when the energy error exceeds 1000) ported
to flat tensors with Python-float bookkeeping. Why not subclass ``pyro.infer.mcmc.NUTS``:
its ``sample`` keeps the per-draw statistics local, works on dicts of per-site tensors
(a ``torch.cat`` and split per mass-matrix product), calls ``pyro.sample`` for every coin
flip and keeps scalars as tensors, which costs tens of tensor operations per leapfrog step
on top of the gradient; here one leapfrog step is six tensor operations plus one
:meth:`FlatPotential.value_and_grad` (see ``benchmarks/nuts.py`` for the measured ratios).
With ``vectorize_chains=True`` (and two chains or more, diagonal mass matrix) all chains run
as one batched computation: the transitions are :mod:`zoo.inference.mcmc.batched` (one
:meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch` per leapfrog step of
all chains) and the warm-up is :mod:`zoo.inference.mcmc.adaptation` (the same adaptation as
Pyro's ``WarmupAdapter``, bit for bit, as pure functions over one state for all chains; its
step-size search is batched too). Each chain is seeded from ``(seed, c)`` and draws its
momenta and coins from its own generators in the order the one-chain code draws them, so it
visits the points it would visit alone, up to float rounding of the batched products (which
chaotic trajectories amplify over many draws).

The one-chain path (``vectorize_chains=False``, or one chain) keeps the one-chain kernel and
Pyro's ``WarmupAdapter`` per chain: it is the only path for dense and block mass matrices, and
for a diagonal one its numbers differ from a batch of one chain by the rounding of
:meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad` against its batched
version, so running it through the batched path would move every published sequential run.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from pyro.infer.mcmc.adaptation import WarmupAdapter

from zoo.inference.mcmc.adaptation import (
    AdaptationState,
    WindowAdaptation,
    find_reasonable_step_size,
    window_adaptation,
)
from zoo.inference.mcmc.batched import (
    BatchMetric,
    hmc_step_batch,
    leapfrog_batch,
    new_point_batch,
    nuts_step_batch,
)
from zoo.inference.mcmc.kernel import Metric, hmc_step, leapfrog, new_point, nuts_step
from zoo.inference.mcmc.potential import FlatPotential

# FlatPotential re-exported
__all__ = ["EXTEND_EVERY", "FlatPotential", "MCMCResult", "run_hmc", "run_nuts"]

#: With ``until``, the stopping rule is asked after every this many draws past ``draws``.
EXTEND_EVERY = 25


# --- object shell -------------------------------------------------------------------------
@dataclass(frozen=True)
class MCMCResult:
    """Result of :func:`run_nuts` / :func:`run_hmc`.

    Attributes
    ----------
    draws : dict of str to ndarray
        Constrained draws per site, shape ``(chain, draw, *site_shape)``.
    sample_stats : dict of str to ndarray
        Per-draw statistics, shape ``(chain, draw)``, named as arviz-base's NumPyro converter
        names them: ``lp`` (log density of the draw in unconstrained space, ``-U``; NumPyro
        stores ``U`` itself), ``step_size``, ``n_steps`` (leapfrog steps), ``tree_depth``
        (NUTS doublings; NUTS only), ``diverging``, ``energy`` (Hamiltonian of the draw with
        its momentum) and ``acceptance_rate`` (the adaptation statistic).
    settings : dict
        The sampler settings, plus the adapted ``step_size`` per chain.
    seconds, warmup_seconds : float
        Wall time of all chains, and the part of it spent in warm-up.
    site_slices : dict of str to slice
        Where each site sits in the flat vectors of :meth:`flat_draws`.
    """

    draws: dict[str, np.ndarray]
    sample_stats: dict[str, np.ndarray]
    settings: dict
    seconds: float
    warmup_seconds: float
    site_slices: dict[str, slice]
    flat: np.ndarray = field(repr=False)

    @property
    def n_divergent(self) -> int:
        """Number of divergent transitions after warm-up, over all chains."""
        return int(self.sample_stats["diverging"].sum())

    def flat_draws(self) -> np.ndarray:
        """Unconstrained flat draws, shape ``(chain * draw, D)`` (``noise`` as its log)."""
        return self.flat.reshape(-1, self.flat.shape[-1])


def _mass_shapes(pot: FlatPotential, mass_matrix: str) -> dict[tuple[str, ...], tuple]:
    """Pyro's ``mass_matrix_shape``: blocks keyed by tuples of site names, in model order."""
    names = tuple(pot.site_slices)
    if mass_matrix in ("diag", "dense"):
        return {names: (pot.dim,) * (1 if mass_matrix == "diag" else 2)}
    if mass_matrix != "block":
        raise ValueError(f"mass_matrix={mass_matrix!r}; use 'diag', 'dense' or 'block'")
    out: dict[tuple[str, ...], tuple] = {}
    for w, b in pot.model.layer_sites():
        n = pot.site_slices[b].stop - pot.site_slices[w].start
        out[(w, b)] = (n, n)
    if pot.learned_noise:
        out[("noise",)] = (1,)
    return out


def _chain_rngs(seed: int, chain: int) -> tuple[np.random.Generator, torch.Generator]:
    """Chain ``chain``'s generators: NumPy (directions, coins) and torch (momenta, prior)."""
    ss = np.random.SeedSequence([seed, chain])
    gen = torch.Generator().manual_seed(int(ss.generate_state(1, np.uint64)[0] >> 1))
    return np.random.default_rng(ss), gen


def _collapsed(chain: int, eps: float, target_accept: float, blocks: list, warmup: int) -> None:
    """Raise when a chain's adapted step size is not a finite number above 1e-8."""
    if not (math.isfinite(eps) and eps > 1e-8):
        raise FloatingPointError(
            f"chain {chain}: the adapted step size collapsed to {eps:.3g} (target_accept"
            f"={target_accept}, mass matrix {blocks}, warmup={warmup}); start from a better "
            "point (init= the MF-VI posterior mean), warm up longer or lower target_accept"
        )


class _Chain:
    """One chain: Pyro's WarmupAdapter around a transition function, seeded from (seed, c)."""

    def __init__(self, pot: FlatPotential, transition: Callable, seed: int, chain: int,
                 warmup: int, target_accept: float, step_size: float | None, mass_matrix: str,
                 adapt_mass_matrix: bool) -> None:  # fmt: skip
        self.pot, self.transition, self.warmup, self.chain = pot, transition, warmup, chain
        self.rng, self.gen = _chain_rngs(seed, chain)
        shapes = _mass_shapes(pot, mass_matrix)
        sl = pot.site_slices
        self.slices = {k: slice(sl[k[0]].start, sl[k[-1]].stop) for k in shapes}
        self.skip_search = step_size is not None
        self.adapter = WarmupAdapter(step_size or 1.0, adapt_step_size=True,
                                     target_accept_prob=target_accept,
                                     adapt_mass_matrix=adapt_mass_matrix)  # fmt: skip
        self.adapter.configure(warmup, initial_step_size=step_size or 1.0,
                               mass_matrix_shape=shapes,
                               find_reasonable_step_size_fn=self.find_step_size,
                               options={"dtype": pot.x.dtype, "device": pot.x.device})  # fmt: skip
        self._minv: tuple = ()
        self.metric = self.sync()

    def sync(self) -> Metric:
        """The flat metric of the adapter's current inverse mass matrix (rebuilt on change)."""
        minv = self.adapter.mass_matrix_adapter.inverse_mass_matrix
        vals = tuple(minv.values())
        if len(vals) != len(self._minv) or any(map(lambda a, b: a is not b, vals, self._minv)):
            self._minv, self.metric = vals, Metric(minv, self.slices)
        return self.metric

    def check_step_size(self) -> None:
        _collapsed(self.chain, self.adapter.step_size, self.adapter.target_accept_prob,
                   list(self.slices), self.warmup)  # fmt: skip

    def zdict(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: z[sl] for n, sl in self.pot.site_slices.items()}

    def find_step_size(self, zd: Mapping[str, torch.Tensor]) -> float:
        """Pyro's ``HMC._find_reasonable_step_size`` on flat tensors (double or halve)."""
        eps = self.adapter.step_size
        if self.skip_search:  # the user's initial step size is used as given
            self.skip_search = False
            return eps
        pot, metric = self.pot, self.sync()
        z = torch.cat([zd[n].reshape(-1) for n in pot.site_slices])
        u, g = pot.value_and_grad(z)
        direction = new_dir = None
        while new_dir == direction and 1e-10 < eps < 1e10:
            if direction is not None:
                eps *= 2.0**direction
            p = new_point(pot, metric, z, u, g, self.gen)
            q = leapfrog(pot, metric, p, eps)
            new_dir = 1 if math.log(0.8) < p.energy - q.energy else -1
            direction = new_dir if direction is None else direction
        return min(max(eps, 1e-10), 1e10)

    def run(self, z: torch.Tensor, draws: int, out: torch.Tensor, bar) -> tuple[dict, float]:
        """Warm up from ``z``, then write ``draws`` flat draws into ``out``; stats, warm-up s."""
        pot, adapter, warmup = self.pot, self.adapter, self.warmup
        t0 = time.perf_counter()
        u, g = pot.value_and_grad(z)
        adapter.reset_step_size_adaptation(self.zdict(z))
        metric, t_warm = self.sync(), 0.0
        rec: dict[str, list] = {}
        for t in range(warmup + draws):
            eps = adapter.step_size
            p = new_point(pot, metric, z, u, g, self.gen)
            q, st = self.transition(pot, metric, p, eps, self.rng)
            z, u, g = q.z, q.potential, q.g
            if t < warmup:
                adapter.step(t, self.zdict(z), torch.tensor(st["acceptance_rate"]))
                metric = self.sync()
                if t == warmup - 1:
                    t_warm = time.perf_counter() - t0
                    self.check_step_size()
            else:
                out[t - warmup] = z
                for k, val in (("lp", -u), ("step_size", eps), ("energy", q.energy), *st.items()):
                    rec.setdefault(k, []).append(val)
            if bar is not None:
                bar.update(1)
                if t % 10 == 0:
                    bar.set_postfix(eps=f"{eps:.2e}", n_steps=st["n_steps"])
        return {k: np.asarray(v) for k, v in rec.items()}, t_warm


def _run(pot: FlatPotential, transition: Callable, method: str, *, seed: int, warmup: int,
         draws: int, chains: int, target_accept: float, step_size: float | None,
         mass_matrix: str, adapt_mass_matrix: bool, init: Mapping[str, torch.Tensor] | None,
         progress: bool, threads: int | None, settings: dict, vectorize_chains: bool = False,
         batch_transition: Callable | None = None, max_draws: int | None = None,
         until: Callable[[np.ndarray], bool] | None = None) -> MCMCResult:  # fmt: skip
    if warmup < 0 or draws < 1 or chains < 1 or not 0 < target_accept < 1:
        raise ValueError(
            f"{method}: need warmup >= 0, draws >= 1, chains >= 1 and 0 < target_accept < 1; "
            f"got {warmup}, {draws}, {chains}, {target_accept}"
        )
    if until is not None and not (vectorize_chains and chains > 1):
        raise ValueError(
            f"{method}: a stopping rule (until=) extends all chains together; it needs "
            f"vectorize_chains=True and chains >= 2, got {vectorize_chains} and {chains}"
        )
    if until is not None and (max_draws is None or max_draws < draws):
        raise ValueError(
            f"{method}: with a stopping rule max_draws must be >= draws ({draws}), got {max_draws}"
        )
    settings = dict(settings, vectorize_chains=vectorize_chains)
    if vectorize_chains and mass_matrix != "diag":
        raise ValueError(
            f"{method}: vectorize_chains=True supports only mass_matrix='diag', got "
            f"mass_matrix={mass_matrix!r}; use mass_matrix='diag' or vectorize_chains=False"
        )
    if vectorize_chains and chains > 1:
        return _run_batched(pot, batch_transition, method, seed=seed, warmup=warmup,
                            draws=draws, chains=chains, target_accept=target_accept,
                            step_size=step_size, adapt_mass_matrix=adapt_mass_matrix, init=init,
                            progress=progress, threads=threads, settings=settings,
                            max_draws=max_draws, until=until)  # fmt: skip
    z_init = None if init is None else pot.ravel(init).detach().clone()
    flat = torch.empty(chains, draws, pot.dim, dtype=pot.x.dtype)
    stats: dict[str, list] = {}
    steps, t_warm, t0 = [], 0.0, time.perf_counter()
    saved = torch.get_num_threads()
    threads = saved if threads is None else threads
    for c in range(chains):
        chain = _Chain(pot, transition, seed, c, warmup, target_accept, step_size, mass_matrix,
                       adapt_mass_matrix)  # fmt: skip
        z = z_init.clone() if z_init is not None else pot.prior_draw(chain.gen)
        _check_init(pot, z, "init" if init is not None else "a prior draw (init=None)")
        bar = _progress(warmup + draws, f"{method} chain {c}") if progress else None
        try:
            torch.set_num_threads(threads)
            rec, tw = chain.run(z, draws, flat[c], bar)
        finally:
            torch.set_num_threads(saved)
            if bar is not None:
                bar.close()
        eps = chain.adapter.step_size
        steps.append(eps)
        t_warm += tw
        for k, v in rec.items():
            stats.setdefault(k, []).append(v)
    seconds = time.perf_counter() - t0
    settings = dict(settings, method=method, seed=seed, warmup=warmup, draws=draws, chains=chains,
                    target_accept=target_accept, initial_step_size=step_size,
                    mass_matrix=mass_matrix, adapt_mass_matrix=adapt_mass_matrix,
                    init="given" if init is not None else "prior", step_size=steps,
                    threads=threads)  # fmt: skip
    return _result(pot, flat, {k: np.stack(v) for k, v in stats.items()}, settings, seconds,
                   t_warm)  # fmt: skip


def _search(pot: FlatPotential, ad: WindowAdaptation, state: AdaptationState, z: torch.Tensor,
            gens: Sequence[torch.Generator]) -> AdaptationState:  # fmt: skip
    """The batched step-size search where the schedule asks for it, and the restart after it."""
    if not state.needs_search:
        return state
    minv = state.inverse_mass_matrix
    leap = functools.partial(leapfrog_batch, pot, BatchMetric(minv))
    eps = find_reasonable_step_size(pot.value_and_grad_batch, leap, z, state.step_size, minv,
                                    gens)  # fmt: skip
    return ad.restart(state, eps)


def _sample_batched(pot: FlatPotential, transition: Callable, ad: WindowAdaptation,
                    warmup: int, z: torch.Tensor, step_size: float | None,
                    gens: Sequence[torch.Generator], rngs: Sequence[np.random.Generator],
                    draws: int, out: torch.Tensor, bar,
                    until: Callable[[np.ndarray], bool] | None,
                    check: Callable[[torch.Tensor], None]) -> tuple[dict, float, int, torch.Tensor]:  # fmt: skip
    """Warm up all chains from ``z`` (C, D), write ``out`` (C, max draws, D).

    Draws ``draws``, then (with ``until``) goes on in rounds of :data:`EXTEND_EVERY` until
    ``until(out[:, :k])`` is true or ``out`` is full. Returns stats, warm-up seconds, ``k``
    and the adapted step sizes (C,); ``check(step_sizes)`` runs at the end of warm-up.
    """
    t0 = time.perf_counter()
    u, g = pot.value_and_grad_batch(z)
    state = ad.init(z, 1.0 if step_size is None else step_size, search=step_size is None)
    state = _search(pot, ad, state, z, gens)
    minv, t_warm = state.inverse_mass_matrix, 0.0
    metric = BatchMetric(minv)
    rec: dict[str, list] = {}
    kept = out.shape[1]
    for t in range(warmup + out.shape[1]):
        eps = state.step_size
        p = new_point_batch(metric, z, u, g, gens)
        # float32 step sizes: what torch.tensor made of the per-chain adapters' Python floats
        # in earlier versions (kept: the same numbers); the kernels cast them to z's dtype
        q, st = transition(pot, metric, p, eps.float(), rngs)
        z, u, g = q.z, q.potential, q.g
        if t < warmup:
            # float32 acceptance statistics, as the per-chain adapters were fed
            acc = torch.from_numpy(st["acceptance_rate"]).float()
            state = _search(pot, ad, ad.update(state, t, z, acc), z, gens)
            if state.inverse_mass_matrix is not minv:
                minv = state.inverse_mass_matrix
                metric = BatchMetric(minv)
            if t == warmup - 1:
                t_warm = time.perf_counter() - t0
                check(state.step_size)
        else:
            out[:, t - warmup] = z
            for k, val in (("lp", -u.numpy()), ("step_size", eps.numpy()),
                           ("energy", q.energy.numpy()), *st.items()):  # fmt: skip
                rec.setdefault(k, []).append(val)
        if bar is not None:
            bar.update(1)
            if t % 10 == 0:
                bar.set_postfix(eps=f"{eps.median().item():.2e}",
                                n_steps=int(st["n_steps"].mean()))  # fmt: skip
        k = t - warmup + 1
        if until is not None and k >= draws and (k - draws) % EXTEND_EVERY == 0:
            if k == out.shape[1] or until(out[:, :k].numpy()):
                kept = k
                break
    step_size_final, _ = ad.final(state)
    return {k: np.stack(v, 1) for k, v in rec.items()}, t_warm, kept, step_size_final


def _run_batched(pot: FlatPotential, transition: Callable, method: str, *, seed: int,
                 warmup: int, draws: int, chains: int, target_accept: float,
                 step_size: float | None, adapt_mass_matrix: bool,
                 init: Mapping[str, torch.Tensor] | None, progress: bool, threads: int | None,
                 settings: dict, max_draws: int | None = None,
                 until: Callable[[np.ndarray], bool] | None = None) -> MCMCResult:  # fmt: skip
    """Sample ``chains`` chains together with the batched ``transition``; diagonal mass only.

    Parameters as in :func:`run_nuts`; ``transition(pot, metric, p, eps, rngs)`` is a batched
    kernel of :mod:`zoo.inference.mcmc.batched`. The warm-up is
    :func:`~zoo.inference.mcmc.adaptation.window_adaptation` for all chains at once, with
    :func:`~zoo.inference.mcmc.adaptation.find_reasonable_step_size` at the start (unless
    ``step_size`` is given) and after each mass-matrix window. ``warmup_seconds`` is the wall
    time of the joint warm-up; one progress bar for all chains. With ``until`` every chain
    draws ``draws``, then all go on together in rounds of :data:`EXTEND_EVERY` draws until
    ``until(flat draws so far, shape (chains, k, D))`` is true or they have ``max_draws``;
    ``settings["draws"]`` is the number drawn.
    """
    cap = draws if until is None or max_draws is None else max_draws
    z_init = None if init is None else pot.ravel(init).detach().clone()
    t0 = time.perf_counter()
    gens, rngs, zs = [], [], []
    for c in range(chains):
        rng, gen = _chain_rngs(seed, c)
        z = z_init.clone() if z_init is not None else pot.prior_draw(gen)
        _check_init(pot, z, "init" if init is not None else "a prior draw (init=None)")
        gens.append(gen)
        rngs.append(rng)
        zs.append(z)
    ad = window_adaptation(warmup, target_accept=target_accept,
                           adapt_mass_matrix=adapt_mass_matrix)  # fmt: skip
    blocks = [tuple(pot.site_slices)]

    def check(eps: torch.Tensor) -> None:
        for c, e in enumerate(eps.tolist()):
            _collapsed(c, e, target_accept, blocks, warmup)

    flat = torch.empty(chains, cap, pot.dim, dtype=pot.x.dtype)
    saved = torch.get_num_threads()
    threads = saved if threads is None else threads
    bar = _progress(warmup + cap, f"{method} {chains} chains") if progress else None
    try:
        torch.set_num_threads(threads)
        stats, t_warm, kept, steps = _sample_batched(pot, transition, ad, warmup,
                                                     torch.stack(zs), step_size, gens, rngs,
                                                     draws, flat, bar, until, check)  # fmt: skip
        flat = flat[:, :kept].clone()
    finally:
        torch.set_num_threads(saved)
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - t0
    if until is not None:
        settings = dict(settings, min_draws=draws, max_draws=cap)
    settings = dict(settings, method=method, seed=seed, warmup=warmup, draws=kept, chains=chains,
                    target_accept=target_accept, initial_step_size=step_size,
                    mass_matrix="diag", adapt_mass_matrix=adapt_mass_matrix,
                    init="given" if init is not None else "prior", step_size=steps.tolist(),
                    threads=threads)  # fmt: skip
    return _result(pot, flat, stats, settings, seconds, t_warm)


def _result(pot: FlatPotential, flat: torch.Tensor, stats: dict, settings: dict, seconds: float,
            t_warm: float) -> MCMCResult:  # fmt: skip
    """The MCMCResult of flat draws ``(chain, draw, D)`` and stats ``(chain, draw)``."""
    with torch.no_grad():
        draws_c = {k: v.numpy() for k, v in pot.unravel(flat).items()}
    return MCMCResult(draws_c, stats, settings, seconds, t_warm, dict(pot.site_slices),
                      flat.numpy())  # fmt: skip


def _check_init(pot: FlatPotential, z: torch.Tensor, where: str) -> None:
    u, g = pot.value_and_grad(z)
    if math.isfinite(u) and bool(torch.isfinite(g).all()):
        return
    bad = [n for n, s in pot.site_slices.items() if not bool(torch.isfinite(z[s]).all())]
    bad_g = [n for n, s in pot.site_slices.items() if not bool(torch.isfinite(g[s]).all())]
    raise FloatingPointError(
        f"the potential at the initial point ({where}) is {u}; non-finite values in sites "
        f"{bad}, non-finite gradients in sites {bad_g}; pass init= a finite point (e.g. the "
        "MF-VI posterior mean, guide.median()) and check x and y for NaN or inf"
    )


def run_nuts(potential: FlatPotential, *, seed: int, warmup: int, draws: int, chains: int = 1,
             target_accept: float = 0.8, max_tree_depth: int = 10,
             step_size: float | None = None, mass_matrix: str = "diag",
             init: Mapping[str, torch.Tensor] | None = None, progress: bool = False,
             threads: int | None = 1, vectorize_chains: bool = False,
             max_draws: int | None = None,
             until: Callable[[np.ndarray], bool] | None = None) -> MCMCResult:  # fmt: skip
    """Sample ``potential`` with NUTS (Pyro's multinomial variant and warm-up adaptation).

    Parameters
    ----------
    potential : FlatPotential
    seed : int
        Chain ``c`` is seeded from ``(seed, c)``; chains run one after another unless
        ``vectorize_chains``.
    warmup, draws, chains : int
        Warm-up iterations (discarded), kept draws per chain, number of chains.
    target_accept : float
        Target of the dual-averaging step-size adaptation.
    max_tree_depth : int
        At most ``2**max_tree_depth - 1`` leapfrog steps per draw.
    step_size : float, optional
        Initial step size; ``None`` runs Pyro's heuristic from 1.
    mass_matrix : {"diag", "dense", "block"}
        Adapted inverse mass matrix: diagonal, dense, or dense per layer (weight and bias of
        one layer together; ``noise`` diagonal). Pyro's windowed Welford estimate.
    init : dict, optional
        Constrained initial values per site (e.g. the MF-VI posterior mean); ``None`` draws
        each chain's start from the prior.
    progress : bool
        tqdm bar per chain, or one for all when vectorized (off when stderr is not a terminal).
    threads : int, optional
        torch intra-op threads while sampling, restored afterwards (``None`` keeps torch's
        setting). One is fastest for these small sequential operations: with two threads on
        a busy 2-core machine every leapfrog step was 25 times slower.
    vectorize_chains : bool
        Run all chains as one batched computation: each chain keeps its own seed, step-size
        search, dual averaging and mass-matrix windows (:mod:`zoo.inference.mcmc.adaptation`,
        all chains in one state), while every leapfrog step of all chains is one forward and
        backward pass (:mod:`zoo.inference.mcmc.batched`). On small networks 4
        chains then cost about 1.5 chains. ``mass_matrix="diag"`` only; ``warmup_seconds`` is
        then the wall time of the joint warm-up. One chain runs the sequential path.
    max_draws, until : optional
        A stopping rule (vectorized chains only): after ``draws`` draws per chain, and then
        every :data:`EXTEND_EVERY`, ``until(draws so far)`` is called with the
        flat draws of shape ``(chains, k, D)``; sampling stops when it returns true or at
        ``max_draws``. ``settings["draws"]`` is the number drawn.

    Returns
    -------
    MCMCResult
    """
    if max_tree_depth < 1:
        raise ValueError(f"max_tree_depth={max_tree_depth} must be >= 1")

    def transition(pot, metric, p, eps, rng):
        return nuts_step(pot, metric, p, eps, max_tree_depth, rng)

    def batch_transition(pot, metric, p, eps, rngs):
        return nuts_step_batch(pot, metric, p, eps, max_tree_depth, rngs)

    return _run(potential, transition, "nuts", seed=seed, warmup=warmup, draws=draws,
                chains=chains, target_accept=target_accept, step_size=step_size,
                mass_matrix=mass_matrix, adapt_mass_matrix=True, init=init, progress=progress,
                threads=threads, settings={"max_tree_depth": max_tree_depth},
                vectorize_chains=vectorize_chains, batch_transition=batch_transition,
                max_draws=max_draws, until=until)  # fmt: skip


def run_hmc(potential: FlatPotential, *, seed: int, warmup: int, draws: int, num_steps: int,
            chains: int = 1, target_accept: float = 0.8, step_size: float | None = None,
            adapt_mass_matrix: bool = False, mass_matrix: str = "diag",
            init: Mapping[str, torch.Tensor] | None = None, progress: bool = False,
            threads: int | None = 1, vectorize_chains: bool = False,
            max_draws: int | None = None,
            until: Callable[[np.ndarray], bool] | None = None) -> MCMCResult:  # fmt: skip
    """Sample ``potential`` with HMC: ``num_steps`` leapfrog steps per draw, adapted step size.

    Like hamiltorch's HMC the trajectory has a fixed number of steps (not a fixed length);
    the step size is adapted by dual averaging during warm-up, the mass matrix only when
    ``adapt_mass_matrix``. Other parameters (``vectorize_chains``, ``max_draws`` and ``until``
    too) as in :func:`run_nuts`;
    ``sample_stats`` has no ``tree_depth``.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps={num_steps} must be >= 1")

    def transition(pot, metric, p, eps, rng):
        return hmc_step(pot, metric, p, eps, num_steps, rng)

    def batch_transition(pot, metric, p, eps, rngs):
        return hmc_step_batch(pot, metric, p, eps, num_steps, rngs)

    return _run(potential, transition, "hmc", seed=seed, warmup=warmup, draws=draws,
                chains=chains, target_accept=target_accept, step_size=step_size,
                mass_matrix=mass_matrix, adapt_mass_matrix=adapt_mass_matrix, init=init,
                progress=progress, threads=threads, settings={"num_steps": num_steps},
                vectorize_chains=vectorize_chains, batch_transition=batch_transition,
                max_draws=max_draws, until=until)  # fmt: skip


def _progress(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False, unit="draw", dynamic_ncols=True, disable=None)
