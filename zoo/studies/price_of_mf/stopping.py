"""Draw until the weights pass their gates: the price of mean field's ``stop_at_grade``.

The reference a sampled cell's KL is read against is only usable at silver or better
(:data:`reports.grade.USES`), and whether a cell gets there past depth 2 is mostly a matter
of how long its chains are: on the default's depth-3 and depth-4 cells the hidden units'
aligned split R-hat falls roughly as one over the draws per chain (1.36 -> 1.10 from 150 to
600 draws), so a fixed cap leaves the deep cells bronze while the shallow ones stop long
past their gates. :class:`GateRule` is the second half of the study's stopping rule: after
``kl_target_draws`` is met, draw on (in the sampler's rounds) until the weights' aligned
split R-hat, their aligned bulk ESS, the KL's own split R-hat (:mod:`reports.kl_rhat`) and,
for ReLU and leaky-ReLU networks, the orbit coordinates' R-hat pass the gates of the named
grade (:func:`reports.grade.gates_pass`, the
thresholds the cell is graded by), or until ``max_draws``.

The rule aligns to a pivot it fixes once (Stephens' iteration on the draws at its first
question, :func:`reports.alignment.pivot_from_draws`) and aligns only the draws that are new
at each later question, so a question costs a few R-hats and one ESS over the draws so far.
The cell's grade is read afterwards from its own record (a pivot from all draws), not from
the rule's answer: a rule that stopped on the round its R-hat first crossed the threshold
may leave the final R-hat just above it, and the cell is then graded by that. Stopping on a
diagnostic is optional stopping; the gates read the whole chains, not the last round, so
one lucky round moves them little (Vehtari et al. 2021 recommend running on until R-hat
passes rather than trusting a fixed length).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from reports.alignment import align_to_pivot, pivot_from_draws
from reports.grade import gates_pass
from reports.kl_rhat import kl_rhat
from reports.orbit import orbit_rhat, rhat_and_ess

__all__ = ["GATES_READ", "GateRule"]

#: The gates the rule asks: those of the weights and of the KL that more draws move.
GATES_READ = ("r_hat", "ess_bulk", "orbit_r_hat", "kl_r_hat")


class GateRule:
    """A stopping rule: true once the aligned weights pass ``grade``'s gates.

    Parameters
    ----------
    grade : str
        ``"silver"`` or ``"gold"`` (:data:`reports.grade.GRADES`).
    homogeneous : bool
        ReLU or leaky ReLU: the orbit coordinates' R-hat is asked too.
    jitter : float, default 1e-6
        The Gaussian fit's jitter, for the KL's own R-hat (:func:`reports.kl_rhat.kl_rhat`,
        of the draws as sampled, as the cell records it).

    Notes
    -----
    Called with ``{site: (chain, k, *shape)}`` draws of the weight and bias sites, all draws
    so far (``k`` grows between calls; earlier draws do not change). ``last`` holds the
    metrics of the latest question, for tests and logs.
    """

    def __init__(self, grade: str, *, homogeneous: bool, jitter: float = 1e-6) -> None:
        self.grade, self.homogeneous, self.jitter = grade, homogeneous, jitter
        self._pivot: dict | None = None
        self._aligned: dict[str, list[np.ndarray]] = {}
        self._seen = 0
        self.last: dict[str, Any] = {}

    def _align_new(self, sites: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The draws so far, aligned to the fixed pivot (only the new ones are aligned)."""
        k = next(iter(sites.values())).shape[1]
        if self._pivot is None:
            self._pivot = pivot_from_draws(sites)
        if k > self._seen:
            new = {n: np.asarray(v)[:, self._seen : k] for n, v in sites.items()}
            for n, v in align_to_pivot(new, self._pivot).sites.items():
                self._aligned.setdefault(n, []).append(v)
            self._seen = k
        return {n: np.concatenate(parts, axis=1) for n, parts in self._aligned.items()}

    def __call__(self, sites: Mapping[str, np.ndarray]) -> bool:
        aligned = self._align_new(sites)
        chains = next(iter(aligned.values())).shape[0]

        def flat(d: Mapping[str, np.ndarray]) -> np.ndarray:
            return np.concatenate([np.reshape(v, (chains, v.shape[1], -1)) for v in d.values()], -1)

        rhat, ess = rhat_and_ess(flat(aligned))
        metrics: dict[str, Any] = {
            "weights_rhat_aligned": rhat,
            "weights_ess_bulk_aligned": ess,
            "kl_rhat": kl_rhat(flat(sites), jitter=self.jitter)[0],
        }
        if self.homogeneous:
            metrics["orbit_rhat"] = orbit_rhat(aligned).split
        self.last = metrics
        return gates_pass(self.grade, metrics, GATES_READ)
