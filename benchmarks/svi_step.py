"""SVI step time on the two-moons depth sweep: our AutoMeanField against Pyro's AutoNormal.

One run measures every configuration side by side and prints a table of milliseconds per
step and ratios to the baseline (Pyro's AutoNormal + Trace_ELBO with torch's default
threads)::

    python benchmarks/svi_step.py [--steps 200] [--depths 1 4 8]

Not a test: numbers depend on the machine; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import time

import pyro
import torch
from pyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO
from pyro.infer.autoguide import AutoNormal

import zoo.data
import zoo.models
from guides import AutoMeanField
from zoo.spec import load_spec


def _time(model, guide, elbo, x, y, n, steps: int) -> float:
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), elbo)
    for _ in range(10):  # warm-up and parameter creation
        svi.step(x, y, n)
    t0 = time.perf_counter()
    for _ in range(steps):
        svi.step(x, y, n)
    return (time.perf_counter() - t0) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--batch-size", type=int, default=100)
    a = ap.parse_args()
    default_threads = torch.get_num_threads()
    rows = []
    for depth in a.depths:
        over = [f"sweep.model.depth=[{depth}]", "sweep.seed=[0]"]
        spec = load_spec("specs/two_moons_depth.yaml", over).cells()[0].spec
        ds = zoo.data.load(spec.data, spec.seed)
        model = zoo.models.build(spec, ds)
        x = torch.as_tensor(ds.x_train[: a.batch_size])
        y = torch.as_tensor(ds.y_train[: a.batch_size])
        n = len(ds.x_train)
        configs = {
            "AutoNormal+Trace_ELBO": (AutoNormal, Trace_ELBO(), default_threads),
            "AutoMeanField+TraceMeanField_ELBO": (
                AutoMeanField,
                TraceMeanField_ELBO(),
                default_threads,
            ),
            "AutoMeanField+TraceMeanField_ELBO, 1 thread": (
                AutoMeanField,
                TraceMeanField_ELBO(),
                1,
            ),
        }
        times = {}
        for name, (guide_cls, elbo, threads) in configs.items():
            torch.set_num_threads(threads)
            times[name] = _time(model, guide_cls(model), elbo, x, y, n, a.steps)
        torch.set_num_threads(default_threads)
        base = times["AutoNormal+Trace_ELBO"]
        for name, ms in times.items():
            rows.append((depth, model.dims[1] if depth else 0, name, ms, ms / base))
    print(f"SVI step, batch {a.batch_size}, {a.steps} steps, torch threads {default_threads}")
    print(f"{'depth':>5} {'width':>5}  {'configuration':<44} {'ms/step':>8} {'ratio':>6}")
    for depth, width, name, ms, ratio in rows:
        print(f"{depth:>5} {width:>5}  {name:<44} {ms:>8.2f} {ratio:>6.2f}")


if __name__ == "__main__":
    main()
