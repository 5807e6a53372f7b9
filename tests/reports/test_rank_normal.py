"""The one-sort rank diagnostics are arviz-stats' rank R-hat and bulk ESS, bit for bit."""

from __future__ import annotations

import arviz_stats as azs
import numpy as np
import pytest

from reports.orbit import max_split_rhat, min_bulk_ess, rhat_and_ess
from reports.rank_normal import split_rank_diagnostics


def _arviz(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        r = azs.rhat(v, method="rank", chain_axis=0, draw_axis=1)
        e = azs.ess(v, method="bulk", chain_axis=0, draw_axis=1)
    return np.asarray(r, float).ravel(), np.asarray(e, float).ravel()


def _sticky(rng: np.random.Generator, c: int, s: int, k: int) -> np.ndarray:
    """AR chains that repeat their last draw 40% of the time (ties, as rejections make)."""
    v = rng.standard_normal((c, s, k))
    keep = rng.random((c, s)) < 0.4
    for t in range(1, s):
        v[:, t] = np.where(keep[:, t, None], v[:, t - 1], 0.7 * v[:, t - 1] + v[:, t])
    return v


@pytest.mark.parametrize(
    "case",
    ["plain", "ties", "rounded", "nan", "constant", "shifted_chain", "odd", "short", "matrix"],
)
def test_equals_arviz_stats(case: str) -> None:
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    c, s, k = 6, 101 if case == "odd" else 60, 5
    v = _sticky(rng, c, s, k) if case != "plain" else rng.standard_normal((c, s, k))
    if case == "rounded":
        v = np.round(v, 1)
    elif case == "nan":
        v[2, 7, 1] = np.nan
    elif case == "constant":
        v[..., 3] = 2.5
    elif case == "shifted_chain":
        v[0, :, :] += 4.0
    elif case == "short":
        v = v[:, :6]
    elif case == "matrix":
        v = v.reshape(c, s, 1, k)
    r, e = split_rank_diagnostics(v)
    r0, e0 = _arviz(v)
    assert r.shape == e.shape == (k,)
    np.testing.assert_array_equal(r, r0)
    np.testing.assert_array_equal(e, e0)


def test_orbit_helpers_read_the_same_numbers() -> None:
    v = _sticky(np.random.default_rng(3), 8, 80, 7)
    r0, e0 = _arviz(v)
    assert max_split_rhat(v) == r0.max()
    assert min_bulk_ess(v) == e0.min()
    assert rhat_and_ess(v) == (r0.max(), e0.min())
    v[..., 2] = 1.0  # a column that never moves: no ESS to trust, no finite R-hat
    rhat, ess = rhat_and_ess(v)
    assert np.isnan(rhat) and np.isnan(ess)
    one = np.delete(v[:1], 2, axis=-1)  # one chain: no R-hat, an ESS
    assert rhat_and_ess(one) == (None, min_bulk_ess(one))


def test_a_stuck_chain_shows() -> None:
    """The fast path is a diagnostic, not only a copy: a chain off at another mode fails."""
    rng = np.random.default_rng(4)
    v = rng.standard_normal((4, 400, 3))
    assert max_split_rhat(v) < 1.02
    v[1] += 3.0
    assert max_split_rhat(v) > 1.3
