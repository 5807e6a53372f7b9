"""CPU time and page faults per batched gradient with glibc's default malloc and with the zoo's.

The paper-size network (depth 2 at the 1000-parameter budget, two logits, D = 954) on ``--n``
training points: process CPU microseconds per chain-gradient of
:meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch` at C chains, the
minor page faults per call and the process's peak resident memory, in two worker processes
(one thread each): one with glibc's default malloc, one that called
:func:`zoo.execution.worker_start.keep_freed_memory` first (as every cell does), which serves
every block from the heap and keeps what is freed::

    python benchmarks/malloc.py [--n 10000] [--chains 1 16 64] [--rounds 3] [--calls 10]

Each round asks both workers in turn at every C (paired, interleaved); the table gives the
median over rounds. Glibc maps a block above its mmap threshold (adaptive, at most 32 MB)
afresh and unmaps it when freed, so a gradient whose temporaries are that large touches new
pages on every call; whether a block of 1-32 MB is mapped depends on what was freed before,
so the default's figures at 16 chains vary between rounds and runs.

Not a test: numbers depend on the machine and its glibc; compare the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

_WORKER = r"""
import resource, sys, time, torch
torch.set_num_threads(1)
if sys.argv[1] == "zoo":
    from zoo.execution.worker_start import keep_freed_memory
    assert keep_freed_memory(), "keep_freed_memory did nothing here (not glibc, or MALLOC_*)"
sys.path.insert(0, "benchmarks")
from nuts import _setup
from zoo.inference.mcmc.potential import FlatPotential
model, x, y, init = _setup(int(sys.argv[2]))
pot = FlatPotential(model, x, y)
z1 = pot.ravel(init)
gen = torch.Generator().manual_seed(0)
print("ready", flush=True)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for line in sys.stdin:
    c, calls = map(int, line.split())
    z = z1.expand(c, -1) + 0.01 * torch.randn(c, pot.dim, generator=gen)
    pot.value_and_grad_batch(z)
    f0, t0 = faults(), time.process_time()
    for _ in range(calls):
        pot.value_and_grad_batch(z)
    us = (time.process_time() - t0) / calls / c * 1e6
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(us, (faults() - f0) / calls, rss, flush=True)
"""

SETTINGS = ("glibc default", "zoo")


def _start(setting: str, n: int) -> subprocess.Popen:
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    proc = subprocess.Popen(
        [sys.executable, "-c", _WORKER, "zoo" if setting == "zoo" else "default", str(n)],
        cwd=root,
        env={**env, "PYTHONPATH": str(root)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    if proc.stdout.readline().split() != ["ready"]:
        raise RuntimeError(f"the {setting} worker did not start")
    return proc


def _ask(proc: subprocess.Popen, c: int, calls: int) -> tuple[float, float, float]:
    proc.stdin.write(f"{c} {calls}\n")
    proc.stdin.flush()
    us, faults, rss = map(float, proc.stdout.readline().split())
    return us, faults, rss


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _paired import machine

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="training points")
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=10, help="gradients per measurement")
    a = ap.parse_args()
    print(machine(), f"; load average before: {os.getloadavg()[0]:.2f}")
    workers = {s: _start(s, a.n) for s in SETTINGS}
    got: dict[tuple, list] = {}
    for _ in range(a.rounds):
        for c in a.chains:
            for s, proc in workers.items():
                got.setdefault((s, c), []).append(_ask(proc, c, a.calls))
    for proc in workers.values():
        proc.stdin.close()
        proc.wait()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(
        f"N = {a.n}, D = 954 (2 logits); per call, median of {a.rounds} paired rounds: CPU us "
        "per chain-gradient, minor page faults; peak resident MB of the worker at the end"
    )
    print(f"{'C':>4} {'setting':<14} {'us/chain-grad':>14} {'faults/call':>12} {'peak MB':>9}")
    for c in a.chains:
        for s in SETTINGS:
            rows = got[(s, c)]
            us, faults = (statistics.median(r[i] for r in rows) for i in (0, 1))
            print(f"{c:>4} {s:<14} {us:>14.1f} {faults:>12.0f} {rows[-1][2]:>9.0f}")
        base, ours = (statistics.median(r[0] for r in got[(s, c)]) for s in SETTINGS)
        print(f"{c:>4} {'zoo / default':<14} {ours / base:>14.2f}")


if __name__ == "__main__":
    main()
