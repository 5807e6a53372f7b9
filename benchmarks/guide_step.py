"""SVI step time of every guide, as a ratio to AutoMeanField, on an MNIST-sized MLP.

One run measures all configurations side by side, interleaving the repetitions (each round
times every configuration once, in turn) and reporting medians over rounds::

    python benchmarks/guide_step.py [--rounds 5] [--steps 3] [--threads 1]

Network 784-400-400-10, batch 1024 of random data, TraceMeanField_ELBO, Adam. Ratios are
ms/step over AutoMeanField's; "mean-field + local reparam" is also compared with a
deterministic step of the same net (plain torch forward + backward + Adam).
AutoFullRankNormal cannot run on this net (a 784x400 weight is a 313600-dim block, a
~10^11-number Cholesky factor): it is timed on a small net (8-16-16-2, same batch) against
AutoMeanField on that small net, and labelled so.

Not a test: numbers depend on the machine; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import pyro
import torch
from pyro.infer import SVI, TraceMeanField_ELBO
from pyro.infer.autoguide import AutoDelta
from torch import nn

from guides import AutoMeanField
from guides.fixed_variance import AutoFixedVarianceNormal
from guides.full_rank import AutoFullRankNormal
from guides.k_tied import AutoKTiedNormal
from guides.local_reparam import LocalReparameterization
from guides.matrix_normal import AutoMatrixNormal
from zoo.models.likelihoods import CategoricalLikelihood
from zoo.models.mlp import BayesianMLP

BIG, SMALL = (784, [400, 400], 10), (8, [16, 16], 2)


def _svi_step(name: str, make: Callable, net: tuple, batch: int, local: bool) -> Callable:
    """A zero-argument SVI step of guide ``make(model)``, with its own param names."""
    in_dim, widths, classes = net
    model = BayesianMLP(in_dim, widths, CategoricalLikelihood(classes))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, in_dim, generator=gen)
    y = torch.randint(0, classes, (batch,), generator=gen)
    guide = make(model)
    guide._pyro_name = name  # distinct param-store names: configurations never share
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), TraceMeanField_ELBO())
    n_total = 60_000

    def step() -> None:
        if local:
            with LocalReparameterization():
                svi.step(x, y, n_total)
        else:
            svi.step(x, y, n_total)

    return step


def _deterministic_step(net: tuple, batch: int) -> Callable:
    in_dim, widths, classes = net
    dims = [in_dim, *widths, classes]
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    mlp = nn.Sequential(*layers)
    opt = torch.optim.Adam(mlp.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, in_dim, generator=gen)
    y = torch.randint(0, classes, (batch,), generator=gen)

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(mlp(x), y).backward()
        opt.step()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved repetitions")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per round and config")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    pyro.set_rng_seed(0)
    bs = a.batch_size
    # label -> (net label, baseline label, step)
    configs: dict[str, tuple[str, str, Callable]] = {}

    def svi(label, make, net=BIG, base="AutoMeanField", local=False):
        name = f"cfg{len(configs)}"
        net_label = "big" if net is BIG else "small"
        configs[label] = (net_label, base, _svi_step(name, make, net, bs, local))

    svi("AutoMeanField", AutoMeanField)
    svi("AutoMeanField + local reparam", AutoMeanField, local=True)
    svi("AutoFixedVarianceNormal(0.01)", lambda m: AutoFixedVarianceNormal(m, 0.01))
    svi("AutoKTiedNormal(rank=1)", lambda m: AutoKTiedNormal(m, rank=1))
    svi("AutoKTiedNormal(rank=2)", lambda m: AutoKTiedNormal(m, rank=2))
    svi("AutoKTiedNormal(rank=2) + local reparam", lambda m: AutoKTiedNormal(m, rank=2), local=True)
    svi("AutoMatrixNormal(diag, diag)", lambda m: AutoMatrixNormal(m, "diag", "diag"))
    svi("AutoMatrixNormal(full, full)", lambda m: AutoMatrixNormal(m, "full", "full"))
    svi("AutoDelta (MAP)", AutoDelta)
    configs["deterministic MLP (torch + Adam)"] = ("big", "", _deterministic_step(BIG, bs))
    small = "AutoMeanField [small net]"
    svi(small, AutoMeanField, net=SMALL, base=small)
    for blocks in ("site", "global"):
        label = f"AutoFullRankNormal({blocks}) [small net]"
        svi(label, lambda m, b=blocks: AutoFullRankNormal(m, b), net=SMALL, base=small)

    times: dict[str, list[float]] = {label: [] for label in configs}
    for _, _, step in configs.values():  # warm-up and parameter creation
        step()
        step()
    for _ in range(a.rounds):
        for label, (_, _, step) in configs.items():
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step()
            times[label].append((time.perf_counter() - t0) / a.steps * 1e3)
    med = {label: statistics.median(ts) for label, ts in times.items()}

    det = med["deterministic MLP (torch + Adam)"]
    print(
        f"SVI step (TraceMeanField_ELBO, Adam), batch {bs}, big net 784-400-400-10, small net "
        f"8-16-16-2; median of {a.rounds} interleaved rounds x {a.steps} steps; "
        f"torch threads {a.threads}"
    )
    print(f"{'configuration':<44} {'net':>5} {'ms/step':>9} {'ratio':>6}  ratio to")
    for label, (net, base, _) in configs.items():
        if base:
            ratio, to = med[label] / med[base], base
        else:
            ratio, to = 1.0, "itself"
        print(f"{label:<44} {net:>5} {med[label]:>9.2f} {ratio:>6.2f}  {to}")
    lr_label = "AutoMeanField + local reparam"
    print(
        f"{lr_label + ' / deterministic':<44} {'big':>5} {'':>9} "
        f"{med[lr_label] / det:>6.2f}  deterministic MLP (torch + Adam)"
    )


if __name__ == "__main__":
    main()
