"""Loading a spec file: YAML with positions, ``--set`` overrides, and errors that point.

Every problem is reported as ``FILE:LINE:COL: field.path: message`` (or
``--set PATH=VALUE: field.path: message`` for an override), all problems at once, with
"did you mean ...?" for misspelt keys and kinds. :func:`load_spec` raises
:class:`~zoo.spec.errors.SpecError` and nothing else for bad input; the CLI prints its
messages and exits with status 2.

The YAML is plain JSON data only, within bounds (:mod:`zoo.spec.reader`); so are the file's
size (:data:`MAX_BYTES`) and the number of sweep combinations (:data:`MAX_COMBINATIONS`),
so a hostile file is answered within seconds. Overrides: :mod:`zoo.spec.overrides`.

Paths: a relative ``data.path`` or ``data.dir`` written in the spec file (also as values of
a ``data.path``/``data.dir``/``data`` sweep axis) is relative to the spec file's directory;
one given with ``--set`` is relative to the working directory, as any path on a command
line. Both are made absolute at load, so the spec and its cells hold absolute paths: a
cell id (which hashes them) is the same from whatever directory a run starts, and names
the file the cell really reads. No torch import here.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from zoo.spec.errors import (
    Reporter,
    SpecError,
    did_you_mean,
    format_path,
    one_line,
)
from zoo.spec.overrides import absolute_paths, apply_overrides, parse_overrides
from zoo.spec.paths import set_path
from zoo.spec.reader import read_yaml
from zoo.spec.schema import Spec
from zoo.spec.sweep import axis_path, axis_problem

__all__ = ["MAX_BYTES", "MAX_COMBINATIONS", "SpecError", "load_spec", "parse_overrides"]

#: Largest spec file read (bytes); the shipped specs are a few kB.
MAX_BYTES = 1 << 20
#: Most sweep combinations times methods (each is validated at load).
MAX_COMBINATIONS = 10_000


# --------------------------------------------------------------------------- load_spec


def load_spec(path: str | Path, overrides: Iterable[str] = ()) -> Spec:
    """Read, override and validate a spec file.

    Parameters
    ----------
    path : str or Path
        The YAML spec.
    overrides : iterable of str
        ``field.path=value`` items (``--set`` on the command line); values are YAML.
        Methods are addressed by name (``inference.mfvi.steps=100``);
        ``inference.NAME=null`` drops a method and ``inference=[NAME, ...]`` keeps the
        named ones (a mapping in that list adds a method); either drops the dropped
        methods' sweep axes and their names in ``studies``. ``sweep.AXIS=[...]`` sets a
        sweep axis and ``sweep.AXIS=null`` drops it. Setting a field that a sweep axis
        varies is an error that says to set the axis.

    Returns
    -------
    Spec
        The frozen, validated spec. Every sweep cell is validated too.

    Raises
    ------
    SpecError
        With one ``FILE:LINE:COL: field.path: message`` line per problem.
    """
    p = Path(path)
    fname = str(path)
    text = _read_text(p, fname)
    parsed = parse_overrides(overrides)
    root, data = read_yaml(text, fname)
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise SpecError(
            [
                f"{fname}:1:1: a spec must be a YAML mapping with sections name, data, model, "
                f"inference, ...; got {got} (see specs/two_moons_depth.yaml)"
            ]
        )
    base = p.resolve().parent
    absolute_paths(data, base)
    dropped = _method_names(data)
    applied = apply_overrides(data, parsed)
    dropped -= _method_names(data)
    rep = Reporter(fname, root, applied, Spec, data=data)
    context = {"base_dir": str(base)}
    errors = _sweep_axes(data.get("sweep"), rep)
    errors += _combinations(data, rep)
    if errors:  # too many combinations to check each one: say so first
        raise SpecError(errors)
    try:
        spec = Spec.model_validate(data, context=context)
    except ValidationError as e:
        raise SpecError(errors + rep.errors(e)) from None
    used: set[int] = set()
    errors += _check_sweep(spec, data, rep, context, used)
    errors += _check_report(spec, rep)
    if not errors and dropped:
        spec, used = _skip_orphaned_studies(spec, data, context, used, dropped)
    if not errors:
        errors += _check_studies(spec, rep, used)
    if errors:
        raise SpecError(errors)
    return spec


def _read_text(p: Path, fname: str) -> str:
    """The text of a spec file: a regular file of at most :data:`MAX_BYTES` bytes, UTF-8.

    Raises
    ------
    SpecError
        No such file, a directory or a device, too large, unreadable, or not text.
    """
    try:
        if not p.exists():
            raise SpecError(
                [f"{fname}: no such file; `zoo list` shows the specs shipped in specs/"]
            )
        if p.is_dir():
            raise SpecError([f"{fname}: is a directory; give the path of a YAML spec file"])
        if not p.is_file():  # a device or a pipe: reading it might never end
            raise SpecError([f"{fname}: not a regular file; give the path of a YAML spec file"])
        if p.stat().st_size > MAX_BYTES:
            raise SpecError(
                [f"{fname}: {p.stat().st_size} bytes; a spec file is at most {MAX_BYTES} bytes"]
            )
        raw = p.read_bytes()
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        why = getattr(e, "strerror", None) or one_line(e)
        raise SpecError([f"{fname}: cannot read the file ({why})"]) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError([f"{fname}:1:1: not a text file; a spec is a YAML file"]) from None


def _sweep_axes(sweep: Any, rep: Reporter) -> list[str]:
    """The sweep's form, axis names and emptiness, reported at the axis' own line."""
    if sweep is None:
        return []
    if not isinstance(sweep, dict):
        return [
            f"{rep.where(['sweep'])}: sweep: must be a mapping from a field path to its "
            f"list of values, e.g. sweep: {{seed: [0, 1, 2]}}; got {sweep!r:.60}"
        ]
    errors = []
    for key, values in sweep.items():
        problem = axis_problem(Spec, str(key), values)
        if problem:
            errors.append(f"{rep.where(['sweep', str(key)], key=True)}: sweep.{key}: {problem}")
        elif not isinstance(values, list):
            errors.append(
                f"{rep.where(['sweep', str(key)])}: sweep.{key}: an axis is a list "
                f"of values, e.g. [{json.dumps(values)[:40]}]; got {values!r:.60}"
            )
    return errors


def _combinations(data: dict[str, Any], rep: Reporter) -> list[str]:
    """At most :data:`MAX_COMBINATIONS` sweep combinations times methods."""
    sweep = data.get("sweep")
    if not isinstance(sweep, dict):
        return []
    methods = data.get("inference")
    n = max(1, len(methods) if isinstance(methods, list) else 1)
    for values in sweep.values():
        n *= len(values) if isinstance(values, list) else 1
    if n <= MAX_COMBINATIONS:
        return []
    sizes = " x ".join(str(len(v)) for v in sweep.values() if isinstance(v, list))
    return [
        f"{rep.where(['sweep'], key=True)}: sweep: {n} combinations ({sizes} axis values "
        f"x {max(1, len(methods) if isinstance(methods, list) else 1)} methods); at most "
        f"{MAX_COMBINATIONS}: split the study into several specs"
    ]


def _check_sweep(
    spec: Spec, data: dict[str, Any], rep: Reporter, context: dict, used: set[int]
) -> list[str]:
    """Validate every sweep value where it stands, then every combination.

    ``used`` gets the indices of the studies that record a method in some combination.
    """
    errors: list[str] = []
    base = json.loads(json.dumps({k: v for k, v in data.items() if k not in ("sweep", "tune")}))
    for key, values in spec.sweep.items():
        for i, value in enumerate(values):
            d = json.loads(json.dumps(base))
            set_path(d, axis_path(key), value)
            try:
                Spec.model_validate(d, context=context)
            except ValidationError as e:
                errors += rep.errors(e, at=["sweep", key, i], label=f"sweep.{key}[{i}]")
    if errors:
        return errors
    keys = list(spec.sweep)
    for combo in itertools.product(*(spec.sweep[k] for k in keys)):
        d = json.loads(json.dumps(base))
        for k, v in zip(keys, combo, strict=True):
            set_path(d, axis_path(k), v)
        try:
            resolved = Spec.model_validate(d, context=context)
            for method in resolved.inference:
                rec = resolved.studies_for(method)
                used.update(k for k, s in enumerate(resolved.studies) if any(s is t for t in rec))
        except ValidationError as e:
            label = ", ".join(f"{k}={v}" for k, v in zip(keys, combo, strict=True))
            errors += rep.errors(e, at=["sweep"], label=f"sweep cell ({label})")
            break
    return errors


def _check_report(spec: Spec, rep: Reporter) -> list[str]:
    # the columns of results.csv a figure can use: method, seed (a figure against seed shows
    # single cells, not means over seeds) and the sweep axes
    columns = list(dict.fromkeys(["method", "seed", *spec.sweep]))
    errors = []
    for field in ("x", "hue"):
        value = getattr(spec.report, field)
        default = type(spec.report).model_fields[field].default
        # a default written out (e.g. the resolved spec.yaml of a run directory) falls back
        # silently, as when it is left out
        if value not in columns and field in spec.report.model_fields_set and value != default:
            errors.append(
                f"{rep.where(['report', field])}: report.{field}: {value!r} is not a sweep "
                f"axis; choose one of: {', '.join(columns)}{did_you_mean(value, columns)}"
            )
    return errors


def _method_names(data: dict[str, Any]) -> set[str]:
    """The names of the methods in spec ``data`` (before validation)."""
    methods = data.get("inference")
    if not isinstance(methods, list):
        return set()
    return {str(m["name"]) for m in methods if isinstance(m, dict) and "name" in m}


def _skip_orphaned_studies(
    spec: Spec, data: dict[str, Any], context: dict, used: set[int], dropped: set[str]
) -> tuple[Spec, set[int]]:
    """Skip, with a warning, the studies left without a cell by methods that ``--set``
    dropped (``--set 'inference=[mfvi]'`` on a spec with sampler studies): the documented
    way to run part of a spec. In a spec file such a study is an error (:func:`_check_studies`).
    """
    orphans = [k for k in range(len(spec.studies)) if k not in used]
    studies = data.get("studies")
    if not orphans or not isinstance(studies, list) or len(studies) != len(spec.studies):
        return spec, used
    gone = ", ".join(sorted(dropped))
    kept = [s for k, s in enumerate(studies) if k not in orphans]
    try:
        skipped = Spec.model_validate({**data, "studies": kept}, context=context)
    except ValidationError:
        return spec, used  # _check_studies reports the study
    for k in orphans:
        s = spec.studies[k]
        print(
            f"warning: studies[{k}]: the {s.kind} study records no cell once --set dropped "
            f"{gone} (it applies to {s.needs()}); it is skipped",
            file=sys.stderr,
        )
    return skipped, set(range(len(kept)))


def _check_studies(spec: Spec, rep: Reporter, used: set[int]) -> list[str]:
    """Each study records at least one cell (its methods, on a network it suits).

    ``used``: the indices of the studies that record some cell (:func:`_check_sweep`).
    """
    if not spec.studies:
        return []
    errors = []
    for k, s in enumerate(spec.studies):
        if k not in used:
            path = ["studies", k]
            errors.append(
                f"{rep.where(path)}: {format_path(path)}: the {s.kind} study records no "
                f"cell: it applies to {s.needs()}; add one or remove the study"
            )
    return errors
