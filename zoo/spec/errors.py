"""Errors that point: ``FILE:LINE:COL: field.path: message``, every problem at once.

:class:`Reporter` turns pydantic's validation errors into one line per problem at the YAML
node it concerns (or at the ``--set`` override that wrote it), with "did you mean ...?" for
misspelt keys and kinds, and reports problems inside a study moved from an old location
at the old key (:mod:`zoo.spec.legacy`). No torch import here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from zoo.spec.base import kind_of, union_members
from zoo.spec.paths import fields_at, models_at, parse_path, path_in_schema

__all__ = [
    "Reporter",
    "SpecDeprecationWarning",
    "SpecError",
    "did_you_mean",
    "format_path",
    "one_line",
    "split_override_path",
]


class SpecError(Exception):
    """A spec that cannot be used; ``messages`` holds one line per problem."""

    def __init__(self, messages: Sequence[str]) -> None:
        self.messages = list(messages)
        super().__init__("\n".join(self.messages))


class SpecDeprecationWarning(FutureWarning):
    """A spec uses a form that still works but stops validating in the next release.

    A FutureWarning (shown by default), since the reader is the author of a YAML file, not a
    Python developer; the message starts with ``FILE:LINE:COL`` when the spec came from a
    file.
    """


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def did_you_mean(word: Any, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def format_path(path: Sequence[Any]) -> str:
    s = ""
    for p in path:
        s += f"[{p}]" if isinstance(p, int) else (f".{p}" if s else str(p))
    return s or "<spec>"


def split_override_path(key: str) -> list[str]:
    """``--set`` keys; sweep keys are dotted paths themselves (``sweep.model.depth``)."""
    parts = key.split(".")
    if parts[0] == "sweep" and len(parts) > 1:
        return ["sweep", ".".join(parts[1:])]
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


def _clean_loc(schema: type[BaseModel], loc: Sequence[Any]) -> list[Any]:
    """Drop pydantic's discriminator tags (and validator names) from an error location."""
    models: list[type[BaseModel]] = [schema]
    out: list[Any] = []
    for p in loc:
        if isinstance(p, int):
            out.append(p)
            continue
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
    return out


def _message(schema: type[BaseModel], err: dict[str, Any], path: list[Any]) -> tuple[str, bool]:
    """Human message for one pydantic error; the flag says 'point at the key node'."""
    typ = err["type"]
    strpath = [p for p in path if not isinstance(p, int)]
    if typ == "extra_forbidden":
        name = str(path[-1])
        options = fields_at(schema, strpath[:-1])
        hint = did_you_mean(name, options) or (
            f"; allowed keys: {', '.join(options)}" if options else ""
        )
        return f"unknown key {name!r}{hint}", True
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
    overrides : list of (path, value, text)
        The parsed ``--set`` items; a problem under one of them is reported at it.
    schema : type
        The top-level section class (:class:`zoo.spec.schema.Spec`).
    moved : sequence of (new prefix, old prefix)
        Paths of studies moved from old locations (:attr:`zoo.spec.legacy.Move.paths`).
    """

    def __init__(self, fname: str, root: yaml.Node | None,
                 overrides: list[tuple[str, Any, str]], schema: type[BaseModel],
                 moved: Sequence[tuple[tuple[Any, ...], tuple[Any, ...]]] = ()) -> None:  # fmt: skip
        self.fname = fname
        self.root = root
        self.overrides = overrides
        self.schema = schema
        self.moved = sorted(moved, key=lambda pair: -len(pair[0]))  # longest prefix first

    def original(self, path: Sequence[Any]) -> list[Any]:
        """Where ``path`` was written: the old key of a study moved from an old location."""
        for new, old in self.moved:
            if tuple(path[: len(new)]) == new:
                return [*old, *path[len(new) :]]
        return list(path)

    def where(self, path: Sequence[Any], *, key: bool = False) -> str:
        """``FILE:LINE:COL`` (or ``--set TEXT``) of the node at ``path`` of the written spec."""
        for opath, _, text in reversed(self.overrides):
            op = split_override_path(opath)
            if [str(p) for p in path[: len(op)]] == op:
                return f"--set {text}"
        node = locate(self.root, path, key=key)
        if node is None:
            return f"{self.fname}:1:1"
        m = node.start_mark
        return f"{self.fname}:{m.line + 1}:{m.column + 1}"

    def errors(self, exc: ValidationError, *, at: Sequence[Any] = (), label: str = "") -> list[str]:
        """One line per error; ``at``/``label`` report it at a sweep value instead."""
        out = []
        errs = [(err, _clean_loc(self.schema, err["loc"])) for err in exc.errors()]
        # a misspelt key also makes its correct name "missing": report only the misspelling
        suggested = set()
        for err, path in errs:
            if err["type"] == "extra_forbidden":
                options = fields_at(self.schema, [p for p in path[:-1] if not isinstance(p, int)])
                close = difflib.get_close_matches(str(path[-1]), options, n=1)
                if close:
                    suggested.add((*map(str, path[:-1]), close[0]))
        for err, path in errs:
            if path == ["sweep"] and not at:
                continue  # reported with positions by the loader's axis check
            if err["type"] == "missing" and tuple(map(str, path)) in suggested:
                continue
            msg, key = _message(self.schema, err, path)
            lines = [(path, msg)]
            if not path:  # whole-spec checks: one "PATH: message" line per problem
                lines = [_blame(self.schema, line) or ([], line) for line in msg.split("\n")]
            for p, m in lines:
                if err["type"] == "union_tag_invalid":
                    p = [*p, "kind"]
                p = self.original(p)
                if at:
                    where = self.where(at)
                    fpath = label + (
                        "" if format_path(p) == label.split(" ")[0] else f": {format_path(p)}"
                    )
                else:
                    where, fpath = self.where(p, key=key), format_path(p)
                out.append(f"{where}: {fpath}: {m}")
        return out
