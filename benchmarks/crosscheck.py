"""Ours against the reference implementations: NUTS, ChEES, MCLMC and MAMS of the zoo beside
BlackJAX's MCLMC and ChEES and NumPyro's vectorized NUTS, on the same network, data, start
and chain count, one table.

    python benchmarks/crosscheck.py [--n 200] [--budget 100] [--chains 4] [--warmup 300]
                                    [--draws 300] [--max-tree-depth 6]
                                    [--peers PYTHON]

The network is ``benchmarks/nuts.py``'s (``specs/two_moons_depth.yaml`` at depth 2, a
2-logit softmax, ``--budget`` parameters, ``--n`` training points), every chain starting at
its MLE-pretrained weights. The peers run in another interpreter (``--peers``, a venv with
jax, numpyro and blackjax, never the project's; the rows are left out with a message when it
is absent), on the CPU with one XLA thread as ours use one torch thread:

- BlackJAX 1.7.1 MCLMC: ``mclmc_find_L_and_step_size`` (diagonal preconditioning) with
  ``num_steps = 3 * warmup`` so that its three tuning windows take about ``warmup`` steps as
  ours do, vmapped over the chains, then ``draws`` steps of the tuned kernel;
- BlackJAX ChEES: ``chees_adaptation(...).run`` for ``warmup`` steps (Adam at 0.025, the
  docs' example), then ``draws`` steps of ``dynamic_hmc`` with the adapted parameters;
- NumPyro's NUTS, ``chain_method="vectorized"`` (``benchmarks/nuts.py``'s script), at the
  same ``--max-tree-depth`` as ours.

Columns, per method: seconds of the whole run (warm-up and draws; JAX's include its
compilation), sampling-phase gradients per chain and draw (leapfrog steps; two per MCLMC or
MAMS step, McLachlan's scheme), the bulk ESS of the weights (minimum and median over the
parameters) and of the predictions (median over the class-1 probabilities at 50 test
points), each per 1000 sampling-phase gradients and per second, and the gate: the largest
nested R-hat (Margossian et al. 2024; arviz-stats, two superchains of half the chains each)
over weights and predictions, ``ok`` at <= 1.05. ESS numbers of a row that fails the gate
are not comparable. The machine is shared: times are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from arviz_stats.base import array_stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chees import _predictive, machine  # noqa: E402
from nuts import _NUMPYRO, _setup  # noqa: E402

from zoo.inference.mcmc.potential import FlatPotential  # noqa: E402
from zoo.inference.mcmc.samplers import (  # noqa: E402
    run_chees,
    run_mams,
    run_mclmc,
    run_nuts,
)

_BLACKJAX = r"""
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp, optax, blackjax
from jax.scipy.stats import norm
data, cfg = np.load(sys.argv[1]), json.loads(sys.argv[2])
names, shapes, priors = cfg["names"], cfg["shapes"], cfg["priors"]
sizes = [int(np.prod(shapes[n])) for n in names]
x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"])
def logdensity(z):
    p, i, lp = {}, 0, 0.0
    for n, k in zip(names, sizes):
        p[n] = z[i:i + k].reshape(shapes[n]); i += k
        lp += norm.logpdf(p[n], *priors[n]).sum()
    h, depth = x, len(names) // 2 - 1
    for j in range(depth + 1):
        h = h @ p[f"layer{j}.weight"].T + p[f"layer{j}.bias"]
        h = jax.nn.relu(h) if j < depth else h
    return lp + jnp.take_along_axis(jax.nn.log_softmax(h), y[:, None], 1).sum()
C, W, S = cfg["chains"], cfg["warmup"], cfg["draws"]
z0 = jnp.broadcast_to(jnp.asarray(data["z0"]), (C, data["z0"].shape[0]))
out = {}
# MCLMC: BlackJAX's tuning per chain (vmapped), then S steps
t0 = time.perf_counter()
kernel = blackjax.mcmc.mclmc.build_kernel()
def tune_and_sample(z, key):
    k1, k2, k3 = jax.random.split(key, 3)
    st = blackjax.mcmc.mclmc.init(z, logdensity, k1)
    st, params, _ = blackjax.mclmc_find_L_and_step_size(
        mclmc_kernel=kernel, num_steps=3 * W, state=st, rng_key=k2, logdensity_fn=logdensity,
        diagonal_preconditioning=True)
    alg = blackjax.mclmc(logdensity, L=params.L, step_size=params.step_size,
                         inverse_mass_matrix=params.inverse_mass_matrix)
    def step(s, k):
        s, _ = alg.step(k, s)
        return s, s.position
    _, zs = jax.lax.scan(step, st, jax.random.split(k3, S))
    return zs
zs = jax.block_until_ready(jax.jit(jax.vmap(tune_and_sample))(z0, jax.random.split(jax.random.PRNGKey(0), C)))
out["mclmc"] = (np.asarray(zs), time.perf_counter() - t0, 2.0)
# ChEES: the adaptation on all chains, then S steps of dynamic HMC
t0 = time.perf_counter()
warm = blackjax.chees_adaptation(logdensity, C)
k1, k2 = jax.random.split(jax.random.PRNGKey(1))
(states, params), _ = warm.run(k1, z0, 0.1, optax.adam(0.025), W)
alg = blackjax.dynamic_hmc(logdensity, **params)
def step(s, k):
    s, info = jax.vmap(alg.step)(jax.random.split(k, C), s)
    return s, (s.position, info.num_integration_steps)
_, (zs, nsteps) = jax.lax.scan(step, states, jax.random.split(k2, S))
zs = jax.block_until_ready(zs)
out["chees"] = (np.swapaxes(np.asarray(zs), 0, 1), time.perf_counter() - t0, float(np.mean(nsteps)))
np.savez(sys.argv[3], **{f"{k}_{i}": v[i] for k, v in out.items() for i in range(3)})
"""


def _peers(python: str, script: str, init: dict, priors: dict, x, y, cfg: dict) -> dict:
    """Run ``script`` in the peers' interpreter; its ``.npz`` back as a dict."""
    names = list(init)
    cfg = dict(
        cfg,
        names=names,
        shapes={n: list(init[n].shape) for n in names},
        priors={n: priors[n] for n in names},
    )
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        JAX_ENABLE_X64="0",
        XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    )
    with tempfile.TemporaryDirectory() as d:
        arrays = {f"init{i}": init[n].numpy() for i, n in enumerate(names)}
        z0 = np.concatenate([init[n].numpy().reshape(-1) for n in names])
        np.savez(f"{d}/in.npz", x=x.numpy(), y=y.numpy(), z0=z0, **arrays)
        subprocess.run(
            [python, "-c", script, f"{d}/in.npz", json.dumps(cfg), f"{d}/out.npz"],
            check=True,
            env=env,
        )
        return dict(np.load(f"{d}/out.npz"))


def _row(model, pot, flat: np.ndarray, seconds: float, grads: float, x_test) -> tuple:
    """Per 1000 gradients and per second: min and median bulk ESS of the weights, median
    of the predictions; and the largest nested R-hat over weights and predictions."""
    c, s, _ = flat.shape
    flat = flat.astype(np.float64)
    pred = _predictive(model, pot, flat, x_test)
    ess = array_stats.ess(flat, chain_axis=0, draw_axis=1, method="bulk")
    ess_pred = np.nanmedian(array_stats.ess(pred, chain_axis=0, draw_axis=1, method="bulk"))
    ids = [0] * (c // 2) + [1] * (c - c // 2)
    nested = max(
        float(np.nanmax(array_stats.rhat_nested(a, ids, chain_axis=0, draw_axis=1)))
        for a in (flat, pred)
    )
    total = grads * c * s / 1000
    stats = (ess.min(), np.median(ess), ess_pred)
    return (seconds, grads, *(e / total for e in stats), *(e / seconds for e in stats), nested)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--max-tree-depth", type=int, default=6)
    ap.add_argument("--peers", default=None, help="python of a venv with jax, numpyro, blackjax")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model, x, y, init = _setup(a.n, a.budget)
    x_test = torch.linspace(-1.5, 2.5, 50).unsqueeze(1) * torch.tensor([[1.0, 0.5]])
    pot = FlatPotential(model, x, y)
    print(machine())
    print(
        f"D = {pot.dim} parameters, N = {a.n}, {a.chains} chains, {a.warmup} warm-up + {a.draws} draws"
    )
    kw = dict(seed=0, warmup=a.warmup, draws=a.draws, chains=a.chains, step_size=None, init=init)
    rows: dict[str, tuple] = {}
    runs = {
        "zoo NUTS (vectorized)": lambda: run_nuts(
            pot,
            target_accept=0.8,
            max_tree_depth=a.max_tree_depth,
            mass_matrix="diag",
            vectorize_chains=True,
            **kw,
        ),
        "zoo ChEES": lambda: run_chees(pot, target_accept=0.651, max_leapfrog=256, **kw),
        "zoo MCLMC": lambda: run_mclmc(pot, **kw),
        "zoo MAMS": lambda: run_mams(pot, **kw),
    }
    for name, run in runs.items():
        t0 = time.perf_counter()
        res = run()
        sec = time.perf_counter() - t0
        rows[name] = _row(model, pot, res.flat, sec, res.n_steps_mean, x_test)
    cfg = dict(chains=a.chains, warmup=a.warmup, draws=a.draws, depth=a.max_tree_depth)
    if a.peers and Path(a.peers).exists():
        bj = _peers(a.peers, _BLACKJAX, init, model.prior_params, x, y, cfg)
        for k, label in (("mclmc", "BlackJAX MCLMC"), ("chees", "BlackJAX ChEES")):
            flat, sec, grads = bj[f"{k}_0"], float(bj[f"{k}_1"]), float(bj[f"{k}_2"])
            rows[label] = _row(model, pot, flat, sec, grads, x_test)
        npy = _peers(a.peers, _NUMPYRO, init, model.prior_params, x, y, cfg)
        rows["NumPyro NUTS (vectorized)"] = _row(
            model, pot, npy["flat"], float(npy["seconds"]), float(npy["steps"].mean()), x_test
        )
    else:
        print(f"(no peers' interpreter at {a.peers!r}: BlackJAX and NumPyro rows left out)")
    head = (
        "| method | s | grads/draw | ESS/1k grads min / med / pred | ESS/s min / med / pred "
        "| nested R-hat | gate |"
    )
    print(head)
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, r in rows.items():
        sec, g, *e, nested = r
        print(
            f"| {name} | {sec:.1f} | {g:.1f} | {e[0]:.2f} / {e[1]:.2f} / {e[2]:.2f} | "
            f"{e[3]:.2f} / {e[4]:.2f} / {e[5]:.2f} | {nested:.3f} | "
            f"{'ok' if nested <= 1.05 else 'FAIL'} |"
        )


if __name__ == "__main__":
    main()
