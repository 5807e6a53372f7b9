"""The settings of a run as run, for the head of its report: :func:`run_settings`.

Computed from the spec as run (the run directory's ``spec.yaml``, after any ``--set``), not
from its description: data, model, prior and likelihood, each method, the studies and the
sweep with its cell count; the hidden widths the cells were built with come from
results.csv.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from zoo.spec import Spec
from zoo.spec.sweep import AXIS_ALIASES

__all__ = ["run_settings"]


def _value(v: Any) -> str:
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


def run_settings(spec: Spec, results: pd.DataFrame) -> list[str]:
    """What this run was, computed from the spec as run (not its description).

    Parameters
    ----------
    spec : Spec
        The resolved spec of the run (the run directory's ``spec.yaml``, after ``--set``).
    results : pd.DataFrame
        results.csv (for the hidden widths the cells were built with).

    Returns
    -------
    list of str
        One line each: data, model, prior and likelihood, each method, studies, the sweep
        with its cell count.
    """
    sweep = {AXIS_ALIASES.get(k, k): v for k, v in spec.sweep.items()}
    data = _fields(spec.data, "data", sweep, defaults=True)
    if "n_train" in results.columns and results["n_train"].notna().any():
        sizes = sorted({int(v) for v in results["n_train"].dropna()})
        if sizes != [getattr(spec.data, "n_train", None)]:
            data += f"; {', '.join(map(str, sizes))} training points in the cells"
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
