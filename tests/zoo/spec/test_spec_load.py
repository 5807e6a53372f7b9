"""Spec loading: valid specs load, broken ones give FILE:LINE:COL errors that say the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
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
        "report over seed",
        GOOD + "report: {x: seed}\n",
        [],
        "17:13",
        ["choose one of: method, model.depth"],
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
    r = subprocess.run([sys.executable, "-m", "zoo.cli", "validate", str(p)],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"{p}:7:10: model.depth:" in r.stderr
    ok = subprocess.run([sys.executable, "-m", "zoo.cli", "validate", str(_write(tmp_path, GOOD, "g.yaml"))],
                        capture_output=True, text=True)  # fmt: skip
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
