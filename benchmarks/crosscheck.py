"""Ours against the reference implementations: NUTS, ChEES, MCLMC and MAMS of the zoo beside
BlackJAX's MCLMC and ChEES and NumPyro's vectorized NUTS, on the same network, data, start
and chain count, paired, one table.

    python benchmarks/crosscheck.py [--n 200] [--budget 100] [--chains 4] [--warmup 300]
                                    [--draws 300] [--max-tree-depth 6] [--pairs 1]
                                    [--peers PYTHON]

The network is ``benchmarks/nuts.py``'s (``specs/two_moons_depth.yaml`` at depth 2, a
2-logit softmax, ``--budget`` parameters, ``--n`` training points), every chain starting at
its MLE-pretrained weights. The peers run in another interpreter (``--peers``, a venv with
jax, numpyro and blackjax, never the project's; the rows are left out with a message when it
is absent), on the CPU with one XLA thread as ours use one torch thread, each kept running
(``benchmarks/_paired.py``) so that it compiles once:

- BlackJAX 1.7.1 MCLMC (``benchmarks/blackjax_chees.py``, mode ``mclmc``):
  ``mclmc_find_L_and_step_size`` (diagonal preconditioning) with ``num_steps = 3 * warmup``
  so that its three tuning windows take about ``warmup`` steps as ours do, vmapped over the
  chains, then ``draws`` steps of the tuned kernel;
- BlackJAX ChEES (the same script, mode ``adapt``): ``chees_adaptation(...).run`` for
  ``warmup`` steps (Adam at 0.025, the docs' example; initial step 0.1), then ``draws``
  steps of ``dynamic_hmc`` with the adapted parameters;
- NumPyro's NUTS vectorized over the chains (``benchmarks/nuts.py``'s peer), at the same
  ``--max-tree-depth`` as ours.

Paired: pair ``k`` runs every method with seed ``k`` in turn (interleaved, so load drift
falls on all alike); pair 0 holds the peers' first runs (JIT compilation included), pairs
1 .. ``--pairs`` their compiled samplers. Columns, per method and pair: process CPU seconds
of the whole run (warm-up and draws; each peer's of its own process), sampling-phase
gradients per chain and draw (leapfrog steps; two per MCLMC or MAMS step, McLachlan's
scheme), the bulk ESS of the weights (minimum and median over the parameters) and of the
predictions (median over the class-1 probabilities at 50 test points), each per 1000
sampling-phase gradients and per CPU-second, and the gate: the largest nested R-hat
(Margossian et al. 2024; arviz-stats, two superchains of half the chains each) over weights
and predictions, ``ok`` at <= 1.05. Then ours over the peer of the same method, ESS per
CPU-second, first run and steady (median and range over pairs) apart. ESS numbers of a row
that fails the gate are not comparable. The machine and its load average are printed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from arviz_stats.base import array_stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paired import Peer, load, machine, print_ratios, run_pairs  # noqa: E402
from chees import BLACKJAX  # noqa: E402
from nuts import _Peer, _predictive, _setup  # noqa: E402

from zoo.inference.mcmc.potential import FlatPotential  # noqa: E402
from zoo.inference.mcmc.samplers import (  # noqa: E402
    run_chees,
    run_mams,
    run_mclmc,
    run_nuts,
)


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


#: Ours over the peer of the same method, the pairs whose ratios are printed
MATCHES = {
    "zoo NUTS (vectorized)": "NumPyro NUTS (vectorized)",
    "zoo ChEES": "BlackJAX ChEES",
    "zoo MCLMC": "BlackJAX MCLMC",
}

#: The nested R-hat gate: an ESS of a row above it is not comparable
GATE = 1.05


def _peer_runs(python: str, model, x, y, init, a) -> tuple[dict, list]:
    """The peers' contenders (BlackJAX's MCLMC and ChEES, NumPyro's vectorized NUTS), each
    kept running in the peers' interpreter: ``(name -> fn(seed) -> (flat, cpu, grads per
    draw)), the peers to close``."""
    names = list(init)
    arrays = {f"init{i}": init[n].numpy() for i, n in enumerate(names)}
    arrays |= dict(x=x.numpy(), y=y.numpy())
    cfg = {
        "kind": "bnn", "names": names, "chains": a.chains, "warmup": a.warmup,
        "draws": a.draws, "shapes": {n: list(init[n].shape) for n in names},
        "priors": {n: model.prior_params[n] for n in names},
    }  # fmt: skip
    mclmc = Peer(python, [str(BLACKJAX)], arrays, dict(cfg, mode="mclmc"))
    chees = dict(cfg, mode="adapt", step_size=0.1, lr=0.025, target_accept=0.651)
    chees = Peer(python, [str(BLACKJAX)], arrays, dict(chees, max_leapfrog=1000))
    npy = _Peer(python, model, x, y, init, a.warmup, a.draws, a.max_tree_depth, a.chains)

    def blackjax(peer):
        def run(k):
            r = peer.run(k)
            return r["flat"], float(r["cpu"]), int(r["draw_steps"]) / a.draws

        return run

    def numpyro(k):
        r = npy.run(k)
        return r["flat"], float(r["cpu"]), float(r["steps"].mean())

    runs = {
        "BlackJAX MCLMC": blackjax(mclmc),
        "BlackJAX ChEES": blackjax(chees),
        "NumPyro NUTS (vectorized)": numpyro,
    }
    return runs, [mclmc, chees, npy]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--max-tree-depth", type=int, default=6)
    ap.add_argument("--pairs", type=int, default=1, help="steady pairs after the first")
    ap.add_argument("--peers", default=None, help="python of a venv with jax, numpyro, blackjax")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model, x, y, init = _setup(a.n, a.budget)
    x_test = torch.linspace(-1.5, 2.5, 50).unsqueeze(1) * torch.tensor([[1.0, 0.5]])
    pot = FlatPotential(model, x, y)
    print(machine(), f"; load average {load():.1f}")
    print(
        f"D = {pot.dim} parameters, N = {a.n}, {a.chains} chains, {a.warmup} warm-up + "
        f"{a.draws} draws, {a.pairs + 1} pairs"
    )
    kw = dict(warmup=a.warmup, draws=a.draws, chains=a.chains, step_size=None, init=init)
    ours = {
        "zoo NUTS (vectorized)": lambda k: run_nuts(
            pot,
            seed=k,
            target_accept=0.8,
            max_tree_depth=a.max_tree_depth,
            mass_matrix="diag",
            vectorize_chains=True,
            **kw,
        ),
        "zoo ChEES": lambda k: run_chees(pot, seed=k, target_accept=0.651, max_leapfrog=256, **kw),
        "zoo MCLMC": lambda k: run_mclmc(pot, seed=k, **kw),
        "zoo MAMS": lambda k: run_mams(pot, seed=k, **kw),
    }

    def zoo(run):
        def timed(k):
            t0 = time.process_time()
            res = run(k)
            return res.flat, time.process_time() - t0, res.n_steps_mean

        return timed

    runs, peers = {name: zoo(run) for name, run in ours.items()}, []
    if a.peers and Path(a.peers).exists():
        theirs, peers = _peer_runs(a.peers, model, x, y, init, a)
        runs |= theirs
    else:
        print(f"(no peers' interpreter at {a.peers!r}: BlackJAX and NumPyro rows left out)")

    def contender(run):
        def one(k):
            flat, cpu, grads = run(k)
            return {"row": _row(model, pot, flat, cpu, grads, x_test)}

        return one

    load0 = load()
    try:
        rows = run_pairs(a.pairs, {name: contender(run) for name, run in runs.items()})
    finally:
        for p in peers:
            p.close()
    print(
        f"load average {load0:.1f} before the paired runs, {load():.1f} after; pair k: seed k "
        f"on every side in turn, pair 0 holds the peers' first runs (JIT compilation "
        f"included), later pairs their compiled samplers; process CPU seconds on every side"
    )
    head = (
        "| method | pair | CPU s | grads/draw | ESS/1k grads min / med / pred "
        "| ESS/CPU-s min / med / pred | nested R-hat | gate |"
    )
    print(head)
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        sec, g, *e, nested = r["row"]
        print(
            f"| {r['sampler']} | {r['pair']} | {sec:.3g} | {g:.1f} | "
            f"{e[0]:.2f} / {e[1]:.2f} / {e[2]:.2f} | {e[3]:.2f} / {e[4]:.2f} / {e[5]:.2f} | "
            f"{nested:.3f} | {'ok' if nested <= GATE else 'FAIL'} |"
        )
    for mine, peer in MATCHES.items():
        pair = [r for r in rows if r["sampler"] in (mine, peer)]
        if any(r["sampler"] == peer for r in pair):
            print_ratios(
                pair, mine, lambda r: r["row"][5:8], "ESS/CPU-s min / median / predictions",
                lambda r: r["row"][-1], GATE,
            )  # fmt: skip


if __name__ == "__main__":
    main()
