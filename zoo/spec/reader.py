"""Reading spec YAML as plain JSON data, within bounds, with positions for messages.

The reader builds strings, integers, finite floats, booleans, null, lists and mappings with
string keys, nothing else: any other tag (``!!set``, ``!!binary``, ``!!timestamp``,
``!!python/...``, custom tags) is refused at its line, and an unquoted date is a string.
Nesting is bounded (:data:`MAX_DEPTH`) and so is the number of values a document expands
to through its aliases (:data:`MAX_VALUES`, against "billion laughs"), so a hostile file
is answered within a second. Aliases and merge keys (``<<``) within the bound work. The
composed node graph is returned too: :class:`~zoo.spec.errors.Reporter` finds the line of
a field in it. No torch import here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import yaml

from zoo.spec.errors import SpecError, one_line

__all__ = ["MAX_DEPTH", "MAX_VALUES", "read_yaml"]

#: Deepest nesting of lists and mappings (a spec needs about 6).
MAX_DEPTH = 32
#: Most values (scalars, lists, mappings, keys) a document may expand to, aliases included.
MAX_VALUES = 20_000

_JSON_TYPES = "strings, numbers, true/false, null, lists and mappings with string keys"
_T = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_T}{t}" for t in ("str", "int", "float", "bool", "null")}


# --------------------------------------------------------------------------- YAML


class _Problem(Exception):
    """A YAML problem at a mark, ending the read."""

    def __init__(self, mark: Any, message: str) -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


def _without(tags: set[str]) -> dict[str, list[tuple[str, Any]]]:
    return {
        first: [(tag, rx) for tag, rx in resolvers if tag not in tags]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


class _Loader(yaml.SafeLoader):
    """SafeLoader's scanner, parser and composer with a nesting bound.

    Plain dates, ``=`` and ``!``/``&``/``*`` alone resolve to strings (JSON has no
    timestamps); the alias positions are kept to name them in messages.
    """

    yaml_implicit_resolvers = _without({f"{_T}timestamp", f"{_T}value", f"{_T}yaml"})

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.alias_marks: dict[int, Any] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)
            self.alias_marks.setdefault(id(node), mark)
            return node
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Problem(self.peek_event().start_mark, _too_deep())
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _too_deep() -> str:
    return f"lists and mappings nest deeper than {MAX_DEPTH} levels; a spec needs a handful"


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(_T) :] if tag.startswith(_T) else tag


class _Builder:
    """Plain JSON data from a composed YAML node graph, within the budgets."""

    def __init__(self, loader: _Loader, where: Callable[[Any], str]) -> None:
        self.loader = loader
        self.where = where
        self.count = 0
        self.built: set[int] = set()
        self.alias: Any = None  # mark of the outermost alias being expanded
        self.errors: dict[str, None] = {}

    def error(self, mark: Any, message: str) -> None:
        self.errors.setdefault(f"{self.where(mark)}: {message}")

    def build(self, node: yaml.Node, depth: int = 1) -> Any:
        outer = self.alias
        if id(node) in self.built and self.alias is None:
            self.alias = self.loader.alias_marks.get(id(node), node.start_mark)
        self.built.add(id(node))
        try:
            return self._build(node, depth)
        finally:
            self.alias = outer

    def _build(self, node: yaml.Node, depth: int) -> Any:
        if depth > MAX_DEPTH:  # only through aliases: the composer bounds the text
            raise _Problem(
                self.alias or node.start_mark,
                _too_deep() + " (YAML aliases nest here; write the values out)",
            )
        self.count += 1
        if self.count > MAX_VALUES:
            if self.alias is not None:
                raise _Problem(
                    self.alias,
                    f"YAML aliases expand the spec to more than "
                    f"{MAX_VALUES} values; write the values out or use fewer "
                    "aliases",
                )
            raise _Problem(node.start_mark, f"the spec has more than {MAX_VALUES} values")
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != f"{_T}seq":
                return self._bad_tag(node)
            return [self.build(v, depth + 1) for v in node.value]
        if node.tag != f"{_T}map":
            return self._bad_tag(node)
        return self._mapping(node, depth)

    def _bad_tag(self, node: yaml.Node) -> None:
        self.error(
            node.start_mark,
            f"the YAML tag {_short_tag(node.tag)} is not allowed: a spec holds only {_JSON_TYPES}",
        )
        return None

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        if node.tag not in _SCALAR_TAGS:
            return self._bad_tag(node)
        construct = getattr(self.loader, "construct_yaml_" + node.tag[len(_T) :])
        try:
            value = construct(node)
        except (ValueError, ArithmeticError, yaml.YAMLError) as e:
            self.error(
                node.start_mark,
                f"{node.value[:40]!r} is not a valid "
                f"{_short_tag(node.tag)[2:]} ({one_line(e)[:80]})",
            )
            return None
        if isinstance(value, float) and not math.isfinite(value):
            self.error(node.start_mark, f"{node.value[:40]!r} is not a finite number")
            return None
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                self.error(
                    node.start_mark,
                    "the string holds an unpaired surrogate (\\ud800-\\udfff), which is not text",
                )
                return None
        return value

    def _mapping(self, node: yaml.MappingNode, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first: dict[str, Any] = {}
        merged: list[dict[str, Any]] = []
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.tag == f"{_T}merge":
                merged.extend(self._merge(v, depth))
                continue
            key = self.build(k, depth + 1)
            if not isinstance(key, str):
                if key is not None or k.tag == f"{_T}null":
                    self.error(
                        k.start_mark,
                        f"a key must be a string, got {key!r:.40}; quote it if it is meant as text",
                    )
                continue
            if key in first:
                self.error(
                    k.start_mark,
                    f"duplicate key {key!r} (first at line "
                    f"{first[key].line + 1}); keep one of them",
                )
                continue
            first[key] = k.start_mark
            out[key] = self.build(v, depth + 1)
        for m in merged:  # keys written in the mapping win over merged ones
            for key, value in m.items():
                out.setdefault(key, value)
        return out

    def _merge(self, node: yaml.Node, depth: int) -> list[dict[str, Any]]:
        items = node.value if isinstance(node, yaml.SequenceNode) else [node]
        out = []
        for item in items:
            if not isinstance(item, yaml.MappingNode):
                self.error(
                    item.start_mark, "a merge key (<<) takes a mapping or a list of mappings"
                )
                continue
            value = self.build(item, depth + 1)
            if isinstance(value, dict):
                out.append(value)
        return out


def _mark_where(label: str, text: str | None = None) -> Callable[[Any], str]:
    def where(mark: Any) -> str:
        if mark is None:
            return f"{label}:1:1" if text is not None else label
        if text is None:  # an override: its text names it
            return label
        return f"{label}:{mark.line + 1}:{mark.column + 1}"

    return where


def read_yaml(text: str, label: str, *, positions: bool = True) -> tuple[yaml.Node | None, Any]:
    """Compose and build YAML ``text`` as plain JSON data.

    Parameters
    ----------
    text : str
        The YAML document.
    label : str
        The file name (messages say ``LABEL:LINE:COL``) or, with ``positions`` false, the
        prefix of every message (e.g. ``--set model.depth=3``).
    positions : bool
        Whether messages carry the line and column.

    Returns
    -------
    (yaml.Node or None, data)
        The composed node graph (for positions) and the data.

    Raises
    ------
    SpecError
        For a syntax error, a tag other than the JSON ones, a non-string key, a duplicate
        key, nesting beyond :data:`MAX_DEPTH` or more than :data:`MAX_VALUES` values.
    """
    where = _mark_where(label, text if positions else None)
    loader = None
    try:
        loader = _Loader(text)
        root = loader.get_single_node()
        if root is None:
            return None, None
        builder = _Builder(loader, where)
        data = builder.build(root)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        ctx = f" ({e.context})" if e.context else ""
        raise SpecError([f"{where(mark)}: YAML syntax error: {e.problem}{ctx}"]) from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        col = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        pos = f"{label}:{line}:{col}" if positions else label
        raise SpecError([f"{pos}: not valid YAML text: {one_line(e)}"]) from None
    except yaml.YAMLError as e:
        raise SpecError([f"{where(None)}: not valid YAML: {one_line(e)}"]) from None
    except _Problem as e:
        raise SpecError([f"{where(e.mark)}: {e.message}"]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if builder.errors:
        raise SpecError(list(builder.errors))
    return root, data
