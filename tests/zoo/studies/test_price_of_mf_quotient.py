"""The aligned references: bias measured on the aligned draws themselves."""

from __future__ import annotations

import numpy as np
import pytest

from reports.alignment import AlignedKL, aligned_reference
from reports.gaussian import fit_gaussian, kl_diag_full, kl_sampling_bias
from reports.w2_reference import w2sq_diag_full


def test_aligned_reference_debiases_independent_draws_to_zero_less_the_null() -> None:
    """Independent N(0, I) draws (true KL 0): the bias is the closed form at the draws' own
    n (8 x 100 = 800, not any other stream's n), and the debiased KL is 0 less the null
    within 3 of its standard errors."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 100, 12))
    kl = float(kl_diag_full(fit_gaussian(x.reshape(-1, 12), jitter=1e-6).cov))
    out = aligned_reference(x, AlignedKL(0.0, 0.0, kl, 0.25, 800, 12), seed=1, jitter=1e-6)
    assert out["kl_aligned_bias"] == pytest.approx(kl_sampling_bias(800, 12), rel=0.3)
    deb, se = out["kl_aligned_debiased"], out["kl_aligned_debiased_se"]
    assert deb == pytest.approx(kl - out["kl_aligned_bias"] - 0.25, abs=1e-12)
    assert abs(deb + 0.25) < 3 * se
    cov = np.cov(x.reshape(-1, 12), rowvar=False)
    assert out["w2_aligned"] ** 2 == pytest.approx(w2sq_diag_full(cov, 1e-6), rel=1e-6)
    assert abs(out["w2sq_aligned_debiased"]) < 3 * out["w2sq_aligned_debiased_se"]


def test_aligned_reference_is_none_without_a_closed_form_bias() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 20))  # 12 draws of 20 parameters: n below D
    out = aligned_reference(x, AlignedKL(0.0, 0.0, 1.0, 0.0, 12, 20), seed=0, jitter=1e-6)
    assert out["kl_aligned_debiased"] is None and out["kl_aligned_debiased_se"] is None
