"""Old study locations moved into the top-level ``studies`` list, with a message each.

Before the ``studies`` section, the studies were configured in four places:

- ``inference[i].ktied`` (an svi method): the k-tied study;
- ``metrics.pruning``: the over-pruning study;
- ``metrics.product_matrix_draws``: the product-matrix study;
- a sampler's ``gaussian_fit``, ``kl_target_draws`` and ``max_draws``: the price of mean
  field, which every sampler cell recorded by itself.

:func:`migrate` rewrites plain spec data (before validation) into the new form and says
what it moved, so that old specs and the resolved ``spec.yaml`` of old run directories
keep validating for one release. Samplers of a spec without a ``studies`` key keep
recording the price of mean field: they get a ``price_of_mean_field`` study. Methods with
the same old settings share one study; one that covers every method it can apply to
names none (``methods`` left out). In a spec that has a ``studies`` list (the new form), an
old setting on a method that a study of its kind already records (e.g. ``--set
inference.nuts.max_draws=600``) goes into that study, split off for the method if the study
records others too. No torch import here.
"""

from __future__ import annotations

import copy
import json
from typing import Any, NamedTuple

import yaml

from zoo.spec.base import kind_of, member_for_kind
from zoo.spec.sections.inference import InferenceSpec
from zoo.spec.sections.studies import (
    KTiedStudy,
    PriceOfMeanFieldStudy,
    ProductMatrixStudy,
    PruningStudy,
)

__all__ = ["Move", "migrate"]

_REMOVAL = "it stops validating in the next release"
_SAMPLER_KEYS = ("gaussian_fit", "kl_target_draws", "max_draws")


class Move(NamedTuple):
    """One old setting moved into ``studies`` (or dropped: a null that did nothing).

    Attributes
    ----------
    old : tuple
        Path of the old key in the spec data, e.g. ``("inference", 1, "gaussian_fit")``.
    message : str
        What moved where, with the new form to write (no file position).
    paths : tuple of (new prefix, old prefix)
        How paths inside the new study map back to the old keys, to report errors there.
    """

    old: tuple[Any, ...]
    message: str
    paths: tuple[tuple[tuple[Any, ...], tuple[Any, ...]], ...] = ()


def _fmt(path: tuple[Any, ...]) -> str:
    s = ""
    for p in path:
        s += f"[{p}]" if isinstance(p, int) else (f".{p}" if s else str(p))
    return s


def _flow(study: dict[str, Any]) -> str:
    return yaml.safe_dump(study, default_flow_style=True, width=10**6, sort_keys=False).strip()


_FAMILIES: dict[str, str | None] = {}


def _family(method: Any) -> str | None:
    kind = method.get("kind") if isinstance(method, dict) else None
    if not isinstance(kind, str):
        return None
    if kind not in _FAMILIES:  # migrate runs for every sweep combination: look up once
        _FAMILIES[kind] = getattr(member_for_kind(InferenceSpec, kind), "family", None)
    return _FAMILIES[kind]


def _old_sampler_keys(method: dict[str, Any]) -> list[str]:
    """The old price-of-MF keys on ``method`` that are not fields of its own section (ChEES
    has its own ``max_draws``)."""
    kind = method.get("kind")
    own = (
        getattr(member_for_kind(InferenceSpec, kind), "model_fields", {})
        if isinstance(kind, str)
        else {}
    )
    return [k for k in _SAMPLER_KEYS if k in method and k not in own]


def _old_keys(data: dict[str, Any]) -> bool:
    """Whether ``data`` may hold a setting at an old location (cheap, before a deep copy)."""
    methods = data.get("inference") if isinstance(data.get("inference"), list) else []
    for m in methods:
        if isinstance(m, dict) and ("ktied" in m or _old_sampler_keys(m)):
            return True
    metrics = data.get("metrics")
    if isinstance(metrics, dict) and ("pruning" in metrics or "product_matrix_draws" in metrics):
        return True
    return "studies" not in data and any(
        _family(m) in PriceOfMeanFieldStudy.families for m in methods
    )


class _Migration:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.given = data.get("studies")
        self.studies: list[Any] = list(self.given) if isinstance(self.given, list) else []
        self.first_new = len(self.studies)
        self.moves: list[Move] = []

    def add(self, study: dict[str, Any], sources: list[tuple[int, str]], cls: type) -> int:
        """Append ``study``; ``methods`` unless ``sources`` are all the spec's methods that a
        study of class ``cls`` applies to."""
        methods = self.data.get("inference") or []
        every = [i for i, m in enumerate(methods) if _family(m) in cls.families]
        if sorted(i for i, _ in sources) != every:
            study = {
                "kind": study["kind"],
                "methods": [n for _, n in sources],
                **{k: v for k, v in study.items() if k != "kind"},
            }
        self.studies.append(study)
        return len(self.studies) - 1

    def into_given(self, i: int, cls: type, settings: dict[str, Any]) -> int | None:
        """Put old-location ``settings`` of method ``i`` into the given study of class
        ``cls`` that records it; the study's index, or None if there is none.

        A study that records other methods too keeps them; method ``i`` gets a copy of it
        with ``settings`` merged in.
        """
        if not isinstance(self.given, list):
            return None
        methods = self.data.get("inference") or []
        name = methods[i].get("name")
        for k, s in enumerate(self.studies[: self.first_new]):
            if not isinstance(s, dict) or s.get("kind") != kind_of(cls):
                continue
            named = s.get("methods")
            if named is None:
                covers = [m.get("name") for m in methods if _family(m) in cls.families]
            elif isinstance(named, list):
                covers = list(named)
            else:
                continue
            if name not in covers:
                continue
            others = [n for n in covers if n != name]
            if not others:
                self.studies[k] = _merged(s, settings)
                return k
            self.studies[k] = {**s, "methods": others}
            self.studies.append(_merged({**s, "methods": [name]}, settings))
            return len(self.studies) - 1
        return None

    def dropped(self, old: tuple[Any, ...], what: str) -> None:
        self.moves.append(
            Move(
                old,
                f"{_fmt(old)}: deprecated key; null does nothing: remove "
                f"it ({what} is configured in the `studies:` list now; "
                f"{_REMOVAL})",
            )
        )

    def moved(self, old: tuple[Any, ...], keys: str, k: int, paths: list[tuple]) -> None:
        study = self.studies[k]
        self.moves.append(
            Move(
                old,
                f"{_fmt(old[:-1] + (keys,))}: deprecated location, read "
                f"as studies[{k}] for now ({_REMOVAL}); write it as "
                f"studies: [{_flow(study)}]",
                tuple(paths),
            )
        )

    def grouped(self, found: dict[int, dict[str, Any]], cls: type):
        """Studies of class ``cls`` for methods ``{index: settings}``, one per distinct
        settings; yields (study index, method indices)."""
        methods = self.data.get("inference") or []
        groups: dict[str, list[int]] = {}
        for i, settings in found.items():
            groups.setdefault(json.dumps(settings, sort_keys=True, default=str), []).append(i)
        for idx in groups.values():
            sources = [(i, methods[i].get("name")) for i in idx]
            k = self.add({"kind": kind_of(cls), **found[idx[0]]}, sources, cls)
            yield k, idx


def _merged(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``new`` written over it, mappings merged key by key."""
    out = copy.deepcopy(base)
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def migrate(data: dict[str, Any]) -> tuple[dict[str, Any], list[Move]]:
    """Spec data with the old study locations moved into ``studies``, and what moved.

    Parameters
    ----------
    data : dict
        Plain spec data (parsed YAML), not changed.

    Returns
    -------
    (dict, list of Move)
        The new-form data (the input itself when nothing moved) and one :class:`Move` per
        old key.
    """
    if not isinstance(data, dict) or (
        "studies" in data and not isinstance(data["studies"], list | None)
    ):
        return data, []  # malformed: validation reports it
    if not _old_keys(data):
        return data, []
    d = copy.deepcopy(data)
    mig = _Migration(d)
    methods = d.get("inference") if isinstance(d.get("inference"), list) else []
    _price_of_mf(mig, methods)
    _ktied(mig, methods)
    metrics = d.get("metrics")
    if isinstance(metrics, dict):
        _metrics(mig, metrics)
    if len(mig.studies) == mig.first_new and not mig.moves:
        return data, []
    if mig.studies or "studies" in d:
        d["studies"] = mig.studies
    return d, mig.moves


def _price_of_mf(mig: _Migration, methods: list[Any]) -> None:
    found: dict[int, dict[str, Any]] = {}
    present: dict[int, list[str]] = {}
    for i, m in enumerate(methods):
        if _family(m) not in PriceOfMeanFieldStudy.families:
            continue
        keys = _old_sampler_keys(m)
        if not keys and "studies" in mig.data:
            continue  # a new-form spec: the sampler records what its studies say
        settings = {k: m.pop(k) for k in keys}
        if keys and "studies" in mig.data:
            k = mig.into_given(i, PriceOfMeanFieldStudy, settings)
            if k is not None:
                paths = [(("studies", k, key), ("inference", i, key)) for key in keys]
                if k >= mig.first_new:  # split off for this method: its errors are here
                    paths.append((("studies", k), ("inference", i, keys[0])))
                mig.moved(("inference", i, keys[0]), ", ".join(keys), k, paths)
                continue
        found[i] = {k: v for k, v in settings.items() if v is not None or k == "gaussian_fit"}
        present[i] = keys
    for k, idx in mig.grouped(found, PriceOfMeanFieldStudy):
        for i in idx:
            keys = present[i]
            if not keys:
                mig.moves.append(
                    Move(
                        ("inference", i, "kind"),
                        (
                            f"inference[{i}]: a sampler records the price of mean field only in a "
                            f"study now; read as studies[{k}] for this spec without a `studies:` key "
                            f"({_REMOVAL}); write studies: [{_flow(mig.studies[k])}]"
                        ),
                        ((("studies", k), ("inference", i)),),
                    )
                )
                continue
            paths = [(("studies", k, key), ("inference", i, key)) for key in keys]
            paths.append((("studies", k), ("inference", i, keys[0])))
            mig.moved(("inference", i, keys[0]), ", ".join(keys), k, paths)


def _ktied(mig: _Migration, methods: list[Any]) -> None:
    found: dict[int, dict[str, Any]] = {}
    for i, m in enumerate(methods):
        if _family(m) not in KTiedStudy.families or "ktied" not in m:
            continue
        if m["ktied"] is None:
            del m["ktied"]
            mig.dropped(("inference", i, "ktied"), "the k-tied study")
        elif isinstance(m["ktied"], dict):
            settings = m.pop("ktied")
            k = mig.into_given(i, KTiedStudy, settings) if "studies" in mig.data else None
            if k is None:
                found[i] = settings
                continue
            old = ("inference", i, "ktied")
            paths = [(("studies", k, key), (*old, key)) for key in settings]
            if k >= mig.first_new:
                paths.append((("studies", k), old))
            mig.moved(old, "ktied", k, paths)
    for k, idx in mig.grouped(found, KTiedStudy):
        for i in idx:
            old = ("inference", i, "ktied")
            mig.moved(old, "ktied", k, [(("studies", k), old)])


def _metrics(mig: _Migration, metrics: dict[str, Any]) -> None:
    if isinstance(metrics.get("pruning", 0), dict | None):  # anything else: unknown key
        value = metrics.pop("pruning")
        old = ("metrics", "pruning")
        if value is None:
            mig.dropped(old, "the pruning study")
        else:
            mig.studies.append({"kind": kind_of(PruningStudy), **value})
            k = len(mig.studies) - 1
            mig.moved(old, "pruning", k, [(("studies", k), old)])
    if "product_matrix_draws" in metrics:
        value = metrics.pop("product_matrix_draws")
        old = ("metrics", "product_matrix_draws")
        if value is None:
            mig.dropped(old, "the product-matrix study")
        else:
            mig.studies.append({"kind": kind_of(ProductMatrixStudy), "draws": value})
            k = len(mig.studies) - 1
            mig.moved(
                old,
                "product_matrix_draws",
                k,
                [(("studies", k, "draws"), old), (("studies", k), old)],
            )
