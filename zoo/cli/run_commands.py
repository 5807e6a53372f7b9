"""``zoo run``, ``zoo report`` and ``zoo status``: the commands on a run directory."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from reports.sampler_report import grade_lines, sampler_record
from zoo.cli.common import stdout_closed
from zoo.cli.run_plan import REPORT_WAIT, not_started, plan_args
from zoo.cli.summary import print_summary, run_holder
from zoo.execution.checkpoint_file import UnusableCheckpoint, config_sha256
from zoo.execution.executors import ExecutorStartError, WorkerStartError
from zoo.execution.launch import launch
from zoo.execution.plan import RunPlan, run_dir_spec
from zoo.execution.rundir import RunDir, RunDirError
from zoo.execution.runner import build_report
from zoo.execution.store import RunStore
from zoo.execution.tune import plan as tune_plan
from zoo.execution.usage import UsageError

__all__ = ["cmd_report", "cmd_run", "cmd_status"]


def cmd_run(a: argparse.Namespace, plan: RunPlan | None = None) -> int:
    """``zoo run SPEC|DIR``: run the cells not yet stored, write the report; the exit status.

    The path of ``zoo.run(...)``: ``plan`` is :func:`~zoo.execution.plan.plan_run`'s (made
    before torch was imported; without it the arguments and the spec are checked here), run
    by :func:`~zoo.execution.launch.launch`. This door adds the words and the exit status.
    """
    with not_started():
        plan = plan or plan_args(a)
        out = plan.out
        try:
            res = launch(plan, log=lambda line: print(line, file=sys.stderr))
        except RunDirError as e:
            raise UsageError(str(e)) from None
        except ExecutorStartError as e:  # no cell ran; a resume on local workers runs them
            print(
                f"zoo: the {a.executor} executor {e}. No cell ran: the cells are pending in "
                f"{out}; run them here with local worker processes: zoo run {out} "
                "--executor local",
                file=sys.stderr,
            )
            return 2
        except WorkerStartError as e:  # the cells stay pending; a resume runs them
            print(
                f"zoo: {e}; rerun with --workers 1 to run the cells in this process",
                file=sys.stderr,
            )
            return 1
    if not res.report_error:
        try:
            print(f"\nreport: {out / 'report.md'}  (html: {out / 'report.html'})")
            print_summary(out)
            sys.stdout.flush()
        except BrokenPipeError:  # `zoo run ... | head`: the status below still counts
            stdout_closed()
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


def cmd_report(a: argparse.Namespace) -> int:
    """``zoo report DIR``: rebuild the tables and the report from the stored cells.

    It holds the run directory's lock while it writes, so a report and a run never write
    the same files: a run going there refuses it (exit 2), and a run started meanwhile
    waits for nothing, it is refused.
    """
    spec = run_dir_spec(a.run_dir)
    store = RunStore(a.run_dir)
    try:
        with store.lock(then=REPORT_WAIT):
            build_report(store, spec, log=lambda msg: print(msg, file=sys.stderr))
    except RunDirError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot write the report in {a.run_dir}: {e.strerror or e}") from None
    print(f"report: {a.run_dir / 'report.md'}  (html: {a.run_dir / 'report.html'})")
    print_summary(a.run_dir)
    _print_grades(RunDir(a.run_dir), spec)
    return 0


def _print_grades(run: RunDir, spec) -> None:
    """Per reference grade, how many of the spec's sampled cells, and what each one below
    gold failed (:func:`reports.sampler_report.grade_lines`)."""
    ids = {c.cell_id for c in tune_plan(spec, run.record).main}
    graded = {
        r["cell_id"]: sampler_record(r.get("metrics") or {})
        for r in run.records()
        if r["cell_id"] in ids
        and r.get("status") == "ok"
        and (r.get("metrics") or {}).get("reference_grade")
    }
    for line in grade_lines(graded):
        print(line)


def _checkpoint_note(run: RunDir, cell: Any) -> str:
    """``  (sampler checkpoint of <UTC time>: ...)`` when the cell has a saved state that a
    resume takes (the test a run makes: :meth:`RunDir.read_checkpoint`); the file and why
    not when it has one that a resume does not take."""
    try:
        data = run.read_checkpoint(cell.cell_id, config_sha256(cell.config()))
        if data is None:
            return ""
        when = datetime.fromtimestamp(run.checkpoint_path(cell.cell_id).stat().st_mtime, tz=UTC)
    except UnusableCheckpoint as e:
        return f"  ({e}: a resume starts the cell over)"
    except OSError:  # gone since it was read: the run stored its cell
        return ""
    return f"  (sampler checkpoint of {when:%Y-%m-%d %H:%M} UTC: a resume continues from it)"


def cmd_status(a: argparse.Namespace) -> int:
    """``zoo status DIR``: the counts of done, running, queued, failed and pending cells of a
    run directory, then the cells not done (failed first).

    While a ``zoo run`` holds the directory, a cell not stored is ``running`` once its fit
    has started (the run keeps their ids in the directory) and ``queued`` before; where the
    run keeps no such list (Ray's tasks report no progress), ``running/queued``. With no
    run going, it is ``pending`` (the next ``zoo run DIR`` runs it).
    """
    spec = run_dir_spec(a.run_dir)
    run = RunDir(a.run_dir)
    stored = {r["cell_id"]: r for r in run.records()}  # damaged records are left out
    pid = run_holder(a.run_dir)  # a zoo run is going: the cells not stored are its to run
    started = run.running() if pid is not None else None
    kinds = ("failed", "running", "queued", "running/queued", "pending")
    counts = dict.fromkeys(("ok", *kinds), 0)
    lines: dict[str, list[str]] = {k: [] for k in kinds}
    for c in tune_plan(spec, stored.get).cells:  # tuning cells first (a spec with tune)
        rec = stored.get(c.cell_id)
        if rec is not None:
            st = rec.get("status", "pending")
        elif pid is None:
            st = "pending"
        elif started is None:
            st = "running/queued"
        else:
            st = "running" if c.cell_id in started else "queued"
        counts[st] = counts.get(st, 0) + 1
        if st != "ok":
            note = "  (its worker died; a resume runs it again)" if (rec or {}).get("retry") else ""
            note += _checkpoint_note(run, c) if rec is None or rec.get("retry") else ""
            lines.setdefault(st, []).append(f"{st:<8} {c.cell_id}{note}")
    going = (
        ""
        if pid is None
        else f"running/queued {counts['running/queued']}, "
        if started is None
        else f"running {counts['running']}, queued {counts['queued']}, "
    )
    print(
        f"done {counts['ok']}, {going}failed {counts['failed']}, pending {counts['pending']}"
        + ("" if not pid else f" (zoo run pid {pid} is going)")
    )
    for st in kinds:
        for line in lines[st]:
            print(line)
    for problem in run.problems():
        print(f"zoo: damaged file: {problem}", file=sys.stderr)
    _print_grades(run, spec)
    return 0
