"""One builder of spec files for the tests, so that a test states only what it is about.

A spec is built as plain data (a dict, as YAML would parse it), written as YAML and loaded
through :func:`zoo.spec.load_spec`, the path every user's spec takes::

    from tests import specs

    path = specs.write_spec(tmp_path, data=specs.two_moons(n_train=60), studies=[...])
    spec = specs.load(tmp_path, inference=[specs.svi(steps=5), specs.nuts(warmup=10)])

:func:`spec` fills what a test leaves out with tiny defaults (:data:`DATA`, :data:`MODEL`,
:data:`INFERENCE`: a two-moons set, a small MLP, a few steps of mean-field VI) and always
writes an explicit ``studies:`` key (default ``[]``: no studies), so no spec of the tests
depends on what a missing key means. The section helpers (:func:`two_moons`, :func:`mlp`,
:func:`svi`, :func:`nuts`, ...) add nothing to the fields they are given: a field left out
takes the schema's default, as in a hand-written file.

Tests of the YAML reader itself (line and column numbers in messages, anchors, tags) keep
their YAML text; this builder is for specs whose layout does not matter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from zoo.spec import Spec, load_spec

__all__ = [
    "DATA",
    "INFERENCE",
    "MODEL",
    "chees",
    "csv",
    "digits",
    "idx",
    "load",
    "method",
    "mlp",
    "nuts",
    "section",
    "simulation",
    "spec",
    "study",
    "svi",
    "teacher",
    "two_moons",
    "uci",
    "write_spec",
    "yaml_text",
]

# --------------------------------------------------------------------------- sections


def section(kind: str, **fields: Any) -> dict[str, Any]:
    """A section ``{kind: KIND, **fields}`` (data, model, prior, likelihood, guide, study)."""
    return {"kind": kind, **fields}


def two_moons(**fields: Any) -> dict[str, Any]:
    """``data: {kind: two_moons, ...}``."""
    return section("two_moons", **fields)


def digits(**fields: Any) -> dict[str, Any]:
    """``data: {kind: digits, ...}``."""
    return section("digits", **fields)


def uci(name: str, **fields: Any) -> dict[str, Any]:
    """``data: {kind: uci, name: NAME, ...}``."""
    return section("uci", name=name, **fields)


def csv(path: str, target: str, **fields: Any) -> dict[str, Any]:
    """``data: {kind: csv, path: PATH, target: TARGET, ...}`` (a relative path is the spec's)."""
    return section("csv", path=path, target=target, **fields)


def idx(dir: str, **fields: Any) -> dict[str, Any]:
    """``data: {kind: idx, dir: DIR, ...}``."""
    return section("idx", dir=dir, **fields)


def teacher(**fields: Any) -> dict[str, Any]:
    """``data: {kind: teacher, ...}``."""
    return section("teacher", **fields)


def mlp(**fields: Any) -> dict[str, Any]:
    """``model: {kind: mlp, ...}``."""
    return section("mlp", **fields)


def study(kind: str, **fields: Any) -> dict[str, Any]:
    """One entry of ``studies:``."""
    return section(kind, **fields)


def method(name: str, kind: str, **fields: Any) -> dict[str, Any]:
    """One entry of ``inference:`` (``map``, ``mle``, ``nuts``, ...)."""
    return {"name": name, "kind": kind, **fields}


def svi(
    name: str = "mfvi", guide: str | Mapping[str, Any] = "mean_field", **fields: Any
) -> dict[str, Any]:
    """An ``svi`` method; ``guide`` is a kind or a whole guide section."""
    g = section(guide) if isinstance(guide, str) else dict(guide)
    return method(name, "svi", guide=g, **fields)


def nuts(name: str = "nuts", **fields: Any) -> dict[str, Any]:
    """A ``nuts`` method."""
    return method(name, "nuts", **fields)


def chees(name: str = "chees", **fields: Any) -> dict[str, Any]:
    """A ``chees`` method."""
    return method(name, "chees", **fields)


# --------------------------------------------------------------------------- whole specs

#: The defaults of :func:`spec`: seconds to run, two classes, one hidden layer.
DATA = two_moons(n_train=100, n_test=100, noise=0.1)
MODEL = mlp(depth=1, width=4)
INFERENCE = (svi("mfvi", steps=10),)

#: Top-level keys in the order a spec file shows them; other keys follow.
_ORDER = (
    "name",
    "description",
    "seed",
    "simulation",
    "data",
    "model",
    "prior",
    "likelihood",
    "inference",
    "studies",
    "sweep",
    "metrics",
    "report",
    "runtime",
)
_DEFAULT: Any = object()


def spec(
    name: str = "t",
    *,
    data: Mapping[str, Any] | None = _DEFAULT,
    model: Mapping[str, Any] | None = _DEFAULT,
    inference: Sequence[Mapping[str, Any]] | None = _DEFAULT,
    studies: Iterable[Mapping[str, Any]] = (),
    sweep: Mapping[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A spec as plain data, with an explicit ``studies`` list.

    Parameters
    ----------
    name : str
        The spec's name.
    data, model, inference : optional
        Sections; left out, :data:`DATA`, :data:`MODEL` and :data:`INFERENCE` (none of
        them in a spec with ``simulation``); ``None`` leaves the key out.
    studies : iterable of dict, default ()
        Always written, ``[]`` when empty.
    sweep : dict, optional
        The sweep axes; left out when None.
    **fields
        Any other top-level key (``seed``, ``prior``, ``likelihood``, ``metrics``,
        ``report``, ``runtime``, ``simulation``, ``description``, or a wrong one on purpose).

    Returns
    -------
    dict
        Fresh data (nothing shared with the arguments or the defaults).
    """
    sim = "simulation" in fields
    defaults = {"data": DATA, "model": MODEL, "inference": list(INFERENCE)}
    given = {"data": data, "model": model, "inference": inference}
    out: dict[str, Any] = {"name": name, **fields}
    for key, value in given.items():
        if value is _DEFAULT:
            value = None if sim else defaults[key]
        if value is not None:
            out[key] = value
    out["studies"] = list(studies)
    if sweep is not None:
        out["sweep"] = sweep
    order = {k: i for i, k in enumerate(_ORDER)}
    ordered = dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))
    return yaml.safe_load(yaml_text(ordered))  # a deep copy, as YAML would read it


def simulation(
    kind: str, name: str = "sim", *, seed: int | None = None, **fields: Any
) -> dict[str, Any]:
    """A simulation spec: ``simulation: {kind: KIND, **fields}`` and ``studies: []``."""
    top = {} if seed is None else {"seed": seed}
    return spec(name, simulation=section(kind, **fields), **top)


class _Dumper(yaml.SafeDumper):
    """Safe YAML, with tuples written as lists."""


_Dumper.add_representer(tuple, lambda d, v: d.represent_list(list(v)))


def yaml_text(data: Mapping[str, Any]) -> str:
    """``data`` as the YAML of a spec file (keys in the given order, short lists inline)."""
    return yaml.dump(
        dict(data), Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=100
    )


def write_spec(
    where: Path, whole: Mapping[str, Any] | None = None, /, *, file: str = "s.yaml", **kw: Any
) -> Path:
    """Write a spec file and return its path.

    Parameters
    ----------
    where : Path
        A directory (the file is ``where / file``) or, ending in ``.yaml``, the file itself.
    whole : dict, optional
        A whole spec (e.g. from :func:`spec`, positional); without it, ``spec(**kw)``.
    file : str, default "s.yaml"
        The file name inside ``where``.
    **kw
        Arguments of :func:`spec` (only without ``whole``).
    """
    if whole is not None and kw:
        raise TypeError(f"write_spec takes a whole spec or spec() arguments, not both: {kw}")
    path = where if where.suffix == ".yaml" else where / file
    path.write_text(yaml_text(whole if whole is not None else spec(**kw)))
    return path


def load(
    where: Path,
    whole: Mapping[str, Any] | None = None,
    /,
    *,
    overrides: Iterable[str] = (),
    file: str = "s.yaml",
    **kw: Any,
) -> Spec:
    """:func:`write_spec` then :func:`zoo.spec.load_spec` (with ``overrides``)."""
    return load_spec(write_spec(where, whole, file=file, **kw), overrides)
