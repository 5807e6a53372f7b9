"""reports.posterior: the DataTree entry points give the array functions' numbers exactly."""

from __future__ import annotations

import copy

import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr
from arviz_base import from_dict

from reports.alignment import (
    NULL_REPS,
    align_to_pivot,
    aligned_reference,
    kl_by_labelling,
    pivot_from_draws,
)
from reports.kl_reference import debiased_kl_draws
from reports.posterior import (
    MLP_SITES,
    aligned_price_of_mean_field,
    chain_draws,
    nested_rhat,
    posterior_sites,
    price_of_mean_field,
)
from reports.superchains import max_rhat_nested
from reports.w2_reference import debiased_w2_draws
from tests import specs
from tests.zoo.studies.test_price_of_mf import SPEC
from zoo.execution.cell import run_cell
from zoo.execution.netcdf import datatree_from_bytes
from zoo.runtime import Runtime
from zoo.seeds import Stream, seed_for


def _gaussian_tree(seed: int = 0, chains: int = 8, draws: int = 200):
    """Draws of a correlated Gaussian over a (3, 2) matrix ``a`` and a scalar ``b``, and a
    variable ``c`` left out by ``var_names``; returns the tree and the (C, S, 7) array."""
    rng = np.random.default_rng(seed)
    chol = np.tril(rng.normal(size=(7, 7)) * 0.3) + np.eye(7)
    x = rng.normal(size=(chains, draws, 7)) @ chol.T
    posterior = {
        "a": x[..., :6].reshape(chains, draws, 3, 2),
        "b": x[..., 6],
        "c": rng.normal(size=(chains, draws, 4)),
    }
    return from_dict({"posterior": posterior}), x


def test_chain_draws_flattens_in_group_order_and_c_order() -> None:
    dt, x = _gaussian_tree()
    y, flat = chain_draws(dt, var_names=["a", "b"])
    np.testing.assert_array_equal(y, x)
    assert flat.labels[:2] == ("a[0,0]", "a[0,1]") and flat.labels[-1] == "b"
    assert set(flat.blocks) == {"a", "b"}
    # a Dataset is read as its group, and "~c" leaves c out as arviz-stats' var_names do
    np.testing.assert_array_equal(chain_draws(dt["posterior"].to_dataset())[0][..., :7], x)
    np.testing.assert_array_equal(chain_draws(dt, var_names=["~c"])[0], x)


def test_price_of_mean_field_is_the_array_functions_numbers() -> None:
    dt, x = _gaussian_tree()
    out = price_of_mean_field(dt, var_names=["a", "b"], seed=3)
    _, flat = chain_draws(dt, var_names=["a", "b"])
    deb = debiased_kl_draws(x, jitter=1e-6, blocks=flat.blocks, calibrate=True, seed=3)
    w2 = debiased_w2_draws(x, jitter=1e-6)
    assert out["kl_diag_full"] == deb.kl
    assert out["kl_debiased"] == deb.debiased
    assert out["kl_debiased_se"] == deb.se
    assert out["kl_debiased_ci"] == deb.half_width(0.95)
    assert out["kl_debiased.a"] == deb.blocks["a"]
    assert out["w2_diag_full"] == np.sqrt(w2.w2sq)
    assert out["w2sq_debiased"] == w2.w2sq_debiased
    assert (out["chains"], out["draws"], out["dim"], out["groups"]) == (8, 200, 7, 8)
    assert out["kl_debiased"] is not None and out["kl_diag_full"] > 0


def test_nested_rhat_is_max_rhat_nested_of_the_draws() -> None:
    dt, x = _gaussian_tree(seed=1)
    ids = [0, 0, 1, 1, 2, 2, 3, 3]
    assert nested_rhat(dt, ids, var_names=["a", "b"]) == max_rhat_nested(x, ids)
    assert nested_rhat(dt, [0] * 8) is None
    # arviz-stats' own rhat_nested on the same tree, whichever ArviZ line is installed
    stat = azs.rhat_nested(dt, var_names=["a", "b"], superchain_ids=ids)
    ds = stat.to_dataset() if isinstance(stat, xr.DataTree) else stat
    theirs = max(float(np.max(v.values)) for v in ds.data_vars.values())
    assert nested_rhat(dt, ids, var_names=["a", "b"]) == pytest.approx(theirs, rel=1e-12)


def _mlp_tree(seed: int = 0):
    """Independent draws of a 2-4-1 MLP's sites with zoo names, and a ``noise`` site."""
    rng = np.random.default_rng(seed)
    shapes = {"layer0.weight": (4, 2), "layer0.bias": (4,), "layer1.weight": (1, 4)}
    sites = {
        k: rng.normal(size=(4, 100, *s)) + np.arange(np.prod(s)).reshape(s)
        for k, s in shapes.items()
    }
    sites["layer1.bias"] = rng.normal(size=(4, 100, 1))
    return from_dict({"posterior": {**sites, "noise": rng.normal(size=(4, 100))}}), sites


def test_aligned_price_of_mean_field_is_the_studys_numbers() -> None:
    dt, sites = _mlp_tree()
    assert set(posterior_sites(dt, var_names=["~noise"])) == set(sites)
    out = aligned_price_of_mean_field(dt, seed=5)
    pivot = pivot_from_draws(sites)
    res = kl_by_labelling(sites, pivot, seed=5, jitter=1e-6, null_reps=NULL_REPS)
    flat, _ = chain_draws(dt, var_names=["~noise"])
    assert out["kl_raw"] == res.raw and out["kl_alignment_null"] == res.null
    aligned = align_to_pivot(sites, pivot).sites
    x = np.concatenate([aligned[k].reshape(4, 100, -1) for k in sites], axis=-1)
    ref = aligned_reference(x, res, 5, 1e-6)
    assert {k: out[k] for k in ref} == ref
    assert ref["kl_alignment_null_sd"] > 0  # the null's own error is in the s.e.
    assert (
        ref["kl_aligned_debiased_se"]
        > aligned_reference(x, res._replace(null_sd=None), 5, 1e-6)["kl_aligned_debiased_se"]
    )
    assert flat.shape == (4, 100, 17)
    strong = aligned_price_of_mean_field(dt, seed=5, strength=0.5)
    pivot = pivot_from_draws(sites, strength=0.5)
    res = kl_by_labelling(sites, pivot, seed=5, jitter=1e-6, strength=0.5)
    assert strong["kl_aligned"] == res.aligned and strong["kl_alignment_null"] == res.null


def test_a_variable_without_chains_is_named() -> None:
    dt, _ = _gaussian_tree()
    ds = dt["posterior"].to_dataset().isel(chain=0, drop=True)
    with pytest.raises(ValueError, match="chain"):
        chain_draws(ds)


def test_a_cells_file_gives_the_numbers_its_study_recorded(tmp_path) -> None:
    """A shrunk NUTS cell of the price-of-mean-field study: its ArviZ file, read by the entry
    points, gives the KL, W2 and aligned KL the study recorded from the same draws (the
    aligned ones bit for bit; the plug-ins to rounding, the study's KL being of one pass over
    the draws and this of the chain groups' merged moments)."""
    spec = copy.deepcopy(SPEC)
    spec["inference"][1]["chains"] = 4  # chain groups for the KL's bias and its error
    cell = specs.load(tmp_path, spec).cells()[1]
    out = run_cell(cell, Runtime.cpu())
    m, dt = out.metrics, datatree_from_bytes(out.artifacts[".nc"])
    seed = cell.spec.seed
    price = price_of_mean_field(
        dt, var_names=[MLP_SITES], filter_vars="regex", seed=seed_for(seed, Stream.KL_CALIBRATION)
    )
    for key in ("kl_diag_full", "kl_debiased", "w2_diag_full", "kl_ess_n"):
        assert price[key] == pytest.approx(m[key], rel=1e-9), key
    assert price["kl_debiased_se"] == m["kl_debiased_se"]
    aligned = aligned_price_of_mean_field(dt, seed=seed_for(seed, Stream.UNIT_ALIGNMENT))
    for key in ("kl_aligned", "kl_relabelled", "kl_alignment_null", "kl_aligned_debiased"):
        assert aligned[key] == m[key], key
