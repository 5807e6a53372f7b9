"""NUTS on the two-moons BNN: time per leapfrog step and ESS per second, ours against Pyro's.

One run measures every configuration side by side on the depth-2 network of
``specs/two_moons_depth.yaml`` at the paper's 1000-parameter budget (~950 parameters) and prints one table::

    python benchmarks/nuts.py [--n 1000 10000] [--warmup 100] [--draws 200] [--max-tree-depth 8]

Part 1, milliseconds per gradient evaluation (one leapfrog step), ratio to ``raw``:

- ``raw``: the network's log density and its ``torch.autograd.grad`` written by hand in torch,
  with no sampler around it (the floor), with the fused ``F.cross_entropy`` that
  FlatPotential uses, and (next row) with ``log_softmax`` + ``gather``;
- ``zoo run_nuts``: :func:`zoo.inference.mcmc.samplers.run_nuts` on :class:`zoo.inference.mcmc.potential.FlatPotential`;
- ``pyro NUTS(potential_fn=flat)``: Pyro's own NUTS kernel on the same flat potential, as one
  site ``{"z": z}`` (what subclassing Pyro's kernel would cost);
- ``pyro NUTS(model)``: Pyro's NUTS on the PyroModule model (potential from the model trace).

Sampler times are wall time of a short run divided by the number of potential-gradient
evaluations it made. Every configuration is timed in each of ``--rounds`` interleaved rounds
and its fastest round counts (a shared machine's load comes and goes); raw is the fastest of
7 repeats per round. Part 2 runs ours and ``pyro NUTS(model)`` with the same initial point
(maximum-likelihood pretrained weights), warm-up, draws and tree depth at N=1000 and reports
ESS_bulk (min and median over parameters) per second of total run time; ``grads/iter`` is
gradient evaluations per iteration and chain (warm-up included; NumPyro: leapfrog steps per
draw; vectorized: every chain's row of every batch, also those of chains already done).
Part 2 also runs 4 chains of ours one after another and as one batched computation
(``vectorize_chains=True``) with the same settings, ESS over the 4 chains, and prints the
ratio of their ESS/s.
``--numpyro PYTHON`` adds NumPyro's NUTS, one chain and 4 chains with
``chain_method="vectorized"`` (compared with ours vectorized), run by another interpreter that
has jax and numpyro (never install them into the project venv), timed with its JIT compilation.

``--batched`` runs part 3 instead (the batched NUTS of ``vectorize_chains=True``)::

    python benchmarks/nuts.py --batched [--before main] [--chains 16 64] [--processes 1] \
        [--numpyro PYTHON]

- chain-gradients per CPU-second of :func:`zoo.inference.mcmc.batched.nuts_step_batch` over
  those of the raw batched gradient (``value_and_grad_batch`` alone) at each ``C``, on the
  default spec's depth-2 network (one logit, 100-parameter budget, N = 500), transitions
  from an MLE-pretrained point with a step so small that every tree reaches depth 8 (as the
  default's trees do); beside it the same for the kernel at git ref ``--before`` (loaded
  from ``git show``, so that before and after are measured in one run). Each round times
  the raw gradient and then every kernel, and its ratios pair those runs: the median (with
  its standard error, what a rerun's median would move by) and range over ``--rounds``
  rounds are printed. With ``--processes K`` the rounds run in ``K`` fresh interpreters one
  after another and the standard error comes from the ``K`` processes' medians (fresh
  processes' medians differ by more than the bootstrap over one process's rounds says);
  else it is that bootstrap's. Beside them, each side's minor page faults per
  transition (the raw gradient's per ``2**depth`` calls; a kernel that keeps small tensors
  through the gradient's calls breaks up the heap, and the gradient faults on new pages);
- ESS_bulk (min and median over parameters, the network's weights aligned modulo
  hidden-unit permutations as the zoo's gates read them; median over the class-1
  probabilities at 100 test points for the network) per CPU-second (process CPU time,
  warm-up included) with the largest R-hat beside it (an ESS whose R-hat exceeds 1.01 is
  marked unconverged), of
  ``run_nuts(vectorize_chains=True)`` and of NumPyro's NUTS vectorized over the chains
  (its transition vmapped and scanned in one ``jax.jit``, the CPU seconds of its own
  process), on a 50-d rotated Gaussian (variances 0.32-3.2, 64 chains, overdispersed starts
  shared with NumPyro) and on the default's network (16 chains, MLE start, target
  acceptance 0.9, depth 8). Paired and interleaved: pair ``k`` runs ours, then NumPyro's,
  both with seed ``k``; pair 0 is NumPyro's first run (its compilation included), pairs
  1 .. ``--pairs`` reuse its compiled sampler (``--gauss-pairs`` for the Gaussian, whose
  pairs take seconds and whose ratio a second of load moves): the first-run ratio and the
  steady ratios (median and range over pairs) are printed apart, with the CPU and the load
  average.

Not a test: numbers depend on the machine; the ratios are what to compare. One torch thread.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

try:  # minor page faults (Unix)
    import resource
except ImportError:
    resource = None

import numpy as np
import pyro
import torch
from _paired import (
    PEER_ENV,
    RHAT_OK,
    Peer,
    ess_cpu,
    load,
    machine,
    median_se,
    print_ratios,
    print_table,
    run_pairs,
)
from arviz_stats.base import array_stats
from pyro.infer.mcmc import MCMC, NUTS

import zoo.data
import zoo.models
from reports.alignment import align_to_pivot, pivot_from_draws
from reports.draws import flatten_sites
from zoo.inference.init import initial_locs, pretrain_mle
from zoo.inference.mcmc import programs
from zoo.inference.mcmc.batched import BatchMetric, new_point_batch, nuts_step_batch
from zoo.inference.mcmc.gaussian import GaussianPotential
from zoo.inference.mcmc.loop import chain_rngs
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.samplers import run_nuts
from zoo.runtime import Runtime
from zoo.spec import load_spec


class _Counted(FlatPotential):  # counts gradient evaluations (a batch of C counts C)
    calls = 0

    def value_and_grad(self, z):
        self.calls += 1
        return super().value_and_grad(z)

    def value_and_grad_batch(self, z, finish=True, into=None):
        self.calls += len(z)
        return super().value_and_grad_batch(z, finish, into)

    # batched NUTS may finish U per subtree and write U and its gradient into its stacks
    value_and_grad_batch.finishes_later = value_and_grad_batch.writes_into = True


class _CountedNUTS(NUTS):
    calls = 0

    def _initialize_model_properties(self, model_args, model_kwargs):
        super()._initialize_model_properties(model_args, model_kwargs)
        fn = self.potential_fn

        def counted(z):
            self.calls += 1
            return fn(z)

        self.potential_fn = counted


def _setup(n: int, budget: int = 1000):
    # The benchmark network: depth 2 at the paper's 1000-parameter budget (~950
    # parameters; ``budget`` changes it), whatever budget the laptop default spec uses, with
    # the 2-logit softmax
    # the raw baselines and the NumPyro model below are written for (the default spec has
    # one logit since commit 69b902c).
    over = [
        "sweep.model.depth=[2]",
        "sweep.seed=[0]",
        f"data.n_train={n}",
        f"model.param_budget={budget}",
        "likelihood={kind: categorical}",
    ]
    spec = load_spec("specs/two_moons_depth.yaml", over).cells()[0].spec
    ds = zoo.data.load(spec.data, spec.seed)
    model = zoo.models.build(spec, ds)
    rt = Runtime.cpu()
    data = ds.to_torch(rt)
    x, y = data.x_train, data.y_train
    init = pretrain_mle(
        model.log_likelihood,
        initial_locs(model, "he", data, 0, rt),
        x[:1000],
        y[:1000],
        gen=rt.generator(0),
        epochs=10,
        batch_size=100,
        lr=0.01,
    )
    return model, x, y, init


def _raw_ms(pot: FlatPotential, x, y, z0: torch.Tensor, reps: int, fused: bool) -> float:
    """Hand-written log density + autograd gradient of the same ReLU network, median ms.

    ``fused`` uses ``F.cross_entropy`` (as FlatPotential does) instead of log_softmax + gather.
    """
    layers = [
        (pot.site_slices[w], pot.site_shapes[w], pot.site_slices[b])
        for w, b in pot.model.layer_sites()
    ]
    yi = y.unsqueeze(-1)

    def raw(z):
        z = z.detach().requires_grad_(True)
        h = x
        for i, (ws, shape, bs) in enumerate(layers):
            h = torch.addmm(z[bs], h, z[ws].view(shape).t())
            h = torch.relu(h) if i < len(layers) - 1 else h
        if fused:
            lp = -torch.nn.functional.cross_entropy(h, y, reduction="sum") - 0.5 * z.dot(z)
        else:
            lp = torch.log_softmax(h, -1).gather(-1, yi).sum() - 0.5 * z.dot(z)
        (g,) = torch.autograd.grad(-lp, z)
        return lp.item(), g

    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            raw(z0)
        times.append((time.perf_counter() - t0) / reps * 1e3)
    return min(times)


def _pyro_run(kernel, init_z, warmup, draws, x, y, seed):
    pyro.set_rng_seed(seed)
    mcmc = MCMC(
        kernel, num_samples=draws, warmup_steps=warmup, initial_params=init_z, disable_progbar=True
    )
    t0 = time.perf_counter()
    mcmc.run(x, y)
    return mcmc, time.perf_counter() - t0


def _per_step(model, x, y, init, warmup, draws, depth, reps, rounds) -> dict[str, float]:
    """ms per gradient of each configuration: the fastest of ``rounds`` interleaved rounds."""
    pot = _Counted(model, x, y)
    z0 = pot.ravel(init)
    out: dict[str, float] = {}

    def keep(name, ms):
        out[name] = min(out.get(name, float("inf")), ms)

    def flat_fn(zd):  # the same fused energy as value_and_grad
        flat_fn.calls += 1
        return pot._energy(zd["z"]) + pot._offset

    for _ in range(rounds):
        keep("raw", _raw_ms(pot, x, y, z0, reps, fused=True))
        keep("raw, log_softmax+gather", _raw_ms(pot, x, y, z0, reps, fused=False))
        pot.calls = 0
        res = run_nuts(
            pot,
            seed=0,
            warmup=warmup,
            draws=draws,
            chains=1,
            target_accept=0.8,
            init=init,
            max_tree_depth=depth,
            step_size=None,
            mass_matrix="diag",
            vectorize_chains=False,
        )
        keep("zoo run_nuts", res.seconds / pot.calls * 1e3)
        flat_fn.calls = 0
        kern = NUTS(potential_fn=flat_fn, max_tree_depth=depth)
        _, sec = _pyro_run(kern, {"z": z0.clone()}, warmup, draws, None, None, 0)
        keep("pyro NUTS(potential_fn=flat)", sec / flat_fn.calls * 1e3)
        kern = _CountedNUTS(model, max_tree_depth=depth)
        _, sec = _pyro_run(kern, {k: v.clone() for k, v in init.items()}, warmup, draws, x, y, 0)
        keep("pyro NUTS(model)", sec / kern.calls * 1e3)
    return out


_NUMPYRO_SETUP = r"""
import json, sys, time
import numpy as np
import jax, numpyro, numpyro.distributions as dist
from numpyro.infer import NUTS, init_to_value
data, cfg = np.load(sys.argv[1]), json.loads(sys.argv[2])
names, shapes, priors = cfg["names"], cfg["shapes"], cfg["priors"]
def model(x, y):
    p = {n: numpyro.sample(n, dist.Normal(*priors[n]).expand(shapes[n]).to_event(len(shapes[n])))
         for n in names}
    h, depth = x, len(names) // 2 - 1
    for i in range(depth + 1):
        h = h @ p[f"layer{i}.weight"].T + p[f"layer{i}.bias"]
        h = jax.nn.relu(h) if i < depth else h
    if cfg.get("likelihood") == "bernoulli":
        numpyro.sample("obs", dist.Bernoulli(logits=h[..., 0]), obs=y)
    else:
        numpyro.sample("obs", dist.Categorical(logits=h), obs=y)
def gaussian(x, y):
    numpyro.sample("theta", dist.MultivariateNormal(0.0, data["cov"]))
init = {n: data["init" + str(i)] for i, n in enumerate(names)}
kern = NUTS(gaussian if "cov" in data else model, max_tree_depth=cfg["depth"],
            target_accept_prob=cfg.get("target_accept", 0.8),
            init_strategy=init_to_value(values=init))
# NUTS's own transition, vmapped over the chains once init() has seen a batch of keys
# (as MCMC's chain_method="vectorized" runs it), in one jitted scan over warm-up and draws:
# compiled in the first run, reused by later runs (MCMC.run traces its loop again per call)
C, W, S = cfg["chains"], cfg["warmup"], cfg["draws"]
inits = {"theta": data["inits"]} if "inits" in data else None
args, state0 = (data["x"], data["y"]), None
def body(state, _):
    state = kern.sample(state, args, {})
    return state, (state.z, state.num_steps)
loop = jax.jit(lambda state: jax.lax.scan(body, state, None, length=W + S))
def run(seed, out):
    global state0
    t0, c0 = time.perf_counter(), time.process_time()
    keys = jax.random.split(jax.random.PRNGKey(seed), C)
    if state0 is None:  # init once: a second init() would vmap the transition again
        state0 = kern.init(keys, W, inits, model_args=args)
    _, (z, steps) = jax.block_until_ready(loop(state0._replace(rng_key=keys)))
    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
    flat = np.concatenate(
        [np.swapaxes(np.asarray(z[n])[W:], 0, 1).reshape(C, S, -1) for n in names], -1)
    np.savez(out, flat=flat, seconds=sec, cpu=cpu, steps=np.asarray(steps)[W:])
"""
_NUMPYRO = _NUMPYRO_SETUP + "run(0, sys.argv[3])\n"
#: NumPyro as a server: one run per line ``SEED OUT`` on stdin, ``done`` on stdout after it
_NUMPYRO_SERVER = (
    _NUMPYRO_SETUP
    + """
for line in sys.stdin:
    seed, out = line.split()
    run(int(seed), out)
    print("done", flush=True)
"""
)


class _Peer(Peer):
    """NumPyro's NUTS on the same model in another interpreter (its own venv with jax),
    kept running: :meth:`run` asks for one more run of the same compiled sampler.

    ``chains > 1`` runs NumPyro's ``chain_method="vectorized"`` (all chains in one jitted
    computation), the counterpart of ``vectorize_chains=True``. ``cfg`` adds ``likelihood``
    ("bernoulli") or ``target_accept``; ``arrays`` with ``cov`` (and ``inits``, one start
    per chain) samples ``theta ~ N(0, cov)`` instead of the network (``model=None``). Its
    first run compiles; later runs of the same shapes reuse the compiled sampler. A run
    returns ``flat``, ``seconds``, ``cpu`` (the peer process's CPU seconds of this run
    alone) and ``steps``.
    """

    def __init__(
        self, python: str, model, x, y, init, warmup, draws, depth, chains=1, cfg=None, arrays=None
    ) -> None:
        names = list(init)
        cfg = {
            "names": names,
            "shapes": {n: list(init[n].shape) for n in names},
            "priors": {n: model.prior_params[n] for n in names} if model is not None else {},
            "depth": depth,
            "warmup": warmup,
            "draws": draws,
            "chains": chains,
            **(cfg or {}),
        }
        inits = {f"init{i}": init[n].numpy() for i, n in enumerate(names)}
        arrays = dict(x=x.numpy(), y=y.numpy(), **inits, **(arrays or {}))
        super().__init__(python, ["-c", _NUMPYRO_SERVER], arrays, cfg)

    def once(self) -> dict:
        """One run in a fresh interpreter (compilation included)."""
        out = f"{self.dir.name}/once.npz"
        argv = [self.argv[0], "-c", _NUMPYRO, *self.argv[3:], out]
        subprocess.run(argv, check=True, env=dict(os.environ, **PEER_ENV))
        return dict(np.load(out))


def _numpyro(
    python: str, model, x, y, init, warmup, draws, depth, chains: int = 1, *, cpu=False, cfg=None,
    arrays=None,
) -> tuple:  # fmt: skip
    """One run of :class:`_Peer` in a fresh interpreter, its compilation included: ``(name,
    flat, seconds, steps per draw)``; ``cpu``: the seconds are the process's CPU seconds."""
    peer = _Peer(python, model, x, y, init, warmup, draws, depth, chains, cfg, arrays)
    try:
        r = peer.once()
    finally:
        peer.close()
    name = "numpyro NUTS(model)" if chains == 1 else f"numpyro {chains} chains vectorized"
    return name, r["flat"], float(r["cpu" if cpu else "seconds"]), r["steps"].mean()


def _ess(model, x, y, init, warmup, draws, depth, numpyro: str | None) -> list[tuple]:
    pot = _Counted(model, x, y)
    res = run_nuts(
        pot,
        seed=0,
        warmup=warmup,
        draws=draws,
        chains=1,
        target_accept=0.8,
        init=init,
        max_tree_depth=depth,
        step_size=None,
        mass_matrix="diag",
        vectorize_chains=False,
    )
    rows = [("zoo run_nuts", res.flat, res.seconds, pot.calls / (warmup + draws))]
    kern = _CountedNUTS(model, max_tree_depth=depth)
    mcmc, sec = _pyro_run(kern, {k: v.clone() for k, v in init.items()}, warmup, draws, x, y, 0)
    s = mcmc.get_samples(group_by_chain=True)
    flat = torch.cat([s[k].reshape(1, draws, -1) for k in pot.site_slices], -1).numpy()
    rows.append(("pyro NUTS(model)", flat, sec, kern.calls / (warmup + draws)))
    if numpyro:
        rows.append(_numpyro(numpyro, model, x, y, init, warmup, draws, depth))
        rows.append(_numpyro(numpyro, model, x, y, init, warmup, draws, depth, chains=4))
    for vec in (False, True):
        pot = _Counted(model, x, y)
        res = run_nuts(
            pot,
            seed=0,
            warmup=warmup,
            draws=draws,
            init=init,
            max_tree_depth=depth,
            chains=4,
            target_accept=0.8,
            step_size=None,
            mass_matrix="diag",
            vectorize_chains=vec,
        )
        name = f"zoo 4 chains {'vectorized' if vec else 'sequential'}"
        rows.append((name, res.flat, res.seconds, pot.calls / 4 / (warmup + draws)))
    out = []
    for name, f, sec, nsteps in rows:
        ess = array_stats.ess(f, chain_axis=0, draw_axis=1, method="bulk")
        out.append((name, sec, nsteps, ess.min(), np.median(ess)))
    return out


def _aligned(pot: FlatPotential, flat: np.ndarray) -> np.ndarray:
    """The draws ``(chains, draws, D)`` with every draw's hidden units aligned to a pivot
    (Stephens' iteration from the first draw, :func:`reports.alignment.pivot_from_draws`),
    as the zoo's gates read a network's weights: the raw weights' R-hat measures how often
    the chains switch unit labels, not whether they agree modulo those labels."""
    c, s, _ = flat.shape
    sites = {k: v.numpy() for k, v in pot.unravel(torch.as_tensor(flat)).items()}
    aligned = align_to_pivot(sites, pivot_from_draws(sites)).sites
    return flatten_sites(aligned).draws.reshape(c, s, -1)


def _predictive(model, pot: FlatPotential, flat: np.ndarray, x_test: torch.Tensor) -> np.ndarray:
    """Class-1 probability at ``x_test`` per draw, ``(chains, draws, points)``."""
    c, s, _ = flat.shape
    with torch.no_grad():
        draws = pot.unravel(torch.as_tensor(flat.reshape(c * s, -1), dtype=pot.x.dtype))
        logp = model.likelihood.class_log_probs(model.apply(x_test, draws))
    return logp[..., 1].exp().double().numpy().reshape(c, s, -1)


def _kernel_at(ref: str):
    """``nuts_step_batch`` of ``zoo/inference/mcmc/batched.py`` at git ``ref`` (the kernel
    before a change, callable beside today's in one run)."""
    root = Path(__file__).resolve().parent.parent
    shown = subprocess.run(
        ["git", "show", f"{ref}:zoo/inference/mcmc/batched.py"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if shown.returncode:
        sys.exit(f"--before {ref}: git cannot show that commit's kernel ({shown.stderr.strip()})")
    src = shown.stdout
    mod = types.ModuleType(f"_batched_at_{ref}")
    sys.modules[mod.__name__] = mod  # NamedTuple classes look their module up
    exec(compile(src, f"{ref}:batched.py", "exec"), mod.__dict__)
    return mod.nuts_step_batch


def _default_network():
    """The default spec's depth-2 network (one logit, 100-parameter budget, N = 500) with an
    MLE-pretrained start, its test inputs and its NUTS settings."""
    spec = load_spec("specs/two_moons_depth.yaml", ["sweep.model.depth=[2]", "sweep.seed=[0]"])
    cell = spec.cells()[0].spec
    ds = zoo.data.load(cell.data, cell.seed)
    model = zoo.models.build(cell, ds)
    rt = Runtime.cpu()
    data = ds.to_torch(rt)
    x, y = data.x_train, data.y_train
    init = pretrain_mle(
        model.log_likelihood,
        initial_locs(model, "he", data, 0, rt),
        x,
        y,
        gen=rt.generator(0),
        epochs=10,
        batch_size=100,
        lr=0.01,
    )
    return model, x, y, init, data.x_test[:100]


def _faults() -> int:
    """The process's minor page faults so far (0 where ``resource`` is missing)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource else 0


def _throughput(kernels: dict, pot, z: torch.Tensor, depth: int, reps: int, rounds: int):
    """Each NUTS kernel's chain-gradients per CPU-second over the raw batched gradient's, per
    round: a round times ``reps * 2**depth`` raw gradients at the same ``(C, D)`` points and
    then ``reps`` transitions of every kernel from ``z`` (a step so small that every tree
    reaches ``depth``, as the default's trees do), so that each ratio pairs runs seconds
    apart (the load of a shared CPU drifts over minutes). One round before them warms up.
    Also the minor page faults per transition (``raw``: per ``2**depth`` raw gradients): a
    kernel that keeps small tensors through the gradient's calls breaks up the heap, and
    the gradient then faults on new pages."""
    c, d = z.shape
    metric = BatchMetric(torch.ones(c, d, dtype=z.dtype))
    eps = torch.full((c,), 1e-3)
    u, g = pot.value_and_grad_batch(z)
    ratios: dict[str, list[float]] = {name: [] for name in kernels}
    faults: dict[str, list[float]] = {name: [] for name in ["raw", *kernels]}
    for r in range(rounds + 1):
        t0, f0 = time.process_time(), _faults()
        for _ in range(reps * 2**depth):
            pot.value_and_grad_batch(z)
        raw = c * reps * 2**depth / (time.process_time() - t0)
        if r:
            faults["raw"].append((_faults() - f0) / reps)
        for name, step in kernels.items():
            rngs = [np.random.default_rng(i) for i in range(c)]
            gens = [torch.Generator().manual_seed(i) for i in range(c)]
            pot.calls, t0, f0 = 0, time.process_time(), _faults()
            for _ in range(reps):
                step(pot, metric, new_point_batch(metric, z, u, g, gens), eps, depth, rngs)
            if r:
                ratios[name].append(pot.calls / (time.process_time() - t0) / raw)
                faults[name].append((_faults() - f0) / reps)
    return ratios, faults


def _run_zoo(step, pot, seed: int = 0, **kw) -> tuple[np.ndarray, float]:
    """``run_nuts(vectorize_chains=True)`` with the batched kernel ``step``; CPU seconds."""
    old = programs.nuts_step_batch  # the module the batched sampler calls it from
    programs.nuts_step_batch = step
    try:
        t0 = time.process_time()
        res = run_nuts(pot, seed=seed, vectorize_chains=True, mass_matrix="diag", **kw)
        return res.flat, time.process_time() - t0
    finally:
        programs.nuts_step_batch = old


def _in_processes(a, c: int) -> tuple[dict, dict, dict]:
    """:func:`_throughput` at ``c`` chains in ``a.processes`` fresh interpreters, one after
    another (``--ratios-only``): each round's ratios pooled, each process's median, and the
    page faults pooled. A rerun is a new process, and fresh processes' medians differ by more
    than the spread of one process's rounds says."""
    cmd = [sys.executable, __file__, "--batched", "--ratios-only", "--before", a.before]
    cmd += ["--chains", str(c), "--reps", str(a.reps), "--rounds", str(a.rounds)]
    ratios: dict = {}
    medians: dict = {}
    faults: dict = {}
    for _ in range(a.processes):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"a process of --processes failed:\n{done.stderr[-2000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        for name, v in got["ratios"].items():
            ratios.setdefault(name, []).extend(v)
            medians.setdefault(name, []).append(float(np.median(v)))
        for name, v in got["faults"].items():
            faults.setdefault(name, []).extend(v)
    return ratios, medians, faults


def _starts(pot, init, c: int) -> torch.Tensor:
    """The kernel rounds' ``(C, D)`` points: the MLE start plus noise seeded by ``C`` (the
    same in every process)."""
    gen = torch.Generator().manual_seed(c)
    return pot.ravel(init).expand(c, -1) + 0.01 * torch.randn(c, pot.dim, generator=gen)


def _ratio_cell(v: list, medians: list | None) -> str:
    """A kernel's ratio: the median of the rounds with its standard error (within one
    process: the bootstrap's over rounds; over several: the process medians' spread over
    the square root of their number) and its range (of the process medians, or rounds)."""
    if not medians:
        return f"{np.median(v):.3f} +- {median_se(v):.3f} ({min(v):.3f}-{max(v):.3f})"
    se = np.std(medians, ddof=1) / np.sqrt(len(medians))
    return f"{np.median(v):.3f} +- {se:.3f} ({min(medians):.3f}-{max(medians):.3f})"


def batched(a) -> None:
    """Part 3: the batched NUTS against the raw batched gradient and NumPyro (``--batched``)."""
    kernels = {"device tree": nuts_step_batch, f"at {a.before}": _kernel_at(a.before)}
    model, x, y, init, x_test = _default_network()
    pot = _Counted(model, x, y)
    if a.ratios_only:  # a child of _in_processes: its rounds' ratios as one JSON line
        z = _starts(pot, init, a.chains[0])
        ratios, faults = _throughput(kernels, pot, z, 8, a.reps, a.rounds)
        print(json.dumps({"ratios": ratios, "faults": faults}))
        return
    over = (
        f"{a.rounds} interleaved rounds"
        if a.processes == 1
        else f"{a.processes} processes of {a.rounds} interleaved rounds, +- from the processes' "
        "medians (range of those medians)"
    )
    print(
        f"\nbatched NUTS, default's depth-2 network (D = {pot.dim}, N = {len(x)}), max tree "
        f"depth 8, chain-gradients per CPU-second over the raw batched gradient's, median "
        f"+- its standard error (range) of {over}"
    )
    print(f"{'C':>4}  " + "  ".join(f"{k:>30}" for k in kernels))
    for c in a.chains:
        if a.processes > 1:
            ratios, medians, faults = _in_processes(a, c)
        else:
            z = _starts(pot, init, c)
            (ratios, faults), medians = _throughput(kernels, pot, z, 8, a.reps, a.rounds), {}
        cells = (_ratio_cell(v, medians.get(k)) for k, v in ratios.items())
        print(f"{c:>4}  " + "  ".join(f"{x:>30}" for x in cells))
        print(
            "      minor page faults per transition, median (range): "
            + "; ".join(
                f"{k} {np.median(v):.0f} ({min(v):.0f}-{max(v):.0f})" for k, v in faults.items()
            )
        )
    print(f"load average after: {load():.1f}")
    if a.skip_ess:
        return
    _paired_ess(a, model, pot, init, x, y, x_test)


def _pairs(a, target, ours, peer, pred, view=lambda f: f, pairs=None) -> list[dict]:
    """``pairs + 1`` pairs (default ``a.pairs``), ours then the peer's, each pair with seed
    ``k``: pair 0 is the peer's first run (its compilation included), pairs 1.. its compiled
    sampler again. The ESS and R-hat are of ``view(draws)`` (the network's: :func:`_aligned`)."""

    def stats(flat, cpu):
        return ess_cpu(view(flat), cpu, pred(flat))

    def zoo(k):
        flat, cpu = ours(k)
        return {"target": target, "cpu": cpu, "stats": stats(flat, cpu)}

    def numpyro(k):
        r = peer.run(k)
        cpu = float(r["cpu"])
        return {"target": target, "cpu": cpu, "stats": stats(r["flat"], cpu)}

    contenders = {"zoo batched NUTS": zoo}
    if peer is not None:
        contenders["numpyro vectorized"] = numpyro
    return run_pairs(a.pairs if pairs is None else pairs, contenders)


def _paired_ess(a, model, pot, init, x, y, x_test) -> None:
    """ESS per CPU-second of our batched NUTS and NumPyro's, paired and interleaved."""
    rows, dim = [], a.gauss_dim
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(dim, dim)))
    cov = (q * np.logspace(-0.5, 0.5, dim)) @ q.T  # variances 0.32 .. 3.2, rotated
    gpot = GaussianPotential(cov)
    kw = dict(warmup=a.gauss_warmup, draws=a.gauss_draws, chains=a.gauss_chains)
    kw |= dict(max_tree_depth=10, target_accept=0.8, step_size=None, init=None)
    load0 = load()
    peer = None
    if a.numpyro:
        inits = np.stack(
            [gpot.prior_draw(chain_rngs(0, i)[1]).numpy() for i in range(kw["chains"])]
        )
        peer = _Peer(
            a.numpyro, None, torch.zeros(1), torch.zeros(1), {"theta": torch.zeros(dim)},
            kw["warmup"], kw["draws"], 10, kw["chains"], arrays={"cov": cov, "inits": inits},
        )  # fmt: skip
    try:
        ours = lambda k: _run_zoo(nuts_step_batch, gpot, seed=k, **kw)  # noqa: E731
        rows += _pairs(a, f"gaussian {dim}-d", ours, peer, lambda f: None, pairs=a.gauss_pairs)
    finally:
        if peer is not None:
            peer.close()
    kw = dict(warmup=a.bnn_warmup, draws=a.bnn_draws, chains=a.bnn_chains, init=init)
    kw |= dict(max_tree_depth=8, target_accept=0.9, step_size=None)
    peer = None
    if a.numpyro:
        peer = _Peer(
            a.numpyro, model, x, y, init, kw["warmup"], kw["draws"], 8, kw["chains"],
            cfg={"likelihood": "bernoulli", "target_accept": 0.9},
        )  # fmt: skip
    try:
        ours = lambda k: _run_zoo(nuts_step_batch, pot, seed=k, **kw)  # noqa: E731
        pred = lambda f: _predictive(model, pot, f, x_test)  # noqa: E731
        rows += _pairs(a, "default depth 2", ours, peer, pred, lambda f: _aligned(pot, f))
    finally:
        if peer is not None:
            peer.close()
    print(
        f"\n{machine()}; load average {load0:.1f} before the ESS runs, "
        f"{load():.1f} after\n"
        f"ESS_bulk per CPU-second (process CPU time; NumPyro's of its own process): gaussian "
        f"{a.gauss_chains} chains, {a.gauss_warmup}+{a.gauss_draws}, depth 10; default depth 2 "
        f"{a.bnn_chains} chains, {a.bnn_warmup}+{a.bnn_draws}, depth 8, target 0.9, MLE start; "
        f"the network's weights aligned modulo hidden-unit permutations (its ESS and R-hat); "
        f"predictions: p(y=1) at 100 test points. Pair k: seed k on both sides, ours then "
        f"NumPyro's; pair 0 is NumPyro's first run (compilation included), later pairs reuse "
        f"its compiled sampler. An ESS with R-hat > {RHAT_OK} is marked unconverged (*)."
    )
    print_table(rows)
    for target in dict.fromkeys(r["target"] for r in rows):
        print_ratios(
            [r for r in rows if r["target"] == target], "zoo batched NUTS", label=f"{target}, "
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--max-tree-depth", type=int, default=8)
    ap.add_argument("--step-draws", type=int, default=10, help="warm-up = draws in part 1")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (part 1)")
    ap.add_argument("--skip-ess", action="store_true")
    ap.add_argument(
        "--numpyro",
        metavar="PYTHON",
        help="a Python with numpyro and jax (a separate venv) to add NumPyro's NUTS",
    )
    ap.add_argument(
        "--batched",
        action="store_true",
        help="part 3 only: the batched NUTS against the raw batched gradient and NumPyro",
    )
    ap.add_argument("--before", default="main", help="git ref of the kernel to compare (part 3)")
    ap.add_argument("--chains", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--reps", type=int, default=2, help="transitions per round (part 3)")
    ap.add_argument(
        "--processes",
        type=int,
        default=1,
        help="part 3: run the kernel's rounds in this many fresh processes, one after another, "
        "and take the standard error from their medians (what a rerun moves)",
    )
    ap.add_argument("--ratios-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--gauss-dim", type=int, default=50)
    ap.add_argument("--gauss-chains", type=int, default=64)
    ap.add_argument("--gauss-warmup", type=int, default=200)
    ap.add_argument("--gauss-draws", type=int, default=200)
    ap.add_argument("--bnn-chains", type=int, default=16)
    ap.add_argument("--bnn-warmup", type=int, default=100)
    ap.add_argument("--bnn-draws", type=int, default=100)
    ap.add_argument("--pairs", type=int, default=2, help="steady pairs after the first (part 3)")
    ap.add_argument(
        "--gauss-pairs",
        type=int,
        default=None,
        help="the Gaussian's steady pairs (default --pairs)",
    )
    a = ap.parse_args()
    if a.processes < 1:
        ap.error(f"--processes must be at least 1, not {a.processes}")
    torch.set_num_threads(1)
    if a.batched:
        print(machine(), f"; load average {load():.1f}")
        batched(a)
        return
    print(
        f"two-moons BNN depth 2, torch threads 1; part 1: {a.step_draws} warm-up + "
        f"{a.step_draws} draws, max tree depth 6, fastest of {a.rounds} rounds"
    )
    print(f"{'N':>6}  {'configuration':<32} {'ms/step':>8} {'ratio':>6}")
    for n in a.n:
        model, x, y, init = _setup(n)
        times = _per_step(
            model, x, y, init, a.step_draws, a.step_draws, 6, max(10, 20000 // n), a.rounds
        )
        for name, ms in times.items():
            print(f"{n:>6}  {name:<32} {ms:>8.3f} {ms / times['raw']:>6.2f}", flush=True)
    if a.skip_ess:
        return
    model, x, y, init = _setup(1000)
    print(
        f"\nESS_bulk on N=1000, {a.warmup} warm-up + {a.draws} draws, max tree depth "
        f"{a.max_tree_depth}, 1 chain unless named, init = MLE-pretrained weights, "
        f"D = {model.num_params}"
    )
    rows = _ess(model, x, y, init, a.warmup, a.draws, a.max_tree_depth, a.numpyro)
    print(
        f"{'sampler':<26} {'seconds':>8} {'grads/iter':>10} {'min ESS':>8} {'med ESS':>8} "
        f"{'min ESS/s':>9} {'med ESS/s':>9}"
    )
    for name, sec, nsteps, emin, emed in rows:
        print(
            f"{name:<26} {sec:>8.1f} {nsteps:>10.1f} {emin:>8.1f} {emed:>8.1f} "
            f"{emin / sec:>9.3f} {emed / sec:>9.3f}"
        )
    seq, vec = rows[-2:]
    single = [r for r in rows[1:-2] if "chains" not in r[0]]  # one chain, like rows[0]
    multi = [r for r in rows[1:-2] if "chains" in r[0]] + [seq]  # 4 chains, like vec
    for ours, base in [(rows[0], b) for b in single] + [(vec, b) for b in multi]:
        print(
            f"ratio {ours[0]} / {base[0]}: min ESS/s {ours[3] / ours[1] / (base[3] / base[1]):.2f}"
            f", median ESS/s {ours[4] / ours[1] / (base[4] / base[1]):.2f}"
        )


if __name__ == "__main__":
    main()
