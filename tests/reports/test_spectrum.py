"""Spectrum, truncation, SNR and parameter-count math on constructed matrices."""

from __future__ import annotations

import numpy as np
import pytest

from reports.figures.spectrum import heatmap_figure, spectrum_figure
from reports.spectrum import (
    as_matrix,
    double_centred,
    gradient_snr,
    sign_flip_null,
    singular_values,
    snr_summary,
    std_param_count,
    top_fraction,
    top_fraction_null,
    truncate,
    variance_fractions,
)


def _orthonormal(n: int, k: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, k)))
    return q


def test_rank_two_matrix_has_exactly_two_nonzero_fractions():
    u, v = _orthonormal(30, 2, 0), _orthonormal(20, 2, 1)
    a = u @ np.diag([3.0, 1.0]) @ v.T  # singular values 3 and 1
    f = variance_fractions(a)
    assert f.shape == (20,)
    np.testing.assert_allclose(f[:2], [0.9, 0.1], atol=1e-12)
    np.testing.assert_allclose(f[2:], 0.0, atol=1e-12)
    assert f.sum() == pytest.approx(1.0)
    assert top_fraction(a, 1) == pytest.approx(0.9)
    assert top_fraction(a, 2) == pytest.approx(1.0)
    np.testing.assert_allclose(singular_values(a)[:2], [3.0, 1.0])


def test_positive_rank_two_std_matrix_truncation():
    rng = np.random.default_rng(2)
    uu, vv = rng.uniform(0.1, 1.0, size=(40, 2)), rng.uniform(0.1, 1.0, size=(25, 2))
    a = uu @ vv.T  # a k-tied std matrix with k = 2: positive, rank 2
    f = variance_fractions(a)
    assert f[2:].max() < 1e-20 and f[0] > f[1] > 0
    np.testing.assert_allclose(truncate(a, 2), a, rtol=1e-10)  # exact at rank 2
    np.testing.assert_allclose(truncate(a, 3), a, rtol=1e-10)
    r1 = truncate(a, 1)
    assert np.linalg.matrix_rank(r1) == 1
    # rank 1 keeps exactly the top singular value's share of the squared norm
    assert (r1**2).sum() / (a**2).sum() == pytest.approx(f[0])


def test_truncation_is_clamped_at_zero():
    m = np.array([[1.0, -1.0], [-1.0, 1.0]])  # rank 1 with negative entries
    np.testing.assert_allclose(truncate(m, 1, clamp=False), m, atol=1e-12)
    np.testing.assert_allclose(truncate(m, 1), [[1.0, 0.0], [0.0, 1.0]], atol=1e-12)
    a = np.array([[0.0, 3.0, 2.0], [3.0, 0.0, 0.0], [3.0, 0.0, 2.0]])  # non-negative, rank 3
    raw = truncate(a, 2, clamp=False)
    assert raw[1, 1] == pytest.approx(-0.48, abs=5e-3) and raw[0, 0] < 0
    t = truncate(a, 2)
    assert t[1, 1] == 0.0 and t[0, 0] == 0.0 and t.min() == 0.0
    keep = raw > 0
    np.testing.assert_allclose(t[keep], raw[keep])  # only negatives change
    # Perron-Frobenius: the rank-1 part of a non-negative matrix is already non-negative
    assert truncate(a, 1, clamp=False).min() >= -1e-12


def test_conv_kernel_is_viewed_filters_by_rest():
    k = np.random.default_rng(3).uniform(size=(8, 2, 3, 3))
    assert as_matrix(k).shape == (8, 18)
    np.testing.assert_array_equal(as_matrix(k)[5], k[5].ravel())
    t = truncate(k, 2)
    assert t.shape == k.shape
    with pytest.raises(ValueError, match="at least 2 dims"):
        as_matrix(np.ones(3))
    with pytest.raises(ValueError, match="rank k must be >= 1"):
        truncate(k, 0)


def test_gradient_snr_on_a_known_sequence():
    g = np.array([[1.0, 2.0, 0.0, 5.0], [3.0, 2.0, 0.0, -5.0]])
    snr = gradient_snr(g)
    # means 2, 2, 0, 0; variances (ddof=0) 1, 0, 0, 25
    assert snr[0] == pytest.approx(4.0)
    assert snr[1] == np.inf
    assert np.isnan(snr[2])
    assert snr[3] == 0.0
    s = snr_summary(snr)
    assert s == {"mean": pytest.approx(2.0), "median": pytest.approx(2.0)}
    window = np.random.default_rng(0).normal(3.0, 0.5, size=(10, 1000))
    assert np.median(gradient_snr(window)) == pytest.approx(36.0, rel=0.25)
    with pytest.raises(ValueError, match="at least 2"):
        gradient_snr(g[:1])


def test_std_param_counts_follow_table_1():
    assert std_param_count((400, 784)) == 313600
    assert std_param_count((400, 784), 2) == 2 * (400 + 784)
    assert std_param_count((64, 32, 3, 3), 1) == 64 + 288


def test_figures_build():
    a = np.random.default_rng(0).uniform(size=(6, 5))
    fig = spectrum_figure({"layer0": {"mean": variance_fractions(a), "std": variance_fractions(a)}})
    assert len(fig.axes) == 1
    assert len(heatmap_figure(a).axes) == 4  # three maps and a colour bar


def test_snr_noise_floor_is_the_mean_snr_of_pure_noise():
    """1/(w - 3) (1/7 for w = 10), not 1/(w - 1) = 1/9: Monte Carlo on i.i.d. N(0, 1) gradients."""
    from reports.spectrum import gradient_snr, snr_noise_floor

    window, n = 10, 200_000
    snr = gradient_snr(np.random.default_rng(0).normal(size=(window, n)))
    se = snr.std() / np.sqrt(n)  # about 0.0006: Var = 2 v^2 (v-1) / ((v-2)^2 (v-4)) / v^2, v = 9
    assert abs(snr.mean() - snr_noise_floor(window)) < 4 * se
    assert abs(snr.mean() - 1 / (window - 1)) > 20 * se
    with pytest.raises(ValueError, match="more than 3"):
        snr_noise_floor(3)


def _noise_only(seed: int, m: int, n: int, kind: str) -> np.ndarray:
    """A std matrix whose log is additive plus symmetric noise of a size that varies by row
    and/or column: no structure beyond rank 1, whatever the noise's layout."""
    g = np.random.default_rng(seed)
    rows, cols = np.ones((m, 1)), np.ones((1, n))
    if kind in ("rows", "both"):
        rows[:2] = 10.0  # two noisy rows (the output layer's pattern)
    if kind in ("columns", "both"):
        cols[0, : n // 10] = 10.0
    if kind == "smooth":
        rows, cols = np.exp(g.normal(size=(m, 1))), np.exp(g.normal(size=(1, n)))
    log = g.normal(size=(m, 1)) + g.normal(size=(1, n))
    return np.exp(log + 0.1 * rows * cols * g.normal(size=(m, n)))


@pytest.mark.parametrize("kind", ["iid", "rows", "columns", "both", "smooth"])
@pytest.mark.parametrize("shape", [(10, 400), (60, 50)])
def test_sign_flip_null_stays_calibrated_under_row_and_column_noise(kind, shape) -> None:
    # 6 seeds a case; with 20 flips the z of a calibrated null exceeds 4 with probability
    # about 1e-3 (t with 19 df), so 60 draws in all stay under it
    zs = [
        sign_flip_null(_noise_only(seed, *shape, kind), (1,), seed=seed).z[0] for seed in range(6)
    ]
    assert max(abs(z) for z in zs) < 4, zs


def test_shuffles_of_the_residual_took_noisy_rows_for_structure() -> None:
    # the null this one replaces: the residual's shuffles, double-centred again
    a = _noise_only(0, 10, 400, "rows")
    resid = double_centred(np.log(a))
    shuffled = top_fraction_null(resid, (1,), shuffles=20)
    assert shuffled.z[0] > 10  # noise only, yet far above the shuffles
    assert abs(sign_flip_null(a, (1,)).z[0]) < 4


def test_sign_flip_null_sees_rank_one_as_additive_and_finds_rank_two_beyond_it() -> None:
    rng = np.random.default_rng(0)
    m, n = 50, 40
    u, v = np.exp(rng.normal(size=m)), np.exp(rng.normal(size=n))
    exact = sign_flip_null(np.outer(u, v))  # the k = 1 family: log sigma = log u + log v
    assert exact.additive_share == pytest.approx(1.0, abs=1e-12)
    for seed in range(3):
        for kind in ("iid", "both"):
            g = np.random.default_rng(100 + seed)
            extra = 0.15 * sum(np.outer(g.normal(size=m), g.normal(size=n)) for _ in range(2))
            r2 = sign_flip_null(_noise_only(seed, m, n, kind) * np.exp(extra), seed=seed)
            assert r2.z[0] > 10 and r2.observed[1] > r2.null_max[1]
    # dead units (whole rows and columns large) beat the whole-matrix shuffle but not this
    dead = np.full((m, n), 0.05) * np.exp(0.05 * rng.normal(size=(m, n)))
    dead[:5] *= 20.0
    dead[:, :4] *= 20.0
    assert top_fraction_null(dead, (1,), shuffles=20).z[0] > 10
    assert abs(sign_flip_null(dead).z[0]) < 4
    with pytest.raises(ValueError, match="positive"):
        sign_flip_null(np.zeros((3, 3)))
