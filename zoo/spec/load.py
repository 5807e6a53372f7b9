"""Loading a spec file: YAML with positions, ``--set`` overrides, and errors that point.

Every problem is reported as ``FILE:LINE:COL: field.path: message`` (or
``--set PATH=VALUE: field.path: message`` for an override), all problems at once, with
"did you mean ...?" for misspelt keys and kinds. :func:`load_spec` raises
:class:`SpecError`; the CLI prints its messages and exits with status 2.

The YAML is read with ``yaml.SafeLoader`` semantics: plain data only, never arbitrary
Python objects.
"""

from __future__ import annotations

import difflib
import itertools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from zoo.spec.schema import (
    AXIS_ALIASES,
    Spec,
    fields_at,
    models_at,
    path_in_schema,
    set_path,
    suggest_path,
    union_members,
)

__all__ = ["SpecError", "load_spec", "parse_overrides"]


class SpecError(Exception):
    """A spec that cannot be used; ``messages`` holds one line per problem."""

    def __init__(self, messages: Sequence[str]) -> None:
        self.messages = list(messages)
        super().__init__("\n".join(self.messages))


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
            errors.append(f"--set {item}: the value is not valid YAML ({_one_line(e)})")
            continue
        out.append((key, value, item))
    if errors:
        raise SpecError(errors)
    return out


def _split_override_path(key: str) -> list[str]:
    # sweep keys are dotted paths themselves: sweep.model.depth -> ["sweep", "model.depth"]
    parts = key.split(".")
    if parts[0] == "sweep" and len(parts) > 1:
        return ["sweep", ".".join(parts[1:])]
    return parts


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


# --------------------------------------------------------------------------- YAML positions


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


def _locate(root: yaml.Node | None, path: Sequence[Any], *, key: bool = False) -> yaml.Node | None:
    """The deepest node along ``path``; with ``key`` the key node of the last element."""
    node = root
    for i, p in enumerate(path):
        last = i == len(path) - 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == str(p):
                    node = k if (key and last) else v
                    break
            else:
                return node
        elif isinstance(node, yaml.SequenceNode) and isinstance(p, int):
            if 0 <= p < len(node.value):
                node = node.value[p]
            else:
                return node
        else:
            return node
    return node


# --------------------------------------------------------------------------- error messages


def _clean_loc(loc: Sequence[Any]) -> list[Any]:
    """Drop pydantic's discriminator tags from an error location."""
    models: list[type[BaseModel]] = [Spec]
    out: list[Any] = []
    for p in loc:
        if isinstance(p, int):
            out.append(p)
            continue
        tagged = [m for m in models if _kind_of(m) == p]
        field_models = [m for m in models if p in m.model_fields]
        if field_models:
            out.append(p)
            nxt: list[type[BaseModel]] = []
            for m in field_models:
                nxt.extend(union_members(m.model_fields[p].annotation))
            models = nxt
        elif tagged:
            models = tagged
        else:
            out.append(p)
            models = []
    return out


def _kind_of(m: type[BaseModel]) -> Any:
    f = m.model_fields.get("kind")
    if f is None:
        return None
    args = getattr(f.annotation, "__args__", ())
    return args[0] if len(args) == 1 else None


def _kinds_at(path: Sequence[Any]) -> list[str]:
    models = models_at(list(path))[0]
    return [k for k in (_kind_of(m) for m in models) if k is not None]


def _description(path: Sequence[Any]) -> str:
    return models_at(list(path))[1]


def _did_you_mean(word: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _message(err: dict[str, Any], path: list[Any]) -> tuple[str, bool]:
    """Human message for one pydantic error; the flag says 'point at the key node'."""
    typ = err["type"]
    strpath = [p for p in path if not isinstance(p, int)]
    if typ == "extra_forbidden":
        name = str(path[-1])
        options = fields_at([p for p in strpath[:-1]])
        hint = _did_you_mean(name, options) or (
            f"; allowed keys: {', '.join(options)}" if options else ""
        )
        return f"unknown key {name!r}{hint}", True
    if typ == "missing":
        desc = _description(path)
        return f"required field missing ({desc.rstrip('.')}); add it" if desc else (
            "required field missing; add it"
        ), False
    if typ in ("union_tag_invalid", "union_tag_not_found"):
        kinds = _kinds_at(path)
        if typ == "union_tag_not_found":
            return f"missing 'kind'; choose one of: {', '.join(kinds)}", False
        tag = err.get("ctx", {}).get("tag")
        return (
            f"unknown kind {tag!r}; choose one of: {', '.join(kinds)}{_did_you_mean(tag, kinds)}",
            False,
        )
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    elif typ == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        opts = [o.strip().strip("'") for o in expected.replace(" or ", ", ").split(",")]
        msg = f"{err['input']!r} is not allowed; choose one of: {expected}"
        msg += _did_you_mean(str(err["input"]), opts)
    elif "input" in err and not isinstance(err["input"], dict | list):
        msg = f"{msg} (got {err['input']!r})"
    return msg, False


def _format_path(path: Sequence[Any]) -> str:
    s = ""
    for p in path:
        s += f"[{p}]" if isinstance(p, int) else (f".{p}" if s else str(p))
    return s or "<spec>"


class _Reporter:
    def __init__(self, fname: str, root: yaml.Node | None, overrides: list[tuple[str, Any, str]]):
        self.fname = fname
        self.root = root
        self.overrides = overrides

    def where(self, path: Sequence[Any], *, key: bool = False) -> str:
        for opath, _, text in reversed(self.overrides):
            op = _split_override_path(opath)
            if [str(p) for p in path[: len(op)]] == op:
                return f"--set {text}"
        node = _locate(self.root, path, key=key)
        if node is None:
            return f"{self.fname}:1:1"
        m = node.start_mark
        return f"{self.fname}:{m.line + 1}:{m.column + 1}"

    def errors(self, exc: ValidationError, *, at: Sequence[Any] = (), label: str = "") -> list[str]:
        """One line per error; ``at``/``label`` report it at a sweep value instead."""
        out = []
        errs = [(err, _clean_loc(err["loc"])) for err in exc.errors()]
        # a misspelt key also makes its correct name "missing": report only the misspelling
        suggested = set()
        for err, path in errs:
            if err["type"] == "extra_forbidden":
                options = fields_at([p for p in path[:-1] if not isinstance(p, int)])
                close = difflib.get_close_matches(str(path[-1]), options, n=1)
                if close:
                    suggested.add((*map(str, path[:-1]), close[0]))
        for err, path in errs:
            if path == ["sweep"] and not at:
                continue  # reported with positions by _sweep_axes
            if err["type"] == "missing" and tuple(map(str, path)) in suggested:
                continue
            msg, key = _message(err, path)
            if not path:  # whole-spec checks start their message with the field they blame
                first = msg.split(" ", 1)[0]
                if path_in_schema(first):
                    path, msg = first.split("."), msg[len(first) :].lstrip()
            if err["type"] == "union_tag_invalid":
                path = [*path, "kind"]
            if at:
                where = self.where(at)
                fpath = label + (
                    "" if _format_path(path) == label.split(" ")[0] else f": {_format_path(path)}"
                )
            else:
                where, fpath = self.where(path, key=key), _format_path(path)
            out.append(f"{where}: {fpath}: {msg}")
        return out


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
        raise SpecError([f"{fname}:1:1: not valid YAML: {_one_line(e)}"]) from None
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
            set_path(data, _split_override_path(key), value)
        except KeyError as e:
            bad_sets.append(f"--set {text}: {e.args[0]}")
    if bad_sets:
        raise SpecError(bad_sets)
    rep = _Reporter(fname, root, parsed)
    context = {"base_dir": str(p.resolve().parent)}
    errors += _sweep_axes(data.get("sweep"), rep)
    try:
        spec = Spec.model_validate(data, context=context)
    except ValidationError as e:
        raise SpecError(errors + rep.errors(e)) from None
    errors += _check_sweep(spec, data, rep, context)
    errors += _check_report(spec, rep)
    if errors:
        raise SpecError(errors)
    return spec


def _sweep_axes(sweep: Any, rep: _Reporter) -> list[str]:
    """Axis names and emptiness, reported at the axis' own line."""
    if not isinstance(sweep, dict):
        return []
    errors = []
    for key, values in sweep.items():
        key = str(key)
        where = rep.where(["sweep", key], key=True)
        if key in ("name", "sweep", "inference", "simulation") or key.startswith(
            ("sweep.", "simulation")
        ):
            errors.append(f"{where}: sweep.{key}: cannot sweep over {key!r}")
        elif key.startswith("inference."):
            continue  # inference.<method>.<field>: checked by validating each value
        elif not path_in_schema(key):
            errors.append(f"{where}: sweep.{key}: {key!r} is not a spec field{suggest_path(key)}")
        elif isinstance(values, list) and not values:
            errors.append(f"{where}: sweep.{key}: the axis is empty; give at least one value")
    return errors


def _check_sweep(spec: Spec, data: dict[str, Any], rep: _Reporter, context: dict) -> list[str]:
    """Validate every sweep value where it stands, then every combination."""
    errors: list[str] = []
    base = json.loads(json.dumps({k: v for k, v in data.items() if k != "sweep"}))
    for key, values in spec.sweep.items():
        for i, value in enumerate(values):
            d = json.loads(json.dumps(base))
            set_path(d, AXIS_ALIASES.get(key, key).split("."), value)
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
            set_path(d, AXIS_ALIASES.get(k, k).split("."), v)
        try:
            Spec.model_validate(d, context=context)
        except ValidationError as e:
            label = ", ".join(f"{k}={v}" for k, v in zip(keys, combo, strict=True))
            errors += rep.errors(e, at=["sweep"], label=f"sweep cell ({label})")
            break
    return errors


def _check_report(spec: Spec, rep: _Reporter) -> list[str]:
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
                f"axis; choose one of: {', '.join(columns)}{_did_you_mean(value, columns)}"
            )
    return errors
