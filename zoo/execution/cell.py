"""One sweep cell, start to finish: :func:`run_cell`.

The flow of a cell: load its data set (:func:`zoo.data.load`), build its network
(:func:`zoo.models.build`), move the data into torch once (:meth:`Dataset.to_torch`), ask
each of the cell's studies for a probe (:data:`zoo.studies.STUDIES`), fit the cell's method
with the probes' hooks (:func:`zoo.inference.fit`), evaluate the fit
(:func:`zoo.execution.evaluate.evaluate_fit`), and let each probe add its metrics and artifacts.
Everything random is seeded from the cell's seed (``torch.manual_seed(seed)`` first, then
one stream per purpose, ``seed_for(seed, Stream.X)`` from the one table
:class:`zoo.seeds.Stream`), so a cell gives the same numbers wherever it runs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pyro
import torch

import zoo.data
import zoo.models
from zoo.execution.evaluate import evaluate_fit, grade_record
from zoo.inference import SampledPosterior, combine_hooks, fit
from zoo.runtime import Runtime
from zoo.spec.base import kind_of
from zoo.studies import STUDIES, CellContext

__all__ = ["CellOutput", "run_cell"]


class CellOutput(NamedTuple):
    """What a cell produced: its metrics (one row of results.csv) and files to store.

    ``artifacts`` maps a file suffix (``".nc"``, ``".ktied.npz"``) to its bytes, stored as
    ``cells/<cell id><suffix>`` by the run store.
    """

    metrics: dict[str, Any]
    artifacts: dict[str, bytes]


def run_cell(cell: Any, runtime: Runtime, progress: bool = False) -> CellOutput:
    """Build data and model, fit the cell's method with its studies' probes, evaluate.

    Parameters
    ----------
    cell : Cell
        A sweep cell (:func:`zoo.spec.cells`).
    runtime : Runtime
        Device and dtype of every tensor; seeded generators.
    progress : bool
        Progress bars of the fit.

    Raises
    ------
    ValueError
        If two studies' probes report the same metric name (one would silently overwrite
        the other in results.csv).
    """
    spec = cell.spec
    pyro.clear_param_store()  # guides of earlier cells must not leak their parameters
    torch.manual_seed(spec.seed)
    ds = zoo.data.load(spec.data, spec.seed)
    model = zoo.models.build(spec, ds).to(runtime.device)  # its priors on the data's device
    ctx = CellContext(cell, model, ds, ds.to_torch(runtime), runtime)
    probes = [(kind_of(type(s)), STUDIES[type(s)].probe(s, ctx)) for s in cell.studies]
    probes = [(name, p) for name, p in probes if p is not None]
    result = fit(
        cell.method,
        model,
        ctx.data,
        seed=spec.seed,
        runtime=runtime,
        hooks=combine_hooks(p.hooks for _, p in probes),
        progress=progress,
        desc=cell.cell_id[:40],
        others={m.name: m for m in spec.inference},
    )
    metrics, artifacts = evaluate_fit(ctx, result)
    reported: dict[str, str] = {}  # metric -> the study whose probe reported it
    for study, probe in probes:
        more, files = probe.finish(result)
        twice = sorted(k for k in more if k in reported)
        if twice:
            raise ValueError(
                f"cell {cell.cell_id}: the {study} and {reported[twice[0]]} studies both "
                f"report the metric(s) {twice}; each metric must come from one probe"
            )
        reported.update(dict.fromkeys(more, study))
        metrics.update(more)
        artifacts.update(files)
    if isinstance(result.posterior, SampledPosterior):  # after the studies: kl_ess_n counts
        metrics.update(grade_record(metrics))
    sizes = {
        "width": model.dims[1] if model.depth else 0,
        "n_params": model.num_params,
        "n_train": len(ds.x_train),
        "n_test": len(ds.x_test),
    }
    return CellOutput({**sizes, **metrics}, artifacts)
