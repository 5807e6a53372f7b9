"""The settings of a run as run, for the head of its report: :func:`run_settings`.

Computed from the spec as run (the run directory's ``spec.yaml``, after any ``--set``), not
from its description: data, model, prior and likelihood, each method, the studies and the
sweep with its cell count; the hidden widths and the training and test set sizes the cells
were built with come from results.csv.

A data file or directory is named relative to the run directory (:func:`relative_paths`):
the spec holds absolute paths (cell ids hash them), but a report sent to a colleague should
not carry this machine's directory layout.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from zoo.spec import Spec
from zoo.spec.sweep import AXIS_ALIASES

__all__ = ["data_paths", "relative_paths", "run_settings"]


def data_paths(spec: Spec) -> list[str]:
    """The absolute file and directory paths of the spec's data (also as sweep values)."""
    found: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str) and os.path.isabs(v):
            found.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(spec.data.model_dump(mode="json") if spec.data is not None else None)
    walk([vals for key, vals in spec.sweep.items() if key.split(".")[0] == "data"])
    return sorted(set(found), key=len, reverse=True)


def relative_paths(text: str, spec: Spec, root: str | os.PathLike[str] | None) -> str:
    """``text`` with each data path of ``spec`` written relative to the run directory ``root``
    (unchanged without a root)."""
    if root is None:
        return text
    start = os.path.abspath(root)
    for p in data_paths(spec):  # longest first: a directory may prefix a file in it
        text = text.replace(p, Path(os.path.relpath(p, start)).as_posix())
    return text


#: A string value written bare in the settings; any other is quoted (``delimiter ','``,
#: not ``delimiter ,``, which reads as a stray comma in the list of fields).
_BARE = re.compile(r"[\w./:+-]+")


def _value(v: Any) -> str:
    """A spec value as the settings write it: ``0.1``, ``[1, 2]``, a section's kind, a
    string bare when it is a word or a path, else quoted."""
    if isinstance(v, str) and not _BARE.fullmatch(v):
        return repr(v)
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return str(v.get("kind", v))
    if isinstance(v, list):
        return "[" + ", ".join(_value(i) for i in v) + "]"
    return str(v)


def _fields(
    section: Any, prefix: str, sweep: dict[str, list[Any]], skip=(), *, defaults: bool = False
) -> str:
    """``kind, field v, other a, b (swept), ...`` of a spec section: its fields that differ
    from their defaults (every field with ``defaults``; None values left out), and the
    swept ones with their values."""
    if section is None:
        return "none"
    d = section.model_dump(mode="json", exclude_defaults=not defaults)
    d.update(
        {k: None for k in type(section).model_fields if f"{prefix}.{k}" in sweep and k not in d}
    )
    parts = [str(d.pop("kind"))] if "kind" in d else []
    for key, v in d.items():
        path = f"{prefix}.{key}"
        if key in skip:
            continue
        if path in sweep:
            parts.append(f"{key} {', '.join(_value(i) for i in sweep[path])} (swept)")
        elif v is not None and not (isinstance(v, dict) and "kind" not in v):
            parts.append(f"{key} {_value(v)}")
    return ", ".join(parts)


def _widths(results: pd.DataFrame, spec: Spec) -> str | None:
    """The hidden widths the cells were built with, per swept model setting."""
    if "width" not in results.columns or results["width"].isna().all():
        return None
    axes = [a for a in spec.sweep if a.startswith("model.") and a in results.columns]
    ok = results[results["width"].notna()]
    if not axes:
        widths = sorted({int(w) for w in ok["width"]})
        return f"hidden width {', '.join(map(str, widths))}"
    a = axes[0]
    pairs = ok.groupby(a, sort=True)["width"].agg(lambda s: sorted({int(w) for w in s}))
    return "hidden width " + ", ".join(
        f"{'/'.join(map(str, w))} at {a.split('.')[-1]} {_value(k)}" for k, w in pairs.items()
    )


def _sizes(results: pd.DataFrame, column: str) -> list[int]:
    if column not in results.columns:
        return []
    return sorted({int(v) for v in results[column].dropna()})


def run_settings(
    spec: Spec, results: pd.DataFrame, root: str | os.PathLike[str] | None = None
) -> list[str]:
    """What this run was, computed from the spec as run (not its description).

    Parameters
    ----------
    spec : Spec
        The resolved spec of the run (the run directory's ``spec.yaml``, after ``--set``).
    results : pd.DataFrame
        results.csv (for the hidden widths and data set sizes the cells were built with).
    root : path, optional
        The run directory: data paths are written relative to it.

    Returns
    -------
    list of str
        One line each: data, model, prior and likelihood, each method, studies, the sweep
        with its cell count.
    """
    sweep = {AXIS_ALIASES.get(k, k): v for k, v in spec.sweep.items()}
    data = _fields(spec.data, "data", sweep, defaults=True)
    if root is not None and data_paths(spec):
        data = relative_paths(data, spec, root) + " (paths relative to the run directory)"
    train, test = _sizes(results, "n_train"), _sizes(results, "n_test")
    stated = [getattr(spec.data, "n_train", None)], [getattr(spec.data, "n_test", None)]
    if (train and train != stated[0]) or (test and test != stated[1]):
        sizes = [f"{', '.join(map(str, train))} training"] if train else []
        sizes += [f"{', '.join(map(str, test))} test"] if test else []
        data += f"; {' and '.join(sizes)} points in the cells"
    lines = [f"Data: {data}."]
    model = _fields(spec.model, "model", sweep)
    widths = _widths(results, spec)
    lines.append(f"Model: {model}" + (f"; {widths}" if widths else "") + ".")
    lines.append(
        f"Prior: {_fields(spec.prior, 'prior', sweep, defaults=True)}; likelihood: "
        f"{_fields(spec.likelihood, 'likelihood', sweep, defaults=True)}."
    )
    for m in spec.inference:
        text = _fields(m, f"inference.{m.name}", sweep, skip=("name",))
        lines.append(f"Method {m.name}: {text}.")
    if spec.studies:
        lines.append("Studies: " + "; ".join(_fields(s, "studies", {}) for s in spec.studies) + ".")
    seeds = sweep.get("seed", [spec.seed])
    axes = [
        f"{k} = {', '.join(_value(v) for v in vals)}" for k, vals in sweep.items() if k != "seed"
    ]
    lines.append(
        f"Seeds: {', '.join(map(str, seeds))} ({len(seeds)} {'seed' if len(seeds) == 1 else 'seeds'}); "
        + (f"swept: {'; '.join(axes)}; " if axes else "")
        + f"{len(spec.inference)} method(s); {len(spec.cells())} cells."
    )
    return lines
