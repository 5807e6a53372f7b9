"""The price of mean field modulo hidden-unit permutations, on an MLP's draws.

The reference the study reports as its headline is the permutation-quotient posterior in
raw coordinates: every draw's hidden units aligned to a pivot (:mod:`reports.alignment`)
before q_full, the KL, the W2 and their bias references are computed; the rescaling orbits
of ReLU units are not quotiented (mean field in raw coordinates still pays for them), and
their coordinates' R-hat is gated instead (:mod:`reports.orbit`). The sampling-bias
references are measured on the aligned draws themselves, the draws the aligned KL is of (on
the streamed-moments path the kept subset, not the stream behind ``kl_bias_ess``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reports.alignment import (
    NULL_REPS,
    align_to_pivot,
    aligned_reference,
    kl_by_labelling,
    label_switches,
    pivot_from_draws,
)
from reports.draws import flatten_sites
from reports.orbit import max_split_rhat, orbit_rhat, rhat_and_ess
from reports.superchains import max_rhat_nested

__all__ = ["quotient_metrics"]

Sites = Mapping[str, np.ndarray]


def quotient_metrics(
    sites: Sites,
    rest: Sites,
    *,
    homogeneous: bool,
    superchain_ids: Sequence[int] | None,
    seed: int,
    jitter: float,
) -> dict[str, Any]:
    """KLs, R-hats and references of an MLP's draws read modulo hidden-unit permutations.

    Parameters
    ----------
    sites : mapping of str to np.ndarray
        ``(chain, draw, *shape)`` draws of the ``layer{l}.weight`` / ``layer{l}.bias`` sites.
    rest : mapping of str to np.ndarray
        The posterior's other sites (a learned noise scale): in the R-hats as sampled, as
        they are in ``max_r_hat``; not in the KL (which is of the weights).
    homogeneous : bool
        ReLU or leaky ReLU: the units have rescaling orbits, and their R-hat is recorded.
    superchain_ids : sequence of int or None
    seed : int
        Seeds the random relabelling, the null and the bias calibration.
    jitter : float
        The Gaussian fit's jitter.

    Returns
    -------
    dict
        The draws' pivot is Stephens' iteration from the first draw. ``kl_relabelled``
        (every draw's units relabelled at random), ``kl_aligned`` (aligned to the pivot),
        ``kl_alignment_null`` (what aligning adds to independent draws of the same
        marginals) and ``kl_alignment_null_sd`` (its spread over
        :data:`~reports.alignment.NULL_REPS` more sets of such draws); the largest split R-hat raw (``weights_rhat_raw``) and aligned
        (``weights_rhat_aligned``, nested ``weights_rhat_nested_aligned``) and the smallest
        bulk ESS aligned (``weights_ess_bulk_aligned``); the mean number
        of draws per chain whose labelling changed (``label_switches``, summed over layers);
        :func:`reports.alignment.aligned_reference`'s references; with ``homogeneous``, ``orbit_rhat`` (the
        larger of ``orbit_rhat_balance`` and ``orbit_rhat_invariant``) and
        ``orbit_rhat_nested``.
    """
    pivot = pivot_from_draws(sites)
    res = kl_by_labelling(sites, pivot, seed=seed, jitter=jitter, null_reps=NULL_REPS)
    aligned = align_to_pivot(sites, pivot)
    chains = next(iter(sites.values())).shape[0]
    flat_al = _by_chain({**aligned.sites, **rest}, chains)
    rhat_al, ess_al = rhat_and_ess(flat_al)
    out: dict[str, Any] = {
        "kl_relabelled": res.relabelled,
        "kl_aligned": res.aligned,
        "kl_alignment_null": res.null,
        "weights_rhat_raw": max_split_rhat(_by_chain({**sites, **rest}, chains)),
        "weights_rhat_aligned": rhat_al,
        "weights_rhat_nested_aligned": max_rhat_nested(flat_al, superchain_ids),
        "weights_ess_bulk_aligned": ess_al,
        "label_switches": float(sum(label_switches(p).mean() for p in aligned.perms.values())),
    }
    out.update(aligned_reference(_by_chain(aligned.sites, chains), res, seed, jitter))
    if homogeneous:
        orbit = orbit_rhat(aligned.sites, superchain_ids)
        out.update(
            orbit_rhat=orbit.split,
            orbit_rhat_balance=orbit.balance,
            orbit_rhat_invariant=orbit.invariant,
            orbit_rhat_nested=orbit.nested,
        )
    return out


def _by_chain(sites: Sites, chains: int) -> np.ndarray:
    """``(chain, draw, n)``: the sites' draws flattened."""
    flat = flatten_sites(sites).draws
    return flat.reshape(chains, -1, flat.shape[1])
