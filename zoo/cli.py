"""The ``zoo`` command line: run, validate, show, schema, list, report, status.

Bad input (a spec that does not validate, a missing file, a wrong argument) prints short
messages and exits with status 2; no traceback reaches the user. A run whose cells partly
failed exits with status 1 after recording every cell. This is the only module with
function-level imports: ``zoo validate`` and ``zoo --help`` must not pay for torch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

__all__ = ["main"]

EPILOG = """\
examples:
  zoo run specs/two_moons_depth.yaml                 run the sweep, write runs/<name>/<time>/
  zoo run specs/two_moons_depth.yaml --set sweep.seed=[0] --set sweep.model.depth=[1,4]
  zoo run specs/two_moons_depth.yaml --out runs/mine  rerun to resume an interrupted run
  zoo run runs/mine --retry-failed                    resume a run directory, rerun failed cells
  zoo run specs/two_moons_depth.yaml --workers 2      cells in 2 worker processes
  zoo run specs/two_moons_depth.yaml --executor ray --address auto   on a running Ray cluster
  zoo run specs/two_moons_depth.yaml --device cuda    on the GPUs, one worker per GPU
  zoo status runs/mine                                done, failed and pending cells
  zoo validate specs/*.yaml                           check specs, print FILE:LINE:COL errors
  zoo show specs/two_moons_depth.yaml                 resolved spec, cells, model sites
  zoo report runs/mine                                rebuild tables and report from cells
  zoo schema > spec.schema.json                       JSON Schema for editor completion

exit status: 0 ok, 1 some cells failed (or could not be stored), 2 bad input (nothing
computed is lost), 130 stopped by Ctrl-C, 143 stopped by SIGTERM (finished cells are kept;
`zoo run DIR` resumes)
"""


def _specs_dir() -> Path:
    here = Path.cwd() / "specs"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parent.parent / "specs"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zoo",
        description="bnn-zoo: Bayesian neural networks on Pyro from declarative YAML specs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    with_set(r)

    v = sub.add_parser("validate", help="validate specs; print every problem with its line")
    v.add_argument("specs", nargs="+", help="spec files")
    with_set(v)

    s = sub.add_parser("show", help="print the resolved spec, its cells and model sites")
    s.add_argument("spec")
    s.add_argument("--cell", type=int, default=0, help="index of the cell whose sites to show")
    with_set(s)

    sub.add_parser("schema", help="print the JSON Schema of a spec")
    sub.add_parser("list", help="list the specs shipped under specs/")

    rp = sub.add_parser("report", help="rebuild tables and report of a run directory")
    rp.add_argument("run_dir", type=Path)
    st = sub.add_parser("status", help="done, failed and pending cells of a run directory")
    st.add_argument("run_dir", type=Path)
    return p


class UsageError(Exception):
    """Bad input that is not a spec validation error."""


def _load(path: str | Path, overrides: list[str] = (), *, warn: bool = True):
    """Load a spec; its deprecation messages go to stderr as plain FILE:LINE:COL lines."""
    import warnings

    from zoo.spec import SpecDeprecationWarning, load_spec

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SpecDeprecationWarning)
        spec = load_spec(path, overrides)
    for w in caught:
        if issubclass(w.category, SpecDeprecationWarning):
            if warn:
                print(f"zoo: deprecated: {w.message}", file=sys.stderr)
        else:  # not ours to silence
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return spec


def _cmd_run(a: argparse.Namespace) -> int:
    from zoo.run.executors import WorkerStartError
    from zoo.run.runner import default_out_dir, run_spec, spec_runtime
    from zoo.run.store import RunDirError
    from zoo.runtime import RuntimeUnavailable

    if a.workers is not None and a.workers < 1:
        raise UsageError(f"--workers {a.workers}: give at least 1 worker")
    if a.address and a.executor != "ray":
        raise UsageError("--address is for --executor ray")
    if a.executor == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise UsageError('--executor ray needs Ray: pip install "bnn-zoo[ray]"') from None
    source = Path(a.spec)
    if source.is_dir():  # resume a run directory from its stored spec
        if a.out and a.out.resolve() != source.resolve():
            raise UsageError(f"{source} is a run directory; drop --out (it runs in place)")
        spec = _run_dir_spec(source)
        if a.overrides:
            spec = _load(str(source / "spec.yaml"), a.overrides)
        out = source
    else:
        out = a.out
        if out is not None:
            _check_version(out)
        spec = _load(a.spec, a.overrides)
        out = out or default_out_dir(spec)
    try:
        runtime = spec_runtime(spec, a.device) if spec.simulation is None else None
    except RuntimeUnavailable as e:
        raise UsageError(str(e)) from None
    _check_data(spec)
    _check_widths(spec)
    what = "simulation" if spec.simulation is not None else f"{len(spec.cells())} cells"
    on = f" on {runtime.device}" if runtime is not None and runtime.is_cuda else ""
    print(f"zoo: {spec.name}: {what} -> {out}{on}", file=sys.stderr)
    try:  # --fresh deletes only in a run directory, under its lock (checked first)
        res = run_spec(
            spec,
            out,
            executor=a.executor,
            workers=a.workers,
            address=a.address,
            retry_failed=a.retry_failed,
            progress=not a.no_progress,
            runtime=runtime,
            fresh=a.fresh,
        )
    except RunDirError as e:
        raise UsageError(str(e)) from None
    except WorkerStartError as e:  # the cells stay pending; a resume runs them
        print(f"zoo: {e}; rerun with --workers 1 to run the cells in this process", file=sys.stderr)
        return 1
    if not res.report_error:
        print(f"\nreport: {out / 'report.md'}  (html: {out / 'report.html'})")
        _print_summary(out)
    code = 0
    if res.n_failed:
        print(
            f"zoo: {res.n_failed} of {res.n_cells} cells failed; see {out / 'results.csv'} "
            f"and rerun them with: zoo run {out} --retry-failed",
            file=sys.stderr,
        )
        code = 1
    if res.n_unsaved or res.report_error:
        print(
            f"zoo: {res.n_unsaved} computed cells could not be stored in {out}"
            + (f" (saved to {res.rescued_to})" if res.rescued_to else "")
            + ("; the report was not written" if res.report_error else ""),
            file=sys.stderr,
        )
        code = 1
    return code


def _check_data(spec, *, missing_ok: bool = False) -> None:
    """Data that cannot be trained on is bad input (exit 2), found before any cell runs.

    Loads each distinct data section once (with its first cell's seed) through the checks
    of ``zoo.data.load``. With ``missing_ok`` (``zoo validate``) files that are not on this
    machine only give a note: they are checked again when the run starts.
    """
    import zoo.data

    seen = set()
    for cell in spec.cells() if spec.simulation is None else []:
        section = cell.spec.data
        if repr(section) not in seen:
            seen.add(repr(section))
            try:
                zoo.data.check(section, cell.spec.seed)
            except zoo.data.DataFilesMissing as e:
                if not missing_ok:
                    raise UsageError(str(e)) from None
                print(f"zoo: note: {e} (checked again when the run starts)", file=sys.stderr)
            except zoo.data.DataError as e:
                raise UsageError(str(e)) from None


def _check_widths(spec) -> None:
    """Warn (stderr) about degenerate networks; a network that cannot be built is exit 2.

    One line per distinct network and data set, for its first cell. The widths are the
    spec's arithmetic (``MLPModel.network_warnings``, as in ``zoo.models.width_warnings``),
    so ``zoo validate`` still imports no torch.
    """
    import zoo.data

    groups: dict[tuple[str, str], list] = {}
    for cell in spec.cells() if spec.simulation is None else []:
        groups.setdefault((repr(cell.spec.data), repr(cell.spec.model)), []).append(cell)
    shapes: dict[str, tuple[int, int] | None] = {}
    for (data_key, _), group in groups.items():
        cell = group[0]
        if data_key not in shapes:
            try:
                ds = zoo.data.load(cell.spec.data, cell.spec.seed)
                shapes[data_key] = (ds.in_dim, ds.n_classes)
            except (zoo.data.DataFilesMissing, OSError, ValueError):
                shapes[data_key] = None  # _check_data has said what is wrong with the data
        if shapes[data_key] is None:
            continue
        try:
            out_dim = getattr(cell.spec.likelihood, "out_dim", None)  # one logit: bernoulli
            lines = cell.spec.model.network_warnings(*shapes[data_key], out_dim)
        except ValueError as e:
            raise UsageError(f"cell {cell.cell_id}: {e}") from None
        n = len(group) - 1
        more = f" (and {n} more cell{'s' if n > 1 else ''} with this network)" if n else ""
        for line in lines:
            print(f"warning: cell {cell.cell_id}: {line}{more}", file=sys.stderr)


_HEADLINE = (
    "accuracy",
    "nll",
    "kl_diag_full",
    "kl_null",
    "kl_excess",
    "w2_diag_full",
    "rmse",
    "pruned_frac",
    "units_eff_frac",
    "laplace_kl",
    "max_r_hat",
    "min_ess_bulk",
    "draws_per_chain",
)
_SUMMARY_COLS = 8  # metrics per method in the terminal summary; all of them are in summary.csv


def _print_summary(out: Path) -> None:
    """Print, per method, the headline means of ``summary.csv`` within the terminal's width.

    Columns that are empty for a method are left out, a mean over fewer finite values than
    the row's seeds is marked ``[k/n]``, and at most ``_SUMMARY_COLS`` metrics are shown per
    method (the headline ones first); the file has all of them.
    """
    import pandas as pd

    path = out / "summary.csv"
    if not path.exists() or path.stat().st_size == 0:
        return
    df = pd.read_csv(path)
    if df.empty:  # no cell stored, or none ok
        print(f"no finished cell to summarize yet (zoo status {out} lists the cells)")
        return
    width = shutil.get_terminal_size((100, 24)).columns  # COLUMNS, the terminal, or 100
    hidden = ("n_train_mean", "final_loss_mean", "n_var_params_mean", "n_params_mean")
    means = [c for c in df.columns if c.endswith("_mean") and c not in hidden]
    keys = [c for c in df.columns if c not in means and not c.endswith(("_sem", "_n"))]
    keys = [c for c in keys if c != "n" and c not in hidden]
    rank = {m: i for i, m in enumerate(_HEADLINE)}
    groups = df.groupby("method", sort=False) if "method" in df.columns else [(None, df)]
    lines: list[str] = []
    for _, rows in groups:
        have = [c for c in means if rows[c].notna().any()]
        have.sort(key=lambda c: rank.get(c[: -len("_mean")], len(rank)))
        shown, more = have[:_SUMMARY_COLS], len(have) - _SUMMARY_COLS
        table = rows[keys].copy()
        for c in shown:
            k = rows.get(c[: -len("_mean")] + "_n")
            cells = []
            for i, v in zip(rows.index, rows[c], strict=True):
                text = "-" if pd.isna(v) else f"{v:.4g}"
                if k is not None and "n" in rows and pd.notna(k[i]) and k[i] < rows["n"][i]:
                    text += f" [{int(k[i])}/{int(rows['n'][i])}]"
                cells.append(text)
            table[c[: -len("_mean")]] = cells
        if "n" in rows:
            table["seeds"] = rows["n"].astype(int)
        lines += table.to_string(index=False, line_width=width).splitlines()
        if more > 0:
            lines.append(f"  ... and {more} more metrics of this method in summary.csv")
        lines.append("")
    # column blocks wrap at the width; a single cell wider than it is cut
    print("\n".join(ln if len(ln) <= width else ln[: width - 1] + "…" for ln in lines).rstrip())


def _cmd_validate(a: argparse.Namespace) -> int:
    from zoo.spec import SpecError

    bad = 0
    for path in a.specs:
        try:
            spec = _load(path, a.overrides)
            _check_data(spec, missing_ok=True)
            _check_widths(spec)
            print(f"{path}: ok ({len(spec.cells())} cells)")
        except SpecError as e:
            bad += 1
            print("\n".join(e.messages), file=sys.stderr)
        except UsageError as e:  # data that cannot be trained on
            bad += 1
            print(f"zoo: {path}: {e}", file=sys.stderr)
    return 2 if bad else 0


def _cmd_show(a: argparse.Namespace) -> int:
    from zoo.run.store import dump_spec

    spec = _load(a.spec, a.overrides)
    print(dump_spec(spec))
    cells = spec.cells()
    print(f"# {len(cells)} cells")
    for i, c in enumerate(cells):
        print(f"  [{i}] {c.cell_id}")
    if not 0 <= a.cell < len(cells):
        raise UsageError(f"--cell {a.cell}: the spec has cells 0..{len(cells) - 1}")
    cell = cells[a.cell]
    print(f"\n# sample sites of cell [{a.cell}] {cell.cell_id}")
    for line in _sites(cell):
        print("  " + line)
    return 0


def _sites(cell) -> list[str]:
    import pyro

    import zoo.data
    import zoo.models
    from zoo.run.runner import spec_runtime

    try:
        ds = zoo.data.load(cell.spec.data, cell.spec.seed)
    except zoo.data.DataError as e:
        raise UsageError(str(e)) from None
    model = zoo.models.build(cell.spec, ds)
    runtime = spec_runtime(cell.spec, "cpu")
    x = runtime.tensor(ds.x_train[:2])
    y = runtime.tensor(ds.y_train[:2])
    tr = pyro.poutine.trace(model).get_trace(x, y, len(ds.x_train))
    lines = [
        f"network {model.dims} ({model.num_params} parameters), data n_train="
        f"{len(ds.x_train)}, n_test={len(ds.x_test)}"
    ]
    for name, site in tr.nodes.items():
        fn = site.get("fn")
        if site["type"] != "sample" or not hasattr(fn, "batch_shape"):
            continue  # plates record their subsample as a pseudo-site
        base = fn
        while hasattr(base, "base_dist"):
            base = base.base_dist
        params = {k: getattr(base, k) for k in ("loc", "scale") if hasattr(base, k)}
        ptxt = ", ".join(f"{k}={_first(v):.4g}" for k, v in params.items())
        kind = "observed" if site["is_observed"] else "latent"
        shape = tuple(fn.batch_shape + fn.event_shape)
        lines.append(f"{name:<16} {kind:<8} shape={shape!s:<12} {type(base).__name__}({ptxt})")
    return lines


def _first(v) -> float:
    return float(v.reshape(-1)[0]) if hasattr(v, "reshape") else float(v)


def _cmd_schema(a: argparse.Namespace) -> int:
    from zoo.spec import Spec

    print(json.dumps(Spec.model_json_schema(), indent=2))
    return 0


def _cmd_list(a: argparse.Namespace) -> int:
    from zoo.spec import SpecError

    d = _specs_dir()
    for path in sorted(d.glob("*.yaml")):
        try:
            spec = _load(path, warn=False)
            desc = " ".join(spec.description.split()) or "(no description)"
            print(f"{path.name:<32} {len(spec.cells()):>4} cells  {desc}")
        except SpecError:
            print(f"{path.name:<32}  INVALID (zoo validate {path})")
    return 0


def _check_version(run_dir: Path) -> None:
    """A run directory of another spec_version is bad input: say to recompute it (exit 2)."""
    from zoo.run.store import OutdatedRunDir, RunDir, check_version

    try:
        check_version(RunDir(run_dir))
    except OutdatedRunDir as e:
        raise UsageError(str(e)) from None


def _run_dir_spec(run_dir: Path):
    if not (run_dir / "spec.yaml").is_file():
        raise UsageError(
            f"{run_dir}: not a run directory (no spec.yaml); give the --out "
            "directory of a `zoo run`"
        )
    _check_version(run_dir)
    return _load(run_dir / "spec.yaml")


def _cmd_report(a: argparse.Namespace) -> int:
    from zoo.run.runner import build_report

    spec = _run_dir_spec(a.run_dir)
    try:
        build_report(a.run_dir, spec, log=lambda msg: print(msg, file=sys.stderr))
    except OSError as e:
        raise UsageError(f"cannot write the report in {a.run_dir}: {e.strerror or e}") from None
    print(f"report: {a.run_dir / 'report.md'}  (html: {a.run_dir / 'report.html'})")
    _print_summary(a.run_dir)
    return 0


def _cmd_status(a: argparse.Namespace) -> int:
    from zoo.run.store import RunDir

    spec = _run_dir_spec(a.run_dir)
    run = RunDir(a.run_dir)
    stored = {r["cell_id"]: r for r in run.records()}  # damaged records are left out
    counts = {"ok": 0, "failed": 0, "pending": 0}
    for c in spec.cells():
        rec = stored.get(c.cell_id, {})
        st = rec.get("status", "pending")
        counts[st] = counts.get(st, 0) + 1
        if st != "ok":
            note = "  (its worker died; a resume runs it again)" if rec.get("retry") else ""
            print(f"{st:<8} {c.cell_id}{note}")
    for problem in run.problems():
        print(f"zoo: damaged file: {problem}", file=sys.stderr)
    print(f"done {counts['ok']}, failed {counts['failed']}, pending {counts['pending']}")
    return 0


COMMANDS = {
    "run": _cmd_run,
    "validate": _cmd_validate,
    "show": _cmd_show,
    "schema": _cmd_schema,
    "list": _cmd_list,
    "report": _cmd_report,
    "status": _cmd_status,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``zoo`` script; returns the exit status."""
    from zoo.spec import SpecError

    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except SpecError as e:
        print("\n".join(e.messages), file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"zoo: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `zoo show SPEC | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as e:  # the runner's RunInterrupted has said what was kept
        signum = getattr(e, "signum", None)
        if signum is None:
            print(
                "\nzoo: interrupted; finished cells are kept, rerun with the same --out to resume",
                file=sys.stderr,
            )
        return 128 + (signum or 2)


if __name__ == "__main__":
    sys.exit(main())
