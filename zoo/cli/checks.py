"""Checks of a spec's data and networks before anything runs (``zoo run``, ``zoo validate``).

Data that cannot be trained on, and a network that cannot be built, are bad input (exit 2);
degenerate networks give a warning. Neither imports torch, so ``zoo validate`` stays fast.
"""

from __future__ import annotations

import sys

import zoo.data
from zoo.cli.common import UsageError
from zoo.spec.tuning import tuning_cells

__all__ = ["CPU_ONLY_KINDS", "check_data", "check_device", "check_widths"]

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


def check_widths(spec) -> None:
    """Warn (stderr) about degenerate networks; a network that cannot be built is exit 2.

    One line per distinct network and data set, for its first cell. The widths are the
    spec's arithmetic (``MLPModel.network_warnings``, as in ``zoo.models.width_warnings``),
    so ``zoo validate`` still imports no torch.
    """
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
