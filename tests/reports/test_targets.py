"""Known answers with the permutation pathology: the alignment pipeline on a symmetrised Gaussian.

Draws are exact (AR(1) chains of the Gaussian, every draw's units relabelled at random), so
the only errors are Monte Carlo ones, which the debiased KL's chain-group interval measures.
"""

from __future__ import annotations

import numpy as np
import pytest

from reports.gaussian import kl_diag_full
from reports.targets import (
    UNIT_KINDS,
    aligned_run,
    gaussian_chains,
    permutation_target,
    rule_answer,
    unit_sites,
)

CHAINS, DRAWS, RHO = 16, 500, 0.5


def _pipeline(target, seed: int, strength: float = 0.0, pivot_iterations: int = 5):
    """The aligned and raw debiased KL and the alignment null (:func:`aligned_run`;
    ``strength``: the weight of the units' log strength in the signatures)."""
    return aligned_run(
        target,
        CHAINS,
        DRAWS,
        rho=RHO,
        groups=8,
        seed=seed,
        strength=strength,
        pivot_iterations=pivot_iterations,
    )


def test_gaussian_chains_are_stationary_ar1():
    cov = np.array([[2.0, 0.6], [0.6, 1.0]])
    x = gaussian_chains([1.0, -1.0], cov, 64, 400, rho=0.8, seed=3)
    flat = x.reshape(-1, 2)
    # the first draws alone are N(m, S): no burn-in
    first = x[:, 0]
    assert np.all(np.abs(first.mean(0) - [1.0, -1.0]) < 4 * np.sqrt(np.diag(cov) / 64))
    np.testing.assert_allclose(np.cov(flat.T), cov, atol=0.15)
    d = x[..., 0] - 1.0
    lag1 = (d[:, 1:] * d[:, :-1]).mean() / (d * d).mean()
    assert abs(lag1 - 0.8) < 0.02


def test_unit_sites_layout_and_true_kl():
    t = permutation_target(3, 5, 2, seed=1)
    sites = t.pivot()
    assert sites["layer0.weight"].shape == (5, 3)
    assert sites["layer0.bias"].shape == (5,)
    assert sites["layer1.weight"].shape == (2, 5)
    np.testing.assert_array_equal(sites["layer1.weight"][:, 2], t.mean[2, 4:])
    # block-diagonal S: the KL of the assembled matrix is the sum of the units'
    b = t.mean.shape[1]
    full = np.zeros((t.dim, t.dim))
    for j in range(t.hidden):
        full[j * b : (j + 1) * b, j * b : (j + 1) * b] = t.cov[j]
    assert t.kl == pytest.approx(float(kl_diag_full(full)), rel=1e-10)
    assert t.kl > 0.5
    # the near-identical pair: a fraction of a standard deviation apart
    assert np.linalg.norm(t.mean[1] - t.mean[0]) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="F \\+ 1 \\+ O"):
        unit_sites(np.zeros((4, 3)), 2, 1)
    with pytest.raises(ValueError, match="hidden >= 2"):
        permutation_target(2, 1, 1)


def test_pipeline_recovers_the_quotient_kl_with_distinct_and_dead_units():
    """Distinct units and a dead one (outgoing weights ~0): aligning to the Stephens pivot
    recovers the exact KL within the debiased KL's 95% t-interval; the raw KL of the
    symmetrised draws is many intervals off; the alignment null is within its noise of 0."""
    t = permutation_target(2, 4, 1, separation=6.0, seed=0, **UNIT_KINDS["distinct"])
    aligned, raw, null = _pipeline(t, seed=0)
    assert abs(aligned.debiased - t.kl) <= aligned.half_width()
    assert abs(raw.debiased - t.kl) > 20 * raw.half_width()
    assert abs(null) < aligned.se


@pytest.mark.xfail(
    strict=True,
    reason="the alignment null (independent Gaussian draws at the aligned marginals) does not "
    "see what sorting near-identical or signature-less dead units does to the KL, and no null "
    "from the aligned draws alone can; the strength-weighted signature places the dead unit "
    "(test below); a near-identical pair's generating Gaussian is not identifiable from "
    "symmetrised draws, so only the rule's own answer can be recovered (test below; "
    "docs/notes/known_answers.md)",
)
@pytest.mark.parametrize("kind", ["near_identical", "dead_at_prior"])
def test_alignment_null_accounts_for_exchangeable_units(kind):
    """Aligned KL less the null is the exact KL within the aligned KL's 95% t-interval:
    misses by -0.26 nats (near-identical pair, 12 s.e.) and +2.3 nats (a dead unit whose
    incoming weights sit at a centred prior, so its pivot signature is zero) on seed 0."""
    t = permutation_target(2, 4, 1, separation=6.0, seed=0, **UNIT_KINDS[kind])
    aligned, _, null = _pipeline(t, seed=0)
    assert abs(aligned.debiased - null - t.kl) <= aligned.half_width()


def test_strength_in_the_signature_places_a_dead_unit_at_a_centred_prior():
    """With the units' log strength in the signature (rescaling-invariant), the dead unit
    whose incoming weights sit at a centred prior is told from the live ones: the aligned
    KL less the null is the exact KL within its 95% t-interval (by direction alone it is
    2.3 nats off: the xfail above)."""
    t = permutation_target(2, 4, 1, separation=6.0, seed=0, **UNIT_KINDS["dead_at_prior"])
    aligned, _, null = _pipeline(t, seed=0, strength=0.5)
    assert abs(aligned.debiased - null - t.kl) <= aligned.half_width()


def test_rule_answer_is_the_gaussian_where_units_are_told_apart():
    """Distinct units: the quotient KL that aligning defines is the generating Gaussian's,
    within the brute-force answer's own Monte Carlo error (4 s.e.)."""
    t = permutation_target(2, 4, 1, separation=6.0, seed=0, **UNIT_KINDS["distinct"])
    r = rule_answer(t, draws=100_000)
    assert r.null == pytest.approx(0.0, abs=1e-3)
    assert abs(r.estimate - t.kl) <= 4 * r.se


@pytest.mark.parametrize("strength", [0.0, 0.5])
def test_pipeline_recovers_the_rules_answer_for_a_near_identical_pair(strength):
    """A near-identical pair: with the pivot iterated to its fixed point, chains of 16 x 500
    AR(1) draws give aligned less null within their 95% interval (widened by the brute-force
    answer's 2 s.e.) of the rule's own answer on 3 of 3 seeds, and that answer is 0.2-0.35
    nats below the generating Gaussian's KL: the rule's systematic error on units the draws
    cannot tell apart (0.25 by direction, 0.31 with strength 0.5, at 200,000 draws)."""
    t = permutation_target(2, 4, 1, separation=6.0, seed=0, **UNIT_KINDS["near_identical"])
    r = rule_answer(t, draws=100_000, strength=strength)
    assert 0.2 < t.kl - r.estimate < 0.35
    for seed in range(3):
        aligned, _, null = _pipeline(t, seed=seed, strength=strength, pivot_iterations=100)
        assert abs(aligned.debiased - null - r.estimate) <= aligned.half_width() + 2 * r.se
