"""CPU time of ``guides.psis_khat`` against Pyro's ``psis_diagnostic`` on a model that
broadcasts over a batch of draws.

Bayesian linear regression (``--n`` points, ``--d`` weights, N(0, 1) prior, Normal noise),
``w`` one vectorized site, the data in a plate; the guide an ``AutoNormal`` set near the
posterior by 200 SVI steps. Each configuration computes the k-hat of ``--draws`` draws:

- ``guides.psis_khat`` (default: vectorized over the draws in a ``pyro.plate``),
- ``guides.psis_khat(vectorize=False)`` (one guide and model run per draw: what a
  ``PyroModule`` network of ``nn.Linear`` layers gets),
- ``pyro.infer.importance.psis_diagnostic`` (``num_particles = max_simultaneous_particles
  = draws``).

Paired: each round times every configuration once, in turn, by the process's CPU time
(``time.process_time``); the first round (caches, lazy imports) is reported apart from the
median of the later ones (steady). The machine (CPU model, cores, torch threads) is printed
with the numbers::

    python benchmarks/psis.py [--rounds 7] [--draws 1000] [--n 500] [--d 20] [--threads 1]

Not a test: numbers depend on the machine; the ratio to Pyro's is what to compare.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.infer.importance import psis_diagnostic

from guides.checks import psis_khat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chees import machine  # noqa: E402


def model(x: torch.Tensor, y: torch.Tensor) -> None:
    """y ~ N(x w, 0.5), w ~ N(0, I): ``(x * w).sum(-1)`` broadcasts over a batch of draws."""
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal((x * w).sum(-1), 0.5), obs=y)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--d", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(a.n, a.d, generator=gen)
    y = x @ torch.randn(a.d, generator=gen) + 0.5 * torch.randn(a.n, generator=gen)
    pyro.set_rng_seed(0)
    guide = AutoNormal(model)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    for _ in range(200):
        svi.step(x, y)
    configs: dict[str, Callable[[], float]] = {
        "guides.psis_khat (vectorized)": lambda: (
            psis_khat(model, guide, x, y, num_samples=a.draws, seed=0).khat
        ),
        "guides.psis_khat(vectorize=False)": lambda: (
            psis_khat(model, guide, x, y, num_samples=a.draws, seed=0, vectorize=False).khat
        ),
        "pyro psis_diagnostic": lambda: float(
            psis_diagnostic(
                model,
                guide,
                x,
                y,
                num_particles=a.draws,
                max_simultaneous_particles=a.draws,
                max_plate_nesting=1,
            )
        ),
    }
    times: dict[str, list[float]] = {k: [] for k in configs}
    khats: dict[str, float] = {}
    for _ in range(a.rounds):
        for name, fn in configs.items():
            t = time.process_time()
            khats[name] = fn()
            times[name].append(time.process_time() - t)
    print(f"{machine()}; {torch.get_num_threads()} torch thread(s)")
    print(f"model: linear regression, n={a.n}, d={a.d}; {a.draws} draws; {a.rounds} rounds")
    pyro_steady = statistics.median(times["pyro psis_diagnostic"][1:])
    print(f"{'configuration':36s} {'first s':>9s} {'steady s':>9s} {'x Pyro':>8s} {'k-hat':>7s}")
    for name, ts in times.items():
        steady = statistics.median(ts[1:]) if len(ts) > 1 else ts[0]
        print(
            f"{name:36s} {ts[0]:9.4f} {steady:9.4f} {steady / pyro_steady:8.2f} {khats[name]:7.3f}"
        )


if __name__ == "__main__":
    main()
