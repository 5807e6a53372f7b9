"""Loading a spec file: YAML with positions, ``--set`` overrides, and errors that point.

Every problem is reported as ``FILE:LINE:COL: field.path: message`` (or
``--set PATH=VALUE: field.path: message`` for an override), all problems at once, with
"did you mean ...?" for misspelt keys and kinds. :func:`load_spec` raises
:class:`~zoo.spec.errors.SpecError`; the CLI prints its messages and exits with status 2.
Settings at old locations are moved into the new form (:mod:`zoo.spec.legacy`) and each
gives a :class:`~zoo.spec.errors.SpecDeprecationWarning` at its ``FILE:LINE:COL``.

The YAML is read with ``yaml.SafeLoader`` semantics: plain data only, never arbitrary
Python objects. No torch import here.
"""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from zoo.spec.errors import (
    Reporter,
    SpecDeprecationWarning,
    SpecError,
    did_you_mean,
    format_path,
    one_line,
    split_override_path,
)
from zoo.spec.legacy import migrate
from zoo.spec.paths import set_path
from zoo.spec.schema import Spec
from zoo.spec.sweep import axis_path, axis_problem

__all__ = ["SpecError", "load_spec", "parse_overrides"]


def parse_overrides(items: Iterable[str]) -> list[tuple[str, Any, str]]:
    """Parse ``field.path=value`` strings; values are YAML (``3``, ``[1, 2]``, ``relu``).

    Returns
    -------
    list of (path, value, original text)
    """
    out: list[tuple[str, Any, str]] = []
    errors: list[str] = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            errors.append(f"--set {item}: expected FIELD.PATH=VALUE, e.g. --set model.depth=3")
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as e:
            errors.append(f"--set {item}: the value is not valid YAML ({one_line(e)})")
            continue
        out.append((key, value, item))
    if errors:
        raise SpecError(errors)
    return out


def _check_duplicates(node: yaml.Node, fname: str, errors: list[str]) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, yaml.Node] = {}
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                if k.value in seen:
                    first = seen[k.value].start_mark
                    errors.append(
                        f"{fname}:{k.start_mark.line + 1}:{k.start_mark.column + 1}: "
                        f"duplicate key {k.value!r} (first at line {first.line + 1}); "
                        "keep one of them"
                    )
                seen[k.value] = k
            _check_duplicates(v, fname, errors)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            _check_duplicates(v, fname, errors)


# --------------------------------------------------------------------------- load_spec


def load_spec(path: str | Path, overrides: Iterable[str] = ()) -> Spec:
    """Read, override and validate a spec file.

    Parameters
    ----------
    path : str or Path
        The YAML spec.
    overrides : iterable of str
        ``field.path=value`` items (``--set`` on the command line); values are YAML.

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
    if not p.exists():
        raise SpecError([f"{fname}: no such file; `zoo list` shows the specs shipped in specs/"])
    if p.is_dir():
        raise SpecError([f"{fname}: is a directory; give the path of a YAML spec file"])
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError([f"{fname}:1:1: not a text file; a spec is a YAML file"]) from None
    parsed = parse_overrides(overrides)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        m = e.problem_mark or e.context_mark
        where = f"{fname}:{m.line + 1}:{m.column + 1}" if m else f"{fname}:1:1"
        ctx = f" ({e.context})" if e.context else ""
        raise SpecError([f"{where}: YAML syntax error: {e.problem}{ctx}"]) from None
    except yaml.YAMLError as e:
        raise SpecError([f"{fname}:1:1: not valid YAML: {one_line(e)}"]) from None
    errors: list[str] = []
    if root is not None:
        _check_duplicates(root, fname, errors)
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise SpecError(
            [
                f"{fname}:1:1: a spec must be a YAML mapping with sections name, data, model, "
                f"inference, ...; got {got} (see specs/two_moons_depth.yaml)"
            ]
        )
    bad_sets = []
    for key, value, text in parsed:
        try:
            set_path(data, split_override_path(key), value)
        except KeyError as e:
            bad_sets.append(f"--set {text}: {e.args[0]}")
    if bad_sets:
        raise SpecError(bad_sets)
    data, moves = migrate(data)
    rep = Reporter(fname, root, parsed, Spec, [pair for m in moves for pair in m.paths])
    context = {"base_dir": str(p.resolve().parent)}
    errors += _sweep_axes(data.get("sweep"), rep)
    try:
        spec = Spec.model_validate(data, context=context)
    except ValidationError as e:
        raise SpecError(errors + rep.errors(e)) from None
    errors += _check_sweep(spec, data, rep, context)
    errors += _check_report(spec, rep)
    if not errors:
        errors += _check_studies(spec, rep)
    if errors:
        raise SpecError(errors)
    for move in moves:
        warnings.warn(f"{rep.where(move.old, key=True)}: {move.message}",
                      SpecDeprecationWarning, stacklevel=2)  # fmt: skip
    return spec


def _sweep_axes(sweep: Any, rep: Reporter) -> list[str]:
    """Axis names and emptiness, reported at the axis' own line."""
    if not isinstance(sweep, dict):
        return []
    errors = []
    for key, values in sweep.items():
        problem = axis_problem(Spec, str(key), values)
        if problem:
            errors.append(f"{rep.where(['sweep', str(key)], key=True)}: sweep.{key}: {problem}")
    return errors


def _check_sweep(spec: Spec, data: dict[str, Any], rep: Reporter, context: dict) -> list[str]:
    """Validate every sweep value where it stands, then every combination."""
    errors: list[str] = []
    base = json.loads(json.dumps({k: v for k, v in data.items() if k != "sweep"}))
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
            Spec.model_validate(d, context=context)
        except ValidationError as e:
            label = ", ".join(f"{k}={v}" for k, v in zip(keys, combo, strict=True))
            errors += rep.errors(e, at=["sweep"], label=f"sweep cell ({label})")
            break
    return errors


def _check_report(spec: Spec, rep: Reporter) -> list[str]:
    # the report averages over seeds, so seed cannot be a plot axis
    columns = [c for c in dict.fromkeys(["method", *spec.sweep]) if c != "seed"]
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


def _check_studies(spec: Spec, rep: Reporter) -> list[str]:
    """Each study records at least one cell (its methods, on a network it suits)."""
    if not spec.studies:
        return []
    used: set[int] = set()
    for cell in spec.cells():
        used.update(k for k, s in enumerate(cell.spec.studies)
                    if any(s is t for t in cell.studies))  # fmt: skip
    errors = []
    for k, s in enumerate(spec.studies):
        if k not in used:
            path = rep.original(["studies", k])
            errors.append(f"{rep.where(path)}: {format_path(path)}: the {s.kind} study records no "
                          f"cell: it applies to {s.needs()}; add one or remove the study")  # fmt: skip
    return errors
