"""What a run says while it runs: a line per finished cell, the time left, progress.

One line per finished cell with the time left, estimated per method (the mean time of the
method's finished cells times its cells still to run, over the workers). With ``progress``
the steps inside each running cell (optimizer steps; a sampler's warm-up and draws) are
shown: one bar per running cell on a terminal; under Jupyter one ``tqdm.auto`` bar of the
cells (a notebook widget with ipywidgets) whose postfix names the running cell's phase and
step; else (a CI log, a file) a status line per cell at most every :data:`STATUS_EVERY`
seconds.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from tqdm.auto import tqdm

__all__ = ["STATUS_EVERY", "Feedback", "format_seconds", "in_notebook"]

#: Seconds between two status lines of one running cell when stderr is not a terminal.
STATUS_EVERY = 30.0


def format_seconds(s: float) -> str:
    """``42s``, ``12m05s``, ``3h10m``."""
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f}s"
    if s < 5400:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


class Feedback:
    """Cell lines, per-method time left, and progress inside running cells."""

    def __init__(
        self,
        cells: list[Any],
        todo: list[Any],
        done_before: int,
        workers: int,
        log: Callable[[str], None],
        progress: bool,
    ) -> None:
        self.method = {c.cell_id: c.method.name for c in cells}
        self.left = Counter(self.method[c.cell_id] for c in todo)
        self.times: dict[str, list[float]] = defaultdict(list)
        self.workers = max(1, workers)
        self.log = log
        self.k, self.n = done_before, len(cells)
        self.progress = progress
        self.tty = progress and _isatty()
        self.notebook = progress and not self.tty and in_notebook()
        self.running: dict[str, dict[str, Any]] = {}
        self.bar = None
        self.slots: list[Any] = []
        self.eta_text = ""
        if self.tty or self.notebook:
            fmt = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
            self.bar = tqdm(
                total=self.n,
                initial=self.k,
                desc="cells",
                unit="cell",
                dynamic_ncols=True,
                bar_format=fmt,
                file=sys.stderr,
            )
        if self.tty:
            self.slots = [
                tqdm(
                    total=1,
                    position=i + 1,
                    leave=False,
                    bar_format="  {desc}",
                    dynamic_ncols=True,
                    file=sys.stderr,
                )
                for i in range(min(self.workers, len(todo)))
            ]
            self.free = list(range(len(self.slots)))

    def say(self, msg: str) -> None:
        """A line that stays (above the bars on a terminal)."""
        if self.bar is not None:
            self.bar.write(msg, file=sys.stderr)
        else:
            self.log(msg)

    def on_progress(self, cell_id: str, desc: str, phase: str, i: int, n: int) -> None:
        """Progress inside a running cell (from :mod:`zoo.inference.progress`)."""
        now = time.monotonic()
        st = self.running.setdefault(cell_id, {"t0": now, "shown": now, "phase": None})
        label = "" if cell_id.startswith(desc) else f"{desc} "
        what = f"{label}{phase}"
        if self.notebook:  # one bar: the running cell's step in its postfix
            step = f"{_cut(cell_id, 40)} {what} {i}/{n}"
            self.bar.set_postfix_str(f"{self.eta_text}; {step}" if self.eta_text else step)
            return
        if self.tty:
            if "slot" not in st:
                if not self.free:
                    return
                st["slot"] = self.free.pop(0)
            filled = round(20 * i / n) if n else 0
            meter = "#" * filled + "-" * (20 - filled)
            text = f"{_cut(cell_id, 40)} {what} [{meter}] {i}/{n}"
            self.slots[st["slot"]].set_description_str(text, refresh=True)
            return
        if not self.progress:
            return
        changed = st["phase"] is not None and st["phase"] != what
        if now - st["shown"] >= STATUS_EVERY or (changed and now - st["t0"] >= STATUS_EVERY):
            st["shown"] = now
            self.log(f"  {cell_id}: {what} {i}/{n} ({format_seconds(now - st['t0'])} in)")
        st["phase"] = what

    def finished(self, rec: dict[str, Any]) -> None:
        """A cell's line: status, headline metrics, its time and the time left."""
        cid = rec["cell_id"]
        st = self.running.pop(cid, {})
        if "slot" in st:
            self.slots[st["slot"]].set_description_str("", refresh=True)
            self.free.append(st["slot"])
            self.free.sort()
        m = self.method.get(cid)
        if m is not None:
            self.left[m] -= 1
            if rec.get("status") == "ok":
                self.times[m].append(float(rec.get("time_s", 0.0)))
        self.k += 1
        eta = self.eta()
        if rec.get("status") == "ok":
            met = rec.get("metrics", {})
            shown = ", ".join(
                f"{key}={met[key]:.4g}"
                for key in ("accuracy", "nll", "rmse")
                if isinstance(met.get(key), int | float)
            )
            status = f"ok {shown}"
        else:
            status = f"FAILED {rec.get('error', '')}"
        self.say(f"[{self.k}/{self.n}] {cid}: {status} ({rec.get('time_s', 0.0):.1f}s; {eta})")
        if self.bar is not None:
            self.eta_text = eta
            self.bar.update(1)
            self.bar.set_postfix_str(eta)

    def eta(self) -> str:
        """Time left: per method, the mean time of its finished cells times its cells to
        run, less what the running cells have already spent (each at most that mean, so a
        cell about to finish counts as nearly done, not as a whole cell), summed and spread
        over the workers; methods with no finished cell are named."""
        work, unknown, cells_left = 0.0, [], 0
        for m, left in self.left.items():
            if left <= 0:
                continue
            cells_left += left
            if self.times[m]:
                work += sum(self.times[m]) / len(self.times[m]) * left
            else:
                unknown.append(m)
        now = time.monotonic()
        for cid, st in self.running.items():
            m = self.method.get(cid)
            if m is not None and self.times[m]:
                work -= min(now - st["t0"], sum(self.times[m]) / len(self.times[m]))
        work = max(work, 0.0)
        if not cells_left:
            return "done"
        text = f"~{format_seconds(work / min(self.workers, cells_left))} left" if work else ""
        if unknown:
            more = f"{', '.join(unknown)}: no cell timed yet"
            text = f"{text} + {more}" if text else f"time left unknown ({more})"
        return text

    def close(self) -> None:
        for b in self.slots:
            b.close()
        if self.bar is not None:
            self.bar.close()


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (notebook, JupyterLab, VS Code, Colab):
    IPython's shell there is a ``ZMQInteractiveShell``, whose stderr is no terminal but
    shows a bar. Without IPython imported, no (the check imports nothing)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # an IPython too old or half imported: not a kernel we can draw in
        return False
    return any(c.__name__ == "ZMQInteractiveShell" for c in type(shell).__mro__)


def _isatty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
