"""``zoo show``: the resolved spec, its cells and the sample sites of one cell's model."""

from __future__ import annotations

import argparse

import pyro

import zoo.data
import zoo.models
from zoo.execution.runner import spec_runtime
from zoo.execution.store import dump_spec
from zoo.execution.usage import UsageError
from zoo.shipped import resolve_spec
from zoo.spec import load_spec
from zoo.spec.tuning import tuning_cells

__all__ = ["cmd_show"]


def cmd_show(a: argparse.Namespace) -> int:
    """``zoo show SPEC``: the resolved spec, its cells and one cell's sample sites."""
    spec = load_spec(resolve_spec(a.spec), a.overrides)
    print(dump_spec(spec))
    cells = spec.cells()
    tuning = tuning_cells(spec)
    if tuning:  # they run first; their ids are not indices of --cell
        print(f"# {len(tuning)} tuning cells (run first; the main cells take the best values)")
        for _, _, c in tuning:
            print(f"  [tune] {c.cell_id}")
    print(
        f"# {len(cells)} cells"
        + (", shown before tuning (each takes its search's values)" if tuning else "")
    )
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
    """One line per sample site of the cell's model: name, latent or observed, its shape for
    the whole training set, and its distribution with its parameters.

    The model is traced on two training points; a site inside a plate that stands for more
    (the ``data`` plate's ``n_total``) is shown at the plate's full size, so ``obs`` has the
    shape of the training set. Wrappers that only batch a distribution (``to_event``,
    ``expand``, masks) are looked through; a distribution that is a transform of another
    (a HalfNormal is ``|Normal|``) is shown as itself.
    """
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
        while isinstance(base, _WRAPPERS):
            base = base.base_dist
        params = {k: getattr(base, k) for k in ("loc", "scale") if hasattr(base, k)}
        ptxt = ", ".join(f"{k}={_first(v):.4g}" for k, v in params.items())
        if site["is_observed"]:  # its parameters are the network's outputs, point by point
            ptxt = "given the network's outputs"
        kind = "observed" if site["is_observed"] else "latent"
        batch = list(fn.batch_shape)
        for frame in site["cond_indep_stack"]:  # a subsampled plate: its full size
            full = getattr(frame, "full_size", None) or frame.size
            if frame.dim is not None and -frame.dim <= len(batch):
                batch[frame.dim] = full
        shape = (*batch, *fn.event_shape)
        lines.append(f"{name:<16} {kind:<8} shape={shape!s:<12} {type(base).__name__}({ptxt})")
    return lines


#: Distributions that only batch, reshape or mask another: looked through to the one inside.
_WRAPPERS = (
    pyro.distributions.Independent,
    pyro.distributions.ExpandedDistribution,
    pyro.distributions.MaskedDistribution,
)


def _first(v) -> float:
    return float(v.reshape(-1)[0]) if hasattr(v, "reshape") else float(v)
