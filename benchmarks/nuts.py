"""NUTS on the two-moons BNN: time per leapfrog step and ESS per second, ours against Pyro's.

One run measures every configuration side by side on the depth-2 network of
``specs/two_moons_depth.yaml`` (~950 parameters, 1000-parameter budget) and prints one table::

    python benchmarks/nuts.py [--n 1000 10000] [--warmup 100] [--draws 200] [--max-tree-depth 8]

Part 1, milliseconds per gradient evaluation (one leapfrog step), ratio to ``raw``:

- ``raw``: the network's log density and its ``torch.autograd.grad`` written by hand in torch,
  with no sampler around it (the floor);
- ``zoo run_nuts``: :func:`zoo.mcmc.run_nuts` on :class:`zoo.mcmc.FlatPotential`;
- ``pyro NUTS(potential_fn=flat)``: Pyro's own NUTS kernel on the same flat potential, as one
  site ``{"z": z}`` (what subclassing Pyro's kernel would cost);
- ``pyro NUTS(model)``: Pyro's NUTS on the PyroModule model (potential from the model trace).

Sampler times are wall time of a short run divided by the number of potential-gradient
evaluations it made. Part 2 runs ours and ``pyro NUTS(model)`` with the same initial point
(maximum-likelihood pretrained weights), warm-up, draws and tree depth at N=1000 and reports
ESS_bulk (min and median over parameters) per second of total run time.

Not a test: numbers depend on the machine; the ratios are what to compare. One torch thread.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pyro
import torch
from arviz_stats.base import array_stats
from pyro.infer.mcmc import MCMC, NUTS

from zoo.compile import _init_locs, build_data, build_model
from zoo.infer import pretrain_mle
from zoo.mcmc import FlatPotential, run_nuts
from zoo.specload import load_spec


class _Counted(FlatPotential):
    calls = 0

    def value_and_grad(self, z):
        self.calls += 1
        return super().value_and_grad(z)


class _CountedNUTS(NUTS):
    calls = 0

    def _initialize_model_properties(self, model_args, model_kwargs):
        super()._initialize_model_properties(model_args, model_kwargs)
        fn = self.potential_fn

        def counted(z):
            self.calls += 1
            return fn(z)

        self.potential_fn = counted


def _setup(n: int):
    over = ["sweep.model.depth=[2]", "sweep.seed=[0]", f"data.n_train={n}"]
    spec = load_spec("specs/two_moons_depth.yaml", over).cells()[0].spec
    ds = build_data(spec)
    model = build_model(spec, ds)
    x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
    init = pretrain_mle(model.log_likelihood, _init_locs(model, "he", 0), x[:1000], y[:1000],
                        seed=0, epochs=10, batch_size=100, lr=0.01)  # fmt: skip
    return model, x, y, init


def _raw_ms(pot: FlatPotential, x, y, z0: torch.Tensor, reps: int) -> float:
    """Hand-written log density + autograd gradient of the same ReLU network, median ms."""
    layers = [(pot.site_slices[w], pot.site_shapes[w], pot.site_slices[b])
              for w, b in pot.model.layer_sites()]  # fmt: skip
    yi = y.unsqueeze(-1)

    def raw(z):
        z = z.detach().requires_grad_(True)
        h = x
        for i, (ws, shape, bs) in enumerate(layers):
            h = torch.addmm(z[bs], h, z[ws].view(shape).t())
            h = torch.relu(h) if i < len(layers) - 1 else h
        lp = torch.log_softmax(h, -1).gather(-1, yi).sum() - 0.5 * z.dot(z)
        (g,) = torch.autograd.grad(-lp, z)
        return lp.item(), g

    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            raw(z0)
        times.append((time.perf_counter() - t0) / reps * 1e3)
    return statistics.median(times)


def _pyro_run(kernel, init_z, warmup, draws, x, y, seed):
    pyro.set_rng_seed(seed)
    mcmc = MCMC(kernel, num_samples=draws, warmup_steps=warmup, initial_params=init_z,
                disable_progbar=True)  # fmt: skip
    t0 = time.perf_counter()
    mcmc.run(x, y)
    return mcmc, time.perf_counter() - t0


def _per_step(model, x, y, init, warmup, draws, depth, reps) -> dict[str, float]:
    pot = _Counted(model, x, y)
    z0 = pot.ravel(init)
    out = {"raw": _raw_ms(pot, x, y, z0, reps)}
    res = run_nuts(pot, seed=0, warmup=warmup, draws=draws, init=init, max_tree_depth=depth)
    out["zoo run_nuts"] = res.seconds / pot.calls * 1e3
    calls = [0]

    def flat_fn(zd):  # the same fused energy as value_and_grad
        calls[0] += 1
        return pot._energy(zd["z"]) + pot._offset

    kern = NUTS(potential_fn=flat_fn, max_tree_depth=depth)
    _, sec = _pyro_run(kern, {"z": z0.clone()}, warmup, draws, None, None, 0)
    out["pyro NUTS(potential_fn=flat)"] = sec / calls[0] * 1e3
    kern = _CountedNUTS(model, max_tree_depth=depth)
    _, sec = _pyro_run(kern, {k: v.clone() for k, v in init.items()}, warmup, draws, x, y, 0)
    out["pyro NUTS(model)"] = sec / kern.calls * 1e3
    return out


def _ess(model, x, y, init, warmup, draws, depth) -> list[tuple]:
    pot = FlatPotential(model, x, y)
    res = run_nuts(pot, seed=0, warmup=warmup, draws=draws, init=init, max_tree_depth=depth)
    rows = [("zoo run_nuts", res.flat, res.seconds, res.sample_stats["n_steps"].mean())]
    kern = NUTS(model, max_tree_depth=depth)
    mcmc, sec = _pyro_run(kern, {k: v.clone() for k, v in init.items()}, warmup, draws, x, y, 0)
    s = mcmc.get_samples(group_by_chain=True)
    flat = torch.cat([s[k].reshape(1, draws, -1) for k in pot.site_slices], -1).numpy()
    rows.append(("pyro NUTS(model)", flat, sec, float("nan")))
    out = []
    for name, f, sec, nsteps in rows:
        ess = array_stats.ess(f, chain_axis=0, draw_axis=1, method="bulk")
        out.append((name, sec, nsteps, ess.min(), np.median(ess)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--max-tree-depth", type=int, default=8)
    ap.add_argument("--step-draws", type=int, default=10, help="warm-up = draws in part 1")
    ap.add_argument("--skip-ess", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"two-moons BNN depth 2, torch threads 1; part 1: {a.step_draws} warm-up + "
          f"{a.step_draws} draws, max tree depth 6")  # fmt: skip
    print(f"{'N':>6}  {'configuration':<32} {'ms/step':>8} {'ratio':>6}")
    for n in a.n:
        model, x, y, init = _setup(n)
        times = _per_step(model, x, y, init, a.step_draws, a.step_draws, 6, max(5, 20000 // n))
        for name, ms in times.items():
            print(f"{n:>6}  {name:<32} {ms:>8.3f} {ms / times['raw']:>6.2f}", flush=True)
    if a.skip_ess:
        return
    model, x, y, init = _setup(1000)
    print(f"\nESS_bulk on N=1000, {a.warmup} warm-up + {a.draws} draws, max tree depth "
          f"{a.max_tree_depth}, 1 chain, init = MLE-pretrained weights, D = {model.num_params}")  # fmt: skip
    rows = _ess(model, x, y, init, a.warmup, a.draws, a.max_tree_depth)
    print(f"{'sampler':<20} {'seconds':>8} {'steps/draw':>10} {'min ESS':>8} {'med ESS':>8} "
          f"{'min ESS/s':>9} {'med ESS/s':>9}")  # fmt: skip
    for name, sec, nsteps, emin, emed in rows:
        print(f"{name:<20} {sec:>8.1f} {nsteps:>10.1f} {emin:>8.1f} {emed:>8.1f} "
              f"{emin / sec:>9.3f} {emed / sec:>9.3f}")  # fmt: skip
    base = rows[1]
    print(f"ratio ours / pyro: min ESS/s {rows[0][3] / rows[0][1] / (base[3] / base[1]):.2f}, "
          f"median ESS/s {rows[0][4] / rows[0][1] / (base[4] / base[1]):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
