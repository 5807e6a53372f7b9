"""The output-column KL of a sampled classifier (zoo.studies.price_of_mf.sampler_cell._kl_output_columns)."""

import numpy as np
import pytest

from reports.draws import flatten_sites
from reports.gaussian import fit_gaussian
from zoo.spec.sections.inference import GaussianFitSpec
from zoo.studies.price_of_mf.sampler_cell import _kl_output_columns


def test_kl_output_columns_sums_the_closed_form_pair_kls():
    # Two classes: each output column (w[0, j], w[1, j]) and the bias pair is a correlated
    # pair; a 2x2 block's KL(q_diag || q_full) is -log(1 - r^2) / 2 with r the correlation of
    # the fitted covariance. Hidden-layer weights are independent and do not enter.
    rng = np.random.default_rng(0)
    s, rhos = 4000, [-0.8, -0.4, 0.0, 0.6]
    pairs = [rng.multivariate_normal([0, 0], [[1, r], [r, 1]], size=s) for r in rhos]
    w_out = np.stack(pairs[:3], axis=2)  # (S, 2, 3): column j is pair j
    sites = {"layer0.weight": rng.normal(size=(1, s, 3, 2)),
             "layer0.bias": rng.normal(size=(1, s, 3)),
             "layer1.weight": w_out[None], "layer1.bias": pairs[3][None]}  # fmt: skip
    flat = flatten_sites(sites)
    fit = GaussianFitSpec(cov="empirical", jitter=0.0)
    cov = fit_gaussian(flat.draws, cov="empirical", jitter=0.0).cov

    def pair_kl(i, j):
        r = cov[i, j] / np.sqrt(cov[i, i] * cov[j, j])
        return -0.5 * np.log1p(-(r**2))

    first = flat.labels.index("layer1.weight[0,0]")
    expected = sum(pair_kl(first + j, first + 3 + j) for j in range(3)) + pair_kl(
        first + 6, first + 7
    )
    assert _kl_output_columns(flat, fit) == pytest.approx(expected, rel=1e-10)
    # ... which is close to the population value within Monte Carlo error (r's s.e. ~ 0.01)
    assert _kl_output_columns(flat, fit) == pytest.approx(
        sum(-0.5 * np.log1p(-(r**2)) for r in rhos), abs=0.05
    )
