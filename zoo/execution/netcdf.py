"""A cell's ArviZ tree as compressed netCDF-4 bytes, and back.

A cell hands its tree over as netCDF bytes (:func:`datatree_to_bytes`) and the run store
writes them (``cells/<cell id>.nc``); :func:`load_datatree` reads one back. Every variable
of :data:`MIN_COMPRESS_BYTES` or more is compressed (zlib level 4 with the shuffle filter,
h5netcdf engine).
"""

from __future__ import annotations

import io
import os

import xarray as xr

__all__ = [
    "COMPRESSION",
    "MIN_COMPRESS_BYTES",
    "datatree_from_bytes",
    "datatree_to_bytes",
    "load_datatree",
]

#: Compression of every variable of at least :data:`MIN_COMPRESS_BYTES` in
#: :func:`datatree_to_bytes` (smaller ones grow from the chunk index HDF5 adds).
COMPRESSION = {"zlib": True, "complevel": 4, "shuffle": True}
MIN_COMPRESS_BYTES = 16384


def datatree_to_bytes(dt: xr.DataTree) -> bytes:
    """The netCDF-4 file of ``dt`` as bytes (h5netcdf engine, compressed, written in memory).

    Every data variable of at least :data:`MIN_COMPRESS_BYTES` is compressed with zlib
    (level 4) after the shuffle filter; a reader needs nothing but h5netcdf (or netCDF4)
    to open the file.

    Parameters
    ----------
    dt : xarray.DataTree
        The tree to encode.

    Returns
    -------
    bytes
        What :func:`load_datatree` / :func:`datatree_from_bytes` read back.
    """
    encoding = {
        node.path: {
            name: dict(COMPRESSION)
            for name, var in node.data_vars.items()
            if var.ndim and var.nbytes >= MIN_COMPRESS_BYTES
        }
        for node in dt.subtree
    }
    encoding = {path: enc for path, enc in encoding.items() if enc}
    buf = io.BytesIO()
    dt.to_netcdf(buf, engine="h5netcdf", encoding=encoding)
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
