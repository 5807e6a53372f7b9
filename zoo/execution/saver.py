"""Storing finished cells when the disk may be full: keep, retry, rescue.

A result that cannot be written (full disk) is kept in memory and written again after
later cells and at the end (:data:`WRITE_RETRY_DELAYS`); what still cannot be written is
saved to a new directory under the system's temporary directory, and the run says where.
Nothing computed is dropped without a line saying so.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from zoo.execution.executors import CellResult
from zoo.execution.signals import Stopper
from zoo.execution.store import RunStore

__all__ = ["RETRY_EVERY", "WRITE_RETRY_DELAYS", "Saver", "describe_os_error"]

#: Pauses (s) between the last tries to store results that could not be written.
WRITE_RETRY_DELAYS = (1.0, 2.0, 4.0)
#: Seconds between tries to store an unsaved result while other cells still run.
RETRY_EVERY = 5.0


class Saver:
    """Writes results to the store; keeps those it cannot write and tries them again."""

    def __init__(self, store: RunStore, stopper: Stopper, say: Callable[[str], None]) -> None:
        self.store, self.stopper, self.say = store, stopper, say
        self.unsaved: list[CellResult] = []
        self.rescued: list[CellResult] = []
        self.next_try = 0.0

    def _write(self, res: CellResult) -> None:
        with self.stopper.deferring():
            self.store.write_cell(res.record, res.artifacts)

    def save(self, res: CellResult) -> bool:
        """Store ``res``; on failure keep it (and say so). True when stored."""
        try:
            self._write(res)
            return True
        except OSError as e:
            self.unsaved.append(res)
            self.next_try = time.monotonic() + RETRY_EVERY
            self.say(
                f"zoo: could not store cell {res.record['cell_id']} in {self.store.root} "
                f"({describe_os_error(e)}); its result is kept in memory and written again "
                "later"
            )
            return False

    def retry(self, final: bool = False) -> None:
        """Try the unsaved results again: now if due (or ``final``: with pauses)."""
        delays = (0.0, *WRITE_RETRY_DELAYS) if final else (0.0,)
        if not final and time.monotonic() < self.next_try:
            return
        for delay in delays:
            if not self.unsaved:
                return
            time.sleep(delay)
            still = []
            for res in self.unsaved:
                try:
                    self._write(res)
                    self.say(f"zoo: stored cell {res.record['cell_id']} on a later try")
                except OSError:
                    still.append(res)
            self.unsaved = still
        self.next_try = time.monotonic() + RETRY_EVERY

    def rescue(self) -> Path | None:
        """Write what is still unsaved to a new temporary directory; say where (or that
        it is lost). Returns that directory, None when nothing was left or it failed."""
        if not self.unsaved:
            return None
        ids = [r.record["cell_id"] for r in self.unsaved]
        try:
            where = Path(tempfile.mkdtemp(prefix="zoo-unsaved-")) / "cells"
            where.mkdir()
            for res in self.unsaved:
                cid = res.record["cell_id"]
                for suffix, data in res.artifacts.items():
                    (where / f"{cid}{suffix}").write_bytes(data)
                text = json.dumps(res.record, indent=1, sort_keys=True)
                (where / f"{cid}.json").write_text(text, encoding="utf-8")
        except OSError as e:
            self.say(
                f"zoo: LOST: the results of {len(ids)} computed cells could not be "
                f"written anywhere ({describe_os_error(e)}): {', '.join(ids)}; a resume computes "
                "them again"
            )
            return None
        self.say(
            f"zoo: {len(ids)} computed cells could not be stored in {self.store.root}; "
            f"they were saved to {where}. Once there is room, move them in with: "
            f"mv {where}/* {self.store.cells_dir}/  (or a resume computes them "
            "again)"
        )
        self.rescued += self.unsaved
        self.unsaved = []
        return where.parent


def describe_os_error(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__
