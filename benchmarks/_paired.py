"""What every peer comparison of the benchmarks shares: paired runs, process CPU time, peers
kept running so that they compile once, first-run and steady ratios printed apart, R-hat
beside each ESS, and the machine and its load named.

A comparison runs its contenders in pairs: pair ``k`` runs each contender once with seed
``k``, one after another (interleaved, so that a shared machine's load drift falls on all of
them alike). Pair 0 is a peer's first run (its JIT compilation included); pairs 1.. reuse
its compiled sampler (:class:`Peer` keeps the peer's interpreter running between
runs), so the first-run ratio and the steady ratios (median and range over pairs) are
printed apart (:func:`print_ratios`). Every contender reports process CPU seconds of its
own process.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from arviz_stats.base import array_stats

#: R-hat above this marks an ESS as unconverged (Vehtari et al. 2021's threshold)
RHAT_OK = 1.01

#: The peers' environment: JAX on the CPU with one XLA thread (ours run one torch thread)
PEER_ENV = {
    "JAX_PLATFORMS": "cpu",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
}


def machine() -> str:
    """One line naming the machine: CPU model and cores, torch, and the GPU if any."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    return (
        f"machine: {cpu}, {os.cpu_count()} cores; {gpu}; torch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )


def load() -> float:
    """The one-minute load average (how busy the shared machine was)."""
    return os.getloadavg()[0]


class Peer:
    """A peer sampler kept running in another interpreter (its own venv with jax) on one
    target.

    ``arrays`` go to a temporary ``IN.npz``; ``PYTHON *script IN.npz CFG`` (``cfg`` as JSON)
    starts the peer, which reads one run per line ``SEED OUT`` on stdin, writes that run's
    arrays to ``OUT`` (an ``.npz`` with ``cpu``, the process CPU seconds of the run alone)
    and prints ``done``. Its first run compiles; later runs reuse the compiled program.
    """

    def __init__(self, python: str, script: list[str], arrays: dict, cfg: dict) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.input = f"{self.dir.name}/in.npz"
        np.savez(self.input, **arrays)
        self.argv = [python, *script, self.input, json.dumps(cfg)]
        self.proc: subprocess.Popen | None = None

    def run(self, seed: int) -> dict:
        """One run with PRNG seed ``seed``; its arrays as a dict."""
        if self.proc is None:
            self.proc = subprocess.Popen(
                self.argv, env=dict(os.environ, **PEER_ENV), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
        out = f"{self.dir.name}/run{seed}.npz"
        self.proc.stdin.write(f"{seed} {out}\n")
        self.proc.stdin.flush()
        if self.proc.stdout.readline().strip() != "done":
            raise RuntimeError(f"the peer {self.argv[1]} stopped (its error is above)")
        return dict(np.load(out))

    def close(self) -> None:
        """Stop the peer's interpreter and remove its files."""
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None
        self.dir.cleanup()


def ess_cpu(flat: np.ndarray, cpu: float, pred: np.ndarray | None = None) -> tuple:
    """(min, median) bulk ESS per CPU-second over parameters, median over predictions (nan
    without), and the largest R-hat over parameters."""
    ess = array_stats.ess(flat, chain_axis=0, draw_axis=1, method="bulk")
    rhat = float(np.max(array_stats.rhat(flat, chain_axis=0, draw_axis=1)))
    p = np.nan
    if pred is not None:
        p = np.nanmedian(array_stats.ess(pred, chain_axis=0, draw_axis=1, method="bulk")) / cpu
    return ess.min() / cpu, np.median(ess) / cpu, p, rhat


def run_pairs(pairs: int, contenders: dict[str, Callable[[int], dict]]) -> list[dict]:
    """``pairs + 1`` pairs: pair ``k`` calls every contender with seed ``k`` in turn.

    A contender returns a dict (at least ``flat``, ``(chains, draws, D)``, and ``cpu``, its
    process CPU seconds); each row is that dict with ``sampler`` and ``pair`` added.
    """
    rows = []
    for k in range(pairs + 1):
        for name, fn in contenders.items():
            rows.append({**fn(k), "sampler": name, "pair": k})
    return rows


def ess_stats(row: dict) -> tuple:
    """A row's (min, median, predictions) ESS per CPU-second (``row["stats"]``, :func:`ess_cpu`)."""
    return row["stats"][:3]


def ess_rhat(row: dict) -> float:
    """A row's largest R-hat (``row["stats"]``, :func:`ess_cpu`)."""
    return row["stats"][3]


def print_table(rows: list[dict]) -> None:
    """One line per run: target, sampler, pair, CPU seconds, ESS per CPU-second (min,
    median, predictions) and the largest R-hat, ``*`` where it exceeds :data:`RHAT_OK`."""
    print(
        f"{'target':<16} {'sampler':<24} {'pair':>4} {'CPU s':>7} {'min/s':>8} {'med/s':>8} "
        f"{'pred/s':>8} {'R-hat':>7}"
    )
    for r in rows:
        emin, emed, epred, rhat = r["stats"]
        print(
            f"{r['target']:<16} {r['sampler']:<24} {r['pair']:>4} {r['cpu']:>7.3g} "
            f"{emin:>8.3f} {emed:>8.3f} {epred:>8.3f} {rhat:>6.3f}"
            + ("" if rhat <= RHAT_OK else "*")
        )


def median_se(values, draws: int = 2000, seed: int = 0) -> float:
    """The bootstrap standard error of ``values``' median (resampling the rounds or pairs
    with replacement): how far a rerun's median would move, so that a target such as 0.9
    reads as met, missed or within the noise."""
    v = np.asarray(values, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(v), (draws, len(v)))
    return float(np.median(v[idx], axis=1).std())


def print_ratios(
    rows: list[dict],
    ours: str,
    stats: Callable[[dict], tuple] = ess_stats,
    what: str = "ESS/CPU-s min / median / predictions",
    rhat: Callable[[dict], float] = ess_rhat,
    rhat_ok: float = RHAT_OK,
    label: str = "",
) -> None:
    """Print ``ours`` over every other sampler of ``rows``: the first pair's ratio and the
    median (range) of the steady pairs' ratios, for each value of ``stats(row)`` (named by
    ``what``), each marked unconverged where either side's ``rhat(row)`` exceeds ``rhat_ok``.
    """
    mine = {r["pair"]: r for r in rows if r["sampler"] == ours}
    for peer in dict.fromkeys(r["sampler"] for r in rows if r["sampler"] != ours):
        theirs = {r["pair"]: r for r in rows if r["sampler"] == peer}
        ks = sorted(set(mine) & set(theirs))
        ratio = {
            k: [o / t for o, t in zip(stats(mine[k]), stats(theirs[k]), strict=True)] for k in ks
        }
        bad = {k: max(rhat(mine[k]), rhat(theirs[k])) > rhat_ok for k in ks}
        first = " / ".join(f"{v:.2f}" for v in ratio[ks[0]])
        print(
            f"ratio {label}{ours} / {peer}, {what}: first run {first}"
            + (" (unconverged)" if bad[ks[0]] else "")
        )
        steady = ks[1:]
        if steady:
            parts = []
            for i in range(len(ratio[ks[0]])):
                vals = [ratio[k][i] for k in steady]
                parts.append(f"{np.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f})")
            n_bad = sum(bad[k] for k in steady)
            print(
                f"    steady (median (range) of {len(steady)} pairs): "
                + " / ".join(parts)
                + (f"; {n_bad} of them unconverged" if n_bad else "")
            )
