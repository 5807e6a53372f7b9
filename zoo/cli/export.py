"""``zoo export RUN_DIR --out DIR``: a run's graded reference posteriors in posteriordb's
layout (:mod:`zoo.references`); the arguments are :mod:`zoo.cli.export_args`'."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.execution.plan import run_dir_spec
from zoo.execution.usage import UsageError
from zoo.references import ExportError, export_run

__all__ = ["cmd_export"]


def cmd_export(a: argparse.Namespace) -> int:
    """``zoo export RUN_DIR --out DIR``: write the references, print what was written."""
    run_dir, out = Path(a.run_dir), Path(a.out)
    spec = run_dir_spec(run_dir)
    try:
        res = export_run(run_dir, spec, out, max_draws=a.max_draws, min_grade=a.min_grade)
    except ExportError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot write in {out}: {e.strerror or e}") from None
    for line in res.skipped:
        print(f"zoo: left out {line}", file=sys.stderr)
    for p in res.posteriors:
        print(f"{p.grade:<7} {p.name}  ({p.chains} chains x {p.draws} draws, thin {p.thin})")
    print(f"{len(res.posteriors)} reference posteriors, {res.n_bytes / 1e6:.2f} MB -> {res.out}")
    return 0
