r"""The price of mean field and nested R-hat of any posterior held in an ArviZ DataTree.

The entry points of :mod:`reports` for a user's own draws. Each takes what arviz-stats'
functions take (``ess``, ``rhat``): a :class:`xarray.DataTree` (or a Dataset), the
``group`` to read (default ``"posterior"``), ``var_names`` and ``filter_vars`` (as in
:func:`arviz_base.extract`); the variables must have ``chain`` and ``draw`` dimensions.
One reader, :func:`chain_draws`, takes the chosen variables as a ``(chain, draw, D)``
array (each variable's entries in C order, the variables in the order of the group); the
numbers are then those of the array functions the zoo's studies call, unchanged:

- :func:`price_of_mean_field`: KL(q_diag || q_full) between the Gaussian fit of the draws
  and its KL-closest diagonal Gaussian (Farquhar, Smith & Gal 2020), as a plug-in and
  debiased at the draws' own effective n with a chain-group jackknife interval
  (:func:`reports.kl_reference.debiased_kl_draws`), and the closed-form W2 between the two
  Gaussians with its jackknife correction (:func:`reports.w2_reference.debiased_w2_draws`);
- :func:`aligned_price_of_mean_field`: the same of an MLP's draws modulo hidden-unit
  permutations (:mod:`reports.alignment`), for variables named as the zoo names them
  (``layer{l}.weight`` of shape ``(out, in)``, ``layer{l}.bias``);
- :func:`nested_rhat`: the largest nested R-hat of chains in superchains (Margossian et al.
  2024; :func:`reports.superchains.max_rhat_nested`).

Nothing here fits a model or writes a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr
from arviz_base import extract

from reports.alignment import (
    NULL_REPS,
    align_to_pivot,
    aligned_reference,
    kl_by_labelling,
    label_switches,
    pivot_from_draws,
)
from reports.draws import FlatDraws, flatten_sites
from reports.kl_reference import debiased_kl_draws
from reports.superchains import max_rhat_nested
from reports.w2_reference import debiased_w2_draws

__all__ = [
    "MLP_SITES",
    "aligned_price_of_mean_field",
    "chain_draws",
    "nested_rhat",
    "posterior_sites",
    "price_of_mean_field",
]

Data = xr.DataTree | xr.Dataset
#: The variables :func:`aligned_price_of_mean_field` reads (``filter_vars="regex"``).
MLP_SITES = r"^layer\d+\.(weight|bias)$"
_SAMPLE_DIMS = ("chain", "draw")


def posterior_sites(
    data: Data,
    *,
    group: str = "posterior",
    var_names: str | Sequence[str] | None = None,
    filter_vars: str | None = None,
) -> dict[str, np.ndarray]:
    """The chosen variables' draws, each as a float ``(chain, draw, *shape)`` array.

    Parameters
    ----------
    data : xarray.DataTree or xarray.Dataset
        A tree as arviz-base writes it (or the group itself as a Dataset).
    group : str, default "posterior"
    var_names : str or sequence of str, optional
        The variables (default all), as :func:`arviz_base.extract` selects them.
    filter_vars : {None, "like", "regex"}, optional
        How ``var_names`` match, as in :func:`arviz_base.extract`.

    Returns
    -------
    dict of str to np.ndarray
        Variable name -> its draws, ``chain`` and ``draw`` first, the other dimensions in
        their stored order; in the order of the group.

    Raises
    ------
    ValueError
        If a chosen variable lacks the ``chain`` or ``draw`` dimension, or none is chosen.
    """
    ds = extract(
        data,
        group=group,
        var_names=var_names,
        filter_vars=filter_vars,
        combined=False,
        keep_dataset=True,
    )
    out: dict[str, np.ndarray] = {}
    for name, da in ds.data_vars.items():
        if not set(_SAMPLE_DIMS) <= set(da.dims):
            raise ValueError(
                f"variable {name!r} of group {group!r} has dims {da.dims}; it needs {_SAMPLE_DIMS}"
            )
        out[str(name)] = np.asarray(da.transpose(*_SAMPLE_DIMS, ...).values, dtype=float)
    if not out:
        raise ValueError(f"no variables chosen in group {group!r} (var_names={var_names!r})")
    return out


def _by_chain(sites: dict[str, np.ndarray]) -> tuple[np.ndarray, FlatDraws]:
    """``(chain, draw, D)`` draws of ``sites`` and their :class:`FlatDraws`."""
    flat = flatten_sites(sites)
    chains, draws = next(iter(sites.values())).shape[:2]
    return flat.draws.reshape(chains, draws, -1), flat


def chain_draws(
    data: Data,
    *,
    group: str = "posterior",
    var_names: str | Sequence[str] | None = None,
    filter_vars: str | None = None,
) -> tuple[np.ndarray, FlatDraws]:
    """The chosen variables as one ``(chain, draw, D)`` array, with labels and blocks.

    Parameters are those of :func:`posterior_sites`.

    Returns
    -------
    draws : np.ndarray
        ``(chain, draw, D)``: every variable's entries flattened in C order and
        concatenated in the order of the group.
    flat : reports.draws.FlatDraws
        The same draws as ``(chain * draw, D)``, a label per column (``layer1.weight[3,0]``,
        0-based) and the columns of each block (a variable's name up to its first ``.``:
        ``layer1.weight`` and ``layer1.bias`` form ``layer1``).
    """
    return _by_chain(
        posterior_sites(data, group=group, var_names=var_names, filter_vars=filter_vars)
    )


def price_of_mean_field(
    data: Data,
    *,
    group: str = "posterior",
    var_names: str | Sequence[str] | None = None,
    filter_vars: str | None = None,
    jitter: float = 1e-6,
    groups: int | None = None,
    calibrate: bool = True,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    r"""KL(q_diag || q_full) and W2 of the draws' Gaussian fit, plug-in and debiased.

    :math:`q_\mathrm{full} = \mathcal N(\hat\mu, \hat\Sigma)` is the Gaussian fit of the
    draws (``ddof=1`` covariance plus ``jitter`` on its diagonal) and :math:`q_\mathrm{diag}`
    the diagonal Gaussian closest to it in KL: what mean field pays for its independence
    on this posterior's Gaussian shape. The plug-in KL is biased upward by the noise of
    :math:`\hat\Sigma`; the bias is measured on the chains themselves (split into ``groups``
    contiguous chain groups) and removed, with a jackknife standard error over the groups
    (:func:`reports.kl_reference.debiased_kl_draws`, whose module says how and how well).

    Parameters
    ----------
    data, group, var_names, filter_vars
        The draws, as :func:`posterior_sites` reads them (e.g. ``var_names=["~noise"]`` to
        leave out a learned noise scale, as the zoo's studies do).
    jitter : float, default 1e-6
        Added to the fitted covariance's diagonal.
    groups : int, optional
        Chain groups for the bias and its error (default ``min(8, chains)``); one chain
        gives neither.
    calibrate : bool, default True
        Calibrate the bias on AR(1) chains of the same shape (seconds; as the zoo's
        ``price_of_mean_field`` study does); False: the second-order effective n as it is.
    seed : int, default 0
        Seeds that calibration.
    level : float, default 0.95
        Level of the interval ``kl_debiased_ci`` (Student's t over the groups).

    Returns
    -------
    dict
        Under the names of the zoo's ``results.csv``: ``kl_diag_full`` (plug-in, nats),
        ``kl_debiased``, ``kl_debiased_se``, ``kl_debiased_ci`` (the interval's half-width),
        ``kl_bias_ess`` (the bias removed), ``kl_ess_n`` (the KL's effective n),
        ``kl_squares_n``, ``kl_bias_rho`` and ``kl_debiased.<block>`` per block;
        ``w2_diag_full`` (closed-form W2 of the fit), ``w2sq_debiased`` and
        ``w2sq_debiased_se`` (its square, jackknife-corrected); ``chains``, ``draws``,
        ``dim`` and ``groups``. The debiased values are None where the bias has no closed
        form (the effective n not above ``dim``).
    """
    x, flat = chain_draws(data, group=group, var_names=var_names, filter_vars=filter_vars)
    deb = debiased_kl_draws(
        x, groups=groups, jitter=jitter, blocks=flat.blocks, calibrate=calibrate, seed=seed
    )
    w2 = debiased_w2_draws(x, groups=groups, jitter=jitter)
    out: dict[str, Any] = {
        "kl_diag_full": deb.kl,
        "kl_debiased": deb.debiased,
        "kl_debiased_se": deb.se,
        "kl_debiased_ci": deb.half_width(level),
        "kl_bias_ess": deb.bias,
        "kl_ess_n": deb.n,
        "kl_squares_n": deb.squares_n,
        "kl_bias_rho": deb.rho,
    }
    out.update({f"kl_debiased.{k}": v for k, v in deb.blocks.items()})
    out.update(
        w2_diag_full=float(np.sqrt(max(w2.w2sq, 0.0))),
        w2sq_debiased=w2.w2sq_debiased,
        w2sq_debiased_se=w2.se,
        chains=x.shape[0],
        draws=x.shape[1],
        dim=x.shape[2],
        groups=deb.groups,
    )
    return out


def aligned_price_of_mean_field(
    data: Data,
    *,
    group: str = "posterior",
    jitter: float = 1e-6,
    seed: int = 0,
    strength: float = 0.0,
    pivot_iterations: int = 5,
) -> dict[str, Any]:
    """The price of mean field of an MLP's draws modulo hidden-unit permutations.

    Reads the variables ``layer{l}.weight`` (``(chain, draw, out, in)``) and
    ``layer{l}.bias`` (:data:`MLP_SITES`; others, e.g. ``noise``, are left out), aligns
    every draw's hidden units to a pivot (Stephens' iteration from the first draw,
    :func:`reports.alignment.pivot_from_draws`) and measures the KL raw, randomly
    relabelled and aligned, the alignment's null and the references on the aligned draws,
    as the zoo's ``price_of_mean_field`` study records them.

    Parameters
    ----------
    data : xarray.DataTree or xarray.Dataset
    group : str, default "posterior"
    jitter : float, default 1e-6
        Added to the fitted covariances' diagonal.
    seed : int, default 0
        Seeds the random relabelling, the null's draws and the bias calibration.
    strength : float, default 0
        Weight of the units' log strength in the alignment's signatures
        (:func:`reports.alignment.unit_signatures`; the zoo's study aligns by direction
        alone, 0). Comparing the KLs at 0 and 0.5 shows how much the headline depends on
        the alignment rule where units are dead or alike (``docs/notes/known_answers.md``).
    pivot_iterations : int, default 5
        Cap on Stephens' iteration (the zoo's study: 5). Near-identical units need more
        before no draw's labelling changes (on deep networks it may not stop at all), and
        the difference shows what the cap does to the headline
        (``docs/notes/known_answers.md``).

    Returns
    -------
    dict
        ``kl_raw``, ``kl_relabelled``, ``kl_aligned``, ``kl_alignment_null``,
        ``label_switches`` (mean draws per chain whose labelling changed, summed over
        layers) and :func:`reports.alignment.aligned_reference`'s ``kl_aligned_debiased``
        (``_se``), ``kl_aligned_bias``, ``kl_aligned_ess_n``, ``w2_aligned`` and
        ``w2sq_aligned_debiased`` (``_se``).

    Raises
    ------
    ValueError
        If the layers are not ``layer0 .. layerL`` without gaps.
    """
    sites = posterior_sites(data, group=group, var_names=[MLP_SITES], filter_vars="regex")
    pivot = pivot_from_draws(sites, strength=strength, iterations=pivot_iterations)
    res = kl_by_labelling(
        sites, pivot, seed=seed, jitter=jitter, strength=strength, null_reps=NULL_REPS
    )
    aligned = align_to_pivot(sites, pivot, strength=strength)
    out: dict[str, Any] = {
        "kl_raw": res.raw,
        "kl_relabelled": res.relabelled,
        "kl_aligned": res.aligned,
        "kl_alignment_null": res.null,
        "label_switches": float(sum(label_switches(p).mean() for p in aligned.perms.values())),
    }
    out.update(aligned_reference(_by_chain(aligned.sites)[0], res, seed, jitter))
    return out


def nested_rhat(
    data: Data,
    superchain_ids: Sequence[int],
    *,
    group: str = "posterior",
    var_names: str | Sequence[str] | None = None,
    filter_vars: str | None = None,
) -> float | None:
    """The largest nested R-hat over the chosen variables' entries (Margossian et al. 2024).

    Parameters
    ----------
    data, group, var_names, filter_vars
        As :func:`posterior_sites`.
    superchain_ids : sequence of int
        The superchain of each chain (chains started from one initial point share one).
        Superchains of unequal size are cut to the smallest.

    Returns
    -------
    float or None
        NaN when some entry has none (it never moved); None with fewer than two
        superchains (:func:`reports.superchains.max_rhat_nested`).
    """
    x, _ = chain_draws(data, group=group, var_names=var_names, filter_vars=filter_vars)
    return max_rhat_nested(x, superchain_ids)
