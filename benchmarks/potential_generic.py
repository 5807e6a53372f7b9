"""The generic ``torch.func`` potential against the hand-written MLP one, per chain-gradient.

One command measures side by side, in interleaved rounds (the fastest round counts), the
seconds of one batched value-and-gradient of ``C`` chains, divided by ``C``::

    python benchmarks/potential_generic.py [--n 1000] [--chains 1 16 64] [--rounds 5]
                                           [--threads 1]

Rows, each at every ``C`` of ``--chains``, as chain-gradients per second and as a ratio to the
hand-written potential (``> 1``: the generic one is faster):

- ``mlp``: the depth-2 two-moons MLP of ``specs/two_moons_depth.yaml`` at the paper's
  1000-parameter budget (2-21-21-2, D = 569), ``--n`` training points, two logits: :meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch` (the
  hand-written batched MLP, ``baddbmm`` per layer) against
  :class:`~zoo.inference.mcmc.functional.ModulePotential` with ``grad="autograd"`` (vmapped
  energy, one backward) and ``grad="func"`` (``vmap(grad_and_value)``), same weights.
- ``lenet``: a small LeNet (one 3x3 convolution of 4 filters, 2x2 pool, dense 16) on
  ``--n`` 8x8 images, 10 classes: the generic potential only (there is no hand-written
  one): ``grad="autograd"`` with all chains in one vmapped call, ``func``, and ``autograd``
  with the chains vmapped 8 at a time (``chunk=8``), the last two over the first.

Not a test: absolute numbers depend on the machine (named in the table's head); compare the
ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chees import machine  # noqa: E402

from zoo.inference.mcmc.functional import ModulePotential  # noqa: E402
from zoo.inference.mcmc.potential import FlatPotential  # noqa: E402
from zoo.models.lenet import BayesianLeNet  # noqa: E402
from zoo.models.likelihoods import CategoricalLikelihood  # noqa: E402
from zoo.models.mlp import BayesianMLP  # noqa: E402


def _seconds(pot, z: torch.Tensor, reps: int) -> float:
    """Seconds of one batched value-and-gradient of the rows of ``z`` (mean of ``reps``)."""
    t0 = time.perf_counter()
    for _ in range(reps):
        pot.value_and_grad_batch(z)
    return (time.perf_counter() - t0) / reps


def _race(pots: dict[str, object], dim: int, chains: int, rounds: int) -> dict[str, float]:
    """Chain-gradients per second of each potential at ``chains`` rows, fastest round."""
    z = 0.1 * torch.randn(chains, dim, generator=torch.Generator().manual_seed(chains))
    for p in pots.values():  # warm
        p.value_and_grad_batch(z)
    first = next(iter(pots.values()))
    reps = max(1, int(0.05 / max(_seconds(first, z, 1), 1e-6)))
    best = dict.fromkeys(pots, float("inf"))
    for _ in range(rounds):
        for name, p in pots.items():
            best[name] = min(best[name], _seconds(p, z, reps))
    return {name: chains / s for name, s in best.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.n, 2, generator=g)
    y = (x[:, 0] * x[:, 1] > 0).long()
    mlp = BayesianMLP(2, [21, 21], CategoricalLikelihood(2))
    pots = {
        "hand": FlatPotential(mlp, x, y),
        "autograd": ModulePotential(mlp, x, y, grad="autograd"),
        "func": ModulePotential(mlp, x, y, grad="func"),
    }
    xi = torch.randn(args.n, 64, generator=g)
    yi = torch.randint(0, 10, (args.n,), generator=g)
    lenet = BayesianLeNet(64, CategoricalLikelihood(10), conv=(4,), dense=16)
    lpots = {
        "autograd": ModulePotential(lenet, xi, yi, grad="autograd"),
        "func": ModulePotential(lenet, xi, yi, grad="func"),
        "chunk8": ModulePotential(lenet, xi, yi, chunk=8),
    }
    print(machine())
    print(f"torch threads {args.threads}; N = {args.n}; chain-gradients per second (fastest of")
    print(f"{args.rounds} interleaved rounds); ratio = generic / hand-written")
    print()
    d_mlp, d_lenet = pots["hand"].dim, lpots["autograd"].dim
    print(
        "| network | C | hand-written | generic autograd | generic func | autograd/hand | func/hand |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for c in args.chains:
        r = _race(pots, d_mlp, c, args.rounds)
        print(
            f"| mlp D={d_mlp} | {c} | {r['hand']:.3g} | {r['autograd']:.3g} | {r['func']:.3g} "
            f"| {r['autograd'] / r['hand']:.2f} | {r['func'] / r['hand']:.2f} |"
        )
    print()
    print(
        "| network | C | generic autograd | func | autograd chunk=8 | func/autograd | chunk/autograd |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for c in args.chains:
        r = _race(lpots, d_lenet, c, args.rounds)
        print(
            f"| lenet D={d_lenet} | {c} | {r['autograd']:.3g} | {r['func']:.3g} "
            f"| {r['chunk8']:.3g} | {r['func'] / r['autograd']:.2f} "
            f"| {r['chunk8'] / r['autograd']:.2f} |"
        )


if __name__ == "__main__":
    main()
