"""Posterior draws -> ArviZ :class:`xarray.DataTree`, and netCDF bytes to and from it.

A cell's posterior is stored as one DataTree with the groups ArviZ expects
(``posterior``, ``sample_stats``, ``log_likelihood``, ``posterior_predictive``,
``observed_data``), built with :func:`arviz_base.from_dict` so that arviz-stats
(``ess``, ``rhat``, ``summary``, ``loo``) works on it directly. NUTS posteriors have
``(chain, draw)`` sample dimensions; a variational posterior is ``S`` guide draws stored as
one chain.

Naming
------
Variables keep the Pyro site names, dots included (``layer1.weight``): netCDF-4 through
h5netcdf accepts them and they round-trip unchanged (tested). Dimensions are named per
layer so that the unit axes line up across sites:

- ``layer{i}.weight`` of shape ``(out, in)``: ``("layer{i}_out", "layer{i}_in")``;
- ``layer{i}.bias`` of shape ``(out,)``: ``("layer{i}_out",)``;
- any other site: ``("{site}_dim_0", "{site}_dim_1", ...)``;
- test-set variables (``log_likelihood``, ``posterior_predictive``, ``observed_data``,
  all named ``y``): ``("obs_id", "y_dim_1", ...)``.

Root attributes hold the method name and settings. netCDF attributes must be strings,
numbers or 1-D arrays, so any other value (dicts, lists, booleans, ``None``) is stored as a
JSON string and its key listed in the root attribute ``json_attrs``;
:func:`datatree_attrs` decodes them again.

Files: a cell hands its tree over as netCDF bytes (:func:`datatree_to_bytes`) and the run
store writes them (``cells/<cell id>.nc``); :func:`load_datatree` reads one back.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr
from arviz_base import from_dict

__all__ = [
    "SAMPLE_STATS",
    "site_dims",
    "posterior_to_datatree",
    "datatree_attrs",
    "datatree_from_bytes",
    "datatree_to_bytes",
    "load_datatree",
]

#: Sample-stat names of arviz-base's NumPyro converter, which the NUTS runner should use.
SAMPLE_STATS = (
    "lp",
    "step_size",
    "n_steps",
    "tree_depth",
    "diverging",
    "energy",
    "acceptance_rate",
)
JSON_ATTRS_KEY = "json_attrs"
_WEIGHT = re.compile(r"^layer(\d+)\.weight$")
_BIAS = re.compile(r"^layer(\d+)\.bias$")


def site_dims(name: str, event_ndim: int) -> list[str]:
    """Dimension names of a site's event axes (see the module docstring).

    Parameters
    ----------
    name : str
        Site name, e.g. ``layer2.weight``.
    event_ndim : int
        Number of axes after ``(chain, draw)``.

    Returns
    -------
    list of str
        For example ``["layer2_out", "layer2_in"]`` or ``["noise_dim_0"]``.
    """
    if (m := _WEIGHT.match(name)) and event_ndim == 2:
        return [f"layer{m[1]}_out", f"layer{m[1]}_in"]
    if (m := _BIAS.match(name)) and event_ndim == 1:
        return [f"layer{m[1]}_out"]
    return [f"{name}_dim_{k}" for k in range(event_ndim)]


def _encode_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    encoded = []
    for key, value in attrs.items():
        if not isinstance(key, str):
            raise TypeError(f"attribute keys must be strings, got {key!r}")
        if key == JSON_ATTRS_KEY:
            raise ValueError(f"attribute name {JSON_ATTRS_KEY!r} is reserved")
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            out[key] = value
        else:
            try:
                out[key] = json.dumps(value, sort_keys=True)
            except TypeError as err:
                raise TypeError(f"attribute {key!r} is not JSON-serializable: {err}") from err
            encoded.append(key)
    if encoded:
        out[JSON_ATTRS_KEY] = json.dumps(encoded)
    return out


def datatree_attrs(dt: xr.DataTree) -> dict[str, Any]:
    """Root attributes of a DataTree with JSON-encoded values decoded again.

    Parameters
    ----------
    dt : xarray.DataTree
        A tree from :func:`posterior_to_datatree` or :func:`load_datatree`.

    Returns
    -------
    dict
        The ``attrs`` passed to :func:`posterior_to_datatree`.
    """
    attrs = dict(dt.attrs)
    encoded = json.loads(attrs.pop(JSON_ATTRS_KEY, "[]"))
    return {k: json.loads(v) if k in encoded else v for k, v in attrs.items()}


def _check_sample_shape(
    group: str, name: str, value: Any, shape: tuple[int, int] | None, min_ndim: int
) -> tuple[np.ndarray, tuple[int, int]]:
    arr = np.asarray(value)
    if arr.ndim < min_ndim:
        raise ValueError(
            f"{group} variable {name!r} has shape {arr.shape}; expected (chain, draw, ...) "
            f"with at least {min_ndim} axes"
        )
    if shape is not None and arr.shape[:2] != shape:
        raise ValueError(
            f"{group} variable {name!r} has (chain, draw) = {arr.shape[:2]}, "
            f"but the posterior has {shape}"
        )
    return arr, arr.shape[:2]


def posterior_to_datatree(
    draws: Mapping[str, np.ndarray],
    *,
    sample_stats: Mapping[str, np.ndarray] | None = None,
    log_likelihood: np.ndarray | None = None,
    posterior_predictive: np.ndarray | None = None,
    observed: np.ndarray | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> xr.DataTree:
    """Build the ArviZ DataTree of one posterior.

    Parameters
    ----------
    draws : mapping of str to np.ndarray
        Site name -> draws of shape ``(chain, draw, *site_shape)``. Variational posteriors
        are ``S`` guide draws with one chain, ``(1, S, ...)``.
    sample_stats : mapping of str to np.ndarray, optional
        Sampler statistics of shape ``(chain, draw)``, named as in :data:`SAMPLE_STATS`
        (``diverging`` boolean). Other names are stored too.
    log_likelihood : np.ndarray, optional
        Pointwise test-set log-likelihood, ``(chain, draw, n_test)``; variable ``y``.
    posterior_predictive : np.ndarray, optional
        Predictive draws on the test set, ``(chain, draw, n_test, ...)``; variable ``y``.
    observed : np.ndarray, optional
        Test targets, ``(n_test, ...)``; ``observed_data`` variable ``y``.
    attrs : mapping of str to any, optional
        Method name and settings, stored on the root (see :func:`datatree_attrs`).

    Returns
    -------
    xarray.DataTree
        Groups for every argument given; ``posterior`` always.

    Raises
    ------
    ValueError
        If ``draws`` is empty or any array disagrees with the posterior's
        ``(chain, draw)`` shape.
    """
    if not draws:
        raise ValueError("draws is empty: a posterior needs at least one site")
    shape = None
    dims: dict[str, list[str]] = {}
    posterior = {}
    for name, value in draws.items():
        arr, shape = _check_sample_shape("posterior", name, value, shape, 2)
        posterior[name] = arr
        dims[name] = site_dims(name, arr.ndim - 2)
    data: dict[str, dict[str, np.ndarray]] = {"posterior": posterior}

    if sample_stats:
        data["sample_stats"] = {}
        for name, value in sample_stats.items():
            arr, _ = _check_sample_shape("sample_stats", name, value, shape, 2)
            if arr.ndim != 2:
                raise ValueError(f"sample_stats {name!r} must be (chain, draw), got {arr.shape}")
            data["sample_stats"][name] = arr

    if "y" in dims:
        raise ValueError("a posterior site may not be named 'y' (reserved for test targets)")
    if log_likelihood is not None:
        ll, _ = _check_sample_shape("log_likelihood", "y", log_likelihood, shape, 3)
        if ll.ndim != 3:
            raise ValueError(f"log_likelihood must be (chain, draw, n_test), got {ll.shape}")
        data["log_likelihood"] = {"y": ll}
    event_shape = None
    if posterior_predictive is not None:
        pp, _ = _check_sample_shape("posterior_predictive", "y", posterior_predictive, shape, 3)
        data["posterior_predictive"] = {"y": pp}
        event_shape = pp.shape[2:]
    if observed is not None:
        obs = np.asarray(observed)
        if obs.ndim == 0 or (event_shape is not None and obs.shape != event_shape):
            raise ValueError(
                f"observed has shape {obs.shape}, posterior_predictive events {event_shape}"
            )
        data["observed_data"] = {"y": obs}
        event_shape = obs.shape
    n_tests = {
        data[g]["y"].shape[0 if g == "observed_data" else 2]
        for g in ("log_likelihood", "posterior_predictive", "observed_data")
        if g in data
    }
    if len(n_tests) > 1:
        raise ValueError(f"test-set groups disagree on the number of test points: {n_tests}")
    y_ndim = 1 if event_shape is None else len(event_shape)
    dims["y"] = ["obs_id"] + [f"y_dim_{k}" for k in range(1, y_ndim)]

    root = {"/": _encode_attrs(attrs)} if attrs else None
    return from_dict(data, dims=dims, attrs=root)


def datatree_to_bytes(dt: xr.DataTree) -> bytes:
    """The netCDF-4 file of ``dt`` as bytes (h5netcdf engine, written in memory).

    Parameters
    ----------
    dt : xarray.DataTree
        The tree to encode.

    Returns
    -------
    bytes
        What :func:`load_datatree` / :func:`datatree_from_bytes` read back.
    """
    buf = io.BytesIO()
    dt.to_netcdf(buf, engine="h5netcdf")
    return buf.getvalue()


def datatree_from_bytes(data: bytes) -> xr.DataTree:
    """The tree of netCDF-4 bytes from :func:`datatree_to_bytes`, fully loaded."""
    with xr.open_datatree(io.BytesIO(data), engine="h5netcdf") as dt:
        return dt.load()


def load_datatree(path: str | os.PathLike[str]) -> xr.DataTree:
    """Read a netCDF file of :func:`datatree_to_bytes` (a cell's ``.nc``) fully into memory.

    The file is closed before returning, so it can be replaced or deleted afterwards.

    Parameters
    ----------
    path : str or os.PathLike
        A netCDF-4 file.

    Returns
    -------
    xarray.DataTree
    """
    with xr.open_datatree(path, engine="h5netcdf") as dt:
        return dt.load()
