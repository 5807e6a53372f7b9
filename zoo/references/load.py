"""Read exported reference posteriors back as ArviZ DataTrees (a posteriordb-style reader).

:func:`load` follows the links of ``posteriors/NAME.json`` the way posteriordb's readers do
(``reference_posterior_name`` to the draws and their info, ``data_name`` to the data,
``model_name`` to the model) and returns one :class:`xarray.DataTree` in ArviZ's schema:

``posterior``
    The reference draws, ``(chain, draw, *site dims)``, each site with the dims, dtype and
    values the run's cell stored, thinned as the export says (``draw`` keeps the indices
    of the kept draws), bit for bit.
``observed_data``, ``constant_data``
    ``y`` and ``x``: the training points the posterior was fitted to (``x`` when the cell
    stored it).
``predictions_constant_data``
    ``x`` and ``y``: the held-out test points.

The root attributes hold the reference's grade (``reference_grade``), its cell and
posterior names, and the four info files whole (``posterior``, ``model``, ``data``,
``reference_posterior``) as JSON text named in ``json_attrs``, so that the tree can be
written to netCDF as it is; :func:`reference_info` decodes them. Without ``path`` the
references shipped with bnn-zoo are read (:func:`shipped_dir`). Pure NumPy and xarray: no
torch.
"""

from __future__ import annotations

import os
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from reports.draws import param_labels
from zoo.references.layout import (
    DATA_INFO,
    DRAWS,
    DRAWS_INFO,
    MODEL_INFO,
    POSTERIORS,
    decode_attrs,
    encode_attrs,
    read_array,
    read_json,
    read_json_zip,
)
from zoo.spec.errors import did_you_mean

__all__ = ["SHIPPED", "ReferenceReadError", "load", "names", "reference_info", "shipped_dir"]

#: The folder of the shipped references inside the ``zoo.references`` package.
SHIPPED = "shipped"


class ReferenceReadError(ValueError):
    """A reference database or posterior that cannot be read (the message says which file)."""


def shipped_dir() -> Path:
    """The database of reference posteriors shipped with bnn-zoo (package data)."""
    return Path(str(resources.files("zoo.references").joinpath(SHIPPED)))


def _root(path: str | os.PathLike[str] | None) -> Path:
    root = shipped_dir() if path is None else Path(path)
    if not (root / POSTERIORS).is_dir():
        what = "the shipped references" if path is None else str(root)
        raise ReferenceReadError(
            f"{what}: no {POSTERIORS}/ folder, so not a reference database written by "
            "`zoo export RUN_DIR --out DIR`; give that DIR"
        )
    return root


def names(path: str | os.PathLike[str] | None = None) -> list[str]:
    """The names of the posteriors in a database (default: the shipped one), sorted."""
    root = _root(path)
    return sorted(p.name[: -len(".json")] for p in (root / POSTERIORS).glob("*.json"))


def _read(root: Path, rel: str) -> Any:
    """The JSON of ``root/rel``, or of ``root/rel.zip`` (posteriordb keeps either); a name
    in a file never leads outside the database."""
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise ReferenceReadError(f"{root}: a file there names {rel!r}, outside the database")
    path = root / rel
    try:
        if path.is_file():
            return read_json(path.read_bytes())
        return read_json_zip((root / f"{rel}.zip").read_bytes())
    except FileNotFoundError:
        raise ReferenceReadError(f"{path} (or {path.name}.zip) is missing from {root}") from None
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ReferenceReadError(f"{path}: cannot be read ({e})") from None


def load(name: str, path: str | os.PathLike[str] | None = None) -> xr.DataTree:
    """One reference posterior as an ArviZ DataTree (see the module docstring).

    Parameters
    ----------
    name : str
        The posterior's name (:func:`names` lists them).
    path : path, optional
        The database directory (``zoo export --out``); default the shipped references.

    Returns
    -------
    xarray.DataTree

    Raises
    ------
    ReferenceReadError
        Not a database, no posterior of that name (with the closest names), or a file
        missing or damaged.
    """
    root = _root(path)
    if not (root / POSTERIORS / f"{name}.json").is_file():
        known = names(root if path is not None else None)
        raise ReferenceReadError(
            f"no posterior {name!r} in {root}{did_you_mean(name, known)} ({len(known)} "
            "posteriors; zoo.references.names() lists them)"
        )
    posterior = _read(root, f"{POSTERIORS}/{name}.json")
    ref_name = posterior["reference_posterior_name"]
    info = _read(root, f"{DRAWS_INFO}/{ref_name}.info.json")
    model = _read(root, f"{MODEL_INFO}/{posterior['model_name']}.info.json")
    data_info = _read(root, f"{DATA_INFO}/{posterior['data_name']}.info.json")
    chains = _read(root, f"{DRAWS}/{ref_name}.json")
    data = _read(root, data_info["data_file"])
    groups = {
        "posterior": _posterior(chains, info),
        **_data_groups(data, data_info),
    }
    attrs = {
        "posterior_name": name,
        "cell_id": info["provenance"]["cell_id"],
        "reference_grade": info["checks_made"]["reference_grade"],
        "draws_kind": "mcmc",
        "inference_library": "bnn-zoo",
        "inference_library_version": info["versions"].get("bnn_zoo") or "",
        "posterior": posterior,
        "model": model,
        "data": data_info,
        "reference_posterior": info,
    }
    dt = xr.DataTree.from_dict({f"/{k}": v for k, v in groups.items()})
    dt.attrs = encode_attrs(attrs)
    return dt


def reference_info(dt: xr.DataTree) -> dict[str, Any]:
    """The root attributes of a tree from :func:`load`, the info files decoded."""
    return decode_attrs(dt.attrs)


def _posterior(chains: list[dict[str, list]], info: dict[str, Any]) -> xr.Dataset:
    """The posterior group from posteriordb's per-chain draws and the export's variables."""
    inference = info["inference"]
    kept = inference["draws_per_chain_stored"]
    draw = np.arange(kept, dtype=np.int64) * inference["thin"]
    data_vars = {}
    keys = chains[0].keys() if chains else ()
    for var, v in info["variables"].items():
        shape = tuple(v["shape"])
        labels = param_labels(var, shape)  # 0-based: the zoo's first exports
        if labels[0] not in keys:  # 1-based, as posteriordb writes them
            labels = param_labels(var, shape, base=1)
        per_chain = [
            np.stack([read_array(ch[label], v["dtype"]) for label in labels], axis=-1)
            for ch in chains
        ]
        arr = np.stack(per_chain).reshape(len(chains), kept, *shape)
        data_vars[var] = (("chain", "draw", *v["dims"]), arr)
    coords = {"chain": np.arange(len(chains), dtype=np.int64), "draw": draw}
    for v in info["variables"].values():
        for dim, size in zip(v["dims"], v["shape"], strict=True):
            coords[dim] = np.arange(size, dtype=np.int64)
    return xr.Dataset(data_vars, coords=coords)


def _data_groups(data: dict[str, Any], info: dict[str, Any]) -> dict[str, xr.Dataset]:
    """observed_data, constant_data and predictions_constant_data from the data file."""
    groups: dict[str, dict[str, tuple]] = {}
    for key, spec in info["arrays"].items():
        arr = read_array(data[key], spec["dtype"])
        var = "x" if key.startswith("x") else "y"
        groups.setdefault(spec["group"], {})[var] = (tuple(spec["dims"]), arr)
    out = {}
    for group, data_vars in groups.items():
        coords = {}
        for dims, arr in data_vars.values():
            for dim, size in zip(dims, arr.shape, strict=True):
                coords[dim] = np.arange(size, dtype=np.int64)
        out[group] = xr.Dataset(data_vars, coords=coords)
    return out
