"""The per-call floor of the MLP potential: autograd, its formulas replayed, and a hand-written backward.

One command measures, side by side in interleaved rounds (the fastest counts), process CPU
microseconds per call of :class:`~zoo.inference.mcmc.potential.FlatPotential` on the default
spec's network (``specs/two_moons_depth.yaml`` at depth 2: ReLU, one-logit Bernoulli, a
100-parameter budget, D = 85) at each ``--n`` training points, and prints one table of
ratios headed by the machine::

    python benchmarks/potential_floor.py [--n 500 10000] [--chains 1 16 64] [--rounds 5]

Rows (``ours`` / ``baseline`` = ``ratio``):

- ``value_and_grad replay / autograd``: one chain, ``value_and_grad(z)`` of ``D`` floats
  (on this network the replay of a batch of one: the batched layout and autograd's
  formulas without a graph) over autograd of the one-chain energy (``_energy``, one
  ``F.linear`` per layer on ``(N, units)``; what ``value_and_grad`` ran before);
- ``value_and_grad hand / replay``: one chain with ``hand_backward=True`` (the batched
  layout, backpropagation written out, other rounding) over the replay;
- ``batch C replay / autograd``: ``(C, D)`` rows at each ``--chains``, ``value_and_grad_batch``
  (on this network autograd's derivative formulas called without a graph,
  :mod:`zoo.inference.mcmc.replay`; the same bits) over autograd of the same batched energy
  (``torch.autograd.grad`` of ``_energy_batch``, what ``value_and_grad_batch`` ran before);
- ``batch C hand / replay``: the hand-written pass (``_hand_value_and_grad``, other
  rounding) over ``value_and_grad_batch``;
- ``value_and_grad replay / batch 1 replay``: what one chain's call adds to the batch of
  one it runs (a view and a read of ``u``).

Not a test: numbers depend on the machine; compare the ratios. One torch thread.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chees import machine  # noqa: E402

import zoo.data  # noqa: E402
import zoo.models  # noqa: E402
from zoo.execution.worker_start import keep_freed_memory
from zoo.inference.mcmc.potential import FlatPotential  # noqa: E402
from zoo.runtime import Runtime  # noqa: E402
from zoo.spec import load_spec  # noqa: E402


def _pots(n: int) -> tuple[FlatPotential, FlatPotential]:
    over = ["sweep.model.depth=[2]", "sweep.seed=[0]", f"data.n_train={n}"]
    spec = load_spec("specs/two_moons_depth.yaml", over).cells()[0].spec
    ds = zoo.data.load(spec.data, spec.seed)
    model = zoo.models.build(spec, ds)
    data = ds.to_torch(Runtime.cpu())
    x, y = data.x_train, data.y_train
    return FlatPotential(model, x, y), FlatPotential(model, x, y, hand_backward=True)


def _autograd_batch(pot: FlatPotential, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``value_and_grad_batch`` by autograd: the gradient of the batched energy's sum."""
    z = z.detach().requires_grad_(True)
    u = pot._energy_batch(z)
    (g,) = torch.autograd.grad(u.sum(), z)
    return u.detach().double() + pot._offset, g


def _autograd_one(pot: FlatPotential, z: torch.Tensor) -> tuple[float, torch.Tensor]:
    """``value_and_grad`` by autograd: the gradient of the one-chain energy."""
    z = z.detach().requires_grad_(True)
    u = pot._energy(z)
    (g,) = torch.autograd.grad(u, z)
    return u.item() + pot._offset, g


def _us(fn, reps: int) -> float:
    t0 = time.process_time()
    for _ in range(reps):
        fn()
    return 1e6 * (time.process_time() - t0) / reps


def _rows(n: int, chains: list[int], rounds: int) -> tuple[list[tuple], int]:
    """The rows of one data size (module docstring) and D."""
    ref, hand = _pots(n)
    gen = torch.Generator().manual_seed(0)
    z = 0.5 * torch.randn(max(chains), ref.dim, generator=gen)
    reps = max(2, 200000 // (n * 20))
    one = z[0].clone()
    cases = {
        "one": (
            lambda: _autograd_one(ref, one),
            lambda: ref.value_and_grad(one),
            lambda: hand.value_and_grad(one),
        )
    }
    for c in chains:
        zc = z[:c].contiguous()
        cases[c] = (
            lambda zc=zc: _autograd_batch(ref, zc),
            lambda zc=zc: ref.value_and_grad_batch(zc),
            lambda zc=zc: hand._hand_value_and_grad(zc),
        )
    best = {k: [float("inf")] * len(fns) for k, fns in cases.items()}
    for _ in range(rounds):
        for k, fns in cases.items():
            best[k] = [min(b, _us(f, reps)) for b, f in zip(best[k], fns, strict=True)]
    rows = [
        ("value_and_grad replay / autograd", n, 1, best["one"][1], best["one"][0]),
        ("value_and_grad hand / replay", n, 1, best["one"][2], best["one"][1]),
    ]
    for c in chains:
        rows.append(("batch C replay / autograd", n, c, best[c][1], best[c][0]))
        rows.append(("batch C hand / replay", n, c, best[c][2], best[c][1]))
    if 1 in best:
        rows.append(("value_and_grad replay / batch 1 replay", n, 1, best["one"][1], best[1][1]))
    return rows, ref.dim


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[500, 10000])
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    keep_freed_memory()  # as every cell runs (benchmarks/malloc.py)
    print(machine())
    rows, dim = [], 0
    for n in a.n:
        r, dim = _rows(n, a.chains, a.rounds)
        rows += r
    print(f"default network (depth 2, ReLU, Bernoulli), D = {dim}; us per call, 1 thread")
    w = max(len(r[0]) for r in rows)
    print(f"{'what':<{w}} {'N':>6} {'C':>3} {'ours us':>9} {'base us':>9} {'ratio':>6}")
    for what, n, c, ours, base in rows:
        print(f"{what:<{w}} {n:>6} {c:>3} {ours:>9.1f} {base:>9.1f} {ours / base:>6.2f}")


if __name__ == "__main__":
    main()
