"""Checks of a spec's data, networks and device before anything runs (``zoo run``,
``zoo.run(...)``, ``zoo validate``).

Data that cannot be trained on, a network that cannot be built and a method that cannot run
on the run's device are bad input (:class:`~zoo.execution.usage.UsageError`; exit 2 on the
command line); degenerate networks give a warning. Nothing here imports torch, so ``zoo
validate`` stays fast and ``zoo run`` refuses a spec at once.
"""

from __future__ import annotations

import sys

import zoo.data
from zoo.execution.usage import UsageError
from zoo.spec.memory import WARN_FRACTION, DataShape, estimate, machine_memory, size_text
from zoo.spec.tuning import tuning_cells

__all__ = ["CPU_ONLY_KINDS", "check_data", "check_device", "check_memory", "check_widths"]

#: Methods whose samplers run on the CPU only: batched NUTS builds its trees on the host
#: (per-chain Python lists and masks) and ``hmc`` is Pyro's one-chain kernel. On a GPU the
#: ``chees`` method is the batched sampler.
CPU_ONLY_KINDS = frozenset({"nuts", "hmc"})


def check_data(spec, *, missing_ok: bool = False) -> None:
    """Data that cannot be trained on is bad input (exit 2), found before any cell runs.

    Loads each distinct data section once (with its first cell's seed) through the checks
    of ``zoo.data.load``: the main cells' and the tuning cells' (whose validation part must
    leave enough rows to train on and to score). With ``missing_ok`` (``zoo validate``)
    files that are not on this machine only give a note: they are checked again when the
    run starts.
    """
    seen = set()
    cells = [] if spec.simulation is not None else spec.cells()
    for cell in [*cells, *(c for _, _, c in tuning_cells(spec))]:
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


def check_device(spec, runtime) -> None:
    """A method that cannot run on the run's device is bad input (exit 2), before any cell.

    ``runtime`` is the run's :class:`~zoo.runtime.Runtime` (None for a simulation)."""
    if runtime is None or not runtime.is_cuda:
        return
    for m in spec.inference:
        if m.kind in CPU_ONLY_KINDS:
            raise UsageError(
                f"inference.{m.name}: kind {m.kind} runs on the CPU only (its trees are built "
                f"on the host); on {runtime.device} use kind: chees (the batched sampler for "
                f"GPUs), or run on the CPU: --device cpu"
            )


def check_widths(spec, memory: int | None = None) -> None:
    """Warn (stderr) about degenerate networks; a network that cannot be built is exit 2.

    One line per distinct network and data set, for its first cell. The widths are the
    spec's arithmetic (``MLPModel.network_warnings``, as in ``zoo.models.width_warnings``),
    so ``zoo validate`` still imports no torch. Then the memory of every cell, the tuning
    cells too (:func:`check_memory`, against ``memory`` bytes: this machine's by default).
    """
    groups: dict[tuple[str, str], list] = {}
    for cell in spec.cells() if spec.simulation is None else []:
        groups.setdefault((repr(cell.spec.data), repr(cell.spec.model)), []).append(cell)
    shapes: dict[str, DataShape | None] = {}
    for (data_key, _), group in groups.items():
        cell = group[0]
        if data_key not in shapes:
            shapes[data_key] = _data_shape(cell)
        if shapes[data_key] is None:
            continue
        shape = shapes[data_key]
        try:
            lines = cell.spec.model.network_warnings(shape.in_dim, shape.n_classes, shape.out_dim)
        except ValueError as e:
            raise UsageError(f"cell {cell.cell_id}: {e}") from None
        n = len(group) - 1
        more = f" (and {n} more cell{'s' if n > 1 else ''} with this network)" if n else ""
        for line in lines:
            print(f"warning: cell {cell.cell_id}: {line}{more}", file=sys.stderr)
    tuning = [c for _, _, c in tuning_cells(spec)]  # grid values may be the largest
    for cell in tuning:
        if repr(cell.spec.data) not in shapes:
            shapes[repr(cell.spec.data)] = _data_shape(cell)
    check_memory([*(g for group in groups.values() for g in group), *tuning], shapes, memory)


def _data_shape(cell) -> DataShape | None:
    """The sizes of a cell's data set (None if it cannot be loaded: check_data said why)."""
    try:
        ds = zoo.data.load(cell.spec.data, cell.spec.seed)
    except (zoo.data.DataFilesMissing, OSError, ValueError):
        return None
    out_dim = getattr(cell.spec.likelihood, "out_dim", None)  # one logit: bernoulli
    k = out_dim or (ds.n_classes if ds.n_classes > 0 else 1)
    return DataShape(len(ds.x_train), len(ds.x_test), ds.in_dim, k, ds.n_classes)


def check_memory(cells, shapes: dict[str, DataShape | None], memory: int | None = None) -> None:
    """A cell that needs more memory than the machine has is bad input (exit 2); past
    :data:`~zoo.spec.memory.WARN_FRACTION` of it, a warning (:mod:`zoo.spec.memory`).

    ``shapes`` maps ``repr(cell.spec.data)`` to its data set's sizes; ``memory`` is the
    machine's memory in bytes (default: :func:`~zoo.spec.memory.machine_memory`).
    """
    memory = memory or machine_memory()
    found = []
    for cell in cells:
        shape = shapes.get(repr(cell.spec.data))
        if shape is not None and memory:
            try:
                found.append((estimate(cell.spec, cell.method, cell.studies, shape), cell))
            except ValueError as e:  # a network that cannot be built (a tune grid value)
                raise UsageError(f"cell {cell.cell_id}: {e}") from None
    if not found:
        return
    over = [(e, c) for e, c in found if e.total > memory]
    high = [(e, c) for e, c in found if e.total > WARN_FRACTION * memory]
    worst, cell = max(over or high or found, key=lambda ec: ec[0].total)
    others = len(over or high) - 1
    more = f" (and {others} more cell{'s' * (others > 1)})" if others > 0 else ""
    says = f"cell {cell.cell_id}{more} needs at least {worst.text()} of memory"
    if over:
        raise UsageError(
            f"{says}; this machine has {size_text(memory)}: shrink {', '.join(worst.fields)}"
        )
    if high:
        print(
            f"warning: {says}, more than {WARN_FRACTION:.0%} of this machine's "
            f"{size_text(memory)}; with several workers, run fewer (--workers) or shrink "
            f"{', '.join(worst.fields)}",
            file=sys.stderr,
        )
