"""``--set FIELD.PATH=VALUE`` overrides: parsed, applied to spec data, checked for pitfalls.

A path is names joined by dots; list elements by index, methods by name
(``inference.mfvi.steps``); a sweep axis is ``sweep.<its dotted path>``. Values are YAML,
read as a spec file is (:func:`zoo.spec.reader.read_yaml`). Besides setting a field:

- ``inference.NAME=null`` drops a method, ``inference=[NAME, ...]`` keeps the named ones in
  that order (a mapping in the list adds a method); the dropped methods' sweep axes and
  their names in ``studies`` go with them (a study left with no method goes too);
- ``sweep.AXIS=null`` drops a sweep axis;
- setting a field that a sweep axis varies is an error saying to set the axis (the axis'
  values would silently replace it in every cell).

Relative data paths (``data.path``, ``data.dir`` and their sweep axes) given with ``--set``
are relative to the working directory, as any path on a command line; in the spec file
they are relative to the spec file (:func:`absolute_paths`). No torch import here.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from zoo.spec.errors import SpecError, did_you_mean, format_path, split_override_path
from zoo.spec.reader import read_yaml
from zoo.spec.sections.bounds import file_path
from zoo.spec.sweep import axis_path

__all__ = ["PATH_FIELDS", "absolute_paths", "apply_overrides", "parse_overrides"]

#: Fields of a data section that hold file system paths.
PATH_FIELDS = ("path", "dir")

_KEY = re.compile(r"^[\w\-]+(\.[\w\-]+)*$")


def parse_overrides(items: Iterable[str]) -> list[tuple[str, Any, str]]:
    """Parse ``field.path=value`` strings; values are YAML (``3``, ``[1, 2]``, ``relu``).

    The path is dot-separated names (list elements by index or, for ``inference``, by
    method name; a sweep axis is ``sweep.<its dotted path>``); the value is read as a spec
    file is (plain JSON data only).

    Returns
    -------
    list of (path, value, original text)

    Raises
    ------
    SpecError
        One ``--set ITEM: ...`` line per malformed item.
    """
    out: list[tuple[str, Any, str]] = []
    errors: list[str] = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            errors.append(f"--set {item}: expected FIELD.PATH=VALUE, e.g. --set model.depth=3")
            continue
        if not _KEY.match(key):
            errors.append(
                f"--set {item}: {key!r} is not a field path: give names joined by "
                "dots, e.g. model.depth, inference.mfvi.steps or "
                "sweep.model.depth"
            )
            continue
        try:
            value = read_yaml(raw, f"--set {item}", positions=False)[1] if raw.strip() else None
        except SpecError as e:
            errors += e.messages
            continue
        out.append((key, value, item))
    if errors:
        raise SpecError(errors)
    return out


class _SetProblem(Exception):
    pass


def _names(methods: list[Any]) -> list[str]:
    return [
        m.get("name") for m in methods if isinstance(m, dict) and isinstance(m.get("name"), str)
    ]


def _method_index(methods: list[Any], part: str) -> int:
    names = [m.get("name") if isinstance(m, dict) else None for m in methods]
    if part in names:
        return names.index(part)
    if part.isdigit() and int(part) < len(methods):
        return int(part)
    known = _names(methods)
    raise _SetProblem(
        f"inference has no method {part!r}; the methods are: "
        f"{', '.join(known) or '(none)'} (name one, or give its index)"
        f"{did_you_mean(part, known)}"
    )


def _drop_methods(data: dict[str, Any], dropped: set[str]) -> None:
    """What goes with dropped methods: their sweep axes and tune grid paths, and their
    names in studies and in tune.methods."""
    tune = data.get("tune") if isinstance(data.get("tune"), dict) else {}
    for axes in (data.get("sweep"), tune.get("grid")):
        if isinstance(axes, dict):
            for key in list(axes):
                parts = str(key).split(".")
                if len(parts) > 1 and parts[0] == "inference" and parts[1] in dropped:
                    del axes[key]
    if isinstance(tune.get("methods"), list):
        tune["methods"] = [n for n in tune["methods"] if n not in dropped]
    studies = data.get("studies")
    if isinstance(studies, list):
        kept = []
        for s in studies:
            if isinstance(s, dict) and isinstance(s.get("methods"), list):
                left = [n for n in s["methods"] if n not in dropped]
                if not left and s["methods"]:
                    continue  # recorded only dropped methods
                s = {**s, "methods": left}
            kept.append(s)
        data["studies"] = kept


def _select_methods(data: dict[str, Any], value: list[Any]) -> None:
    """``inference=[name, {...}, ...]``: keep the named methods, add the written ones."""
    methods = data.get("inference") if isinstance(data.get("inference"), list) else []
    new = []
    for entry in value:
        if isinstance(entry, str):
            new.append(methods[_method_index(methods, entry)])
        else:
            new.append(entry)
    if not new:
        raise _SetProblem("keeps no method; a spec needs at least one")
    data["inference"] = new
    _drop_methods(data, set(_names(methods)) - set(_names(new)))


def _apply(data: dict[str, Any], parts: list[str], value: Any) -> list[str]:
    """Set ``value`` at ``parts`` of ``data``; the path with method names (not indices)."""
    if (
        parts == ["inference"]
        and isinstance(value, list)
        and any(isinstance(v, str) for v in value)
    ):
        _select_methods(data, value)
        return parts
    if parts[0] == "sweep" and len(parts) == 2 and value is None:
        if isinstance(data.get("sweep"), dict):
            data["sweep"].pop(parts[1], None)  # null drops the axis
        return parts
    named = list(parts)
    node: Any = data
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if i == 1 and parts[0] == "inference":
                k = _method_index(node, p)
                name = node[k].get("name") if isinstance(node[k], dict) else None
                named[1] = name if isinstance(name, str) else str(k)
                if last and value is None:  # inference.NAME=null drops the method
                    if len(node) == 1:
                        raise _SetProblem(
                            f"{named[1]!r} is the only method; a spec needs at least one"
                        )
                    del node[k]
                    _drop_methods(data, {named[1]})
                    return named
            elif p.isdigit() and int(p) < len(node):
                k = int(p)
            else:
                where = format_path(parts[:i]) if i else "the spec"
                raise _SetProblem(
                    f"{where} is a list of {len(node)}; give an index 0..{len(node) - 1}"
                    if node
                    else f"{where} is an empty list: set the whole list"
                )
            if last:
                node[k] = value
                return named
            _no_scalar(node[k], parts, i)
            if node[k] is None:
                node[k] = {}
            node = node[k]
            continue
        if last:
            node[p] = value
            return named
        _no_scalar(node.get(p), parts, i)
        if node.get(p) is None:
            node[p] = {}
        node = node[p]
    return named


def _no_scalar(value: Any, parts: list[str], i: int) -> None:
    """A value at ``parts[: i + 1]`` that ``parts[i + 1]`` cannot be a field of is an error."""
    if value is not None and not isinstance(value, dict | list):
        where = ".".join(parts[: i + 1])
        raise _SetProblem(
            f"{where} is {_flow(value)[:40]}, which has no field "
            f"{parts[i + 1]!r}; set {where} itself"
        )


def _swept(named: list[str], sweep: dict[str, Any]) -> str | None:
    """The sweep axis whose values replace what ``named`` sets, if any."""
    for key in sweep:
        axis = axis_path(str(key))
        if named[: len(axis)] == axis and named[0] != "sweep":
            return str(key)
    return None


def _flow(value: Any) -> str:
    return (
        yaml.safe_dump(value, default_flow_style=True, width=10**6)
        .strip()
        .removesuffix("\n...")
        .removesuffix("...")
        .strip()
    )


def apply_overrides(
    data: dict[str, Any], parsed: list[tuple[str, Any, str]]
) -> list[tuple[list[str], str]]:
    """Apply the parsed ``--set`` items to spec ``data`` in order.

    Returns
    -------
    list of (path, text)
        Each item's path, methods by name (for :class:`~zoo.spec.errors.Reporter`).

    Raises
    ------
    SpecError
        One ``--set ITEM: ...`` line per item that cannot be applied or sets a field that a
        sweep axis varies.
    """
    cwd = _cwd()
    applied: list[tuple[list[str], str]] = []
    values: list[Any] = []
    errors: list[str] = []
    for key, value, text in parsed:
        parts = split_override_path(key)
        if cwd is not None:
            value = _absolute_value(parts, value, cwd)
        try:
            applied.append((_apply(data, parts, copy.deepcopy(value)), text))
            values.append(value)
        except _SetProblem as e:
            errors.append(f"--set {text}: {e}")
    sweep = data.get("sweep") if isinstance(data.get("sweep"), dict) else {}
    for (named, text), value in zip(applied, values, strict=True):
        axis = _swept(named, sweep)
        if axis is not None:
            errors.append(
                f"--set {text}: {'.'.join(named)} is a sweep axis (sweep.{axis}: "
                f"{_flow(sweep[axis])[:60]}), whose values replace it in every "
                f"cell; set the axis instead: --set 'sweep.{axis}=[{_flow(value)}]', "
                f"or drop the axis with --set sweep.{axis}=null"
            )
    if errors:
        raise SpecError(errors)
    return applied


# --------------------------------------------------------------------------- paths


def _absolute(value: Any, base: Path) -> Any:
    if not isinstance(value, str) or not value:
        return value
    try:
        file_path(value, base)
    except ValueError:  # a NUL byte, no such ~user, too long: validation says so
        return value
    p = Path(value).expanduser()
    return value if p.is_absolute() else str((base / p).resolve())


def _absolute_section(section: Any, base: Path) -> Any:
    if isinstance(section, dict):
        return {k: (_absolute(v, base) if k in PATH_FIELDS else v) for k, v in section.items()}
    return section


def absolute_paths(data: dict[str, Any], base: Path) -> None:
    """Relative data paths (and data path sweep values) made absolute against ``base``."""
    if isinstance(data.get("data"), dict):
        data["data"] = _absolute_section(data["data"], base)
    sweep = data.get("sweep")
    if not isinstance(sweep, dict):
        return
    for key, values in sweep.items():
        if not isinstance(values, list):
            continue
        if key in {f"data.{f}" for f in PATH_FIELDS}:
            sweep[key] = [_absolute(v, base) for v in values]
        elif key == "data":
            sweep[key] = [_absolute_section(v, base) for v in values]


def _absolute_value(parts: list[str], value: Any, base: Path) -> Any:
    """An override's value with its data paths made absolute against ``base``."""
    if parts[0] not in ("data", "sweep"):
        return value
    scratch: dict[str, Any] = {}
    node = scratch
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = copy.deepcopy(value)
    absolute_paths(scratch, base)
    node = scratch
    for p in parts:
        node = node[p] if isinstance(node, dict) else node
    return node


def _cwd() -> Path | None:
    try:
        return Path.cwd()
    except OSError:  # the working directory was removed
        return None
