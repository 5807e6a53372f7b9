"""The one table of per-purpose seed offsets.

Every random stream of a cell is seeded ``cell seed + offset`` with an offset from
:class:`Stream`, so that two purposes never draw from the same stream (two studies that
shared ``seed + 5`` drew correlated random numbers when they ran in one cell) and the
numbers of one purpose do not move when another purpose draws more. A new purpose takes
a new member here; ``tests/test_seeds.py`` checks that no offset is used twice and that
no module of the project writes a literal ``seed + <number>``.

The offsets are small integers, so a sweep over seeds ``0, 1, 2, ...`` reuses a stream of
another cell under another purpose (cell 1's :attr:`Stream.PREDICTIVE` is cell 0's
:attr:`Stream.POSTERIOR_PREDICTIVE`); cells are compared across seeds only through their
own streams, so this is harmless and it keeps every stored number as it was.

Strided families (a stream per fit, step or replicate) start at offsets far from the
others: :attr:`Stream.KTIED_ELBO_STEP` ``+ step``, :attr:`Stream.KTIED_SHUFFLE` ``+ i``
(``i < 100``), ``k *`` :data:`INIT_FIT_STRIDE` for the ``k``-th initial fit of a sampler.

This module is a leaf: it imports nothing of the project (and no torch), so every layer
from the spec up may use it.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["GROUND_TRUTH_STRIDE", "INIT_FIT_STRIDE", "GroundTruthStream", "Stream", "seed_for"]


class Stream(IntEnum):
    """Offset of each random stream of a cell from the cell's seed."""

    #: Model initialisation, the fit itself and the Gaussian fits of the price of mean field.
    CELL = 0
    #: Posterior draws behind the test metrics and predictive comparisons (``tv_vi``).
    PREDICTIVE = 1
    #: Posterior-predictive draws written to the cell's ArviZ file.
    POSTERIOR_PREDICTIVE = 2
    #: Shift null (random rotations) of the price-of-mean-field KL.
    SHIFT_NULL = 3
    #: Shift null inside the ``kl_target_draws`` stopping rule.
    KL_STOP_NULL = 4
    #: Gaussian draws and out-of-distribution inputs of the predictive study.
    PREDICTIVE_STUDY = 5
    #: Draws of a sampler's initial posterior that start its chains (``init_spread: draws``).
    INIT_DRAWS = 6
    #: The held-out split of a point estimate's early stopping.
    HOLDOUT_SPLIT = 7
    #: Posterior draws of the product-matrix study.
    PRODUCT_MATRIX = 8
    #: Posterior draws of the pruning study's activation variances.
    PRUNING = 9
    #: Posterior draws along the pruning study's trajectory.
    PRUNING_TRAJECTORY = 10
    #: Draws from an svi cell's guide behind its PSIS k-hat (``psis_khat``).
    PSIS = 11
    #: First of the VSBC study's replications (``+ r``, r < 400): the prior draw, the
    #: simulated data and the refit of replication r.
    VSBC = 12
    #: Prior draws and unit shuffles of the pruning study's nulls.
    PRUNING_NULL = 450
    #: Jitter of the Laplace study's extra refinement starts (``refinements > 1``).
    LAPLACE_REFINE = 451
    #: Gaussian draws of the predictive study's per-chain fits (``per_chain``).
    PREDICTIVE_CHAINS = 452
    #: Random relabelling and null draws of the price of mean field modulo unit permutations.
    UNIT_ALIGNMENT = 453
    #: AR(1) chains that calibrate the price of mean field's KL bias.
    KL_CALIBRATION = 454
    #: The exact moves along the hidden units' symmetries of a sampler (``symmetry_moves``).
    SYMMETRY_MOVES = 455
    #: The swaps between the rungs of a sampler's tempering ladder (``tempering``).
    TEMPERING = 456
    #: Evaluation draws of the k-tied study.
    KTIED_EVAL = 500
    #: First of the k-tied study's shuffled controls (``+ i``).
    KTIED_SHUFFLE = 700
    #: First of the k-tied study's per-step ELBO streams (``+ step``).
    KTIED_ELBO_STEP = 1000


#: Seed stride between the independent initial fits of a sampler's chains (a prime far
#: from the sweep's seeds 0, 1, 2, ...): fit ``k`` has seed ``seed + k * INIT_FIT_STRIDE``.
INIT_FIT_STRIDE = 100003

#: Seed stride between the replicates of the Gaussian ground-truth simulation.
GROUND_TRUTH_STRIDE = 101


class GroundTruthStream(IntEnum):
    """Offsets within one replicate (``seed + GROUND_TRUTH_STRIDE * i``) of the simulation."""

    #: The random covariance.
    COVARIANCE = 0
    #: The sampler's draws.
    DRAWS = 1
    #: The shift null (its groups use ``+ 1 + g`` beyond this).
    NULL = 3


def seed_for(seed: int, stream: Stream, index: int = 0) -> int:
    """The seed of ``stream`` (``index`` within a strided family) for a cell seeded ``seed``."""
    return int(seed) + int(stream) + int(index)
