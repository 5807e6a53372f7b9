"""CPU time per batched gradient on a quiet CPU and under a load this script makes itself.

The default spec's depth-2 network (one logit, 100-parameter budget, N = 500): process CPU
seconds (every thread of the process, ``time.process_time``) per
:meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch` at C chains, for
several thread settings, each in its own worker process (OpenMP reads its environment once,
at start)::

    python benchmarks/load.py [--chains 1 16 64] [--rounds 3] [--calls 40]

The settings: torch's default threads (one per core), ``torch.set_num_threads(1)``, the
default threads with ``OMP_WAIT_POLICY=PASSIVE`` (an idle OpenMP thread sleeps instead of
spinning), and one thread with one inter-op thread (what the zoo's workers set). The load:
one busy process per core (a Python loop that never sleeps), started before and stopped after
the loaded half of each round. Each round measures every setting at every C quiet, then
loaded, in turn (paired, interleaved); the table gives the median over rounds of the CPU
microseconds per chain-gradient and the loaded / quiet ratio. The machine and its load
average before and after are printed with the numbers.

Not a test: numbers depend on the machine; compare the ratios.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: name -> (environment added, torch threads or None for torch's default, inter-op threads)
SETTINGS = {
    "default threads": ({}, None, None),
    "1 thread": ({}, 1, None),
    "default, OMP passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, None, None),
    "1 thread, 1 inter-op": ({}, 1, 1),
}

_WORKER = r"""
import sys, time, torch
threads, interop = (None if a == "-" else int(a) for a in sys.argv[1:3])
if threads is not None:
    torch.set_num_threads(threads)
if interop is not None:
    torch.set_num_interop_threads(interop)
sys.path.insert(0, "benchmarks")
from nuts import _default_network
from zoo.inference.mcmc.potential import FlatPotential
model, x, y, init, _ = _default_network()
pot = FlatPotential(model, x, y)
z1 = pot.ravel(init)
gen = torch.Generator().manual_seed(0)
print("ready", torch.get_num_threads(), flush=True)
for line in sys.stdin:
    c, calls = map(int, line.split())
    z = z1.expand(c, -1) + 0.01 * torch.randn(c, pot.dim, generator=gen)
    pot.value_and_grad_batch(z)
    t0 = time.process_time()
    for _ in range(calls):
        pot.value_and_grad_batch(z)
    print((time.process_time() - t0) / calls / c * 1e6, flush=True)
"""


def _spin() -> None:  # the load: one busy process per core
    while True:
        pass


class _Load:
    """One busy process per core while inside the block."""

    def __enter__(self):
        self.procs = [mp.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 1)]
        for p in self.procs:
            p.start()
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.join()


def _start(env: dict, threads: int | None, interop: int | None) -> subprocess.Popen:
    root = Path(__file__).resolve().parent.parent
    args = ["-" if threads is None else str(threads), "-" if interop is None else str(interop)]
    proc = subprocess.Popen(
        [sys.executable, "-c", _WORKER, *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root), **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    proc.threads = int(proc.stdout.readline().split()[1])
    return proc


def _ask(proc: subprocess.Popen, c: int, calls: int) -> float:
    proc.stdin.write(f"{c} {calls}\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def main() -> None:
    from chees import machine  # imports torch: after the workers' script is defined

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=40, help="gradients per measurement")
    a = ap.parse_args()
    print(machine(), f"; load average before: {os.getloadavg()[0]:.2f}")
    workers = {name: _start(*s) for name, s in SETTINGS.items()}
    us: dict[tuple, list[float]] = {}
    for _ in range(a.rounds):
        for loaded in (False, True):
            with _Load() if loaded else _Nothing():
                for name, proc in workers.items():
                    for c in a.chains:
                        calls = max(4, a.calls * 16 // max(c, 16))
                        us.setdefault((name, c, loaded), []).append(_ask(proc, c, calls))
    for proc in workers.values():
        proc.stdin.close()
        proc.wait()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(
        f"CPU us per chain-gradient, median of {a.rounds} paired rounds "
        f"(quiet / under {os.cpu_count()} busy processes / ratio)"
    )
    print(f"{'setting':<22} {'threads':>7} " + " ".join(f"{'C = ' + str(c):>22}" for c in a.chains))
    for name, proc in workers.items():
        cells = []
        for c in a.chains:
            q = statistics.median(us[(name, c, False)])
            b = statistics.median(us[(name, c, True)])
            cells.append(f"{q:>7.1f} {b:>7.1f} {b / q:>5.2f}x")
        print(f"{name:<22} {proc.threads:>7} " + " ".join(f"{s:>22}" for s in cells))


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


if __name__ == "__main__":
    main()
