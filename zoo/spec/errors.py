"""Errors that point: ``FILE:LINE:COL: field.path: message``, every problem at once.

:class:`Reporter` turns pydantic's validation errors into one line per problem at the YAML
node it concerns (or at the ``--set`` override that wrote it), with "did you mean ...?" for
misspelt keys and kinds, and where in the schema an unknown key is a key or a kind
(:func:`zoo.spec.paths.homes`). No torch import here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from zoo.spec.base import kind_of, union_members
from zoo.spec.paths import fields_at, homes, models_at, parse_path, path_in_schema

__all__ = [
    "Reporter",
    "SpecError",
    "did_you_mean",
    "format_path",
    "one_line",
    "split_override_path",
]


class SpecError(Exception):
    """A spec that cannot be used; ``messages`` holds one line per problem."""

    def __init__(self, messages: Sequence[str]) -> None:
        # a message is what the user sees: never none, never blank
        self.messages = [m for m in messages if str(m).strip()] or [
            "the spec is not valid (no details were found; please report this)"
        ]
        super().__init__("\n".join(self.messages))


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def did_you_mean(word: Any, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


_NAME = re.compile(r"^[\w\-.]+$")


def format_path(path: Sequence[Any]) -> str:
    """``inference[1].guide.rank``; a key that is not a plain name is quoted."""
    s = ""
    for p in path:
        if not isinstance(p, int) and not _NAME.match(str(p)):
            p = repr(str(p))
        s += f"[{p}]" if isinstance(p, int) else (f".{p}" if s else str(p))
    return s or "<spec>"


def split_override_path(key: str) -> list[str]:
    """``--set`` keys; sweep axes and tune grid paths are dotted paths themselves
    (``sweep.model.depth``, ``tune.grid.prior.scale``)."""
    parts = key.split(".")
    if parts[0] == "sweep" and len(parts) > 1:
        return ["sweep", ".".join(parts[1:])]
    if parts[:2] == ["tune", "grid"] and len(parts) > 2:
        return ["tune", "grid", ".".join(parts[2:])]
    return parts


def locate(root: yaml.Node | None, path: Sequence[Any], *, key: bool = False) -> yaml.Node | None:
    """The deepest YAML node along ``path``; with ``key`` the key node of the last element."""
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


def _clean_loc(schema: type[BaseModel], loc: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """Drop pydantic's discriminator tags (and validator names) from an error location.

    Returns the path and the section classes that hold its last element (one, when the
    location names the member of a union by its tag).
    """
    models: list[type[BaseModel]] = [schema]
    out: list[Any] = []
    owners: list[type[BaseModel]] = []
    for p in loc:
        if isinstance(p, int):
            out.append(p)
            continue
        owners = list(models)
        tagged = [m for m in models if kind_of(m) == p]
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
    return out, owners


def _join(words: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _unknown_key(
    schema: type[BaseModel], path: list[Any], owners: Sequence[Any], kind_set: str | None
) -> str:
    """``unknown key`` with the fix: a close name, the allowed keys, or the kind it is of."""
    name = str(path[-1])
    strpath = [p for p in path if not isinstance(p, int)]
    kinds = [kind_of(m) for m in owners]
    elsewhere = homes(schema, name, strpath[:-1])
    home = f"; {name!r} is {_join(elsewhere)}, not a key here" if elsewhere else ""
    if len(owners) != 1 or kinds[0] is None:  # not one member of a union: the field names
        options = fields_at(schema, strpath[:-1])
        close = [o for o in options if o != name]
        return f"unknown key {name!r}" + (
            home
            or did_you_mean(name, close)
            or (f"; allowed keys: {', '.join(options)}" if options else "")
        )
    owner, kind = owners[0], kinds[0]
    section = format_path([p for p in path[:-1]]) or "the spec"
    allowed = list(owner.model_fields)
    msg = f"unknown key {name!r} for {section} of kind {kind!r}"
    of = [
        k
        for m in models_at(schema, strpath[:-1])[0]
        if name in m.model_fields and (k := kind_of(m)) not in (None, kind)
    ]
    if not of:
        return msg + (
            home or did_you_mean(name, allowed) or f"; allowed keys: {', '.join(allowed)}"
        )
    msg += f" (a key of kind{'s' if len(of) > 1 else ''} {_join(sorted(of))}; {kind} has "
    msg += f"{', '.join(allowed)})"
    if kind_set is not None:
        return (
            f"{msg}; --set {kind_set} changed the kind and kept the other keys: "
            f"replace the whole section instead, e.g. --set '{section}={{kind: {kind}}}'"
        )
    return msg + "; remove it"


def _message(
    schema: type[BaseModel],
    err: dict[str, Any],
    path: list[Any],
    owners: Sequence[Any] = (),
    kind_set: str | None = None,
) -> tuple[str, bool]:
    """Human message for one pydantic error; the flag says 'point at the key node'."""
    typ = err["type"]
    if typ == "extra_forbidden":
        return _unknown_key(schema, path, owners, kind_set), True
    if typ == "missing":
        desc = models_at(schema, path)[1]
        return f"required field missing ({desc.rstrip('.')}); add it" if desc else (
            "required field missing; add it"
        ), False
    if typ in ("union_tag_invalid", "union_tag_not_found"):
        kinds = [k for k in map(kind_of, models_at(schema, path)[0]) if k is not None]
        if typ == "union_tag_not_found":
            return f"missing 'kind'; choose one of: {', '.join(kinds)}", False
        tag = err.get("ctx", {}).get("tag")
        return (
            f"unknown kind {tag!r}; choose one of: {', '.join(kinds)}{did_you_mean(tag, kinds)}",
            False,
        )
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    elif typ == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        opts = [o.strip().strip("'") for o in expected.replace(" or ", ", ").split(",")]
        msg = f"{err['input']!r} is not allowed; choose one of: {expected}"
        msg += did_you_mean(str(err["input"]), opts)
    elif "input" in err and not isinstance(err["input"], dict | list):
        msg = f"{msg} (got {err['input']!r})"
    return msg, False


_BLAME = re.compile(r"^([A-Za-z_][\w.\[\]]*): (.*)$", re.S)


def _blame(schema: type[BaseModel], line: str) -> tuple[list[Any], str] | None:
    """A whole-spec check's ``PATH: message`` line as (path, message), if PATH is a field."""
    m = _BLAME.match(line)
    if not m:
        return None
    key, msg = m.groups()
    if key.startswith("sweep.") and len(key) > len("sweep."):
        return ["sweep", key[len("sweep.") :]], msg
    return (parse_path(key), msg) if path_in_schema(schema, key) else None


class Reporter:
    """Positions and messages for one spec file.

    Parameters
    ----------
    fname : str
        The file name printed in front of each position.
    root : yaml.Node or None
        The composed YAML document (positions).
    overrides : list of (path, text)
        The applied ``--set`` items, their paths with method names (``["inference",
        "mfvi", "steps"]``); a problem under one of them is reported at it.
    schema : type
        The top-level section class (:class:`zoo.spec.schema.Spec`).
    data : dict, optional
        The spec data validated (its method names stand for indices in ``overrides``).
    """

    def __init__(
        self,
        fname: str,
        root: yaml.Node | None,
        overrides: Sequence[tuple[Sequence[str], str]],
        schema: type[BaseModel],
        data: Any = None,
    ) -> None:
        self.fname = fname
        self.root = root
        self.overrides = [([str(p) for p in parts], text) for parts, text in overrides]
        self.schema = schema
        self.data = data if isinstance(data, dict) else {}

    def _named(self, path: Sequence[Any]) -> list[str]:
        """``path`` as strings, a method's index replaced by its name."""
        out = [str(p) for p in path]
        methods = self.data.get("inference")
        if len(path) > 1 and path[0] == "inference" and isinstance(path[1], int):
            if isinstance(methods, list) and 0 <= path[1] < len(methods):
                name = methods[path[1]].get("name") if isinstance(methods[path[1]], dict) else None
                out[1] = name if isinstance(name, str) else out[1]
        return out

    def kind_set(self, path: Sequence[Any]) -> str | None:
        """The ``--set`` item that wrote the ``kind`` of the section at ``path``, if any."""
        target = [*self._named(path), "kind"]
        for parts, text in reversed(self.overrides):
            if parts == target:
                return text
        return None

    def where(self, path: Sequence[Any], *, key: bool = False) -> str:
        """``FILE:LINE:COL`` (or ``--set TEXT``) of the node at ``path`` of the written spec."""
        named = self._named(path)
        for op, text in reversed(self.overrides):
            # the override wrote the node, or (two levels deep at least) inside it
            if named[: len(op)] == op or (len(named) > 1 and op[: len(named)] == named):
                return f"--set {text}"
        node = locate(self.root, path, key=key)
        if node is None:
            return f"{self.fname}:1:1"
        m = node.start_mark
        return f"{self.fname}:{m.line + 1}:{m.column + 1}"

    def errors(self, exc: ValidationError, *, at: Sequence[Any] = (), label: str = "") -> list[str]:
        """One line per error; ``at``/``label`` report it at a sweep value instead."""
        out = []
        errs = [(err, *_clean_loc(self.schema, err["loc"])) for err in exc.errors()]
        # a misspelt key also makes its correct name "missing": report only the misspelling
        suggested = set()
        for err, path, _ in errs:
            if err["type"] == "extra_forbidden":
                options = fields_at(self.schema, [p for p in path[:-1] if not isinstance(p, int)])
                close = difflib.get_close_matches(str(path[-1]), options, n=1)
                if close:
                    suggested.add((*map(str, path[:-1]), close[0]))
        for err, path, owners in errs:
            if path == ["sweep"] and not at:
                continue  # reported with positions by the loader's axis check
            if err["type"] == "missing" and tuple(map(str, path)) in suggested:
                continue
            kind_set = self.kind_set(path[:-1]) if err["type"] == "extra_forbidden" else None
            msg, key = _message(self.schema, err, path, owners, kind_set)
            lines = [(path, msg)]
            if not path:  # whole-spec checks: one "PATH: message" line per problem
                lines = [_blame(self.schema, line) or ([], line) for line in msg.split("\n")]
            for p, m in lines:
                if err["type"] == "union_tag_invalid":
                    p = [*p, "kind"]
                if at:
                    where = self.where(at)
                    fpath = label + (
                        "" if format_path(p) == label.split(" ")[0] else f": {format_path(p)}"
                    )
                else:
                    where, fpath = self.where(p, key=key), format_path(p)
                out.append(f"{where}: {fpath}: {m}")
        if not out:  # every error was left to another check: never say nothing
            for err, path, _ in errs:
                out.append(f"{self.where(path)}: {format_path(path)}: {one_line_msg(err)}")
        return out


def one_line_msg(err: dict[str, Any]) -> str:
    """pydantic's message of one error, with the input it got."""
    got = err.get("input")
    shown = f" (got {got!r:.60})" if not isinstance(got, dict | list) else ""
    return " ".join(str(err.get("msg", "invalid")).split()) + shown
