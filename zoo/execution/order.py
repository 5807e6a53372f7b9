"""The order in which a phase's cells go to the workers: the most work first.

A run's wall time on ``W`` workers is at least its longest cell and at least its total work
over ``W``. Handed out in sweep order, the cells of the last axis values go last, and in a
depth sweep those are the deepest networks, the longest cells: the run ends with one worker
on a long cell while the others idle. Handing out the longest first (Graham 1969: the
makespan of longest-processing-time first is within 4/3 of the optimum) closes that gap.
On the default spec's run at commit 4a8b06c (2 workers, 24 cells, 1662 cell-seconds),
replaying the cells' own times: sweep order ends after 906 s, deepest first after 831 s,
and ordering by the measured times themselves after 831 s; the run at commit d541522, the
first deepest first, took 902 s for 1771 cell-seconds (a replay in sweep order: 974 s).

A cell's time is not known before it runs, so the key is an upper bound of its work from
its spec alone, in gradient evaluations of one data point: :func:`work_bound`. It orders
the sampled cells; the methods without a chain (variational, point and Laplace fits) have
a bound of 0 and go after them, since they take seconds where a sampler takes minutes in
every shipped spec. Ties (the same settings at another depth or seed) go to the deeper
network first: on networks this small a gradient costs about the same number of torch
operations per layer whatever the width, so depth is the better guess; then sweep order.

The order changes nothing a cell computes (a cell's numbers depend on its configuration,
device and thread count only); ``results.csv`` keeps the sweep's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zoo.spec.sections.sampler_base import Sampler
from zoo.spec.sections.studies.price_of_mf import cell_draws_cap

__all__ = ["longest_first", "work_bound"]


def work_bound(cell: Any) -> float:
    r"""An upper bound of a sampled cell's work, in per-point gradient evaluations:

    .. math::

        (\text{warm-up} + \text{draws cap}) \times \text{chains} \times \text{rungs}
        \times \text{gradients a transition} \times N_\text{train},

    with the draws cap of
    :func:`~zoo.spec.sections.studies.price_of_mf.cell_draws_cap` and the method's
    :meth:`~zoo.spec.sections.sampler_base.Sampler.transition_gradients`, times the rungs
    of its tempering ladder (1 without); 0 for a method without chains."""
    method = cell.method
    if not isinstance(method, Sampler):
        return 0.0
    n = getattr(cell.spec.data, "n_train", None) or 1
    transitions = method.warmup + cell_draws_cap(method, cell.studies)[0]
    tempering = getattr(method, "tempering", None)
    rows = method.chains * (1 if tempering is None else tempering.rungs)
    return float(transitions * rows * method.transition_gradients() * n)


def _depth(cell: Any) -> int:
    return int(getattr(cell.spec.model, "depth", 0) or 0)


def longest_first(cells: Sequence[Any]) -> list[Any]:
    """``cells`` ordered by :func:`work_bound`, the most first, ties to the deeper network,
    then in their own order (a stable sort)."""
    return sorted(cells, key=lambda c: (-work_bound(c), -_depth(c)))
