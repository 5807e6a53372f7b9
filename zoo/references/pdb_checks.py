"""posteriordb's diagnostics and checks of a reference posterior, computed for real.

posteriordb (Magnusson et al., https://github.com/stan-dev/posteriordb) states in a
reference's info file the diagnostics of the draws it stores and five checks its readers
(the R package's ``check_reference_posterior_draws``) recompute from them:

``ndraws_is_10k``
    the stored draws number exactly 10,000;
``nchains_is_gte_4``
    at least 4 chains;
``ess_within_bounds``
    every parameter's bulk and tail ESS of the stored draws lies within
    :math:`N \\pm 4\\sqrt{7N}` for :math:`N` stored draws (posteriordb's simulated bounds:
    the stored draws are about independent);
``r_hat_below_1_01``
    every parameter's rank-normalized split :math:`\\hat R` (Vehtari et al. 2021) of the
    stored draws is at most 1.01;
``efmi_above_0_2``
    every chain's E-FMI, :math:`\\sum_n (E_n - E_{n-1})^2 / \\sum_n (E_n - \\bar E)^2` of
    the Hamiltonian's energy :math:`E` at each transition (Betancourt 2016,
    arXiv:1604.00695), is at least 0.2; computed on every draw (the energy of consecutive
    transitions), ``None`` where the sampler stored no energy.

:func:`reference_diagnostics` builds posteriordb's ``diagnostics`` from the stored draws
(keeping those of every draw before thinning under ``every_draw``) and
:func:`posteriordb_checks` evaluates the five checks on them as posteriordb's checker
does (bounds inclusive; a NaN fails). ESS, R-hat and E-FMI are arviz-stats'. Pure NumPy
and xarray: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import arviz_stats as azs
import numpy as np
import xarray as xr

from reports.diagnostics import posterior_summary
from reports.draws import param_labels

__all__ = [
    "PDB_CHECKS",
    "PDB_NDRAWS",
    "efmi",
    "ess_bounds",
    "posteriordb_checks",
    "reference_diagnostics",
    "stored_names",
]

#: posteriordb's draws per reference.
PDB_NDRAWS = 10_000
#: The checks posteriordb's readers make, in its order.
PDB_CHECKS = (
    "ndraws_is_10k",
    "nchains_is_gte_4",
    "ess_within_bounds",
    "r_hat_below_1_01",
    "efmi_above_0_2",
)


def ess_bounds(ndraws: int) -> tuple[float, float]:
    """posteriordb's bounds on the bulk and tail ESS of ``ndraws`` independent draws:
    :math:`N \\pm 4\\sqrt{7N}` (4 of its simulated ESS standard deviations)."""
    half = 4 * math.sqrt(7 * ndraws)
    return ndraws - half, ndraws + half


def efmi(energy: Any) -> list[float] | None:
    """E-FMI per chain of an energy array ``(chain, draw)`` (arviz-stats' ``bfmi``);
    None without energy."""
    if energy is None:
        return None
    return [float(v) for v in np.atleast_1d(azs.bfmi(np.asarray(energy, dtype=np.float64)))]


def _finite(values: Sequence[float | None]) -> list[float | None]:
    return [float(v) if v is not None and math.isfinite(v) else None for v in values]


def stored_names(post: xr.Dataset) -> list[str]:
    """posteriordb's names of the scalar parameters of ``post``: 1-based, C order."""
    return [
        label
        for var, da in post.data_vars.items()
        for label in param_labels(str(var), tuple(da.shape[2:]), base=1)
    ]


def reference_diagnostics(
    kept: xr.Dataset,
    every_draw: Mapping[str, Any],
    *,
    ndraws_sampled: int,
    efmi_per_chain: list[float] | None,
    divergent: list[int] | None,
    cell: Mapping[str, Any],
) -> dict[str, Any]:
    """posteriordb's ``diagnostics`` of the stored draws ``kept``, ``(chain, draw, ...)``.

    Parameters
    ----------
    kept : xarray.Dataset
        The stored (thinned) draws.
    every_draw : mapping
        ``effective_sample_size_bulk``, ``effective_sample_size_tail`` and ``r_hat`` of
        every draw before thinning, in the same parameter order (kept as they are).
    ndraws_sampled : int
        Draws before thinning, all chains together.
    efmi_per_chain : list of float or None
        :func:`efmi` of every draw's energy.
    divergent : list of int or None
        Divergent transitions per chain.
    cell : mapping
        The cell's metrics the grade reads.

    Returns
    -------
    dict
        ``ndraws`` (the stored draws, as posteriordb counts them), ``ndraws_sampled``,
        ``nchains``, per parameter the ESS and R-hat of the stored draws, the E-FMI, the
        divergences, ``every_draw`` and ``cell``.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        summary = posterior_summary(kept)
    return {
        "diagnostic_information": {"names": stored_names(kept)},
        "ndraws": int(kept.sizes["chain"] * kept.sizes["draw"]),
        "ndraws_sampled": int(ndraws_sampled),
        "nchains": int(kept.sizes["chain"]),
        "computed_on": "the stored draws; every_draw: every draw before thinning; "
        "expected_fraction_of_missing_information: the energy of every transition",
        "effective_sample_size_bulk": _finite(summary["ess_bulk"]),
        "effective_sample_size_tail": _finite(summary["ess_tail"]),
        "r_hat": _finite(summary["r_hat"]),
        "divergent_transitions": divergent,
        "expected_fraction_of_missing_information": None
        if efmi_per_chain is None
        else _finite(efmi_per_chain),
        "every_draw": dict(every_draw),
        "cell": dict(cell),
    }


def _all(values: Sequence[float | None] | None, lo: float, hi: float) -> bool | None:
    """Every value within ``[lo, hi]`` (a missing or NaN value fails); None without values."""
    if values is None:
        return None
    return bool(values) and all(v is not None and lo <= v <= hi for v in values)


def posteriordb_checks(diagnostics: Mapping[str, Any]) -> dict[str, bool | None]:
    """posteriordb's five checks of :func:`reference_diagnostics`' output, as its checker
    makes them (``None``: not checkable, no energy stored)."""
    n = diagnostics["ndraws"]
    lo, hi = ess_bounds(n)
    ess = _all(diagnostics["effective_sample_size_bulk"], lo, hi) and _all(
        diagnostics["effective_sample_size_tail"], lo, hi
    )
    return {
        "ndraws_is_10k": n == PDB_NDRAWS,
        "nchains_is_gte_4": diagnostics["nchains"] >= 4,
        "ess_within_bounds": bool(ess),
        "r_hat_below_1_01": bool(_all(diagnostics["r_hat"], -math.inf, 1.01)),
        "efmi_above_0_2": _all(
            diagnostics["expected_fraction_of_missing_information"], 0.2, math.inf
        ),
    }
