"""Tests for reports.product_matrix: exact covariances against Monte Carlo and each other."""

from functools import reduce

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from reports.figures.product_matrix import product_covariance_figure
from reports.product_matrix import (
    MeanFieldLayer,
    covariance_standard_error,
    exact_product_covariance,
    mc_product_covariance,
    off_diagonal_mass,
    product_covariance_from_draws,
    product_mean,
    product_of_draws,
    random_layers,
    random_layers_for_sizes,
    sample_layers,
    sample_product,
    simulate,
    structural_support,
    support_fraction,
)


def _paper_closed_form(layers):
    """The paper's closed forms term by term (eqs. 15 and 17), an oracle independent of the
    recursion. Paper's A, B, C = our W_L, W_{L-1}, W_{L-2}; a, c index outputs, b, d inputs."""
    depth = len(layers)
    assert depth <= 3
    n_out, n_in = layers[-1].mean.shape[0], layers[0].mean.shape[1]
    eo, ei = np.eye(n_out), np.eye(n_in)
    if depth == 1:
        cov = np.einsum("ab,ac,bd->abcd", layers[0].std ** 2, eo, ei)
    elif depth == 2:
        (mb, sb), (ma, sa) = layers
        va, vb = sa**2, sb**2
        cov = (
            np.einsum("ai,ib,ac,bd->abcd", va, vb, eo, ei)
            + np.einsum("ai,ci,ib,bd->abcd", ma, ma, vb, ei)
            + np.einsum("ib,id,ai,ac->abcd", mb, mb, va, eo)
        )
    else:
        # Cov = d_ac d_bd sum_ik vC_ib vA_ak (vB_ki + muB_ki^2)
        #     + d_bd sum_i vC_ib (sum_k muA_ak muA_ck vB_ki + M_ai M_ci)          M = muA muB
        #     + d_ac (sum_ik muC_ib muC_id vA_ak vB_ki + sum_k vA_ak N_kb N_kd)   N = muB muC
        #     + sum_ik muC_ib muC_id muA_ak muA_ck vB_ki        (no delta: full support)
        (mc, sc), (mb, sb), (ma, sa) = layers
        va, vb, vc = sa**2, sb**2, sc**2
        big_m, big_n = ma @ mb, mb @ mc
        full_diag = np.einsum("ib,ak,ki->ab", vc, va, vb + mb**2)
        same_col = np.einsum("ib,ak,ck,ki->acb", vc, ma, ma, vb) + np.einsum(
            "ib,ai,ci->acb", vc, big_m, big_m
        )
        same_row = np.einsum("ib,id,ak,ki->abd", mc, mc, va, vb) + np.einsum(
            "ak,kb,kd->abd", va, big_n, big_n
        )
        cov = (
            np.einsum("ab,ac,bd->abcd", full_diag, eo, ei)
            + np.einsum("acb,bd->abcd", same_col, ei)
            + np.einsum("abd,ac->abcd", same_row, eo)
            + np.einsum("ib,id,ak,ck,ki->abcd", mc, mc, ma, ma, vb, optimize=True)
        )
    p = n_out * n_in
    return cov.reshape(p, p)


SIZES = [3, 4, 2, 5, 2]  # n_0, ..., n_4: unequal on purpose
N_MC = 20_000


def _layers(depth: int, seed: int = 0, scale: float = 1.0) -> list[MeanFieldLayer]:
    """Random layers with means U(-scale, scale): large means make every term visible."""
    return random_layers_for_sizes(
        SIZES[: depth + 1], seed=seed, mean_low=-scale, mean_high=scale, std=0.5
    )


def _mc_z(layers, exact, seed=1):
    """(exact - MC) / SE per covariance entry, over the upper triangle (unique entries)."""
    prod = sample_product(layers, N_MC, seed=seed).reshape(N_MC, -1)
    mc, se = np.cov(prod, rowvar=False), covariance_standard_error(prod)
    assert np.all(se > 0)
    return ((mc - exact) / se)[np.triu_indices(mc.shape[0])]


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_exact_matches_monte_carlo_within_standard_error(depth):
    layers = _layers(depth)
    z = _mc_z(layers, exact_product_covariance(layers))
    assert np.max(np.abs(z)) < 5.0
    # aggregate: the standardized errors have mean square ~ 1 (not too large, not too small)
    assert 0.2 < np.mean(z**2) < 3.0


def test_monte_carlo_check_sees_the_full_support_term_at_three_layers():
    # Power check for the test above: dropping the entries that only exist from L = 3 on
    # (projecting the exact covariance onto the L = 2 support) must fail the 5 SE check.
    layers = _layers(3)
    masked = exact_product_covariance(layers) * structural_support([SIZES[0], SIZES[3]], 2)
    assert np.max(np.abs(_mc_z(layers, masked))) > 5.0
    # ... and so must the exact covariance of slightly different layers (std 0.55, not 0.5)
    other = [MeanFieldLayer(m, 1.1 * s) for m, s in layers]
    assert np.max(np.abs(_mc_z(layers, exact_product_covariance(other)))) > 5.0


@pytest.mark.parametrize("sizes", [[3, 4, 2, 5], [7, 2, 3, 1], [1, 3, 1], [2, 6], [4, 1, 4, 3]])
def test_paper_closed_forms_equal_the_recursion(sizes):
    for depth in range(1, len(sizes)):
        layers = random_layers_for_sizes(
            sizes[: depth + 1], seed=depth, mean_low=-1, mean_high=1, std=0.7
        )
        np.testing.assert_allclose(
            exact_product_covariance(layers), _paper_closed_form(layers), atol=1e-13
        )


def test_recursion_from_output_equals_recursion_from_input():
    # SIZES recurses from the input; the transposed, reversed product from the output.
    layers = _layers(4, seed=3)
    cov = exact_product_covariance(layers)
    flipped = [MeanFieldLayer(m.T, s.T) for m, s in reversed(layers)]
    n_out, n_in = SIZES[4], SIZES[0]
    cov_t = exact_product_covariance(flipped).reshape(n_in, n_out, n_in, n_out)
    np.testing.assert_allclose(cov, cov_t.transpose(1, 0, 3, 2).reshape(cov.shape), atol=1e-13)
    np.testing.assert_allclose(cov, cov.T, atol=1e-13)
    assert np.all(np.linalg.eigvalsh(cov) > 0)


def test_one_layer_exact_is_diagonal_of_variances():
    (layer,) = _layers(1)
    layer = MeanFieldLayer(layer.mean, np.arange(1, 13).reshape(4, 3) / 6)  # distinct stds
    expected = np.diag((layer.std**2).reshape(-1))  # row-major index a * n_0 + b
    np.testing.assert_array_equal(exact_product_covariance([layer]), expected)
    np.testing.assert_array_equal(_paper_closed_form([layer]), expected)


def test_row_major_index_map():
    # Cov(W_ab, W_ab) at index a * n_0 + b: make one input entry of W_1 very uncertain.
    m, s = np.full((4, 3), 0.3), np.full((4, 3), 0.1)
    s[1, 2] = 3.0
    layers = [MeanFieldLayer(m, s), MeanFieldLayer(np.eye(4)[:2], np.zeros((2, 4)))]
    var = np.diag(exact_product_covariance(layers)).reshape(2, 3)
    assert np.argmax(var) == 1 * 3 + 2 and var[1, 2] == pytest.approx(9.0)


@pytest.mark.parametrize("depth", [1, 2])
def test_structural_zeros_below_three_layers(depth):
    layers = _layers(depth, scale=0.1)
    cov = exact_product_covariance(layers)
    mask = structural_support(SIZES[: depth + 1])
    np.testing.assert_array_equal(cov[~mask], 0.0)
    assert np.all(cov[mask] != 0.0)  # generic means: every support entry is non-zero
    assert np.all(np.abs(cov[mask]) > 1e-8)
    assert mask.mean() == pytest.approx(support_fraction(SIZES[: depth + 1]))
    assert mask.sum() == (
        cov.shape[0] if depth == 1 else SIZES[depth] * SIZES[0] * (SIZES[depth] + SIZES[0] - 1)
    )


@pytest.mark.parametrize("depth", [3, 4])
def test_every_entry_covaries_from_three_layers_on(depth):
    layers = _layers(depth, scale=0.1)  # the paper's small means
    cov = exact_product_covariance(layers)
    assert np.all(np.abs(cov) > 1e-9)
    assert structural_support(SIZES[: depth + 1]).all()
    assert support_fraction(SIZES[: depth + 1]) == 1.0


def test_zero_means_give_a_diagonal_covariance_at_any_depth():
    layers = [MeanFieldLayer(np.zeros_like(m), s) for m, s in _layers(4)]
    cov = exact_product_covariance(layers)
    np.testing.assert_array_equal(cov, np.diag(np.diag(cov)))
    assert off_diagonal_mass(cov) == 0.0


def test_structural_support_accepts_outer_sizes_with_depth():
    np.testing.assert_array_equal(structural_support([3, 5], 2), structural_support([3, 9, 5]))
    assert structural_support([3, 5], 1).sum() == 15
    assert support_fraction([3, 5], 2) == pytest.approx(7 / 15)
    with pytest.raises(ValueError, match="does not fit"):
        structural_support([3, 4, 5], 3)
    with pytest.raises(ValueError, match="does not fit"):
        structural_support([3, 5], 0)


def test_from_draws_equals_mc_and_an_explicit_product():
    layers = _layers(3, seed=5)
    draws = sample_layers(layers, 200, seed=9)
    explicit = np.stack(
        [reduce(lambda acc, w: w @ acc, [d[s] for d in draws[1:]], draws[0][s]) for s in range(200)]
    )
    expected = np.cov(explicit.reshape(200, -1).T)
    np.testing.assert_allclose(product_covariance_from_draws(draws), expected, atol=1e-12)
    np.testing.assert_allclose(mc_product_covariance(layers, 200, seed=9), expected, atol=1e-12)
    assert product_of_draws(draws).shape == (200, SIZES[3], SIZES[0])


def test_product_mean_is_product_of_means():
    layers = _layers(3)
    np.testing.assert_allclose(
        product_mean(layers), layers[2].mean @ layers[1].mean @ layers[0].mean
    )


def test_covariance_standard_error_matches_gaussian_theory():
    n = 40_000
    se = covariance_standard_error(np.random.default_rng(0).standard_normal((n, 3)))
    # Var of a sample variance of N(0, 1) is 2/n; of a sample covariance of independent ones 1/n
    expected = np.where(np.eye(3, dtype=bool), np.sqrt(2 / n), np.sqrt(1 / n))
    np.testing.assert_allclose(se, expected, rtol=0.05)


def test_random_layers_follow_the_paper_setting():
    layers = random_layers(4, 3, seed=0)
    assert [m.shape for m, _ in layers] == [(4, 4)] * 3
    means = np.concatenate([m.ravel() for m, _ in layers])
    assert np.all((means >= -0.1) & (means < 0.1)) and means.std() > 0.03
    assert all(np.all(s == 0.5) for _, s in layers)
    np.testing.assert_array_equal(random_layers(4, 3, seed=0)[2].mean, layers[2].mean)
    assert not np.array_equal(random_layers(4, 3, seed=1)[2].mean, layers[2].mean)


def test_bad_input_is_rejected_with_a_clear_message():
    layers = _layers(2)
    with pytest.raises(ValueError, match=r"layers\[1\] has 4 inputs but layers\[0\] has 2"):
        exact_product_covariance([layers[1], layers[1]])
    with pytest.raises(ValueError, match="std"):
        exact_product_covariance([MeanFieldLayer(np.ones((2, 2)), -np.ones((2, 2)))])
    with pytest.raises(ValueError, match="max_entries"):
        exact_product_covariance(_layers(4), max_entries=50)
    with pytest.raises(ValueError, match=r"weight_draws\[1\]"):
        product_of_draws([np.ones((5, 2, 3)), np.ones((4, 2, 2))])
    with pytest.raises(ValueError, match="at least one"):
        exact_product_covariance([])


def test_off_diagonal_mass():
    assert off_diagonal_mass(np.diag([1.0, 2.0])) == 0.0
    assert off_diagonal_mass(np.array([[1.0, 1.0], [1.0, 1.0]])) == pytest.approx(0.5)
    assert off_diagonal_mass(np.zeros((2, 2))) == 0.0


def test_simulate_is_seeded_per_depth():
    out = simulate(3, [1, 2], n_draws=500, seed=4)
    assert list(out) == [1, 2] and all(c.shape == (9, 9) for c in out.values())
    np.testing.assert_array_equal(simulate(3, [2], n_draws=500, seed=4)[2], out[2])
    assert not np.array_equal(simulate(3, [2], n_draws=500, seed=5)[2], out[2])
    # one layer: the variances are std^2 = 0.25 within 5 Monte Carlo standard errors
    np.testing.assert_array_less(np.abs(np.diag(out[1]) - 0.25), 5 * 0.25 * np.sqrt(2 / 500))


def test_simulate_follows_its_documented_seeding_for_both_methods():
    layer_seed, draw_seed = (int(x) for x in np.random.SeedSequence([2, 3]).generate_state(2))
    layers = random_layers(3, 3, seed=layer_seed)
    mc = simulate(3, [3], n_draws=300, seed=2)[3]
    exact = simulate(3, [3], seed=2, method="exact")[3]
    np.testing.assert_array_equal(mc, mc_product_covariance(layers, 300, seed=draw_seed))
    np.testing.assert_array_equal(exact, exact_product_covariance(layers))
    with pytest.raises(ValueError, match="method"):
        simulate(3, [3], seed=2, method="hmc")


@pytest.mark.parametrize("share_scale", [False, True])
def test_figure_has_one_image_per_matrix_with_symmetric_scale(share_scale):
    covs = {f"L = {d}": exact_product_covariance(_layers(d)) for d in (1, 2, 3)}
    fig = product_covariance_figure(covs, share_scale=share_scale, title="product covariance")
    assert isinstance(fig, Figure)
    image_axes = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in image_axes] == list(covs)
    for ax, cov in zip(image_axes, covs.values(), strict=True):
        lo, hi = ax.images[0].get_clim()
        assert lo == -hi and hi >= np.abs(cov).max()
    n_colorbars = len(fig.axes) - len(image_axes)
    assert n_colorbars == (1 if share_scale else 3)
    FigureCanvasAgg(fig).draw()  # renders headless


def test_figure_rejects_non_square_input():
    with pytest.raises(ValueError, match="square"):
        product_covariance_figure({"a": np.ones((2, 3))})
