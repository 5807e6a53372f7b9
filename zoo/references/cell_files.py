"""The files of one cell's reference posterior, :func:`cell_files` (for the export).

Per cell: ``posteriors/NAME.json``; ``models/info/CELL.info.json`` (the network) and
``models/zoo/CELL.yaml`` (the cell's resolved spec); the data files, named by a hash of the
points so that the cells fitted to the same points share them; and the reference draws,
thinned, with ``reference_posteriors/draws/info/NAME.info.json``: posteriordb's
diagnostics and checks of the stored draws (:mod:`zoo.references.pdb_checks`), those of
every draw before thinning (per parameter the rank-normalized split :math:`\\hat R` and
the bulk and tail ESS of Vehtari et al. 2021; per cell what the grade reads), the grade,
the gates that kept it from the next one and the provenance. Pure: builds bytes, writes
nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from reports.diagnostics import posterior_summary
from reports.draws import param_labels
from reports.grade import GATES, gate_metrics
from zoo.execution.arviz_io import datatree_attrs
from zoo.execution.store import dump_spec
from zoo.references.layout import (
    DATA_DATA,
    DATA_INFO,
    DRAWS,
    DRAWS_INFO,
    MODEL_CODE,
    MODEL_INFO,
    POSTERIORS,
    json_array,
    json_zip,
)
from zoo.references.pdb_checks import efmi, posteriordb_checks, reference_diagnostics

__all__ = [
    "CELL_DIAGNOSTICS",
    "COMMENTS",
    "DATA_ARRAYS",
    "Exported",
    "cell_files",
    "draws_text",
    "json_bytes",
    "model_code_keys",
]

#: The cell metrics a reference carries beside its grade (those the gates read, and more).
CELL_DIAGNOSTICS = (
    *gate_metrics(),
    "min_ess_tail",
    "ess_bulk_q05",
    "worst_ess_bulk",
    "median_r_hat_pred",
    "n_divergent",
    "n_max_tree_depth",
    "mean_tree_steps",
    "step_size",
    "superchains",
    "n_draws",
    "draws_per_chain",
)
_ADDED_BY = "bnn-zoo (zoo export)"
#: The info file's ``comments``.
COMMENTS = (
    "Draws thinned to keep the file small; diagnostics of the stored draws as posteriordb "
    "states them, those of every draw under every_draw; the grade is that of every draw "
    "(reports.grade). Parameter names are 1-based, C order."
)


def model_code_keys(path: str) -> dict[str, Any]:
    """A model info's code keys: posteriordb's readers look in
    ``model_implementations[framework]["model_code"]``, earlier posteriordb files and the
    zoo's own exports in ``model_code[framework]``; both name the same file."""
    return {"model_code": {"zoo": path}, "model_implementations": {"zoo": {"model_code": path}}}


@dataclass(frozen=True)
class Exported:
    """One exported reference posterior.

    Attributes
    ----------
    name : str
        The posterior's name (``posteriors/NAME.json``).
    cell_id : str
        The run's cell.
    grade : str
        Its reference grade.
    chains, draws : int
        Chains, and draws per chain written (after thinning).
    thin : int
        Every ``thin``-th draw of each chain was kept.
    """

    name: str
    cell_id: str
    grade: str
    chains: int
    draws: int
    thin: int


def cell_files(
    cell: Any,
    rec: Mapping[str, Any],
    dt: xr.DataTree,
    spec: Any,
    spec_sha: str,
    max_draws: int,
) -> tuple[dict[str, bytes], Exported]:
    """The files of one cell's reference posterior, and what was exported.

    Parameters
    ----------
    cell : zoo.spec.sweep.Cell
        The sampled cell.
    rec : mapping
        Its stored record (metrics with ``reference_grade``).
    dt : xarray.DataTree
        Its ArviZ tree (``cells/<cell id>.nc``).
    spec : zoo.spec.Spec
        The run's spec.
    spec_sha : str
        SHA-256 of the run's ``spec.yaml``.
    max_draws : int
        Draws kept, all chains together.

    Returns
    -------
    files : dict of str to bytes
        Path in the database -> contents.
    exported : Exported
    """
    metrics = rec["metrics"]
    grade = metrics["reference_grade"]
    draws = _Draws.of(dt, max_draws)
    added = str(draws.post.attrs.get("created_at", ""))[:10] or None
    cell_id = cell.cell_id
    name = f"{spec.name}-{cell_id}"
    data_name, data_files = _data(cell, dt, spec.name, added)
    variables = draws.variables()
    info = _draws_info(cell, rec, dt, draws, name=name, spec=spec, spec_sha=spec_sha, added=added)
    posterior = {
        "name": name,
        "keywords": ["bnn", "bnn-zoo", f"grade_{grade}"],
        "model_name": cell_id,
        "reference_posterior_name": name,
        "data_name": data_name,
        "dimensions": {k: math.prod(v["shape"]) for k, v in variables.items()},
        "added_by": _ADDED_BY,
        "added_date": added,
    }
    code = (
        f"# bnn-zoo reference model: cell {cell_id} of the spec {spec.name}\n"
        f"# (its run's spec.yaml has SHA-256 {spec_sha}). `zoo run` on this file runs\n"
        f"# the cell again, with the method it starts from ({cell.method.name} is the one\n"
        "# whose draws are the reference).\n" + dump_spec(cell.spec)
    )
    files = {
        f"{POSTERIORS}/{name}.json": json_bytes(posterior),
        f"{MODEL_INFO}/{cell_id}.info.json": json_bytes(
            _model_info(cell, spec, metrics, variables, added)
        ),
        f"{MODEL_CODE}/{cell_id}.yaml": code.encode("utf-8"),
        **data_files,
        f"{DRAWS_INFO}/{name}.info.json": json_bytes(info),
        f"{DRAWS}/{name}.json.zip": json_zip(f"{name}.json", draws_text(draws.kept)),
    }
    kept = draws.kept.sizes["draw"]
    return files, Exported(name, cell_id, grade, draws.chains, kept, draws.thin)


@dataclass(frozen=True)
class _Draws:
    """A cell's posterior draws (``post``, chains by draws) and those exported (``kept``:
    every ``thin``-th draw of each chain)."""

    post: xr.Dataset
    kept: xr.Dataset
    thin: int

    @classmethod
    def of(cls, dt: xr.DataTree, max_draws: int) -> _Draws:
        """The draws of ``dt``, thinned to at most ``max_draws``, all chains together."""
        post = dt["posterior"].to_dataset()
        thin = max(1, math.ceil(post.sizes["chain"] * post.sizes["draw"] / max_draws))
        return cls(post, post.isel(draw=slice(None, None, thin)), thin)

    @property
    def chains(self) -> int:
        return self.post.sizes["chain"]

    @property
    def n_draws(self) -> int:
        """Draws per chain before thinning."""
        return self.post.sizes["draw"]

    def variables(self) -> dict[str, dict[str, Any]]:
        """Per variable its dims, shape and dtype past the chain and draw dimensions."""
        return {
            str(v): {"dims": list(da.dims[2:]), "shape": list(da.shape[2:]), "dtype": str(da.dtype)}
            for v, da in self.kept.data_vars.items()
        }


def _diagnostics(dt: xr.DataTree, draws: _Draws, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """posteriordb's diagnostics of the stored draws, those of every draw (per parameter
    split R-hat, bulk and tail ESS; E-BFMI and divergences per chain) and the cell's
    :data:`CELL_DIAGNOSTICS` (:func:`~zoo.references.pdb_checks.reference_diagnostics`)."""
    summary = posterior_summary(dt)
    stats = dt["sample_stats"].to_dataset() if "sample_stats" in dt else xr.Dataset()
    div, energy = stats.get("diverging"), stats.get("energy")
    return reference_diagnostics(
        draws.kept,
        {
            "effective_sample_size_bulk": _floats(summary["ess_bulk"]),
            "effective_sample_size_tail": _floats(summary["ess_tail"]),
            "r_hat": _floats(summary["r_hat"]),
        },
        ndraws_sampled=draws.chains * draws.n_draws,
        efmi_per_chain=None if energy is None else efmi(energy.values),
        divergent=None if div is None else [int(n) for n in np.asarray(div.values).sum(axis=1)],
        cell={k: _plain(metrics[k]) for k in CELL_DIAGNOSTICS if k in metrics},
    )


def _draws_info(
    cell: Any,
    rec: Mapping[str, Any],
    dt: xr.DataTree,
    draws: _Draws,
    *,
    name: str,
    spec: Any,
    spec_sha: str,
    added: str | None,
) -> dict[str, Any]:
    """``reference_posteriors/draws/info/NAME.info.json``: how the draws were made, their
    diagnostics and checks, the grade and the gates that kept it from the next one, the
    variables, the provenance and the versions."""
    metrics = rec["metrics"]
    attrs = datatree_attrs(dt)
    diagnostics = _diagnostics(dt, draws, metrics)
    return {
        "name": name,
        "inference": {
            "method": f"bnn_zoo_{cell.method.kind}",
            "method_arguments": attrs.get("settings")
            or cell.method.model_dump(mode="json", exclude_defaults=True),
            "seed": cell.spec.seed,
            "chains": draws.chains,
            "draws_per_chain": draws.n_draws,
            "thin": draws.thin,
            "draws_per_chain_stored": draws.kept.sizes["draw"],
        },
        "diagnostics": diagnostics,
        "checks_made": {
            **posteriordb_checks(diagnostics),
            "reference_grade": metrics["reference_grade"],
            "kept_from_next_grade_by": _split(metrics.get("grade_failed")),
            "stan_gates_failed": _split(metrics.get("gates_failed")),
            "grade_gates": [g._asdict() for g in GATES],
        },
        "variables": draws.variables(),
        "provenance": {
            "spec_name": spec.name,
            "spec_sha256": spec_sha,
            "cell_id": cell.cell_id,
            "config_hash": cell.cell_id.rsplit("_", 1)[-1],
            "axes": rec.get("axes"),
            "device": rec.get("device"),
            "threads": rec.get("threads"),
        },
        "comments": COMMENTS,
        "added_by": _ADDED_BY,
        "added_date": added,
        "versions": {
            "bnn_zoo": attrs.get("inference_library_version"),
            "arviz": draws.post.attrs.get("creation_library_version"),
            "export_commit": _commit(),
        },
    }


def _model_info(
    cell: Any,
    spec: Any,
    metrics: Mapping[str, Any],
    variables: Mapping[str, Mapping[str, Any]],
    added: str | None,
) -> dict[str, Any]:
    """``models/info/CELL.info.json``: the cell's network (model, prior, likelihood, width,
    parameter count and sites) and where its code (the resolved spec) lies."""
    cell_id = cell.cell_id
    return {
        "name": cell_id,
        "keywords": ["bnn", "bnn-zoo", cell.spec.model.kind, cell.method.kind],
        "title": f"{cell.spec.model.kind} of cell {cell_id} of the spec {spec.name}",
        "description": spec.description,
        "urls": [],
        "references": [],
        **model_code_keys(f"{MODEL_CODE}/{cell_id}.yaml"),
        "network": {
            "model": cell.spec.model.model_dump(mode="json"),
            "prior": cell.spec.prior.model_dump(mode="json"),
            "likelihood": cell.spec.likelihood.model_dump(mode="json"),
            "width": _plain(metrics.get("width")),
            "n_params": int(sum(math.prod(v["shape"]) for v in variables.values())),
            "sites": {k: {"shape": v["shape"], "dims": v["dims"]} for k, v in variables.items()},
        },
        "added_by": _ADDED_BY,
        "added_date": added,
    }


def draws_text(post: xr.Dataset) -> str:
    """posteriordb's draws: a list of chains, each ``{"site[i,j]": [draws], ...}``, the
    indices 1-based as posteriordb writes them."""
    chains = []
    for c in range(post.sizes["chain"]):
        items = []
        for v, da in post.data_vars.items():
            arr = np.asarray(da.isel(chain=c).values)
            flat = arr.reshape(arr.shape[0], -1)
            for j, label in enumerate(param_labels(str(v), arr.shape[1:], base=1)):
                items.append(f"{json.dumps(label)}:{json_array(flat[:, j])}")
        chains.append("{" + ",".join(items) + "}")
    return "[" + ",\n".join(chains) + "]"


#: The data arrays a reference carries: key in the data file -> (group, variable).
DATA_ARRAYS = {
    "x": ("constant_data", "x"),
    "y": ("observed_data", "y"),
    "x_test": ("predictions_constant_data", "x"),
    "y_test": ("predictions_constant_data", "y"),
}


def _data(cell: Any, dt: xr.DataTree, spec_name: str, added: str | None) -> tuple[str, dict]:
    """The data name and files of a cell: the training (and test) arrays its tree holds."""
    arrays = {}
    for key, (group, var) in DATA_ARRAYS.items():
        if group in dt.children and var in dt[group].data_vars:
            arrays[key] = dt[group][var]
    text = "{" + ",".join(f'"{k}":{json_array(da.values)}' for k, da in arrays.items()) + "}"
    data_name = f"{spec_name}_data_{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    attrs = datatree_attrs(dt)
    info = {
        "name": data_name,
        "keywords": ["bnn-zoo", cell.spec.data.kind],
        "title": f"{cell.spec.data.kind} data of the spec {spec_name}",
        "description": "The training points (x, y) the reference was fitted to and the "
        "held-out test points (x_test, y_test), as the cell stored them.",
        "urls": [],
        "references": [],
        "data_file": f"{DATA_DATA}/{data_name}.json",
        "arrays": {
            k: {"group": DATA_ARRAYS[k][0], "dims": list(da.dims), "dtype": str(da.dtype)}
            for k, da in arrays.items()
        },
        "zoo": {
            "data": cell.spec.data.model_dump(mode="json"),
            "seed": cell.spec.seed,
            "note": attrs.get("constant_data_note"),
        },
        "added_by": _ADDED_BY,
        "added_date": added,
    }
    return data_name, {
        f"{DATA_INFO}/{data_name}.info.json": json_bytes(info),
        f"{DATA_DATA}/{data_name}.json.zip": json_zip(f"{data_name}.json", text),
    }


def json_bytes(obj: Any) -> bytes:
    """An info file's bytes: strict JSON, indented, one trailing newline."""
    return (json.dumps(obj, indent=2, allow_nan=False) + "\n").encode("utf-8")


def _plain(value: Any) -> Any:
    """A metric as strict JSON: a non-finite float is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _floats(values: Any) -> list[float | None]:
    return [_plain(float(v)) for v in values]


def _split(text: Any) -> list[str]:
    return [t for t in str(text or "").split(",") if t]


def _commit() -> str | None:
    """The git commit of the code exporting (``-dirty`` with local changes); None outside
    a git checkout (an installed package)."""
    home = Path(__file__).resolve().parents[2]
    if not (home / "pyproject.toml").is_file():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(home), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(home), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "") if head else None
