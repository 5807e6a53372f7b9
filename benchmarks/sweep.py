"""Wall time of a 16-cell mean-field sweep: 1 and 2 workers, local processes and Ray.

One run measures every executor side by side (same spec, fresh run directory each time) and
prints seconds and the ratio to one worker in this process::

    python benchmarks/sweep.py [--repeats 1] [--no-ray]

The sweep is the MF-VI part of specs/two_moons_depth.yaml at the paper's 1000-parameter
budget, depths 1-4 x seeds 0-3, with 8 epochs so one cell takes a few seconds. Each configuration also checks that its
results.csv equals the first one of the same thread count. Not a test: numbers depend on
the machine; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from zoo.execution.runner import run_spec
from zoo.spec import load_spec

SPEC = """\
name: sweep_benchmark
data: {kind: two_moons, n_train: 1000, n_test: 1000, noise: 0.1}
model: {kind: mlp, depth: 1, param_budget: 1000, activation: relu}
inference:
  - name: mfvi
    kind: svi
    guide: {kind: mean_field, init_scale: 0.001}
    pretrain_epochs: 2
    epochs: 8
    batch_size: 100
    lr: 0.01
    predictive_samples: 50
sweep:
  model.depth: [1, 2, 3, 4]
  seed: [0, 1, 2, 3]
"""


def _time(executor: str, workers: int, tmp: Path) -> tuple[float, bytes]:
    path = tmp / "sweep.yaml"
    path.write_text(SPEC)
    spec = load_spec(path)
    out = Path(tempfile.mkdtemp(dir=tmp))
    t0 = time.perf_counter()
    res = run_spec(
        spec, out, executor=executor, workers=workers, progress=False, log=lambda m: None
    )
    seconds = time.perf_counter() - t0
    assert res.n_cells == 16 and res.n_failed == 0, res
    return seconds, (out / "results.csv").read_bytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=1, help="runs per configuration (median)")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray executor")
    a = ap.parse_args()
    configs = [("inprocess", 1), ("local", 2)]
    if not a.no_ray:
        configs += [("ray", 1), ("ray", 2)]
    times: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    first_csv: dict[int, bytes] = {}
    same: dict[tuple[str, int], bool] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeats):
            for executor, workers in configs:  # interleaved, so drift hits all alike
                seconds, csv = _time(executor, workers, Path(tmp))
                times[(executor, workers)].append(seconds)
                threads = 2 // workers  # on this 2-core machine
                first_csv.setdefault(threads, csv)
                same[(executor, workers)] = first_csv[threads] == csv
    base = statistics.median(times[("inprocess", 1)])
    print(f"{'executor':<10} {'workers':>7} {'seconds':>8} {'ratio':>6}  same results.csv")
    for (executor, workers), ts in times.items():
        s = statistics.median(ts)
        print(
            f"{executor:<10} {workers:>7} {s:>8.1f} {s / base:>6.2f}  {same[(executor, workers)]}"
        )
    print(
        "ratio: wall time over one worker in this process (lower is faster); "
        "'same' compares with the first run of the same torch thread count"
    )


if __name__ == "__main__":
    main()
