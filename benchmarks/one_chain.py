"""One-chain NUTS (the kernel every sampler runs unless ``vectorize_chains``) on the replayed
gradient of a batch of one against autograd through ``F.linear``, paired.

One command runs, in interleaved rounds, ``--transitions`` transitions of
:func:`zoo.inference.mcmc.kernel.nuts_step` (unit metric, a fixed step size, the same seeds)
from the same start twice: once with
:meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad` as the run path computes
it (on these networks the batched replay of a batch of one,
:func:`zoo.inference.mcmc.replay.replays_one`), once with the potential's one-chain autograd
path (``_energy``: one ``F.linear`` per layer on ``(N, units)`` activations, what
``value_and_grad`` ran before). It prints process CPU microseconds per gradient (the
transition's CPU over its leapfrog steps; median over rounds) and their ratio, and how far the
two runs' positions are apart after their first transition (the two gradients differ by
rounding; a trajectory carries it on)::

    python benchmarks/one_chain.py [--rounds 5] [--transitions 5]

Networks: the default spec's depth-2 network (ReLU, one-logit Bernoulli, D = 85) on its 500
points and on 10,000; the paper-size depth-2 network of ``benchmarks/nuts.py`` (two logits,
D = 954) on 10,000 points.

Not a test: numbers depend on the machine; compare the ratios. One torch thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chees import machine  # noqa: E402
from nuts import _setup  # noqa: E402
from potential_floor import _pots  # noqa: E402

from zoo.execution.worker_start import keep_freed_memory  # noqa: E402
from zoo.inference.mcmc.kernel import Metric, new_point, nuts_step  # noqa: E402
from zoo.inference.mcmc.potential import FlatPotential  # noqa: E402


def _networks() -> list[tuple[str, FlatPotential, FlatPotential, torch.Tensor, float]]:
    """(name, replayed potential, autograd potential, start, step size) per network."""
    out = []
    for n, eps in ((500, 0.02), (10000, 0.004)):
        pot = _pots(n)[0]
        gen = torch.Generator().manual_seed(0)
        z = 0.5 * torch.randn(pot.dim, generator=gen)
        out.append((f"default depth 2, N = {n}", pot, z, eps))
    model, x, y, init = _setup(10000)
    pot = FlatPotential(model, x, y)
    out.append(("paper-size depth 2, N = 10000", pot, pot.ravel(init), 0.002))
    rows = []
    for name, pot, z, eps in out:
        ref = FlatPotential(pot.model, pot.x, pot.y)
        ref._own_energy = False  # value_and_grad by autograd of _energy, as before the replay
        rows.append((name, pot, ref, z, eps))
    return rows


def _run(pot: FlatPotential, z: torch.Tensor, eps: float, transitions: int):
    """CPU microseconds per gradient over ``transitions`` NUTS transitions, and the
    position after the first."""
    metric = Metric({("z",): torch.ones(pot.dim)}, {("z",): slice(None)})
    gen, rng = torch.Generator().manual_seed(1), np.random.default_rng(1)
    u, g = pot.value_and_grad(z)
    steps, first = 0, None
    t0 = time.process_time()
    for _ in range(transitions):
        p, stats = nuts_step(pot, metric, new_point(pot, metric, z, u, g, gen), eps, 8, rng)
        z, u, g = p.z, p.potential, p.g
        steps += stats["n_steps"]
        first = z if first is None else first
    return 1e6 * (time.process_time() - t0) / steps, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--transitions", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    keep_freed_memory()  # as every cell runs (benchmarks/malloc.py)
    print(machine())
    nets = _networks()
    times = {name: ([], []) for name, *_ in nets}
    apart = {}
    for _ in range(a.rounds):
        for name, pot, ref, z, eps in nets:
            (t1, z1), (t0, z0) = (_run(p, z, eps, a.transitions) for p in (pot, ref))
            times[name][0].append(t1)
            times[name][1].append(t0)
            apart[name] = float((z1 - z0).abs().max())
    print("one-chain NUTS, CPU us per gradient (median of rounds), 1 thread")
    w = max(len(n) for n in times)
    print(f"{'network':<{w}} {'replay':>9} {'autograd':>9} {'ratio':>6} {'|dz| after 1':>12}")
    for name, (ours, base) in times.items():
        m1, m0 = statistics.median(ours), statistics.median(base)
        print(f"{name:<{w}} {m1:>9.1f} {m0:>9.1f} {m1 / m0:>6.2f} {apart[name]:>12.1e}")


if __name__ == "__main__":
    main()
