"""ChEES-HMC on the two-moons BNN: throughput, ESS per second and memory per chain, in ratios.

One command measures everything side by side in one run, on the depth-2 network of
``specs/two_moons_depth.yaml`` at the paper's 1000-parameter budget (~950 parameters), and
prints one table of ratios headed by the machine it ran on::

    python benchmarks/chees.py [--n 10000] [--ess-n N] [--ess-budget P] [--chains 1 16 64]
                               [--ess-chains 64]
                               [--warmup 200] [--draws 200] [--numpyro PYTHON]
                               [--blackjax PYTHON] [--skip-throughput] [--skip-gaussian]
                               [--skip-ess] [--no-nuts] [--pairs 2]

Rows (``ours`` / ``baseline`` = ``ratio``):

- ``chain-grads/s``: chain-gradients per second (one potential gradient of one chain) of
  :func:`zoo.inference.mcmc.samplers.run_chees` with its draws streamed into
  :class:`~zoo.inference.mcmc.streaming.StreamingMoments` (as a ``chees`` cell runs), over
  the raw batched :meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch`
  of the same ``C`` chains (the floor: no sampler around it), at each ``C`` of ``--chains``
  (default 1, 16, 64 on the CPU and 1, 256, 1024, 4096 on a GPU) on every device
  (CUDA rows when ``torch.cuda.is_available()``). The sampler runs its sampling phase with
  a fixed small step size and a trajectory of 16 steps on average (``warmup=0``), so the
  ratio is the kernel's overhead per gradient, not the adaptation's.
- paired ESS runs (:mod:`_paired`): bulk ESS (arviz-stats, every draw of every chain) per
  CPU-second of the whole run (process CPU time, warm-up included; a GPU's ChEES in wall
  seconds), minimum and median over the parameters and median over the class-1
  predictive probabilities at 100 test points, with the largest R-hat beside them (an
  ESS of chains that have not converged compares nothing; ChEES needs many chains: its
  criterion is estimated across them), of ChEES (``keep=None``: every draw held), our
  batched NUTS (:func:`~zoo.inference.mcmc.samplers.run_nuts` with
  ``vectorize_chains=True``, CPU only), with ``--numpyro PYTHON`` NumPyro's vectorized
  NUTS (``benchmarks/nuts.py``'s peer) and with ``--blackjax PYTHON`` BlackJAX's ChEES
  (``benchmarks/blackjax_chees.py``), all with the same ``--ess-chains`` chains, warm-up,
  draws and start (maximum-likelihood pretrained weights, shared by the chains), on
  ``--ess-n`` training points and a network of ``--ess-budget`` parameters (defaults
  ``--n`` and 1000: a CPU cannot run four samplers to convergence on the 954-parameter
  network in a benchmark's time; ``--ess-budget 100`` gives D = 93, the depth-2 network of
  ``specs/two_moons_depth_gpu_cpu.yaml`` with two logits). Pair ``k`` runs every sampler
  with seed ``k`` in turn (interleaved); the peers (other interpreters, never the
  project's venv; JAX on one CPU thread) stay running, so pair 0 holds their first runs
  (JIT compilation included) and pairs 1 .. ``--pairs`` their compiled samplers: the
  first-run and steady ratios (median and range over pairs) print apart, with the CPU and
  the load average.
- ``compiled``: the same with :meth:`~zoo.inference.mcmc.potential.FlatPotential.compile`
  (``torch.compile``, the ``chees`` method's ``compile: true``): the raw compiled batch
  over the raw eager one (what compiling pays), ChEES on the compiled potential over that
  (the sampler's own cost once the potential is faster) and over ChEES eager, and the
  seconds of compilation (once per C) over those of one eager raw batch (how many
  gradients the compilation costs). ``--no-compile`` skips them.
- ``memory/chain``: peak memory per chain of the ChEES run at each ``C`` over that of one
  raw batched gradient of the ``C`` chains: ``torch.cuda.max_memory_allocated`` on a GPU,
  the process's peak resident set (VmHWM, reset before each measurement after glibc's
  ``malloc_trim`` has returned freed memory) on the CPU, less what was resident before: an
  estimate (memory the allocator kept can hide part of a peak). The streaming moments' group
  co-moments (8 groups x D^2 float64, 58 MB at D = 954) are a fixed part that the per-chain
  figure amortizes at large C.

- ``gaussian``: the cheap target of the one-chain floor, :math:`\\mathcal N(0, S)` with ``S``
  rotated (``--gaussian-dim`` 50, eigenvalues log-spaced over ``[1, --gaussian-condition]``),
  float64, ``--gaussian-chains`` 64 from the same overdispersed starts
  (:func:`gaussian_rows`): process CPU microseconds per batched leapfrog step at a fixed
  trajectory, with ``--blackjax PYTHON`` over BlackJAX's first run and its steady runs
  (interleaved with ours), and paired adaptive runs of ChEES and BlackJAX's ChEES as
  above (bulk ESS per CPU-second, R-hat, leapfrog steps per transition). A missing
  interpreter skips the BlackJAX rows with a message; ``--no-nuts`` skips our batched NUTS.

Throughput timings: every configuration is timed in each of ``--rounds`` interleaved rounds, its
fastest round counts (a shared machine's load comes and goes). Not a test: numbers depend on
the machine; the ratios are what to compare. ``--threads`` torch threads (default 1).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paired import Peer, ess_cpu, load, machine, print_ratios, print_table, run_pairs  # noqa: E402
from nuts import _Peer, _predictive, _setup  # noqa: E402  (the NUTS benchmark's network and peer)

from reports.ground_truth import random_spd  # noqa: E402
from zoo.execution.worker_start import keep_freed_memory
from zoo.inference.mcmc.gaussian import GaussianPotential  # noqa: E402
from zoo.inference.mcmc.potential import FlatPotential  # noqa: E402
from zoo.inference.mcmc.samplers import run_chees, run_nuts  # noqa: E402
from zoo.inference.mcmc.step_size import find_shared_step_size  # noqa: E402
from zoo.inference.mcmc.streaming import StreamingMoments  # noqa: E402

#: BlackJAX's runner (``--blackjax PYTHON`` runs it in the peers' venv).
BLACKJAX = Path(__file__).resolve().parent / "blackjax_chees.py"

#: Sampling-phase settings of the throughput rows: a small fixed step, 16 steps on average.
STEP, MEAN_STEPS = 1e-3, 16


class _Counted(FlatPotential):  # counts chain-gradients (a batch of C counts C)
    calls = 0

    def value_and_grad_batch(self, z):
        self.calls += len(z)
        return super().value_and_grad_batch(z)

    def grad_batch(self, z):
        self.calls += len(z)
        return super().grad_batch(z)


class _CountedGaussian(GaussianPotential):  # counts batched leapfrog steps (one per call)
    calls = 0

    def value_and_grad_batch(self, z):
        self.calls += 1
        return super().value_and_grad_batch(z)

    def grad_batch(self, z):
        self.calls += 1
        return super().grad_batch(z)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _potential(model, x, y, device: torch.device) -> _Counted:
    return _Counted(model, x.to(device), y.to(device))


def _raw(pot: FlatPotential, z: torch.Tensor, reps: int) -> float:
    """Seconds of one batched value-and-gradient of the rows of ``z``: fastest of 5 x reps."""
    best = float("inf")
    for _ in range(5):
        _sync(z.device)
        t0 = time.perf_counter()
        for _ in range(reps):
            pot.value_and_grad_batch(z)
        _sync(z.device)
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def _chees_fast(pot: _Counted, init, chains: int, draws: int, stream: bool = True):
    """A sampling-phase ChEES run (no warm-up): chain-gradients per second and the result."""
    moments = StreamingMoments(pot.dim, chains, device=pot.x.device) if stream else None
    pot.calls = 0
    res = run_chees(
        pot,
        seed=0,
        warmup=0,
        draws=draws,
        chains=chains,
        init=init,
        step_size=STEP,
        trajectory_length=2 * MEAN_STEPS * STEP,
        keep=2,
        threads=None,
        target_accept=0.651,
        max_leapfrog=1024,
        on_draw=None if moments is None else moments.update,
    )
    return pot.calls / res.seconds, res


class _Peak:
    """Peak memory above the level at entry: CUDA allocator on a GPU, VmHWM on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __enter__(self) -> _Peak:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            gc.collect()
            _trim()  # give freed heap pages back, so that new peaks show in the RSS
            self.base = _rss("VmRSS")
            try:  # reset the high-water mark to the current RSS (Linux >= 4.0)
                Path("/proc/self/clear_refs").write_text("5")
            except OSError:
                pass
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = torch.cuda.max_memory_allocated(self.device) - self.base
        else:
            self.bytes = max(_rss("VmHWM") - self.base, 0)


def _trim() -> None:
    """glibc's ``malloc_trim(0)``: return free heap memory to the system (no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss(key: str) -> int:
    """``VmRSS`` or ``VmHWM`` of this process in bytes (0 where /proc is not there)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def throughput(
    model, x, y, init, devices, chains_of, rounds: int, draws: int, compile_: bool = True
) -> list[tuple]:
    """Rows of chain-gradients per second and memory per chain, per device and C; with
    ``compile_`` also the torch.compile'd potential (:meth:`FlatPotential.compile`) against
    the eager one, and ChEES on it against it."""
    best: dict[tuple, list[float]] = {}
    mem: dict[tuple, tuple[float, float]] = {}
    compiled: dict[tuple, _Counted] = {}
    compile_s: dict[tuple, float] = {}
    for r in range(rounds):
        for dev in devices:
            for c in chains_of(dev):
                pot = _potential(model, x, y, dev)
                z = pot.ravel(init).to(dev).expand(c, -1).contiguous()
                reps = 3 if dev.type == "cpu" else 20
                if r == 0:  # memory once (peaks do not depend on the load), then timing
                    with _Peak(dev) as raw_peak:
                        pot.value_and_grad_batch(z)
                    with _Peak(dev) as chees_peak:
                        _chees_fast(pot, init, c, 2)
                    mem[dev.type, c] = (chees_peak.bytes / c, raw_peak.bytes / c)
                    if compile_:
                        compiled[dev.type, c] = cpot = _potential(model, x, y, dev)
                        compile_s[dev.type, c] = cpot.compile(rows=c)
                raw = c / _raw(pot, z, reps)
                ours, _ = _chees_fast(pot, init, c, draws)
                vals = [ours, raw]
                if compile_:
                    cpot = compiled[dev.type, c]
                    vals += [c / _raw(cpot, z, reps), _chees_fast(cpot, init, c, draws)[0]]
                old = best.get((dev.type, c), [0.0] * len(vals))
                best[dev.type, c] = [max(a, b) for a, b in zip(old, vals, strict=True)]
    rows = []
    for (dev, c), v in best.items():
        rows.append(("chain-grads/s  chees / raw batch", dev, c, v[0], v[1]))
    if compile_:
        for (dev, c), v in best.items():
            rows.append(("chain-grads/s  raw compiled / raw eager", dev, c, v[2], v[1]))
        for (dev, c), v in best.items():
            rows.append(("chain-grads/s  chees compiled / raw compiled", dev, c, v[3], v[2]))
        for (dev, c), v in best.items():
            rows.append(("chain-grads/s  chees compiled / chees eager", dev, c, v[3], v[0]))
        for (dev, c), sec in compile_s.items():
            rows.append(
                ("seconds  compilation / one eager raw batch", dev, c, sec, c / best[dev, c][1])
            )
    for (dev, c), (ours, raw) in mem.items():
        rows.append(("MB/chain  chees / raw batch", dev, c, ours / 2**20, raw / 2**20))
    return rows


def _ess_row(model, pot, flat: np.ndarray, cpu: float, x_test) -> tuple[float, ...]:
    """:func:`_paired.ess_cpu` with the class-1 predictive probabilities at ``x_test``."""
    return ess_cpu(flat, cpu, _predictive(model, pot, flat, x_test))


def _blackjax(python: str | None, cfg: dict, arrays: dict) -> Peer | None:
    """:data:`BLACKJAX` kept running with ``python`` (JAX on one CPU thread); None, with a
    message, when that interpreter is not there."""
    if python is None:
        return None
    if not Path(python).exists():
        print(f"--blackjax {python}: no such interpreter; BlackJAX rows skipped")
        return None
    return Peer(python, [str(BLACKJAX)], arrays, cfg)


def _cpu_run(fn):
    """``(result, process CPU seconds)`` of ``fn()``."""
    t0 = time.process_time()
    res = fn()
    return res, time.process_time() - t0


def _fixed_step_rows(pot, init, chains, rounds, bj, step, leapfrog, draws, tag) -> list[tuple]:
    """CPU microseconds per batched leapfrog step at a fixed trajectory: ours (fastest of
    ``rounds``) over BlackJAX's first run (its compilation included) and its steady runs
    (fastest of ``rounds``), interleaved."""
    ours, first, steady = float("inf"), None, float("inf")
    for r in range(rounds + (bj is not None)):
        if r < rounds:
            pot.calls = 0
            _, sec = _cpu_run(
                lambda: run_chees(
                    pot, seed=0, warmup=0, draws=draws, chains=chains, init=init,
                    step_size=step, trajectory_length=leapfrog * step, keep=2, threads=None,
                    target_accept=0.651, max_leapfrog=1024,
                )
            )  # fmt: skip
            ours = min(ours, sec / (pot.calls - 1))  # less the start's evaluation
        if bj is not None:
            b = bj.run(0)
            per = float(b["cpu"]) / int(b["steps"])
            first, steady = (per, steady) if first is None else (first, min(steady, per))
    what = f"us/step fixed trajectory  chees / blackjax, {tag}"
    if bj is None:
        return [(f"us/step fixed trajectory  chees, {tag}", "cpu", chains, 1e6 * ours, np.nan)]
    return [
        (f"{what}, first run", "cpu", chains, 1e6 * ours, 1e6 * first),
        (f"{what}, steady", "cpu", chains, 1e6 * ours, 1e6 * steady),
    ]


def gaussian_rows(
    dim: int,
    chains: int,
    condition: float,
    warmup: int,
    draws: int,
    rounds: int,
    blackjax: str | None,
    pairs: int = 2,
    step: float = 0.2,
    leapfrog: int = 16,
    fixed_draws: int = 200,
) -> tuple[list[tuple], list[dict]]:
    """The cheap target: N(0, S) with S rotated (:func:`reports.ground_truth.random_spd`,
    eigenvalues log-spaced over ``[1, condition]``), float64, ``chains`` chains from the
    same overdispersed starts (:meth:`GaussianPotential.prior_draw`, generators 0..C-1).

    Returns the rows of process CPU microseconds per batched leapfrog step of a
    sampling-phase run at a fixed step size ``step`` and :math:`\\lceil u_t L\\rceil` steps
    (``L = leapfrog``, identity mass matrix), ours over BlackJAX's first and steady runs
    (:func:`_fixed_step_rows`), and the paired adaptive runs (``warmup`` + ``draws``, pair
    ``k`` with seed ``k`` on both sides, ours then BlackJAX's): their bulk ESS (min, median)
    per CPU-second, largest R-hat and leapfrog steps."""
    pot = _CountedGaussian(random_spd(dim, condition, seed=0, rotate=True))
    starts = torch.stack([pot.prior_draw(torch.Generator().manual_seed(i)) for i in range(chains)])
    init, tag = {"theta": starts}, f"gaussian D={dim}"
    arrays = {"prec": pot.prec.numpy(), "starts": starts.numpy()}
    cfg = dict(kind="gaussian", x64=True, chains=chains)
    fixed = dict(cfg, mode="fixed", step_size=step, leapfrog=leapfrog, draws=fixed_draws)
    bj = _blackjax(blackjax, fixed, arrays)
    try:
        rows = _fixed_step_rows(pot, init, chains, rounds, bj, step, leapfrog, fixed_draws, tag)
    finally:
        if bj is not None:
            bj.close()

    def ours(k):
        pot.calls = 0
        res, cpu = _cpu_run(
            lambda: run_chees(
                pot, seed=k, warmup=warmup, draws=draws, chains=chains, init=init,
                step_size=None, keep=None, threads=None, target_accept=0.651, max_leapfrog=1000,
            )
        )  # fmt: skip
        return {"target": tag, "cpu": cpu, "steps": pot.calls, "stats": ess_cpu(res.flat, cpu)}

    contenders, bj = {"zoo chees": ours}, None
    if blackjax:
        z = starts.clone()
        u, g = pot.value_and_grad_batch(z)
        eps0 = find_shared_step_size(
            pot, z, u, g, torch.ones(dim, dtype=z.dtype), 1.0, torch.Generator().manual_seed(0)
        )
        adapt = dict(cfg, mode="adapt", step_size=eps0, warmup=warmup, draws=draws, lr=0.05)
        adapt |= dict(target_accept=0.651, max_leapfrog=1000)
        bj = _blackjax(blackjax, adapt, arrays)
    if bj is not None:

        def theirs(k):
            r = bj.run(k)
            cpu = float(r["cpu"])
            return {"target": tag, "cpu": cpu, "steps": int(r["steps"]),
                    "stats": ess_cpu(r["flat"], cpu)}  # fmt: skip

        contenders["blackjax chees"] = theirs
    try:
        return rows, run_pairs(pairs, contenders)
    finally:
        if bj is not None:
            bj.close()


def ess_rows(
    model,
    x,
    y,
    init,
    devices,
    chains: int,
    warmup: int,
    draws: int,
    depth: int,
    numpyro: str | None,
    x_test: torch.Tensor,
    blackjax: str | None = None,
    nuts: bool = True,
    pairs: int = 2,
) -> list[dict]:
    """Paired runs on the network: ChEES (process CPU seconds on the CPU, wall seconds on a
    GPU), our batched NUTS, NumPyro's vectorized NUTS and BlackJAX's ChEES, pair ``k`` each
    with seed ``k`` in turn; the peers kept running, so pair 0 holds their first runs (their
    compilation included) and later pairs their compiled samplers."""
    pot = FlatPotential(model, x, y)
    tag = f"network D={pot.dim}"

    def row(flat, cpu, steps=np.nan):
        return {"target": tag, "cpu": cpu, "steps": steps,
                "stats": _ess_row(model, pot, flat, cpu, x_test)}  # fmt: skip

    contenders = {}
    for dev in devices:
        dpot = FlatPotential(model, x.to(dev), y.to(dev))

        def chees(k, dpot=dpot, dev=dev):
            res, cpu = _cpu_run(
                lambda: run_chees(
                    dpot, seed=k, warmup=warmup, draws=draws, chains=chains, init=init,
                    keep=None, threads=None, step_size=None, target_accept=0.651,
                    max_leapfrog=1024,
                )
            )  # fmt: skip
            return row(res.flat, cpu if dev.type == "cpu" else res.seconds)

        contenders["zoo chees" + ("" if dev.type == "cpu" else f" ({dev.type}, wall s)")] = chees
    if nuts:

        def batched_nuts(k):
            res, cpu = _cpu_run(
                lambda: run_nuts(
                    pot, seed=k, warmup=warmup, draws=draws, chains=chains, init=init,
                    max_tree_depth=depth, target_accept=0.8, step_size=None,
                    mass_matrix="diag", vectorize_chains=True, threads=None,
                )
            )  # fmt: skip
            return row(res.flat, cpu)

        contenders["zoo batched NUTS"] = batched_nuts
    peers = []
    if numpyro:
        npy = _Peer(numpyro, model, x, y, init, warmup, draws, depth, chains)
        peers.append(npy)
        contenders["numpyro vectorized NUTS"] = lambda k: (
            lambda r: row(r["flat"], float(r["cpu"]))
        )(npy.run(k))
    names = list(init)
    if blackjax:
        z = pot.ravel(init).expand(chains, -1).contiguous()
        u, g = pot.value_and_grad_batch(z)
        ones = torch.ones(pot.dim, dtype=z.dtype)
        cfg = {
            "kind": "bnn", "mode": "adapt", "names": names, "chains": chains,
            "shapes": {n: list(init[n].shape) for n in names},
            "priors": {n: model.prior_params[n] for n in names},
            "warmup": warmup, "draws": draws, "target_accept": 0.651, "max_leapfrog": 1000,
            "lr": 0.05,
            "step_size": find_shared_step_size(
                pot, z, u, g, ones, 1.0, torch.Generator().manual_seed(0)
            ),
        }  # fmt: skip
        arrays = {f"init{i}": init[n].numpy() for i, n in enumerate(names)}
        bj = _blackjax(blackjax, cfg, dict(arrays, x=x.numpy(), y=y.numpy()))
        if bj is not None:
            peers.append(bj)
            contenders["blackjax chees"] = lambda k: (
                lambda r: row(r["flat"], float(r["cpu"]), int(r["steps"]))
            )(bj.run(k))
    try:
        return run_pairs(pairs, contenders)
    finally:
        for p in peers:
            p.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10000, help="training points (two moons)")
    ap.add_argument("--ess-n", type=int, help="training points of the ESS rows (default --n)")
    ap.add_argument(
        "--ess-budget",
        type=int,
        default=1000,
        help="parameter budget of the ESS rows' network (default 1000, D = 954)",
    )
    ap.add_argument(
        "--chains",
        type=int,
        nargs="+",
        help="C of the throughput rows (default: 1 16 64 on the CPU, 1 256 1024 4096 on a GPU)",
    )
    ap.add_argument("--devices", nargs="+", help="default: cpu, and cuda when available")
    ap.add_argument("--draws-timed", type=int, default=10, help="draws of a throughput run")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    ap.add_argument(
        "--ess-chains",
        type=int,
        default=64,
        help="chains of the ESS rows (ChEES's adaptation reads across chains: "
        "with 8 to 16 its trajectory length stayed at 1 to 5 leapfrog steps)",
    )
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--max-tree-depth", type=int, default=8, help="of the NUTS baselines")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--skip-ess", action="store_true")
    ap.add_argument(
        "--no-compile",
        action="store_true",
        help="skip the torch.compile rows (compiling takes 10 to 60 s per C)",
    )
    ap.add_argument(
        "--numpyro",
        metavar="PYTHON",
        help="a Python with numpyro and jax (a separate venv) to add NumPyro's vectorized NUTS",
    )
    ap.add_argument(
        "--blackjax",
        metavar="PYTHON",
        help="a Python with jax, optax and blackjax (a separate venv) to add BlackJAX's ChEES "
        "on the Gaussian and on the network (benchmarks/blackjax_chees.py)",
    )
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-gaussian", action="store_true")
    ap.add_argument("--no-nuts", action="store_true", help="no batched NUTS in the ESS rows")
    ap.add_argument(
        "--pairs", type=int, default=2, help="steady pairs after the first (paired ESS runs)"
    )
    ap.add_argument("--gaussian-dim", type=int, default=50)
    ap.add_argument("--gaussian-chains", type=int, default=64)
    ap.add_argument("--gaussian-condition", type=float, default=100.0)
    a = ap.parse_args()
    if a.blackjax and not Path(a.blackjax).exists():
        print(f"--blackjax {a.blackjax}: no such interpreter; BlackJAX rows skipped")
        a.blackjax = None
    torch.set_num_threads(a.threads)
    keep_freed_memory()  # as every cell runs (benchmarks/malloc.py)
    names = a.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    devices = [torch.device(d) for d in names]

    def chains_of(dev: torch.device) -> list[int]:
        return a.chains or ([1, 16, 64] if dev.type == "cpu" else [1, 256, 1024, 4096])

    model, x, y, init = _setup(a.n)
    x_test = torch.as_tensor(
        np.random.default_rng(0).uniform([-1.5, -1], [2.5, 1.5], (100, 2)), dtype=x.dtype
    )
    print(machine())
    print(
        f"two moons N={a.n} (ESS rows: N={a.ess_n or a.n}), depth 2, D={model.num_params} (width {model.dims[1]}), "
        f"torch threads {a.threads}; throughput: sampling phase, {a.draws_timed} draws of "
        f"~{MEAN_STEPS} leapfrog steps, fastest of {a.rounds} rounds; ESS: {a.warmup} warm-up "
        f"+ {a.draws} draws, {a.ess_chains} chains, NUTS max tree depth "
        f"{a.max_tree_depth}, start = MLE-pretrained weights"
    )
    rows, paired = [], []
    if not a.skip_throughput:
        rows += throughput(
            model, x, y, init, devices, chains_of, a.rounds, a.draws_timed, not a.no_compile
        )
    load0 = load()
    if not a.skip_gaussian:
        fixed, runs = gaussian_rows(
            a.gaussian_dim,
            a.gaussian_chains,
            a.gaussian_condition,
            a.warmup,
            a.draws,
            a.rounds,
            a.blackjax,
            a.pairs,
        )
        rows += fixed
        paired += runs
    if not a.skip_ess:
        if (a.ess_n and a.ess_n != a.n) or a.ess_budget != 1000:
            model, x, y, init = _setup(a.ess_n or a.n, a.ess_budget)
            print(f"ESS rows: N={a.ess_n or a.n}, D={model.num_params} (width {model.dims[1]})")
        paired += ess_rows(
            model,
            x,
            y,
            init,
            devices,
            a.ess_chains,
            a.warmup,
            a.draws,
            a.max_tree_depth,
            a.numpyro,
            x_test,
            a.blackjax,
            not a.no_nuts,
            a.pairs,
        )
    if rows:
        width = max(len(r[0]) for r in rows)
        print(
            f"{'what':<{width}} {'device':>6} {'chains':>6} {'ours':>10} {'baseline':>10} "
            f"{'ratio':>7}"
        )
        for what, dev, c, ours, base in rows:
            ratio = ours / base if base else float("nan")
            print(f"{what:<{width}} {dev:>6} {c:>6} {ours:>10.4g} {base:>10.4g} {ratio:>7.3f}")
    if paired:
        print(
            f"\n{machine()}; load average {load0:.1f} before the paired runs, {load():.1f} "
            f"after. Bulk ESS per CPU-second (process CPU time, each peer's of its own "
            f"process; warm-up included), pair k: seed k on every side in turn; pair 0 holds "
            f"the peers' first runs (compilation included), later pairs their compiled "
            f"samplers. R-hat > 1.01 is marked unconverged (*)."
        )
        print_table(paired)
        for target in dict.fromkeys(r["target"] for r in paired):
            runs = [r for r in paired if r["target"] == target]
            for r in runs:
                if r["steps"] == r["steps"]:  # not nan: leapfrog steps per transition
                    print(f"{target} {r['sampler']} pair {r['pair']}: "
                          f"{r['steps'] / (a.warmup + a.draws):.1f} leapfrog steps per transition")  # fmt: skip
            print_ratios(runs, "zoo chees", label=f"{target}, ")


if __name__ == "__main__":
    main()
