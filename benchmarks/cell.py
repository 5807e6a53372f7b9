"""One cell of a spec at two versions of the zoo, run at the same time: CPU seconds and
whether the results are the same.

::

    python benchmarks/cell.py [--before REF] [--spec specs/two_moons_depth.yaml]
        [--depth 2] [--seed 0] [--method nuts] [--set KEY=VALUE ...] [--rounds 1]
        [--profile K]

The cell (method ``--method`` at ``model.depth = --depth``, ``seed = --seed``, after the
spec's ``--set`` overrides) runs twice in each round: once with the zoo of this checkout and
once with the zoo of git ``REF`` (its ``zoo``, ``guides`` and ``reports`` packages, taken
out with ``git archive`` into a temporary directory), each in a fresh interpreter with one
torch thread, as a local worker runs it (``execute_cell``: the malloc setting and the
runtime's threads; ``OMP_WAIT_POLICY=PASSIVE``). The two processes start together, one per
core on a 2-core machine, so that whatever else loads the machine falls on both alike; a
cell of the default takes minutes and the host's speed drifts by more than the changes one
wants to see between runs made one after another. Printed per round: each side's process
CPU seconds and their ratio (REF over this checkout: above 1, this checkout is cheaper);
then whether every metric of the two results is equal (the numbers a run writes to
``results.csv``, its timings aside), or which differ.

``--before HEAD`` (the default) runs the same code on both sides: the null, whose ratio
shows what the pairing leaves (the two cores, the two processes' shared cache). ``--profile
K`` says where the cell's time goes: both sides run under ``cProfile`` (its overhead then
in both sides' seconds) and this checkout's ``K`` functions of the zoo with the most
cumulative time, and the ``K`` functions with the most time of their own, are printed as
percentages of the profiled time. Not a test: the seconds depend on the machine, the ratio
is what to compare.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("zoo", "guides", "reports")


def _child(args: argparse.Namespace) -> None:
    """Run the cell with the zoo of ``args.child`` and print one JSON line."""
    sys.path.insert(0, args.child)
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    import zoo
    from zoo.runtime import Runtime
    from zoo.spec import load_spec

    if not Path(zoo.__file__).resolve().is_relative_to(Path(args.child).resolve()):
        sys.exit(f"imported the zoo from {zoo.__file__}, not from {args.child}")
    sets = [*args.set, f"sweep.model.depth=[{args.depth}]", f"sweep.seed=[{args.seed}]"]
    spec = load_spec(args.spec, sets)
    cells = [c for c in spec.cells() if c.method.name == args.method]
    if not cells:
        names = sorted({c.method.name for c in spec.cells()})
        sys.exit(f"--method {args.method}: the spec has no such method (it has {names})")
    try:
        from zoo.execution.execute import execute_cell
    except ImportError:  # its home before the package was named zoo.execution
        from zoo.run.execute import execute_cell

    # cProfile's own clock (wall time): with CPU time as its clock, each of its reads is a
    # system call, and the profiler's overhead doubled a cell
    prof = cProfile.Profile() if args.profile else None
    t0 = time.process_time()
    if prof:
        prof.enable()
    record = execute_cell(cells[0], Runtime.cpu()).record
    if prof:
        prof.disable()
    cpu = time.process_time() - t0
    metrics = {k: v for k, v in record["metrics"].items() if isinstance(v, int | float | str)}
    out = {"cell": cells[0].cell_id, "cpu": cpu, "status": record["status"]}
    if prof:
        out["profile"] = _profile(prof, Path(zoo.__file__).resolve().parent.parent, args.profile)
    print(json.dumps({**out, "error": record.get("error", ""), "metrics": metrics}))


def _profile(prof: cProfile.Profile, root: Path, k: int) -> list[str]:
    """The ``k`` functions of the zoo with the most cumulative time and the ``k`` functions
    (any) with the most time of their own, as percentages of the profiled (wall) time: one
    process per core, so about its CPU time on an otherwise idle machine."""
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (calls, ncalls, own, cum, ...)
    rows = [(*key, v[1], v[2], v[3]) for key, v in stats.items()]
    total = sum(r[4] for r in rows)
    packages = [root / p for p in PACKAGES]

    def name(file: str, line: int, fn: str) -> str:
        if file == "~":  # a builtin
            return fn
        parts = Path(file).parts
        if any(Path(file).is_relative_to(p) for p in packages):
            return f"{Path(file).relative_to(root)}:{line}({fn})"
        if "site-packages" in parts:
            file = "/".join(parts[parts.index("site-packages") + 1 :])
        return f"{file}:{line}({fn})"

    ours = [r for r in rows if any(Path(r[0]).is_relative_to(p) for p in packages)]
    lines = [f"profiled {total:.1f} s; the zoo's functions by cumulative time (calls):"]
    for f, n, fn, calls, _, cum in sorted(ours, key=lambda r: -r[5])[:k]:
        lines.append(f"  {100 * cum / total:5.1f}%  {name(f, n, fn)} ({calls})")
    lines.append("any function by its own time (calls):")
    for f, n, fn, calls, own, _ in sorted(rows, key=lambda r: -r[4])[:k]:
        lines.append(f"  {100 * own / total:5.1f}%  {name(f, n, fn)} ({calls})")
    return lines


def _checkout(ref: str, into: Path) -> str:
    """``REF``'s packages under ``into``; returns the commit's short name."""
    rev = subprocess.run(
        ["git", "rev-parse", "--short", f"{ref}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if rev.returncode:
        sys.exit(f"--before {ref}: git does not know that commit ({rev.stderr.strip()})")
    tree = subprocess.run(
        ["git", "ls-tree", "--name-only", ref], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    paths = [p for p in PACKAGES if p in tree]
    tar = subprocess.run(["git", "archive", ref, *paths], cwd=ROOT, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        t.extractall(into, filter="data")  # plain files under ``into`` only
    return rev.stdout.strip()


def _round(sides: dict[str, str], args: argparse.Namespace, first: int) -> dict[str, dict]:
    """Both sides at once (``first`` starts first); each side's JSON line."""
    me = [sys.executable, str(Path(__file__).resolve())]
    opts = ["--spec", str(args.spec), "--depth", str(args.depth), "--seed", str(args.seed)]
    opts += ["--method", args.method, "--profile", str(args.profile)]
    opts += [x for s in args.set for x in ("--set", s)]
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    names = list(sides)[first:] + list(sides)[:first]
    procs = {
        n: subprocess.Popen(
            [*me, "--child", sides[n], *opts],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for n in names
    }
    out = {}
    for n, p in procs.items():
        stdout, stderr = p.communicate()
        lines = stdout.strip().splitlines()
        if p.returncode or not lines:
            sys.exit(f"the cell with the zoo of {n} failed:\n{stderr.strip()[-3000:]}")
        out[n] = json.loads(lines[-1])
    return out


def _same(a: dict, b: dict) -> str:
    """Whether two cells' metrics are equal, or which of them differ."""
    keys = sorted(k for k in set(a) | set(b) if not k.endswith("_seconds"))  # not timings
    nan = [k for k in keys if a.get(k) != a.get(k) and b.get(k) != b.get(k)]  # NaN on both
    diff = [k for k in keys if a.get(k) != b.get(k) and k not in nan]
    if not diff:
        return f"identical ({len(keys)} metrics)"
    return f"differ in {len(diff)} of {len(keys)} metrics: {', '.join(diff[:12])}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--before", default="HEAD", help="git ref of the other side (default HEAD: the null)"
    )
    ap.add_argument("--spec", type=Path, default=ROOT / "specs" / "two_moons_depth.yaml")
    ap.add_argument("--depth", type=int, default=2, help="the cell's model.depth")
    ap.add_argument("--seed", type=int, default=0, help="the cell's seed")
    ap.add_argument("--method", default="nuts", help="the inference method's name in the spec")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a spec override, as zoo run --set (repeatable)",
    )
    ap.add_argument("--rounds", type=int, default=1, help="rounds (each runs both sides)")
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="K",
        help="profile both sides (cProfile, whose overhead their CPU seconds then include) "
        "and print this checkout's K largest functions",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.profile < 0:
        ap.error("--profile must be at least 0")
    if not args.spec.is_file():
        ap.error(f"--spec {args.spec}: no such file")
    args.spec = args.spec.resolve()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _paired import load, machine

    with tempfile.TemporaryDirectory() as tmp:
        short = _checkout(args.before, Path(tmp))
        sides = {"this checkout": str(ROOT), short: tmp}
        print(machine())
        print(f"load {load():.1f} before")
        print(f"{'round':>5}  {'this checkout CPU s':>20}  {short + ' CPU s':>14}  {short}/this")
        ratios, same = [], []
        for r in range(args.rounds):
            out = _round(sides, args, r % 2)
            now, old = out["this checkout"], out[short]
            ratios.append(old["cpu"] / now["cpu"])
            same.append(_same(now["metrics"], old["metrics"]))
            print(f"{r + 1:>5}  {now['cpu']:>20.1f}  {old['cpu']:>14.1f}  {ratios[-1]:.3f}")
        print(f"cell {now['cell']} ({now['status']} / {old['status']}); load {load():.1f} after")
        for name, side in (("this checkout", now), (short, old)):
            if side["status"] != "ok":
                print(f"the cell failed with the zoo of {name}: {side['error']}")
        if args.rounds > 1:
            print(
                f"median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}"
            )
        for r, s in enumerate(same):
            print(f"round {r + 1}: results {s}")
        if args.profile:
            print(f"where the cell's time goes with this checkout's zoo (round {args.rounds}):")
            print("\n".join(now["profile"]))


if __name__ == "__main__":
    main()
