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

import errno
import math
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from reports.draws import param_labels
from zoo.execution.store_links import LinkedPath, inside
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

__all__ = [
    "MAX_FILE_BYTES",
    "SHIPPED",
    "ReferenceReadError",
    "load",
    "names",
    "reference_info",
    "shipped_dir",
]

#: The folder of the shipped references inside the ``zoo.references`` package.
SHIPPED = "shipped"


#: The largest file, or zip member, a reference database may hold (the shipped draws files
#: are about 0.2 MB; 400 draws of a million parameters would be about 2 GB of text).
MAX_FILE_BYTES = 1 << 30


class ReferenceReadError(ValueError):
    """A reference database or posterior that cannot be read (the message says which file)."""


def shipped_dir() -> Path:
    """The database of reference posteriors shipped with bnn-zoo (package data)."""
    return Path(str(resources.files("zoo.references").joinpath(SHIPPED)))


def _root(path: str | os.PathLike[str] | None) -> Path:
    root = shipped_dir() if path is None else Path(path)
    what = "the shipped references" if path is None else str(root)
    try:
        folder = inside(root, POSTERIORS)
    except LinkedPath:
        raise ReferenceReadError(
            f"{what}: {POSTERIORS}/ is a symbolic link; zoo.references reads nothing "
            "through a link inside a database"
        ) from None
    if not folder.is_dir():
        raise ReferenceReadError(
            f"{what}: no {POSTERIORS}/ folder, so not a reference database written by "
            "`zoo export RUN_DIR --out DIR`; give that DIR"
        )
    return root


def names(path: str | os.PathLike[str] | None = None) -> list[str]:
    """The names of the posteriors in a database (default: the shipped one), sorted."""
    root = _root(path)
    return sorted(p.name[: -len(".json")] for p in (root / POSTERIORS).glob("*.json"))


def _file_bytes(root: Path, rel: str) -> bytes | None:
    """The bytes of the regular file ``root/rel`` (None when there is none), read through
    no symbolic link below ``root`` and refused past :data:`MAX_FILE_BYTES`."""
    try:
        path = inside(root, rel)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if isinstance(e, LinkedPath) or e.errno == errno.ELOOP:
            raise ReferenceReadError(
                f"{root / rel}: a symbolic link on the way; zoo.references reads nothing "
                "through a link inside a database (copy the file in instead)"
            ) from None
        raise ReferenceReadError(f"{root / rel}: cannot be read ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReferenceReadError(f"{path}: not a regular file, so not part of a database")
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ReferenceReadError(f"{path}: larger than {MAX_FILE_BYTES} bytes; not a reference")
    return data


def _read(root: Path, rel: Any) -> Any:
    """The JSON of ``root/rel``, or of ``root/rel.zip`` (posteriordb keeps either); a name
    in a file never leads outside the database, nor through a link."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise ReferenceReadError(f"{root}: a file there names {rel!r}, not a file name")
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise ReferenceReadError(f"{root}: a file there names {rel!r}, outside the database")
    path = root / rel
    data = _file_bytes(root, rel)
    zipped = data is None
    if zipped:
        data = _file_bytes(root, f"{rel}.zip")
        if data is None:
            raise ReferenceReadError(f"{path} (or {path.name}.zip) is missing from {root}")
    try:
        return read_json_zip(data, MAX_FILE_BYTES) if zipped else read_json(data)
    except Exception as e:  # any damage of the bytes: zip, deflate, UTF-8, JSON
        where = f"{path}.zip" if zipped else str(path)
        raise ReferenceReadError(f"{where}: cannot be read ({type(e).__name__}: {e})") from None


def _suggest(name: str, known: list[str]) -> str:
    """The name meant: the one that extends ``name`` by its configuration hash (a name
    given without it), else the closest by spelling."""
    exact = [k for k in known if k.startswith(f"{name}_")]
    return f"; did you mean {exact[0]!r}?" if len(exact) == 1 else did_you_mean(name, known)


@contextmanager
def _damaged(what: str) -> Iterator[None]:
    """Turn the error of a file that parsed but does not hold what it should into a
    :class:`ReferenceReadError` naming ``what``."""
    try:
        yield
    except ReferenceReadError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as e:
        raise ReferenceReadError(
            f"{what} is damaged: {type(e).__name__}: {e}; export the reference again"
        ) from None


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
        Not a database, no posterior of that name (with the closest names), a file
        missing, damaged, not a regular file or reached through a symbolic link: every
        way a database can fail to read.
    """
    root = _root(path)
    known = names(path)
    if name not in known:
        raise ReferenceReadError(
            f"no posterior {name!r} in {root}{_suggest(str(name), known)} ({len(known)} "
            "posteriors; zoo.references.names() lists them)"
        )
    post_rel = f"{POSTERIORS}/{name}.json"
    posterior = _read(root, post_rel)
    with _damaged(str(root / post_rel)):
        ref_name, model_name, data_name = (
            posterior[k] for k in ("reference_posterior_name", "model_name", "data_name")
        )
    info_rel = f"{DRAWS_INFO}/{ref_name}.info.json"
    info = _read(root, info_rel)
    model = _read(root, f"{MODEL_INFO}/{model_name}.info.json")
    data_rel = f"{DATA_INFO}/{data_name}.info.json"
    data_info = _read(root, data_rel)
    chains = _read(root, f"{DRAWS}/{ref_name}.json")
    with _damaged(str(root / data_rel)):
        data_file = data_info["data_file"]
    data = _read(root, data_file)
    with _damaged(f"{root / DRAWS / ref_name}.json.zip (or {root / info_rel})"):
        groups = {"posterior": _posterior(chains, info)}
        attrs = {
            "posterior_name": name,
            "cell_id": str(info["provenance"]["cell_id"]),
            "reference_grade": str(info["checks_made"]["reference_grade"]),
            "draws_kind": "mcmc",
            "inference_library": "bnn-zoo",
            "inference_library_version": str(info["versions"].get("bnn_zoo") or ""),
            "posterior": posterior,
            "model": model,
            "data": data_info,
            "reference_posterior": info,
        }
    with _damaged(f"{root / data_file}(.zip) (or {root / data_rel})"):
        groups.update(_data_groups(data, data_info))
    with _damaged(f"{root}: posterior {name}"):
        dt = xr.DataTree.from_dict({f"/{k}": v for k, v in groups.items()})
        dt.attrs = encode_attrs(attrs)
    return dt


def reference_info(dt: xr.DataTree) -> dict[str, Any]:
    """The root attributes of a tree from :func:`load`, the info files decoded."""
    return decode_attrs(dt.attrs)


def _posterior(chains: Any, info: dict[str, Any]) -> xr.Dataset:
    """The posterior group from posteriordb's per-chain draws and the export's variables
    (a ValueError, KeyError or TypeError where they do not agree)."""
    if not isinstance(chains, list) or not chains or not all(isinstance(c, dict) for c in chains):
        raise ValueError("the draws file holds no list of chains")
    inference = info["inference"]
    keys = chains[0].keys()
    data_vars, coords, kept = {}, {}, None
    for var, v in info["variables"].items():
        shape = tuple(int(n) for n in v["shape"])
        if min(shape, default=1) < 1 or math.prod(shape) > len(keys):
            raise ValueError(f"variable {var}: shape {list(shape)} does not fit the draws file")
        labels = param_labels(var, shape)  # 0-based: the zoo's first exports
        if labels[0] not in keys:  # 1-based, as posteriordb writes them
            labels = param_labels(var, shape, base=1)
        per_chain = np.stack(
            [
                np.stack([read_array(ch[label], v["dtype"]) for label in labels], axis=-1)
                for ch in chains
            ]
        )
        if per_chain.ndim != 3:
            raise ValueError(f"variable {var}: the draws are not one list per parameter")
        kept = per_chain.shape[1]
        data_vars[var] = (
            ("chain", "draw", *v["dims"]),
            per_chain.reshape(len(chains), kept, *shape),
        )
        for dim, size in zip(v["dims"], shape, strict=True):
            coords[dim] = np.arange(size, dtype=np.int64)
    if kept != inference["draws_per_chain_stored"]:
        raise ValueError(
            f"{kept} draws per chain where the info file says {inference['draws_per_chain_stored']}"
        )
    coords["chain"] = np.arange(len(chains), dtype=np.int64)
    coords["draw"] = np.arange(kept, dtype=np.int64) * int(inference["thin"])
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
