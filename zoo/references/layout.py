"""The files of an exported reference database and their encoding (posteriordb's layout).

posteriordb (Magnusson et al., https://github.com/stan-dev/posteriordb) keeps a posterior
as JSON files that name each other; :mod:`zoo.references` writes the same tree::

    posteriors/NAME.json                          the posterior: model_name, data_name,
                                                  reference_posterior_name, dimensions
    models/info/MODEL.info.json                   the model: description, network,
                                                  model_implementations {"zoo": {"model_code":
                                                  "models/zoo/MODEL.yaml"}} (and model_code)
    models/zoo/MODEL.yaml                         the cell's resolved spec (zoo run runs it)
    data/info/DATA.info.json                      the data: description, data_file, dtypes
    data/data/DATA.json.zip                       {"x": [[..]], "y": [..], "x_test": ..}
    reference_posteriors/draws/info/NAME.info.json  inference, diagnostics, grade, versions
    reference_posteriors/draws/draws/NAME.json.zip  [{"layer0.weight[1,1]": [..], ..}, ..]

Where posteriordb has Stan code the zoo has the cell's spec YAML and a description of the
network. The draws file is posteriordb's: a JSON list with one object per chain, keyed by
the scalar parameter's name (``site[i,j]``, 1-based as posteriordb writes them, C order:
:func:`reports.draws.param_labels` with ``base=1``; the first exports were 0-based). A ``.json.zip`` is a zip archive holding
``NAME.json`` alone, deflated, with a fixed timestamp (the same draws give the same bytes).

Numbers are written as the shortest decimal that reads back to the same value in the
array's own dtype (NumPy's ``str`` of a float32 scalar, Python's ``repr`` of a float64):
:func:`json_array` and :func:`read_array` round-trip every finite value bit for bit,
``-0.0`` included, at about half the size of float64 text for float32 draws. Non-finite
values are written as ``NaN``, ``Infinity`` and ``-Infinity``, as Python's :mod:`json`
reads them (outside strict JSON; a finite reference never has them). Pure Python and NumPy:
no torch.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "DATA_DATA",
    "DATA_INFO",
    "DRAWS",
    "DRAWS_INFO",
    "MODEL_CODE",
    "MODEL_INFO",
    "POSTERIORS",
    "decode_attrs",
    "encode_attrs",
    "json_array",
    "read_array",
    "read_json",
    "read_json_zip",
    "json_zip",
]

POSTERIORS = "posteriors"
MODEL_INFO = "models/info"
MODEL_CODE = "models/zoo"
DATA_INFO = "data/info"
DATA_DATA = "data/data"
DRAWS_INFO = "reference_posteriors/draws/info"
DRAWS = "reference_posteriors/draws/draws"

#: The timestamp of every zip member (zip's earliest), so that equal content gives equal bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
#: Root attribute listing the attributes stored as JSON text (as in the zoo's cell files).
JSON_ATTRS_KEY = "json_attrs"

_NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _scalar_text(value: Any) -> str:
    """The shortest text of one NumPy scalar that reads back to it in its dtype."""
    if isinstance(value, np.floating):
        text = str(value) if value.dtype != np.float64 else repr(float(value))
        return _NONFINITE.get(text, text)
    if isinstance(value, np.bool_):
        return "true" if value else "false"
    return str(int(value))


def json_array(arr: np.ndarray) -> str:
    """An array as nested JSON lists, each value as the shortest text of its dtype.

    Parameters
    ----------
    arr : numpy.ndarray
        Integer, boolean or floating (float16/32/64) values.

    Returns
    -------
    str
        JSON text; ``read_array(json.loads(text), arr.dtype)`` gives ``arr`` bit for bit.
    """
    arr = np.asarray(arr)
    if arr.ndim == 0:
        return _scalar_text(arr[()])
    return (
        "[" + ",".join(json_array(sub) if arr.ndim > 1 else _scalar_text(sub) for sub in arr) + "]"
    )


def read_array(values: Any, dtype: str | np.dtype) -> np.ndarray:
    """Values read by :func:`json.loads` as an array of ``dtype`` (the inverse of
    :func:`json_array`): every float text is parsed to a float64 and rounded once to
    ``dtype``, which gives back the value it was written from."""
    return np.asarray(values, dtype=np.float64 if np.dtype(dtype).kind == "f" else None).astype(
        dtype, copy=False
    )


def json_zip(name: str, text: str) -> bytes:
    """A zip archive holding ``name`` (deflated ``text``), with a fixed timestamp."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        zf.writestr(info, text.encode("utf-8"), compresslevel=9)
    return buf.getvalue()


def read_json_zip(data: bytes, max_bytes: int | None = None) -> Any:
    """The JSON of the one member of a ``.json.zip`` archive (:func:`json_zip`); a member
    that inflates past ``max_bytes`` is refused (ValueError) before it is held whole."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        if len(names) != 1:
            raise ValueError(f"a .json.zip holds one JSON file; this one holds {names}")
        with zf.open(names[0]) as member:
            text = member.read() if max_bytes is None else member.read(max_bytes + 1)
        if max_bytes is not None and len(text) > max_bytes:
            raise ValueError(f"its member inflates past {max_bytes} bytes")
        return json.loads(text.decode("utf-8"))


def read_json(data: bytes) -> Any:
    """The JSON of a ``.json`` file's bytes."""
    return json.loads(data.decode("utf-8"))


def encode_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """DataTree attributes that netCDF can store: text and numbers as they are, any other
    value as JSON text named in ``json_attrs`` (the convention of the zoo's cell files,
    read by :func:`decode_attrs` and :func:`zoo.execution.arviz_io.datatree_attrs`)."""
    out: dict[str, Any] = {}
    encoded = []
    for key, value in attrs.items():
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            out[key] = value
        else:
            out[key] = json.dumps(value, sort_keys=True)
            encoded.append(key)
    if encoded:
        out[JSON_ATTRS_KEY] = json.dumps(encoded)
    return out


def decode_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes :func:`encode_attrs` was given."""
    attrs = dict(attrs)
    encoded = json.loads(attrs.pop(JSON_ATTRS_KEY, "[]"))
    return {k: json.loads(v) if k in encoded else v for k, v in attrs.items()}
