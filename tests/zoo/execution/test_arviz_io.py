"""Tests for zoo.execution.arviz_io: DataTree schema, compact netCDF round trip and atomic writes."""

import io
import os

import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr

from zoo.execution.arviz_io import (
    DRAWS_GUIDE,
    DRAWS_MCMC,
    SAMPLE_STATS,
    datatree_attrs,
    datatree_from_bytes,
    datatree_to_bytes,
    heldout_lpd,
    label_dtype,
    load_datatree,
    posterior_to_datatree,
    site_dims,
)
from zoo.execution.store import write_bytes_atomic


def save_datatree(dt, path):
    """What the store does with a cell's ``.nc`` artifact."""
    return write_bytes_atomic(path, datatree_to_bytes(dt))


N_CHAIN, N_DRAW, N_TRAIN, N_TEST = 2, 40, 9, 7
ATTRS = {
    "method": "nuts",
    "seed": 3,
    "step_size": 0.05,
    "settings": {"warmup": 100, "target_accept": 0.8, "nested": {"a": [1, 2]}},
    "adapt_mass": True,
    "note": None,
}


def _tree(seed: int = 0, n_chain: int = N_CHAIN) -> xr.DataTree:
    rng = np.random.default_rng(seed)
    cd = (n_chain, N_DRAW)
    draws = {
        "layer0.weight": rng.normal(size=(*cd, 3, 2)),
        "layer0.bias": rng.normal(size=(*cd, 3)),
        "layer1.weight": rng.normal(size=(*cd, 2, 3)),
        "layer1.bias": rng.normal(size=(*cd, 2)),
        "noise": rng.gamma(2.0, size=cd),
    }
    stats = {
        "lp": rng.normal(size=cd),
        "step_size": np.full(cd, 0.05),
        "n_steps": rng.integers(1, 64, size=cd),
        "tree_depth": rng.integers(1, 7, size=cd),
        "reached_max_treedepth": rng.random(cd) < 0.05,
        "diverging": rng.random(cd) < 0.05,
        "energy": rng.normal(size=cd),
        "acceptance_rate": rng.random(cd),
    }
    return posterior_to_datatree(
        draws,
        sample_stats=stats,
        log_likelihood=-rng.exponential(size=(*cd, N_TRAIN)),
        posterior_predictive=rng.integers(0, 2, size=(*cd, N_TRAIN)),
        observed=rng.integers(0, 2, size=N_TRAIN),
        constant_data={"x": rng.normal(size=(N_TRAIN, 2))},
        predictions=rng.integers(0, 2, size=(*cd, N_TEST)),
        log_likelihood_test=-rng.exponential(size=(*cd, N_TEST)),
        predictions_constant_data={
            "x": rng.normal(size=(N_TEST, 2)),
            "y": rng.integers(0, 2, size=N_TEST),
        },
        n_classes=2,
        draws_kind=DRAWS_MCMC,
        inference_library="bnn-zoo",
        inference_library_version="0.1.0",
        attrs=ATTRS,
    )


LIBRARY = {"inference_library": "bnn-zoo", "inference_library_version": "0.1.0"}


def test_layout_groups_dims_and_names():
    dt = _tree()
    assert set(dt.children) == {
        "posterior",
        "sample_stats",
        "log_likelihood",
        "posterior_predictive",
        "observed_data",
        "constant_data",
        "predictions",
        "log_likelihood_test",
        "predictions_constant_data",
    }
    post = dt["posterior"]
    assert post["layer0.weight"].dims == ("chain", "draw", "layer0_out", "layer0_in")
    assert post["layer0.bias"].dims == ("chain", "draw", "layer0_out")
    assert post["layer1.weight"].dims == ("chain", "draw", "layer1_out", "layer1_in")
    assert post["noise"].dims == ("chain", "draw")
    assert set(dt["sample_stats"].data_vars) == set(SAMPLE_STATS)
    assert dt["sample_stats"]["diverging"].dtype == bool
    # the training points: what the posterior was fitted to, and what loo reads
    assert dt["log_likelihood"]["y"].dims == ("chain", "draw", "obs_id")
    assert dt["posterior_predictive"]["y"].dims == ("chain", "draw", "obs_id")
    assert dt["observed_data"]["y"].dims == ("obs_id",)
    assert dt["constant_data"]["x"].dims == ("obs_id", "x_dim_1")
    assert dt["log_likelihood"].sizes["obs_id"] == N_TRAIN
    # the held-out test points, under another dimension name
    assert dt["predictions"]["y"].dims == ("chain", "draw", "test_id")
    assert dt["log_likelihood_test"]["y"].dims == ("chain", "draw", "test_id")
    assert dt["predictions_constant_data"]["x"].dims == ("test_id", "x_dim_1")
    assert dt["predictions_constant_data"]["y"].dims == ("test_id",)
    assert dt["predictions"].sizes["test_id"] == N_TEST
    assert datatree_attrs(dt) == {**LIBRARY, "draws_kind": "mcmc", **ATTRS}
    for group in dt.children:  # as arviz-base's converters set them on every group
        assert LIBRARY.items() <= dt[group].attrs.items(), group


def test_compact_dtypes():
    dt = _tree()
    assert dt["posterior"]["layer0.weight"].dtype == np.float64  # draws keep their dtype
    assert dt["sample_stats"]["lp"].dtype == np.float64
    assert dt["sample_stats"]["tree_depth"].dtype == np.int8
    assert dt["sample_stats"]["n_steps"].dtype == np.int8
    for group in ("log_likelihood", "log_likelihood_test"):
        assert dt[group]["y"].dtype == np.float32
    for group in (
        "posterior_predictive",
        "observed_data",
        "predictions",
        "predictions_constant_data",
    ):
        assert dt[group]["y"].dtype == np.int8, group
    assert dt["constant_data"]["x"].dtype == np.float32
    assert [label_dtype(k) for k in (1, 10, 128, 129, 32768, 32769)] == [np.int8] * 3 + [
        np.int16
    ] * 2 + [np.int32]
    # regression: real targets and predictive draws as float32
    rng = np.random.default_rng(0)
    reg = posterior_to_datatree(
        {"w": rng.normal(size=(1, 5))},
        observed=rng.normal(size=4),
        posterior_predictive=rng.normal(size=(1, 5, 4)),
    )
    assert reg["observed_data"]["y"].dtype == reg["posterior_predictive"]["y"].dtype == np.float32
    # 300 classes need int16
    many = posterior_to_datatree(
        {"w": rng.normal(size=(1, 5))}, observed=np.array([0, 299, 3]), n_classes=300
    )
    assert many["observed_data"]["y"].dtype == np.int16
    assert many["observed_data"]["y"].values.tolist() == [0, 299, 3]


def test_file_is_compressed():
    rng = np.random.default_rng(1)
    cd = (2, 500)
    dt = posterior_to_datatree(
        {"w": rng.normal(size=(*cd, 3))},
        sample_stats={"diverging": rng.random(cd) < 0.1},
        log_likelihood=np.log(rng.uniform(0.5, 1, size=(*cd, 100))),
        posterior_predictive=rng.integers(0, 3, size=(*cd, 100)),
        observed=rng.integers(0, 3, size=100),
        n_classes=3,
    )
    data = datatree_to_bytes(dt)
    plain = io.BytesIO()
    dt.to_netcdf(plain, engine="h5netcdf")
    assert len(data) < 0.9 * len(plain.getvalue())
    back = datatree_from_bytes(data)
    xr.testing.assert_identical(back, dt)
    enc = back["log_likelihood"]["y"].encoding
    assert enc.get("zlib") and enc.get("shuffle"), enc
    assert not back["observed_data"]["y"].encoding.get("zlib")  # 100 bytes: not worth it
    assert back["posterior_predictive"]["y"].dtype == np.int8
    assert back["sample_stats"]["diverging"].dtype == bool


def test_heldout_lpd_is_the_log_mean_density_of_the_test_group():
    rng = np.random.default_rng(4)
    ll = np.log(rng.uniform(0.2, 1.0, size=(2, 50, 3)))
    dt = posterior_to_datatree({"w": rng.normal(size=(2, 50))}, log_likelihood_test=ll)
    out = heldout_lpd(dt)
    expected = np.log(np.exp(ll).reshape(100, 3).mean(0))
    np.testing.assert_allclose(out.pointwise, expected, rtol=1e-6)
    assert out.n == 3 and out.lpd == pytest.approx(expected.sum(), rel=1e-6)
    with pytest.raises(KeyError, match="log_likelihood_test"):
        heldout_lpd(posterior_to_datatree({"w": rng.normal(size=(2, 50))}, log_likelihood=ll))


def test_site_dims_for_other_sites():
    assert site_dims("noise", 0) == []
    assert site_dims("linear.weight", 2) == ["linear_out", "linear_in"]
    assert site_dims("net.0.bias", 1) == ["net.0_out"]
    assert site_dims("conv1.weight", 4) == [f"conv1.weight_dim_{k}" for k in range(4)]
    assert site_dims("layer3.weight", 3) == [f"layer3.weight_dim_{k}" for k in range(3)]


def test_round_trip_is_identical(tmp_path):
    dt = _tree()
    path = save_datatree(dt, tmp_path / "sub" / "cell.nc")
    loaded = load_datatree(path)
    xr.testing.assert_identical(loaded, dt)
    assert datatree_attrs(loaded) == datatree_attrs(dt)
    # loaded fully into memory and closed: the file can be replaced and values still read
    save_datatree(_tree(seed=1), path)
    np.testing.assert_array_equal(
        loaded["posterior"]["layer0.weight"].values, dt["posterior"]["layer0.weight"].values
    )
    os.remove(path)
    assert float(loaded["sample_stats"]["lp"].sum()) == float(dt["sample_stats"]["lp"].sum())


def test_file_opens_with_xarray_open_datatree(tmp_path):
    path = save_datatree(_tree(), tmp_path / "cell.nc")
    with xr.open_datatree(path, engine="h5netcdf") as dt:
        assert "layer1.weight" in dt["posterior"].data_vars
        assert dt["posterior"]["layer1.weight"].shape == (N_CHAIN, N_DRAW, 2, 3)
    assert os.listdir(tmp_path) == ["cell.nc"]


def test_arviz_stats_runs_on_the_loaded_tree(tmp_path):
    loaded = load_datatree(save_datatree(_tree(), tmp_path / "cell.nc"))
    ess = azs.ess(loaded, method="bulk")
    rhat = azs.rhat(loaded)
    assert ess["layer0.weight"].shape == (3, 2)
    # iid normal draws: ess near the number of draws, r_hat near 1
    n = N_CHAIN * N_DRAW
    assert np.all(ess["layer0.weight"].values > 0.3 * n)
    assert np.all(np.abs(rhat["layer0.weight"].values - 1) < 0.15)
    assert not azs.summary(loaded, kind="diagnostics").isna().any().any()


def test_variational_posterior_is_one_chain():
    rng = np.random.default_rng(2)
    dt = posterior_to_datatree({"layer0.weight": rng.normal(size=(1, 100, 4, 2))})
    assert dict(dt["posterior"].sizes) == {"chain": 1, "draw": 100, "layer0_out": 4, "layer0_in": 2}
    assert set(dt.children) == {"posterior"} and dict(dt.attrs) == {}
    guide = posterior_to_datatree(
        {"w": rng.normal(size=(1, 100))},
        draws_kind=DRAWS_GUIDE,
        inference_library="pyro",
        inference_library_version="1.9.2",
    )
    assert guide.attrs["draws_kind"] == "independent guide draws"
    assert guide.attrs["inference_library"] == "pyro"


def test_multi_output_predictive_gets_extra_dims():
    rng = np.random.default_rng(3)
    dt = posterior_to_datatree(
        {"w": rng.normal(size=(1, 5))},
        posterior_predictive=rng.normal(size=(1, 5, 4, 2)),
        observed=rng.normal(size=(4, 2)),
        log_likelihood=rng.normal(size=(1, 5, 4)),
        predictions=rng.normal(size=(1, 5, 3, 2)),
        predictions_constant_data={"y": rng.normal(size=(3, 2))},
    )
    assert dt["observed_data"]["y"].dims == ("obs_id", "y_dim_1")
    assert dt["posterior_predictive"]["y"].dims == ("chain", "draw", "obs_id", "y_dim_1")
    assert dt["log_likelihood"]["y"].dims == ("chain", "draw", "obs_id")
    assert dt["predictions"]["y"].dims == ("chain", "draw", "test_id", "y_dim_1")
    assert dt["predictions_constant_data"]["y"].dims == ("test_id", "y_dim_1")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"draws": {}}, "empty"),
        ({"draws": {"a": np.zeros(3)}}, "chain, draw"),
        ({"draws": {"a": np.zeros((2, 5)), "b": np.zeros((1, 5))}}, "'b'"),
        ({"sample_stats": {"lp": np.zeros((2, 4))}}, "'lp'"),
        ({"log_likelihood": np.zeros((2, 5, 3, 1))}, "n_train"),
        ({"log_likelihood_test": np.zeros((2, 5, 3, 1))}, "n_test"),
        ({"observed": np.zeros(4), "log_likelihood": np.zeros((2, 5, 3))}, "train-set .*disagree"),
        ({"constant_data": {"x": np.zeros((4, 2))}, "observed": np.zeros(3)}, "constant_data"),
        (
            {"predictions": np.zeros((2, 5, 4)), "log_likelihood_test": np.zeros((2, 5, 3))},
            "test-set .*disagree",
        ),
        ({"observed": np.zeros((3, 2)), "posterior_predictive": np.zeros((2, 5, 3))}, "event"),
        ({"observed": np.array([0, 2]), "n_classes": 2}, "class labels 0..1"),
        ({"predictions": np.full((2, 5, 3), 0.5), "n_classes": 2}, "predictions.*0.5"),
        ({"draws": {"y": np.zeros((2, 5))}}, "reserved"),
        ({"attrs": {"json_attrs": "x"}}, "reserved"),
        ({"attrs": {"draws_kind": "x"}}, "reserved"),
        ({"draws_kind": "vi"}, "draws_kind"),
        ({"draws_kind": "independent guide draws"}, "one chain"),
    ],
)
def test_bad_input_names_the_problem(kwargs, match):
    kwargs = {"draws": {"a": np.zeros((2, 5))}, **kwargs}
    with pytest.raises(ValueError, match=match):
        posterior_to_datatree(**kwargs)


def test_failed_encoding_writes_nothing(tmp_path, monkeypatch):
    dt = _tree()
    target = tmp_path / "cell.nc"

    def boom(self, path, **kwargs):
        path.write(b"half a file")  # an in-memory buffer: the store writes the bytes
        raise RuntimeError("disk full")

    monkeypatch.setattr(xr.DataTree, "to_netcdf", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        save_datatree(dt, target)
    assert os.listdir(tmp_path) == []

    # an existing file at the final path is left unchanged
    monkeypatch.undo()
    save_datatree(dt, target)
    before = target.read_bytes()
    monkeypatch.setattr(xr.DataTree, "to_netcdf", boom)
    with pytest.raises(RuntimeError):
        save_datatree(_tree(seed=5), target)
    assert target.read_bytes() == before and os.listdir(tmp_path) == ["cell.nc"]


def test_bytes_round_trip():
    dt = _tree()
    data = datatree_to_bytes(dt)
    assert data[:8] == b"\x89HDF\r\n\x1a\n"
    back = datatree_from_bytes(data)
    xr.testing.assert_identical(back["posterior"].to_dataset(), dt["posterior"].to_dataset())
    assert datatree_attrs(back) == datatree_attrs(dt)


def test_stored_tree_feeds_diagnostics_and_gaussian_reports(tmp_path):
    from reports.diagnostics import diagnostic_gates
    from reports.draws import flatten_sites
    from reports.price_of_mf import diag_vs_full

    dt = load_datatree(save_datatree(_tree(), tmp_path / "cell.nc"))
    gates = diagnostic_gates(dt)
    assert gates.n_params == 6 + 3 + 6 + 2 + 1
    assert gates.n_divergent == int(dt["sample_stats"]["diverging"].sum())
    post = dt["posterior"]
    flat = flatten_sites({k: v.transpose("chain", "draw", ...).values for k, v in post.items()})
    assert flat.draws.shape == (N_CHAIN * N_DRAW, gates.n_params)
    assert set(flat.blocks) == {"layer0", "layer1", "noise"}
    out = diag_vs_full(flat.draws, flat.blocks, cov="ledoit_wolf", seed=0)
    assert out["kl_diag_full"] > 0 and out["kl_diag_full.noise"] == 0.0
