"""Running one list of cells (a phase of a run) and what is said about each finished cell.

:class:`Phases` runs lists of cells one after the other through one executor setting;
:class:`Started` keeps the ids of the cells whose fit has started for ``zoo status``;
:func:`warn_about` says when a worker died or a metric is not finite. Split out of
:mod:`zoo.execution.runner`, which runs a spec's tuning cells and then its main cells.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zoo.execution.checkpoint_file import UnusableCheckpoint, config_sha256
from zoo.execution.executors import EXECUTORS, CellCheckpoints
from zoo.execution.feedback import Feedback
from zoo.execution.order import longest_first
from zoo.execution.saver import Saver
from zoo.execution.signals import Stopper
from zoo.execution.store import RunStore
from zoo.runtime import Runtime

__all__ = ["Phases", "Started", "warn_about"]


class Started:
    """The cells whose fit has started (their first progress message) and are not stored
    yet, kept in the run directory for ``zoo status`` (:meth:`RunStore.write_running`) from
    the start of the run to its end, so it can tell running cells from queued ones (with
    ``track`` False, for executors that report no progress, no list is kept). A failed
    write only costs that hint."""

    def __init__(self, store: RunStore, show: Callable[..., None] | None, track: bool) -> None:
        self.store, self.show, self.track, self.ids = store, show, track, set()
        self._write(self.ids)

    def _write(self, ids: set[str] | None) -> None:
        if self.track:
            try:
                self.store.write_running(ids)
            except OSError:
                pass

    def on_progress(self, cell_id: str, desc: str, phase: str, i: int, n: int) -> None:
        if cell_id not in self.ids:
            self.ids.add(cell_id)
            self._write(self.ids)
        if self.show is not None:
            self.show(cell_id, desc, phase, i, n)

    def finished(self, cell_id: str) -> None:
        if cell_id in self.ids:
            self.ids.discard(cell_id)
            self._write(self.ids)

    def clear(self) -> None:
        self.ids.clear()
        self._write(None)


def warn_about(rec: dict[str, Any], say: Callable[[str], None]) -> None:
    """Warning lines for a dead worker and for non-finite metrics."""
    cid = rec["cell_id"]
    if rec.get("worker_died"):
        say(
            f"zoo: worker died ({rec['worker_died']}) while running cell {cid}; the other "
            "cells go on, and a plain resume runs this one again (fewer --workers need "
            "less memory)"
        )
    if rec.get("nonfinite"):
        met = rec.get("metrics", {})
        bad = ", ".join(f"{k}={met.get(k)}" for k in rec["nonfinite"])
        say(
            f"zoo: warning: cell {cid} has non-finite metrics: {bad} (kept in results.csv; "
            "the summary's means are over the finite values only)"
        )


class Phases:
    """Runs lists of cells one after the other (a spec's tuning cells, then its main cells)
    through one executor setting, keeping every cell's status."""

    def __init__(
        self,
        store: RunStore,
        stopper: Stopper,
        executor: str,
        n_workers: int,
        threads: int,
        runtime: Runtime,
        address: str | None,
        progress: bool,
        log: Callable[[str], None],
        checkpoint_every: float | None = None,
    ) -> None:
        self.checkpoint_every = checkpoint_every
        self.store, self.executor, self.n_workers, self.threads = (
            store,
            executor,
            n_workers,
            threads,
        )
        self.runtime, self.address, self.progress, self.log = runtime, address, progress, log
        self.say: Callable[[str], None] = log
        self.saver = Saver(store, stopper, lambda msg: self.say(msg))
        self.status: dict[str, str] = {}
        self.skipped = 0  # cells already stored when their phase began
        self.said: set[str] = set()  # damaged files named already

    def checkpoints(self, cells: list[Any]) -> CellCheckpoints | None:
        """The sampler states of ``cells`` in this run directory (``checkpoints/``), saved
        every ``checkpoint_every`` seconds; None when off (None or 0). A file that is not
        resumed is named with why, and its cell starts over (:mod:`zoo.execution.checkpoint_file`)."""
        if not self.checkpoint_every:
            return None
        digests = {c.cell_id: config_sha256(c.config()) for c in cells}
        failed: set[str] = set()

        def load(cell_id: str) -> bytes | None:
            try:
                return self.store.read_checkpoint(cell_id, digests[cell_id])
            except UnusableCheckpoint as e:
                self.say(f"zoo: cell {cell_id}: {e}; it is not resumed, the cell starts over")
                return None

        def save(cell_id: str, data: bytes) -> None:
            try:
                self.store.write_checkpoint(cell_id, data, digests[cell_id])
            except (OSError, UnusableCheckpoint) as e:  # a convenience: the cell goes on
                if cell_id not in failed:
                    failed.add(cell_id)
                    why = (e.strerror or e) if isinstance(e, OSError) else e
                    self.say(
                        f"zoo: cell {cell_id}: its checkpoint could not be saved "
                        f"({why}); the cell goes on, but a stop loses it"
                    )

        return CellCheckpoints(
            load,
            save,
            self.checkpoint_every,
            lambda cell_id, line: self.say(f"zoo: cell {cell_id}: {line}"),
        )

    def _drop_checkpoint(self, rec: dict[str, Any]) -> None:
        """A stored cell needs no checkpoint (one whose worker died keeps it: it resumes)."""
        if rec.get("retry"):
            return
        try:
            self.store.remove_checkpoint(rec["cell_id"])
        except OSError:
            pass

    def save(self, res: Any) -> None:
        """Store a result made without running (a main cell whose tuning all failed)."""
        if self.saver.save(res):
            self.status[res.record["cell_id"]] = res.record["status"]

    def phase(self, cells: list[Any], retry_failed: bool, what: str) -> int:
        """Run the cells of ``cells`` not yet stored; returns how many ran."""
        store, log = self.store, self.log
        records = {c.cell_id: store.record(c.cell_id) for c in cells}
        for cid, r in records.items():
            self.status[cid] = (r or {}).get("status", "pending")
            if r is not None:  # stored by a run that stopped before it dropped the state
                self._drop_checkpoint(r)
        for problem in store.problems():
            if problem not in self.said:
                self.said.add(problem)
                log(f"zoo: damaged file: {problem}; it is computed again")

        def to_run(cid: str) -> bool:
            rec = records[cid]
            return rec is None or (rec["status"] == "failed" and (retry_failed or rec.get("retry")))

        todo = longest_first([c for c in cells if to_run(c.cell_id)])
        done_before = len(cells) - len(todo)
        self.skipped += done_before
        if any(r is not None for r in records.values()):
            status = self.status
            kept_failed = sum(status[c.cell_id] == "failed" for c in cells if c not in todo)
            again = sum(status[c.cell_id] == "failed" for c in todo)
            extra = f" ({kept_failed} failed: rerun with --retry-failed)" if kept_failed else ""
            why = "" if retry_failed else " whose worker died"
            more = f"; running {again} failed cells{why} again" if again else ""
            log(
                f"resuming {store.root}: {done_before} of {len(cells)} {what} already "
                f"done{extra}{more}"
            )
        if todo and self.executor != "inprocess":
            on = f" on {self.runtime.device}" if self.runtime.is_cuda else ""
            log(
                f"running {len(todo)} {what} on {self.executor}: {self.n_workers} workers x "
                f"{self.threads} torch threads{on}"
            )
        if not todo:
            return 0
        shown = Feedback(cells, todo, done_before, self.n_workers, log, self.progress)
        self.say = shown.say
        # Ray's tasks report no progress: no list, so zoo status does not call them queued
        on_progress = shown.on_progress if self.progress else None
        started = Started(store, on_progress, self.executor != "ray")
        results = EXECUTORS[self.executor](
            todo,
            workers=self.n_workers,
            runtime=self.runtime,
            address=self.address,
            progress=False,
            on_progress=started.on_progress,
            checkpoints=self.checkpoints(todo),
        )
        ran = 0
        try:
            for res in results:
                ran += 1
                rec = res.record
                if self.saver.save(res):
                    self.status[rec["cell_id"]] = rec["status"]
                    self._drop_checkpoint(rec)
                started.finished(rec["cell_id"])
                shown.finished(rec)
                warn_about(rec, shown.say)
                self.saver.retry()
        finally:
            results.close()  # stops the workers at once when the loop ends early
            shown.close()
            started.clear()
            self.say = log
        return ran
