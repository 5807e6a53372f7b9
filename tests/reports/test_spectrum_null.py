"""The shuffled null of a std matrix's spectrum (reports.spectrum.top_fraction_null)."""

from __future__ import annotations

import numpy as np
import pytest

from reports.spectrum import centred, shuffle_entries, top_fraction, top_fraction_null


def test_a_rank_one_matrix_is_far_above_its_shuffled_copies() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(50, 1)) @ rng.normal(size=(1, 40))  # rank 1, mean near 0
    null = top_fraction_null(a, (1, 2), shuffles=12, seed=3)
    assert null.ks == (1, 2) and null.shuffles == 12 and null.centre
    assert null.observed[0] > 0.95
    # a random 50 x 40 matrix: about (sqrt(50) + sqrt(40))^2 / 2000 = 0.09 in the top 1
    assert 0.04 < null.null_mean[0] < 0.2 and null.null_max[0] < 0.25
    assert null.null_sd[0] > 0 and null.null_mean[0] <= null.null_max[0]
    assert null.z[0] > 20
    # the same seed gives the same null; another seed another one
    again = top_fraction_null(a, (1, 2), shuffles=12, seed=3)
    np.testing.assert_array_equal(again.null_mean, null.null_mean)
    assert top_fraction_null(a, (1, 2), shuffles=12, seed=4).null_mean[0] != null.null_mean[0]


def test_positive_std_matrices_need_centring() -> None:
    rng = np.random.default_rng(1)
    iid = rng.uniform(0.5, 1.5, size=(60, 80))  # no structure at all
    # uncentred, the common level alone puts most variance in the top singular value, and
    # shuffling keeps it: the paper's fraction is near 1 for structureless stds too
    assert top_fraction(iid, 1) > 0.9
    raw = top_fraction_null(iid, (1,), shuffles=8, seed=0, centre=False)
    assert raw.observed[0] > 0.9 and raw.null_mean[0] > 0.9
    # centred: at the level of its shuffled copies
    c = top_fraction_null(iid, (1,), shuffles=20, seed=0)
    assert abs(c.z[0]) < 4 and c.observed[0] < 0.2
    # a positive rank-1 std matrix (a 1-tied one) stands out once centred
    tied = np.exp(rng.normal(size=(60, 1))) * np.exp(rng.normal(size=(1, 80)))
    t = top_fraction_null(tied, (1, 2), shuffles=8, seed=0)
    assert t.observed[1] == pytest.approx(1.0)  # minus its mean: rank <= 2
    assert (t.z > 10).all()


def test_shuffle_keeps_the_entries_and_centring_commutes_with_it() -> None:
    rng = np.random.default_rng(2)
    a = rng.uniform(size=(6, 2, 5)).astype(np.float32)  # a conv kernel: 6 x 10 matrix view
    s = shuffle_entries(a, np.random.default_rng(0))
    assert s.shape == a.shape and s.dtype == a.dtype and not np.array_equal(s, a)
    np.testing.assert_array_equal(np.sort(s.ravel()), np.sort(a.ravel()))
    assert centred(a).shape == (6, 10) and centred(a).mean() == pytest.approx(0.0, abs=1e-12)
    s2 = shuffle_entries(centred(a), np.random.default_rng(0))
    np.testing.assert_allclose(s2, centred(s).reshape(s2.shape), atol=1e-12)


def test_bad_arguments() -> None:
    a = np.ones((3, 4))
    with pytest.raises(ValueError, match="at least 2"):
        top_fraction_null(a, (1,), shuffles=1)
    with pytest.raises(ValueError, match="positive"):
        top_fraction_null(a, (0,))
