"""Property-based tests of the spec language (hypothesis): hostile input is answered cleanly.

The property, over mutations of every shipped spec (types, numbers, kinds, missing,
renamed and duplicated keys, nesting, unicode, YAML tags and aliases, broken text), over
random specs and over random ``--set`` items: :func:`load_spec` either returns a spec
whose cells expand (and serialize as JSON), or raises :class:`SpecError` whose every line
is non-empty and starts with ``FILE:LINE:COL:`` or with the ``--set`` item, never any
other exception, and answers within a time bound (hypothesis' ``deadline``; a hang is cut
by an alarm). Derandomized, so CI sees the same examples every run.
"""

from __future__ import annotations

import copy
import json
import re
import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.zoo.spec._helpers import GOOD
from zoo.spec import Spec, SpecError, load_spec
from zoo.spec.base import kind_of, union_members

SPECS = Path(__file__).resolve().parents[3] / "specs"
TEXTS = {p.name: p.read_text() for p in sorted(SPECS.glob("*.yaml"))}
DATA = {name: yaml.safe_load(text) for name, text in TEXTS.items()}
#: the paper's two-moons spec (960 cells, half a second to load) would dominate the time
LIGHT = [n for n in TEXTS if n != "two_moons_depth_paper.yaml"]

HANG_S = 20  # an answer later than this is a hang: the alarm ends it as a failure
PROFILE = settings(
    deadline=timedelta(seconds=5),
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)

_LOC = re.compile(r"^.+:\d+:\d+: \S")


def _kinds() -> list[str]:
    out: set[str] = set()
    stack = [Spec]
    seen: set[type] = set()
    while stack:
        model = stack.pop()
        if model in seen:
            continue
        seen.add(model)
        if isinstance(kind_of(model), str):
            out.add(kind_of(model))
        for f in model.model_fields.values():
            stack.extend(union_members(f.annotation))
    return sorted(out)


def _keys(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield str(k)
            yield from _keys(v)
    elif isinstance(node, list):
        for v in node:
            yield from _keys(v)


KINDS = _kinds()
FIELDS = sorted({k for d in DATA.values() for k in _keys(d)})

# --------------------------------------------------------------------------- strategies

NUMBERS = st.sampled_from(
    [
        0,
        1,
        2,
        -1,
        3,
        7,
        10**12,
        -(10**18),
        2**63,
        10**40,
        0.0,
        0.5,
        -0.5,
        1e-300,
        1e300,
        3.4e38,
        1.5,
        float("nan"),
        float("inf"),
    ]
)
WORDS = st.sampled_from(
    [
        *KINDS,
        *FIELDS,
        "",
        " ",
        "..",
        "../x",
        "/",
        "é",
        "名前",
        "\u202e",
        "a" * 300,
        "null",
        "true",
        "0",
        "mfvi",
        "nuts",
        "method",
        "seed",
    ]
)
SCALARS = st.one_of(
    st.none(), st.booleans(), NUMBERS, st.integers(), WORDS, st.text(max_size=12), st.floats()
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.one_of(WORDS, st.text(max_size=6)), inner, max_size=4)
    ),
    max_leaves=10,
)

_BOMB = "".join(
    f"b{k}: &{k} [{', '.join([f'*{p}'] * 9 if p else ['lol'] * 9)}]\n"
    for p, k in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)

#: YAML text a value may become: tags, aliases, nesting, odd scalars, broken syntax
HOSTILE = st.sampled_from(
    [
        "!!set {a, b}",
        "!!binary aGVsbG8=",
        "!!python/object/apply:os.system [echo]",
        "!!python/name:os.system ''",
        "!!timestamp 2001-12-14",
        "2001-12-14",
        "2001-12-14 10:00:00",
        "!foo bar",
        "!!omap [{a: 1}]",
        "!!pairs [[a, 1]]",
        "!!str 3",
        "!!int '3'",
        "!!float 1",
        "!!int [1]",
        "!!map [1]",
        ".nan",
        ".inf",
        "-.inf",
        "1.0e+999",
        "0x1F",
        "1_000",
        "1:30",
        "0o17",
        "0b101",
        "~",
        "",
        "yes",
        "on",
        "NO",
        "=",
        "<<",
        '"\\ud800"',
        "'\\ud800'",
        "&a [1, 2]",
        "*undefined",
        "[&x 1, *x]",
        "&c [*c]",
        "[" * 100 + "]" * 100,
        "[" * 3000,
        "{a: 1, a: 2}",
        "{? [a]: b}",
        "{1: 2}",
        "{null: 1}",
        "{<<: {a: 1}, b: 2}",
        "{<<: [1]}",
        "9" * 5000,
        "!!int " + "9" * 5000,
        "-" + "9" * 400,
        "'" + "é" * 50 + "'",
        "\t",
        "\x00",
        "\x85",
        "\ufeff",
        "%TAG ! tag:x",
        "---",
        "...",
        "@",
        "`",
        "|\n  block",
        "- a\n- b",
        "[a, b",
        "{a: [}",
        "'unterminated",
        "key: value: other",
        "*a *b",
    ]
)


def _walk(node: Any) -> Iterator[tuple[Any, Any]]:
    """(container, key) of every value below ``node``."""
    if isinstance(node, dict):
        for k in list(node):
            yield node, k
            yield from _walk(node[k])
    elif isinstance(node, list):
        for i in range(len(node)):
            yield node, i
            yield from _walk(node[i])


@st.composite
def mutated_data(draw: st.DrawFn) -> tuple[str, Any]:
    """A shipped spec's data after one to three structural mutations."""
    name = draw(st.sampled_from(LIGHT))
    data = copy.deepcopy(DATA[name])
    for _ in range(draw(st.integers(1, 3))):
        places = list(_walk(data))
        if not places:
            break
        top = [(data, k) for k in data] if isinstance(data, dict) else []
        if top and draw(st.booleans()):  # a whole section: wrong types, missing, wrapped
            parent, key = draw(st.sampled_from(top))
            op = draw(st.sampled_from(["scalar", "value", "delete", "wrap"]))
        else:
            parent, key = draw(st.sampled_from(places))
            op = draw(
                st.sampled_from(
                    ["value", "scalar", "delete", "rename", "add", "wrap", "unwrap", "kind"]
                )
            )
        old = parent[key]
        if op == "value":
            parent[key] = draw(VALUES)
        elif op == "scalar":
            parent[key] = draw(SCALARS)
        elif op == "delete":
            del parent[key]
        elif op == "rename" and isinstance(parent, dict):
            del parent[key]
            parent[draw(WORDS)] = old
        elif op == "add" and isinstance(parent, dict):
            parent[draw(WORDS)] = draw(VALUES)
        elif op == "wrap":
            parent[key] = [old] if draw(st.booleans()) else {"kind": old}
        elif op == "unwrap" and isinstance(old, list | dict) and old:
            parent[key] = next(iter(old.values() if isinstance(old, dict) else old))
        elif op == "kind":
            parent[key] = draw(st.sampled_from(KINDS))
    return name, data


@st.composite
def hostile_text(draw: st.DrawFn) -> str:
    """A shipped spec's text with lines replaced, duplicated, dropped or given hostile YAML."""
    text = TEXTS[draw(st.sampled_from(LIGHT))]
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(
            st.sampled_from(
                ["value", "value", "value", "dup", "drop", "indent", "insert", "bomb", "truncate"]
            )
        )
        line = lines[i]
        if op == "value" and ":" in line:
            head = line.split(":")[0]
            lines[i] = f"{head}: {draw(HOSTILE)}"
        elif op == "dup":
            lines.insert(i, line)
        elif op == "drop":
            del lines[i]
        elif op == "indent":
            lines[i] = ("  " + line) if draw(st.booleans()) else line[2:]
        elif op == "insert":
            lines.insert(i, draw(st.text(alphabet="ab:- []{}&*!#'\"\n\t?|>%@`,.~é", max_size=15)))
        elif op == "bomb" and ":" in line:
            lines[i] = f"{line.split(':')[0]}: *i"
            lines = _BOMB.splitlines() + lines
        elif op == "truncate":
            lines = lines[: i + 1]
            lines[-1] = lines[-1][: draw(st.integers(0, len(lines[-1])))]
        if not lines:
            lines = [""]
    return "\n".join(lines) + "\n"


def _section(kind_union: Any) -> st.SearchStrategy[dict[str, Any]]:
    """A mapping with a kind of the union and some of that member's fields (random values)."""
    members = union_members(kind_union)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        m = draw(st.sampled_from(members))
        out: dict[str, Any] = {"kind": kind_of(m)} if kind_of(m) else {}
        fields = [f for f in m.model_fields if f != "kind"]
        for f in draw(st.lists(st.sampled_from(fields), max_size=4, unique=True)) if fields else []:
            out[f] = draw(st.one_of(SCALARS, st.lists(SCALARS, max_size=3)))
        return out

    return build()


@st.composite
def random_spec(draw: st.DrawFn) -> dict[str, Any]:
    """A spec built from the schema's own sections with random fields and values."""
    fields = Spec.model_fields
    methods = draw(st.lists(_section(fields["inference"].annotation), min_size=0, max_size=3))
    for i, m in enumerate(methods):
        m.setdefault("name", draw(st.sampled_from([f"m{i}", "m0", "mfvi", "", "x y"])))
    data: dict[str, Any] = {
        "name": draw(st.sampled_from(["t", "", "..", "a/b", "ok-name", "é"])),
        "data": draw(_section(fields["data"].annotation)),
        "model": draw(_section(fields["model"].annotation)),
        "inference": methods,
    }
    for key in draw(
        st.lists(
            st.sampled_from(
                ["prior", "likelihood", "studies", "runtime", "report", "metrics", "seed", "sweep"]
            ),
            max_size=3,
            unique=True,
        )
    ):
        if key in ("studies",):
            data[key] = draw(st.lists(_section(fields["studies"].annotation), max_size=2))
        elif key == "sweep":
            axes = st.sampled_from(
                [
                    "seed",
                    "model.depth",
                    "model.width",
                    "data.n_train",
                    "data.noise",
                    "split",
                    "inference.m0.steps",
                    "name",
                    "x",
                ]
            )
            data[key] = draw(
                st.dictionaries(axes, st.lists(SCALARS, max_size=3), max_size=2)
                | st.dictionaries(axes, SCALARS, max_size=2)
                | SCALARS
            )
        elif key == "seed":
            data[key] = draw(SCALARS)
        else:
            data[key] = draw(_section(fields[key].annotation))
    return data


_PATHS = [
    "model.depth",
    "model.width",
    "model.kind",
    "data.kind",
    "data.n_train",
    "seed",
    "name",
    "inference",
    "inference.mfvi",
    "inference.mfvi.steps",
    "inference.0.steps",
    "inference.nuts.max_draws",
    "inference.mf.steps",
    "inference.nuts",
    "sweep",
    "sweep.seed",
    "sweep.model.depth",
    "sweep.inference.mfvi.lr",
    "studies",
    "studies.0.max_draws",
    "studies.5.x",
    "report.x",
    "metrics.names.0",
    "metrics.names.0.x",
    "runtime.device",
    "data.path",
    "sweep.data.path",
    "a..b",
    "",
    ".",
    "model.",
    "é",
]
SET_ITEMS = st.one_of(
    st.builds(
        lambda p, v: f"{p}={v}",
        st.sampled_from(_PATHS),
        st.one_of(HOSTILE, VALUES.map(lambda v: json.dumps(v))),
    ),
    st.text(alphabet="ab.=[]{}:!&*-_ 09\n", max_size=20),
    st.sampled_from(_PATHS),
)


# --------------------------------------------------------------------------- the property


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError(f"load_spec gave no answer within {HANG_S} s (a hang)")


def check(path: Path, overrides: list[str] = ()) -> Spec | None:
    """Load ``path``; assert the property; the spec if accepted."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        try:
            spec = load_spec(path, overrides)
        except SpecError as e:
            assert e.messages, "a SpecError without messages"
            for m in e.messages:
                assert m.strip(), f"an empty message: {e.messages}"
                named_set = any(m.startswith(f"--set {o}:") for o in overrides)
                assert named_set or (m.startswith(f"{path}:") and _LOC.match(m)), (
                    f"a message without FILE:LINE:COL or its --set item: {m!r}"
                )
            event("rejected")
            return None
        event("accepted")
        cells = spec.cells()
        json.dumps([c.config() for c in cells])  # what a run writes
        json.dumps(spec.model_dump(mode="json"))
        return spec
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prop") / "spec.yaml"


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@settings(PROFILE, max_examples=120)
@given(case=mutated_data())
def test_mutated_shipped_specs_are_answered_cleanly(spec_file: Path, case) -> None:
    spec_file.write_text(_dump(case[1]), encoding="utf-8")
    check(spec_file)


@settings(PROFILE, max_examples=120)
@given(text=hostile_text())
def test_hostile_yaml_is_answered_cleanly(spec_file: Path, text: str) -> None:
    spec_file.write_text(text, encoding="utf-8", errors="surrogatepass")
    check(spec_file)


@settings(PROFILE, max_examples=80)
@given(data=random_spec())
def test_random_specs_are_answered_cleanly(spec_file: Path, data: dict[str, Any]) -> None:
    spec_file.write_text(_dump(data), encoding="utf-8")
    check(spec_file)


@settings(PROFILE, max_examples=100)
@given(items=st.lists(SET_ITEMS, min_size=1, max_size=3))
def test_random_set_items_are_answered_cleanly(spec_file: Path, items: list[str]) -> None:
    spec_file.write_text(TEXTS["two_moons_depth.yaml"], encoding="utf-8")
    check(spec_file, items)


_AXES = st.dictionaries(
    st.sampled_from(["seed", "model.depth", "data.noise", "inference.mfvi.steps"]),
    st.lists(st.sampled_from([0, 1, 2, 1.0, "1", 0.1, 0.10, True]), min_size=1, max_size=4),
    min_size=1,
    max_size=3,
)


@settings(PROFILE, max_examples=60)
@given(axes=_AXES)
def test_accepted_specs_have_unique_cell_ids(spec_file: Path, axes: dict[str, list]) -> None:
    # duplicate sweep values (0 and 0, 1 and 1.0 and "1") must not make two cells of one id
    data = yaml.safe_load(GOOD)
    data["sweep"] = axes
    spec_file.write_text(_dump(data), encoding="utf-8")
    spec = check(spec_file)
    if spec is not None:
        ids = [c.cell_id for c in spec.cells()]
        assert len(set(ids)) == len(ids), f"duplicate cell ids: {sorted(ids)}"
