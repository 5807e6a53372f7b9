"""The jackknife-debiased W2(q_diag, q_full)^2 (reports.w2_reference) on Gaussian draws with a
known covariance: rotated (true W2^2 from the covariance itself) and diagonal (true 0).

60 replicate runs of 8 iid chains x 250 draws at D = 20, fixed seed. The plug-in W2^2 is
biased above the truth by more than 5 standard errors of the replicates' mean; the debiased one is
within 3.5 of them (a 4e-4 two-sided chance under the null). Its reported s.e. matches the
replicates' spread within 25% on the rotated target (one s.e. from 8 pseudo-values is off
by about 25%, their mean over 60 runs by about 3%); on the diagonal one, where W2^2 is a
degenerate quadratic of the sample correlations, the jackknife over-states the spread (1.4x
here, as it does for the KL there): the test asks it to be conservative, and by under 1.6x.
"""

from __future__ import annotations

import numpy as np
import pytest

from reports.kl_reference import group_moments
from reports.w2_reference import debiased_w2_draws, debiased_w2_groups, w2sq_diag_full

D, REPS = 20, 60


@pytest.mark.parametrize("structure", ["rotated", "diagonal"])
def test_the_debiased_square_is_unbiased_and_its_se_is_its_spread(structure: str) -> None:
    rng = np.random.default_rng(11)
    lam = np.logspace(0, 1, D)
    q = np.linalg.qr(rng.normal(size=(D, D)))[0] if structure == "rotated" else np.eye(D)
    cov = q @ np.diag(lam) @ q.T
    truth = w2sq_diag_full(cov)
    chol = np.linalg.cholesky(cov)
    plug, deb, se = [], [], []
    for _ in range(REPS):
        r = debiased_w2_draws(rng.normal(size=(8, 250, D)) @ chol.T, jitter=0.0)
        plug.append(r.w2sq)
        deb.append(r.w2sq_debiased)
        se.append(r.se)
    plug, deb, se = map(np.asarray, (plug, deb, se))
    sem = deb.std(ddof=1) / np.sqrt(REPS)
    assert plug.mean() - truth > 5 * sem  # the plug-in is visibly biased
    assert abs(deb.mean() - truth) < 3.5 * sem
    spread = deb.std(ddof=1)
    if structure == "rotated":  # a true W2 well above its noise: the linear term leads
        assert se.mean() == pytest.approx(spread, rel=0.25)
    else:  # a degenerate quadratic at W2 = 0: the jackknife over-states, conservatively
        assert spread < se.mean() < 1.6 * spread


def test_one_group_gives_no_correction_and_the_square_is_the_closed_form() -> None:
    x = np.random.default_rng(0).normal(size=(1, 300, 5))
    r = debiased_w2_groups(*group_moments(x), jitter=0.0)
    assert r.w2sq_debiased is None and r.se is None and r.groups == 1
    y = x.reshape(-1, 5) - x.reshape(-1, 5).mean(0)
    assert r.w2sq == pytest.approx(w2sq_diag_full(y.T @ y / (y.shape[0] - 1)))
    assert w2sq_diag_full(np.diag([1.0, 4.0])) == pytest.approx(0.0, abs=1e-12)
