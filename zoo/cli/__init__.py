"""The ``zoo`` command line: run, validate, show, schema, list, report, status, export.

Bad input (a spec that does not validate, a missing file, a wrong argument) prints short
messages and exits with status 2; no traceback reaches the user. A run whose cells partly
failed exits with status 1 after recording every cell. This package's
``__init__`` (argument parsing and dispatch) is the only module with function-level
imports: ``zoo validate`` and ``zoo --help`` must not pay for torch, so each command's
module (:mod:`zoo.cli.run_commands`, :mod:`zoo.cli.show`, :mod:`zoo.cli.spec_commands`,
:mod:`zoo.cli.export`) is
imported when its command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from zoo.cli import export_args
from zoo.cli.common import stdout_closed
from zoo.execution.usage import UsageError, check_dependencies, check_import_names
from zoo.execution.worker_start import quiet_openmp

__all__ = ["main"]

EPILOG = """\
examples:
  zoo run specs/two_moons_depth.yaml                 run the sweep, write runs/<name>/<time>/
  zoo run specs/two_moons_depth.yaml --set sweep.seed=[0] --set sweep.model.depth=[1,4]
  zoo run specs/two_moons_depth.yaml --out runs/mine  rerun to resume an interrupted run
  zoo run runs/mine --retry-failed                    resume a run directory, rerun failed cells
  zoo run two_moons_depth --set 'sweep.seed=[0]'      a shipped spec by name (zoo list), anywhere
  zoo run specs/two_moons_depth.yaml --workers 2      cells in 2 worker processes
  zoo run specs/two_moons_depth.yaml --executor ray --address auto   on a running Ray cluster
  zoo run specs/two_moons_depth.yaml --device cuda    on the GPUs, one worker per GPU
  zoo status runs/mine                                done, failed and pending cells
  zoo validate specs/*.yaml                           check specs, print FILE:LINE:COL errors
  zoo show specs/two_moons_depth.yaml                 resolved spec, cells, model sites
  zoo report runs/mine                                rebuild tables and report from cells
  zoo export runs/mine --out refs                     graded reference posteriors (posteriordb)
  zoo schema > spec.schema.json                       JSON Schema for editor completion

exit status: 0 ok, 1 some cells failed (or could not be stored), 2 bad input (nothing
computed is lost), 130 stopped by Ctrl-C, 143 stopped by SIGTERM (finished cells are kept;
`zoo run DIR` resumes)
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zoo",
        description="bnn-zoo: Bayesian neural networks on Pyro from declarative YAML specs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"zoo {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def with_set(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="FIELD.PATH=VALUE",
            help="override a spec field (value parsed as YAML); repeatable, e.g. "
            "--set model.depth=3 --set 'sweep.seed=[0, 1]'. Methods by name: "
            "--set inference.nuts.draws=100; drop one: --set inference.nuts=null; keep "
            "some: --set 'inference=[mfvi]' (a dropped method's sweep axes go too). A field "
            "that a sweep axis varies is set through the axis (--set 'sweep.model.depth=[3]'); "
            "--set sweep.seed=null drops an axis. To change a section's kind, replace the "
            "section: --set 'data={kind: digits}'. A relative data path given here is "
            "relative to the working directory (in the spec file: to the spec file)",
        )

    r = sub.add_parser(
        "run",
        help="run every cell of a spec and write the report",
        description="Expand the sweep, run each cell (skipping cells already "
        "stored in --out), write results.csv, summary.csv and the report.",
        epilog="Cells run in worker processes (one per core by default, each "
        "with cores/workers torch threads; with --device cuda one per GPU). The "
        "numbers of a cell depend on its configuration, device and thread count "
        "only, so the same --workers gives the same results.csv on the local "
        "and the Ray executor.",
    )
    r.add_argument("spec", help="a YAML spec (see `zoo list`), or a run directory to resume")
    r.add_argument(
        "--out",
        type=Path,
        help="run directory (default runs/<name>/<timestamp>); an existing one is resumed",
    )
    r.add_argument("--fresh", action="store_true", help="discard cells already in --out")
    r.add_argument(
        "--retry-failed",
        action="store_true",
        help="rerun the cells stored as failed (others are kept)",
    )
    r.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="local worker processes (default) or Ray tasks",
    )
    r.add_argument(
        "--workers", type=int, metavar="N", help="cells run at once (default: the number of cores)"
    )
    r.add_argument(
        "--address",
        metavar="ADDR",
        help="Ray cluster address (e.g. auto, "
        "ray://host:10001); default: start a local Ray instance",
    )
    r.add_argument(
        "--device",
        metavar="DEVICE",
        help="cpu, cuda (every visible GPU, one "
        "worker each) or cuda:N; overrides the spec's runtime.device (default cpu)",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.add_argument(
        "--checkpoint-every",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="save a running sampled cell's sampler state in <out>/checkpoints every SECONDS "
        "(default 600; 0: never); a stopped run resumes the cell from it with zoo run <out> "
        "(local executor; bitwise the same chains on the same machine and threads)",
    )
    with_set(r)

    v = sub.add_parser(
        "validate",
        help="validate specs; print every problem with its line",
        description="Check spec files without running anything (no torch): every problem "
        "as FILE:LINE:COL: field.path: message, all at once; exit 2 if any.",
    )
    v.add_argument(
        "specs", nargs="+", metavar="SPEC", help="spec files or shipped spec names (zoo list)"
    )
    with_set(v)

    s = sub.add_parser(
        "show",
        help="print the resolved spec, its cells and model sites",
        description="Print the spec with its defaults filled in and --set applied, its "
        "sweep cells, and the sample sites of one cell's model (priors and shapes).",
    )
    s.add_argument("spec", metavar="SPEC", help="a spec file or a shipped spec's name")
    s.add_argument("--cell", type=int, default=0, help="index of the cell whose sites to show")
    with_set(s)

    sub.add_parser(
        "schema",
        help="print the JSON Schema of a spec",
        description="Print the JSON Schema of a spec, for editor completion and checks.",
    )
    sub.add_parser(
        "list",
        help="list the shipped specs",
        description="List the specs shipped with bnn-zoo: name, cells (or simulation) and "
        "description; the default is marked. `zoo run NAME` runs one from any directory.",
    )

    rp = sub.add_parser(
        "report",
        help="rebuild tables and report of a run directory",
        description="Rebuild results.csv, summary.csv, report.md, report.html and the "
        "figures from the cells stored in a run directory (nothing is run).",
    )
    rp.add_argument("run_dir", type=Path, metavar="DIR", help="a run directory (zoo run --out)")
    st = sub.add_parser(
        "status",
        help="done, running, failed and pending cells of a run directory",
        description="Count the cells of a run directory by status and list those not done; "
        "works while the run is going.",
    )
    st.add_argument("run_dir", type=Path, metavar="DIR", help="a run directory (zoo run --out)")
    export_args.add_parser(sub)
    return p


def _version() -> str:
    import zoo

    return zoo.__version__


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function of a command, imported only when it runs: ``zoo validate`` and ``zoo
    --help`` do not pay for torch."""
    if name == "run":
        from zoo.cli.run_plan import not_started, plan_args

        def fn(a: argparse.Namespace) -> int:
            with not_started():  # a Ctrl-C here says that nothing was computed
                plan = plan_args(a)  # the options and the spec are checked before torch
                from zoo.cli.run_commands import cmd_run
            return cmd_run(a, plan)

    elif name == "report":
        from zoo.cli.run_plan import REPORT_WAIT
        from zoo.execution.plan import check_free

        def fn(a: argparse.Namespace) -> int:
            check_free(a.run_dir, REPORT_WAIT)  # before torch
            from zoo.cli.run_commands import cmd_report

            return cmd_report(a)

    elif name == "status":
        from zoo.cli.run_commands import cmd_status as fn
    elif name == "export":
        from zoo.cli.export import cmd_export as fn
    elif name == "show":
        from zoo.cli.show import cmd_show as fn
    elif name == "validate":
        from zoo.cli.spec_commands import cmd_validate as fn
    elif name == "schema":
        from zoo.cli.spec_commands import cmd_schema as fn
    elif name == "list":
        from zoo.cli.spec_commands import cmd_list as fn
    else:
        raise ValueError(f"unknown command {name!r}")
    return fn


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``zoo`` script; returns the exit status."""
    args = _parser().parse_args(argv)
    if "torch" not in sys.modules:  # OpenMP reads its setting when torch is imported
        quiet_openmp()
    try:  # before anything imports them: a missing library is a message, not a traceback
        check_import_names()
        check_dependencies()
    except UsageError as e:
        print(f"zoo: {e}", file=sys.stderr)
        return 2
    from zoo.spec import SpecError

    try:
        return _command(args.command)(args)
    except SpecError as e:
        print("\n".join(e.messages), file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"zoo: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `zoo show SPEC | head`
        stdout_closed()
        return 0
    except KeyboardInterrupt as e:  # the runner's RunInterrupted has said what was kept
        signum = getattr(e, "signum", None)
        if signum is None:
            print(
                "\nzoo: interrupted; finished cells are kept, rerun with the same --out to resume",
                file=sys.stderr,
            )
        return 128 + (signum or 2)
