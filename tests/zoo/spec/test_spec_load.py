"""Spec loading: valid specs load, broken ones give FILE:LINE:COL errors that say the fix."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from tests.zoo.spec._helpers import GOOD
from tests.zoo.spec._helpers import errors as _errors
from tests.zoo.spec._helpers import write as _write
from zoo.spec import Spec, load_spec
from zoo.spec.sections.models import mlp_num_params, width_from_budget

SPECS = Path(__file__).resolve().parents[3] / "specs"


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_specs_validate(path: Path) -> None:
    spec = load_spec(path)  # a deprecation warning would fail here (filterwarnings=error)
    assert spec.cells() or spec.simulation is not None


def test_method_axes_belong_to_their_method(tmp_path: Path) -> None:
    text = GOOD.replace(
        "sweep:\n",
        "  - {name: kt, kind: svi, guide: {kind: k_tied}, steps: 10}\n"
        "sweep:\n  inference.kt.guide.rank: [1, 2]\n",
    )
    cells = load_spec(_write(tmp_path, text)).cells()
    mf = [c for c in cells if c.method.name == "mfvi"]
    kt = [c for c in cells if c.method.name == "kt"]
    assert len(mf) == 2 * 3 and len(kt) == 2 * 3 * 2  # mfvi does not repeat over the rank
    assert all("inference.kt.guide.rank" not in c.axes for c in mf)
    assert sorted({c.method.guide.rank for c in kt}) == [1, 2]
    assert all(c.axes["inference.kt.guide.rank"] == c.method.guide.rank for c in kt)
    assert len({c.cell_id for c in cells}) == len(cells)


def test_good_spec_defaults_and_cells(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, GOOD))
    assert isinstance(spec, Spec)
    assert spec.prior.kind == "normal" and spec.prior.scale == 1.0
    assert spec.likelihood.kind == "categorical"
    cells = spec.cells()
    assert len(cells) == 6
    assert [c.spec.model.depth for c in cells] == [1, 1, 1, 2, 2, 2]
    assert [c.spec.seed for c in cells] == [0, 1, 2, 0, 1, 2]
    assert len({c.cell_id for c in cells}) == 6
    with pytest.raises(ValidationError):  # frozen
        spec.seed = 3  # type: ignore[misc]


def test_cell_ids_are_stable_and_track_config(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD)
    a = [c.cell_id for c in load_spec(p).cells()]
    b = [c.cell_id for c in load_spec(p).cells()]
    c = [c.cell_id for c in load_spec(p, ["data.noise=0.2"]).cells()]
    assert a == b
    assert not set(a) & set(c)
    # name, description and report layout do not change the numbers, so not the ids
    d = [c.cell_id for c in load_spec(p, ["name=u", "report.figures=[nll]"]).cells()]
    assert d == a


def test_overrides_apply(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, GOOD), ["model.width=5", "sweep.seed=[7]"])
    assert spec.model.width == 5
    assert [c.spec.seed for c in spec.cells()] == [7, 7]


# Each case: spec text (or override), expected line:col, expected fragments of the message.
BROKEN = [
    (
        "unknown key",
        GOOD.replace("  n_train: 100", "  n_trian: 100"),
        [],
        "4:3",
        ["data.n_trian", "unknown key", "did you mean 'n_train'"],
    ),
    ("misspelt section", GOOD.replace("model:", "modle:"), [], "5:1", ["did you mean 'model'"]),
    (
        "wrong type",
        GOOD.replace("width: 8", "width: eight"),
        [],
        "8:10",
        ["model.width", "valid integer"],
    ),
    (
        "negative depth",
        GOOD.replace("depth: 2", "depth: -2"),
        [],
        "7:10",
        ["model.depth", "greater than or equal to 0"],
    ),
    (
        "unknown kind",
        GOOD.replace("kind: two_moons", "kind: two_moon"),
        [],
        "3:9",
        ["data.kind", "did you mean 'two_moons'"],
    ),
    (
        "empty sweep axis",
        GOOD.replace("seed: [0, 1, 2]", "seed: []"),
        [],
        "16:3",
        ["sweep.seed", "empty"],
    ),
    (
        "bad sweep value",
        GOOD.replace("model.depth: [1, 2]", "model.depth: [1, -2]"),
        [],
        "15:20",
        ["sweep.model.depth[1]", "greater than or equal to 0"],
    ),
    (
        "unknown sweep axis",
        GOOD.replace("model.depth: [1, 2]", "model.dept: [1, 2]"),
        [],
        "15:3",
        ["did you mean 'model.depth'"],
    ),
    (
        "missing field",
        GOOD.replace("  depth: 2\n", ""),
        [],
        "6:3",
        ["model.depth", "required field missing"],
    ),
    (
        "missing data file",
        GOOD.replace(
            "kind: two_moons\n  n_train: 100", "kind: csv\n  path: nowhere.csv\n  target: y"
        ),
        [],
        "4:9",
        ["data.path", "does not exist"],
    ),
    (
        "bad YAML syntax",
        GOOD.replace("  n_train: 100", "  n_train: [100"),
        [],
        "5:6",
        ["YAML syntax error"],
    ),
    ("not a mapping", "- just\n- a list\n", [], "1:1", ["must be a YAML mapping"]),
    ("duplicate key", GOOD + "seed: 1\nseed: 2\n", [], "18:1", ["duplicate key 'seed'"]),
    (
        "width and budget",
        GOOD.replace("width: 8", "width: 8\n  param_budget: 100"),
        [],
        "6:3",
        ["exactly one of model.width and model.param_budget"],
    ),
    (
        "bad literal",
        GOOD.replace("depth: 2", "depth: 2\n  activation: rellu"),
        [],
        "8:15",
        ["did you mean 'relu'"],
    ),
    ("override", GOOD, ["model.widht=3"], "--set model.widht=3", ["did you mean 'width'"]),
    ("malformed override", GOOD, ["model.width"], "--set model.width", ["FIELD.PATH=VALUE"]),
    (
        "duplicate method names",
        GOOD.replace(
            "    steps: 10\n",
            "    steps: 10\n  - {name: mfvi, kind: svi, guide: {kind: mean_field}, steps: 5}\n",
        ),
        [],
        "10:3",
        ["unique"],
    ),
    ("report axis", GOOD + "report: {x: model.width}\n", [], "17:13", ["not a sweep axis"]),
    (
        "report column",
        GOOD + "report: {x: sed}\n",
        [],
        "17:13",
        ["choose one of: method, seed, model.depth", "did you mean 'seed'"],
    ),
    (
        "likelihood for the task",
        GOOD + "likelihood: {kind: gaussian}\n",
        [],
        "17:20",
        ["likelihood.kind: 'gaussian' does not fit classification data", "kind: categorical"],
    ),
    (
        "metric for the task",
        GOOD + "metrics: {names: [accuracy, rmse]}\n",
        [],
        "17:18",
        ["metrics.names: ['rmse'] do not apply"],
    ),
]


@pytest.mark.parametrize("case", BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_specs(tmp_path: Path, case) -> None:
    _, text, overrides, where, fragments = case
    p = _write(tmp_path, text)
    msgs = _errors(p, overrides)
    joined = "\n".join(msgs)
    for frag in fragments:
        assert frag in joined, joined
    if where.startswith("--set"):
        assert msgs[0].startswith(where), joined
    else:
        assert msgs[0].startswith(f"{p}:{where}"), joined
    assert "Traceback" not in joined


def test_all_errors_reported_at_once(tmp_path: Path) -> None:
    text = GOOD.replace("n_train: 100", "n_train: -1").replace("width: 8", "width: 0")
    msgs = _errors(_write(tmp_path, text))
    assert len(msgs) == 2
    assert "data.n_train" in msgs[0] and "model.width" in msgs[1]


def test_non_yaml_and_missing_files(tmp_path: Path) -> None:
    binary = tmp_path / "b.yaml"
    binary.write_bytes(bytes(range(256)))
    assert "not a text file" in _errors(binary)[0]
    assert "no such file" in _errors(tmp_path / "missing.yaml")[0]
    assert "is a directory" in _errors(tmp_path)[0]


def test_yaml_never_constructs_objects(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD.replace("name: t", "name: !!python/object/apply:os.system [ls]"))
    assert "YAML" in _errors(p)[0]


def test_validate_cli_exit_code_and_no_traceback(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD.replace("depth: 2", "depth: -2"))
    r = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "validate", str(p)], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"{p}:7:10: model.depth:" in r.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "validate", str(_write(tmp_path, GOOD, "g.yaml"))],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize(
    ("depth", "budget", "in_dim", "out_dim"),
    [(1, 1000, 2, 2), (2, 1000, 2, 2), (4, 1000, 2, 2), (8, 1000, 2, 2), (3, 5000, 64, 10)],
)
def test_width_from_budget_is_largest_that_fits(depth, budget, in_dim, out_dim) -> None:
    w = width_from_budget(in_dim, out_dim, depth, budget)
    assert mlp_num_params(in_dim, out_dim, depth, w) <= budget
    assert mlp_num_params(in_dim, out_dim, depth, w + 1) > budget


def test_width_from_budget_known_values() -> None:
    # two moons (2 -> 2): depth 1 has 5w + 2 params; depth 8 has 7w^2 + 12w + 2
    assert width_from_budget(2, 2, 1, 1000) == 199
    assert width_from_budget(2, 2, 8, 1000) == 11
    assert mlp_num_params(2, 2, 0, 0) == 6
    with pytest.raises(ValueError, match="too small"):
        width_from_budget(2, 2, 8, 10)


# --------------------------------------------------------------------------- hostile input
# each answer is a SpecError whose every line names FILE:LINE:COL or the --set
# item, within seconds; never a traceback, a hang or an empty message.


def _at(p: Path, msgs: list[str], where: str) -> str:
    joined = "\n".join(msgs)
    assert msgs and all(m.strip() for m in msgs), joined
    assert msgs[0].startswith(f"{p}:{where}"), joined
    return joined


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("!!set {a, b}", "!!set is not allowed"),
        ("!!binary aGVsbG8=", "!!binary is not allowed"),
        ("!!timestamp 2001-12-14", "!!timestamp is not allowed"),
        ("!!python/object/apply:os.system [ls]", "!!python/object/apply:os.system is not"),
        ("!!python/name:os.system ''", "!!python/name:os.system is not allowed"),
        ("!!omap [{a: 1}]", "!!omap is not allowed"),
        ("!!pairs [[a, 1]]", "!!pairs is not allowed"),
        ("!mine x", "!mine is not allowed"),
        ("!!int [1]", "!!int is not allowed"),
        (".nan", "not a finite number"),
        ("-.inf", "not a finite number"),
        ("1.0e+999", "not a finite number"),
        ("!!int 1" + "0" * 5000, "not a valid int"),
        ("{1: a}", "a key must be a string, got 1"),
        ("{on: a}", "a key must be a string, got True"),
        ("{~: a}", "a key must be a string, got None"),
        ("{[a]: b}", "a key must be a string, got ['a']"),
        ('"\\ud800"', "unpaired surrogate"),
    ],
)
def test_yaml_holds_only_json_data(tmp_path: Path, value: str, fragment: str) -> None:
    # 'Object of type set/bytes is not JSON serializable' tracebacks before
    p = _write(tmp_path, GOOD.replace("name: t", f"name: t\ndescription: {value}"))
    assert fragment in _at(p, _errors(p), "2:1")  # the value's (or the key's) column


def test_yaml_dates_are_strings(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, GOOD.replace("name: t", "name: t\ndescription: 2024-01-31")))
    assert spec.description == "2024-01-31"


def test_deep_nesting_is_refused_with_its_line(tmp_path: Path) -> None:
    # a RecursionError traceback before
    deep = "[" * 3000 + "]" * 3000
    p = _write(tmp_path, GOOD.replace("name: t", f"name: t\ndescription: {deep}"))
    assert "nest deeper than" in _at(p, _errors(p), "2:")
    cyclic = _write(tmp_path, GOOD + "metrics: &m {names: [*m]}\n", "c.yaml")
    assert "YAML aliases nest here" in _at(cyclic, _errors(cyclic), "17:")


@contextlib.contextmanager
def _within(seconds: int):
    """Raise TimeoutError in the body after ``seconds`` (POSIX alarm)."""

    def alarm(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_BOMB = "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9 if p else ['lol'] * 9)}]\n"
    for p, k in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)


@pytest.mark.parametrize("where", ["top", "sweep"])
def test_alias_bomb_is_refused_quickly(tmp_path: Path, where: str) -> None:
    # "billion laughs": 9^9 values; it never answered before
    if where == "top":
        text = GOOD + "".join(f"x{line}\n" for line in _BOMB.splitlines())  # keys xa .. xi
    else:
        text = _BOMB.replace("i: &i", "bomb: &i") + GOOD.replace("seed: [0, 1, 2]", "seed: *i")
    p = _write(tmp_path, text)
    t = time.perf_counter()
    with _within(20):  # a hang fails instead of hanging the suite
        msgs = _errors(p)
    assert time.perf_counter() - t < 5
    joined = "\n".join(msgs)
    assert "YAML aliases expand the spec to more than" in joined, joined
    assert msgs[0].startswith(f"{p}:"), joined


def test_aliases_and_merge_keys_within_bounds_work(tmp_path: Path) -> None:
    text = GOOD.replace(
        "    guide: {kind: mean_field}\n    steps: 10\n",
        "    guide: &g {kind: mean_field}\n    steps: &n 10\n"
        "  - {<<: {kind: svi, steps: 99}, name: two, guide: *g, steps: *n}\n",
    )
    spec = load_spec(_write(tmp_path, text))
    assert [m.steps for m in spec.inference] == [10, 10]
    assert spec.inference[1].kind == "svi"


def test_huge_files_and_sweeps_are_refused(tmp_path: Path) -> None:
    big = _write(tmp_path, GOOD + "#" * (2 << 20), "big.yaml")
    assert "bytes; a spec file is at most" in _errors(big)[0]
    huge = _write(tmp_path, GOOD.replace("seed: [0, 1, 2]", f"seed: {list(range(300))}"), "h.yaml")
    noise = [round(0.1 * k, 1) for k in range(1, 20)]
    msgs = _errors(huge, [f"sweep.data.noise={noise}"])  # 2 x 300 x 19 = 11400 cells
    assert msgs[0].startswith(f"{huge}:14:1: sweep: 11400 combinations"), msgs


@pytest.mark.parametrize(
    ("section", "value", "override", "fragment"),
    [
        ("sweep", 5, [], "sweep: must be a mapping"),
        ("sweep", [["seed"]], [], "sweep: must be a mapping"),
        ("sweep", {"seed": 5}, [], "sweep.seed: an axis is a list of values"),
        (None, None, ["sweep=5"], "sweep: must be a mapping"),
        ("inference", 5, [], "inference"),
        ("inference", [5], [], "inference[0]"),
        ("studies", 5, [], "studies"),
        ("data", 5, [], "data"),
        ("model", [1], [], "model"),
        ("report", "x", [], "report"),
        ("metrics", 5, [], "metrics"),
        ("runtime", 5, [], "runtime"),
        ("prior", 5, [], "prior"),
        ("likelihood", ["a"], [], "likelihood"),
        ("seed", "x", [], "seed"),
        ("name", [1], [], "name"),
        ("simulation", 5, [], "simulation"),
        (None, None, ["inference=5"], "inference"),
        (None, None, ["studies={}"], "studies"),
    ],
)
def test_wrong_typed_sections_name_the_field(
    tmp_path: Path, section, value, override, fragment
) -> None:
    # `sweep: 5` and `--set sweep=5` exited 2 with an EMPTY message before
    data = yaml.safe_load(GOOD)
    if section is not None:
        data[section] = value
    p = _write(tmp_path, yaml.safe_dump(data, sort_keys=False))
    msgs = _errors(p, override)
    joined = "\n".join(msgs)
    assert msgs and all(m.strip() for m in msgs), joined
    assert fragment in joined, joined
    for m in msgs:
        assert m.startswith((f"{p}:", "--set ")), joined


def test_cli_never_prints_an_empty_error(tmp_path: Path, capsys) -> None:
    from zoo.cli import main

    p = _write(tmp_path, GOOD.split("sweep:")[0] + "sweep: 5\n")
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"{p}:14:8: sweep: must be a mapping" in err
    assert main(["validate", str(p), "--set", "sweep=5"]) == 2
    assert "--set sweep=5: sweep: must be a mapping" in capsys.readouterr().err


def test_cli_tag_and_bomb_exit_2_without_traceback(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD.replace("name: t", "name: t\ndescription: !!binary aGVsbG8="))
    q = _write(tmp_path, GOOD + "".join(f"x{line}\n" for line in _BOMB.splitlines()), "q.yaml")
    r = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "validate", str(p), str(q)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"{p}:2:14: the YAML tag !!binary is not allowed" in r.stderr
    assert f"{q}:" in r.stderr and "YAML aliases expand" in r.stderr


# --------------------------------------------------------------------------- --set


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ("foo", "expected FIELD.PATH=VALUE"),
        ("=3", "expected FIELD.PATH=VALUE"),
        ("a..b=1", "'a..b' is not a field path"),
        (".a=1", "is not a field path"),
        ("model.=1", "is not a field path"),
        ("model depth=1", "is not a field path"),
        ("model.depth=[1", "YAML syntax error"),
        ("model.depth=*x", "undefined alias"),
        ("model.depth=!!set {1}", "!!set is not allowed"),
        ("model.depth=.nan", "not a finite number"),
        ("foo=1", "unknown key 'foo'"),
        ("model.widht=3", "did you mean 'width'"),
        ("inference.mf.steps=3", "inference has no method 'mf'; the methods are: mfvi"),
        ("inference.mf=3", "did you mean 'mfvi'"),
        ("inference.7.steps=3", "the methods are: mfvi"),
        ("metrics.names.5=nll", "give an index"),
        ("metrics.names.0.x=1", "metrics.names.0 is accuracy, which has no field 'x'"),
        ("model.depth.x=1", "model.depth is 2, which has no field 'x'"),
    ],
)
def test_bad_set_items_name_the_item(tmp_path: Path, item: str, fragment: str) -> None:
    p = _write(tmp_path, GOOD + "metrics: {names: [accuracy]}\n")
    msgs = _errors(p, [item])
    joined = "\n".join(msgs)
    assert msgs[0].startswith(f"--set {item}:"), joined
    assert fragment in joined, joined


def test_set_of_a_swept_field_says_to_set_the_axis(tmp_path: Path) -> None:
    # silently ignored before: the sweep axis' values replaced it in every cell
    p = _write(tmp_path, GOOD)
    msg = _errors(p, ["model.depth=3"])[0]
    assert msg.startswith("--set model.depth=3: model.depth is a sweep axis"), msg
    assert "--set 'sweep.model.depth=[3]'" in msg and "sweep.model.depth=null" in msg
    assert "sweep.seed=[4]" in _errors(p, ["seed=4"])[0]
    spec = load_spec(p, ["sweep.model.depth=[3]"])
    assert {c.spec.model.depth for c in spec.cells()} == {3}
    spec = load_spec(p, ["sweep.model.depth=null", "model.depth=3"])
    assert {c.spec.model.depth for c in spec.cells()} == {3} and "model.depth" not in spec.sweep
    kt = _write(
        tmp_path, GOOD.replace("sweep:\n", "sweep:\n  inference.mfvi.steps: [1, 2]\n"), "k.yaml"
    )
    assert "sweep.inference.mfvi.steps=[5]" in _errors(kt, ["inference.0.steps=5"])[0]


def test_set_of_a_kind_says_to_replace_the_section(tmp_path: Path) -> None:
    # said "unknown key 'n_train'; did you mean 'n_train'?" before
    p = _write(tmp_path, GOOD)
    msg = _errors(p, ["data.kind=digits"])[0]
    assert msg.startswith(f"{p}:4:3: data.n_train: unknown key 'n_train' for data of kind 'digits'")
    assert "did you mean 'n_train'" not in msg
    assert "a key of kinds idx, teacher and two_moons" in msg
    assert "--set data.kind=digits changed the kind" in msg and "--set 'data={kind: digits}'" in msg
    assert load_spec(p, ["data={kind: digits}"]).data.kind == "digits"
    q = _write(tmp_path, GOOD.replace("kind: two_moons", "kind: digits"), "q.yaml")
    msg = _errors(q)[0]
    assert "unknown key 'n_train' for data of kind 'digits'" in msg and msg.endswith("remove it")


_TWO = GOOD.replace(
    "    steps: 10\n",
    "    steps: 10\n  - {name: kt, kind: svi, guide: {kind: k_tied}, steps: 10}\n"
    "  - {name: map, kind: map, steps: 10}\n",
).replace(
    "sweep:\n",
    "studies:\n  - {kind: ktied, methods: [kt]}\nsweep:\n  inference.kt.guide.rank: [1, 2]\n",
)


def test_methods_can_be_dropped_and_selected(tmp_path: Path) -> None:
    p = _write(tmp_path, _TWO)
    assert [m.name for m in load_spec(p).inference] == ["mfvi", "kt", "map"]
    spec = load_spec(p, ["inference.kt=null"])  # its axis and its study go with it
    assert [m.name for m in spec.inference] == ["mfvi", "map"]
    assert "inference.kt.guide.rank" not in spec.sweep and not spec.studies
    spec = load_spec(p, ["inference=[map, mfvi]"])
    assert [m.name for m in spec.inference] == ["map", "mfvi"]
    spec = load_spec(p, ["inference=[kt, {name: x, kind: map, steps: 5}]", "inference.kt.steps=3"])
    assert [m.name for m in spec.inference] == ["kt", "x"] and spec.inference[0].steps == 3
    assert spec.studies and spec.sweep["inference.kt.guide.rank"] == [1, 2]
    msg = _errors(p, ["inference=[mfvi, nope]"])[0]
    assert msg.startswith("--set inference=[mfvi, nope]: inference has no method 'nope'"), msg
    assert "mfvi, kt, map" in msg
    one = _write(tmp_path, GOOD, "one.yaml")
    assert "is the only method" in _errors(one, ["inference.mfvi=null"])[0]


# --------------------------------------------------------------------------- data paths

_CSV = "x1,x2,y\n" + "\n".join(f"{i % 7},{i % 3},{i % 5}" for i in range(40)) + "\n"


def test_relative_data_paths_resolve_against_the_spec_file(tmp_path: Path, monkeypatch) -> None:
    # from another directory: a traceback (sweep) or a different file of the same name
    d = tmp_path / "specdir"
    d.mkdir()
    (d / "a.csv").write_text(_CSV)
    (d / "b.csv").write_text(_CSV.replace("x1", "z1"))
    text = GOOD.replace("kind: two_moons\n  n_train: 100", "kind: csv\n  path: a.csv\n  target: y")
    text = text.replace(
        "sweep:\n", "likelihood: {kind: gaussian}\nsweep:\n  data.path: [a.csv, b.csv]\n"
    )
    spec_file = _write(d, text)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "a.csv").write_text("a decoy of the same name\n")
    ids = {}
    for cwd, rel in ((d, "s.yaml"), (other, "../specdir/s.yaml"), (tmp_path, "specdir/s.yaml")):
        monkeypatch.chdir(cwd)
        spec = load_spec(rel)
        assert spec.data.path == str(d / "a.csv")
        assert spec.sweep["data.path"] == [str(d / "a.csv"), str(d / "b.csv")]
        cells = spec.cells()
        assert {c.spec.data.path for c in cells} == {str(d / "a.csv"), str(d / "b.csv")}
        ids[cwd] = [c.cell_id for c in cells]
    assert len({tuple(v) for v in ids.values()}) == 1  # ids do not depend on the cwd
    # a path given with --set is relative to the working directory
    monkeypatch.chdir(other)
    (other / "c.csv").write_text(_CSV)
    spec = load_spec(spec_file, ["sweep.data.path=[c.csv]"])
    assert [c.spec.data.path for c in spec.cells()] == [str(other / "c.csv")] * 6
    spec = load_spec(spec_file, ["sweep.data.path=null", "data.path=c.csv"])
    assert spec.data.path == str(other / "c.csv")
    assert spec_file.exists()


def test_validate_from_another_directory(tmp_path: Path) -> None:
    d = tmp_path / "specdir"
    d.mkdir()
    (d / "a.csv").write_text(_CSV)
    text = GOOD.replace("kind: two_moons\n  n_train: 100", "kind: csv\n  path: a.csv\n  target: y")
    text = text.replace("sweep:\n", "likelihood: {kind: gaussian}\nsweep:\n  data.path: [a.csv]\n")
    _write(d, text)
    r = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "validate", "specdir/s.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(SPECS.parent)},
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX pipes")
def test_a_pipe_or_device_is_not_read(tmp_path: Path) -> None:
    # reading a pipe (or /dev/zero) would never end
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    with _within(20):
        assert "not a regular file" in _errors(fifo)[0]
