r"""Hidden-unit alignment of MLP posterior draws: the posterior modulo unit permutations.

An MLP's likelihood is unchanged when the hidden units of a layer are permuted (the rows of
``layer{l}.weight`` and ``layer{l}.bias`` and the columns of ``layer{l+1}.weight`` together).
With ``H`` units per layer the posterior therefore has :math:`\prod_l H_l!` copies of every
mode. A sampler that moves between copies ("label switching") makes the weights' R-hat large
although every copy is the same function, and it changes the Gaussian fit
:math:`q_\mathrm{full}` of the draws: two copies averaged into one covariance are not the
covariance of either. The KL between mean field and that fit then measures how the sampler
mixed the labels as much as the posterior's shape.

The remedy of the mixture literature (Stephens 2000; Jasra, Holmes & Stephens 2005) is to
relabel every draw to a pivot. Here each draw's units are matched, layer by layer from the
input, to the pivot's units by the Hungarian algorithm
(:func:`scipy.optimize.linear_sum_assignment`) on *scale-free unit signatures*: the direction
of a unit's incoming weights and bias,

.. math::

    s_j = \frac{(W_l[j, :],\, b_l[j])}{\lVert (W_l[j, :],\, b_l[j]) \rVert},

in the (already aligned) coordinates of the layer below, and for the last hidden layer also
the direction of its outgoing weights :math:`W_{L}[:, j]` (the outputs are never permuted).
A ReLU or leaky-ReLU unit rescaled by :math:`c > 0` (incoming times :math:`c`, outgoing
divided by it) keeps its signature, so the match ignores the rescaling orbits, which the
reference keeps (mean field in raw coordinates still pays for them). The cost of matching
unit :math:`j` to pivot unit :math:`k` is :math:`\lVert s_j - s^{\mathrm{pivot}}_k \rVert^2`.
Sign flips of odd activations (tanh) are not quotiented.

Aligning is not free of bias: it picks, for every draw, the labelling closest to the pivot,
which shrinks the spread of exchangeable units and correlates them. :func:`kl_by_labelling`
therefore reports, beside the raw, randomly relabelled and aligned KLs of the same draws,
the *alignment null*: the KL that the same alignment adds to draws of a target with the same
shapes whose KL is known to be 0 (independent Gaussian weights at the draws' own marginal
scales, with ``n`` equal to the draws' count), so that the aligned KL is read against it.

NumPy and SciPy only; nothing here knows about Pyro or torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from scipy.optimize import linear_sum_assignment

from reports.gaussian import fit_gaussian, kl_diag_full
from reports.kl_reference import debiased_kl_draws
from reports.w2_reference import debiased_w2_draws

__all__ = [
    "NULL_REPS",
    "AlignedKL",
    "Alignment",
    "align_to_pivot",
    "aligned_reference",
    "hidden_layers",
    "kl_by_labelling",
    "label_switches",
    "permute_units",
    "pivot_from_draws",
    "relabel_randomly",
    "unit_signatures",
]

_WEIGHT = re.compile(r"^layer(\d+)\.weight$")

Sites = Mapping[str, np.ndarray]


class Alignment(NamedTuple):
    """Draws relabelled to a pivot.

    Attributes
    ----------
    sites : dict of str to np.ndarray
        The draws, each hidden layer's units in the pivot's order; sites that are not
        ``layer{l}.weight`` / ``layer{l}.bias`` (e.g. ``noise``) are passed through.
    perms : dict of int to np.ndarray
        For hidden layer ``l``, shape ``(*sample_shape, H_l)``: ``perms[l][..., k]`` is the
        draw's unit that was put in place ``k``. The identity where no relabelling was needed.
    """

    sites: dict[str, np.ndarray]
    perms: dict[int, np.ndarray]


#: Further sets of null draws that the zoo's study and
#: :func:`reports.posterior.aligned_price_of_mean_field` draw for the null's own error
#: (``AlignedKL.null_sd``): four sets in all.
NULL_REPS = 3


class AlignedKL(NamedTuple):
    """KL(q_diag || q_full) of one set of draws under three labellings, and the null.

    Attributes
    ----------
    raw : float
        The draws as sampled.
    relabelled : float
        Every draw's units independently and uniformly relabelled: the KL a sampler that
        mixed the labels perfectly would give.
    aligned : float
        Every draw aligned to the pivot (:func:`align_to_pivot`).
    null : float
        What the same alignment adds to the KL of independent Gaussian draws of the same
        shapes, marginal scales and number (true KL 0): the aligned KL of those draws minus
        their raw KL, which removes the common sampling bias.
    n : int
        Number of draws.
    d : int
        Number of parameters.
    null_sd : float or None
        Standard deviation of ``null`` over its replicates (``null_reps`` more sets of
        independent draws beside the one ``null`` reads): the null's own Monte Carlo error,
        which a rerun on new draws would show. None without replicates.
    """

    raw: float
    relabelled: float
    aligned: float
    null: float
    n: int
    d: int
    null_sd: float | None = None


def hidden_layers(sites: Sites) -> list[int]:
    """Indices ``l`` of the hidden layers of an MLP's sites: every ``layer{l}.weight`` but the last.

    Raises
    ------
    ValueError
        If the layers are not numbered ``0..L`` without gaps.
    """
    found = sorted(int(m[1]) for name in sites if (m := _WEIGHT.match(name)))
    if found != list(range(len(found))):
        raise ValueError(f"expected sites layer0.weight .. layerL.weight, found layers {found}")
    return found[:-1]


def permute_units(sites: Sites, layer: int, perm: np.ndarray, *, sample_ndim: int = 2) -> dict:
    """Relabel hidden layer ``layer``'s units of every draw; the network's function is unchanged.

    Parameters
    ----------
    sites : mapping of str to np.ndarray
        Site name -> draws of shape ``(*sample_shape, *site_shape)``.
    layer : int
        A hidden layer.
    perm : np.ndarray
        Shape ``(*sample_shape, H)`` (or ``(H,)`` for every draw alike): the new unit ``k``
        is the old unit ``perm[..., k]``.
    sample_ndim : int, default 2
        Number of leading sample axes.

    Returns
    -------
    dict of str to np.ndarray
        New arrays for the permuted sites; the others are the input arrays.
    """
    out = dict(sites)
    w_in, b_in, w_out = f"layer{layer}.weight", f"layer{layer}.bias", f"layer{layer + 1}.weight"
    sample_shape = np.shape(sites[w_in])[:sample_ndim]
    p = np.broadcast_to(np.asarray(perm, dtype=np.intp), (*sample_shape, np.shape(perm)[-1]))
    out[w_in] = np.take_along_axis(np.asarray(sites[w_in]), p[..., :, None], axis=-2)
    if b_in in sites:
        out[b_in] = np.take_along_axis(np.asarray(sites[b_in]), p, axis=-1)
    out[w_out] = np.take_along_axis(np.asarray(sites[w_out]), p[..., None, :], axis=-1)
    return out


def _unit(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(norm > 0, norm, 1.0)


def unit_signatures(
    sites: Sites, layer: int, *, last_hidden: bool, strength: float = 0.0
) -> np.ndarray:
    r"""Scale-free signatures of hidden layer ``layer``'s units.

    Parameters
    ----------
    sites : mapping of str to np.ndarray
        Draws (any leading sample shape) or one network (no sample axes).
    layer : int
        A hidden layer.
    last_hidden : bool
        Whether ``layer + 1`` is the output layer: its outgoing directions are added.
    strength : float, default 0
        With a positive weight, one more coordinate: ``strength`` times the log of the
        unit's strength :math:`\lVert (W_l[j, :], b_l[j]) \rVert\, \lVert W_{l+1}[:, j]
        \rVert`, which the rescaling orbit leaves unchanged. It tells a dead unit (outgoing
        weights near 0) from live ones where its direction cannot: a dead unit whose
        incoming weights sit at a centred prior has no mean direction, and matching by
        direction alone assigns it by chance (``docs/notes/known_answers.md``).

    Returns
    -------
    np.ndarray
        Shape ``(*sample_shape, H, F)``: the unit-norm direction of the incoming weights
        and bias, followed (for the last hidden layer) by the unit-norm outgoing direction
        (and, with ``strength``, the weighted log strength). A unit with all-zero weights
        gets a zero direction.
    """
    w = np.asarray(sites[f"layer{layer}.weight"], dtype=float)
    parts = [w]
    bias = sites.get(f"layer{layer}.bias")
    if bias is not None:
        parts.append(np.asarray(bias, dtype=float)[..., None])
    incoming = np.concatenate(parts, axis=-1)
    sig = [_unit(incoming)]
    w_out = np.asarray(sites[f"layer{layer + 1}.weight"], dtype=float)
    if last_hidden:
        sig.append(_unit(np.swapaxes(w_out, -1, -2)))
    if strength > 0:
        size = np.linalg.norm(incoming, axis=-1) * np.linalg.norm(w_out, axis=-2)
        sig.append(strength * np.log(np.maximum(size, 1e-12))[..., None])
    return np.concatenate(sig, axis=-1)


def _match(sig: np.ndarray, pivot_sig: np.ndarray) -> np.ndarray:
    """Hungarian assignment of every draw's units to the pivot's: ``(S, H, F)`` -> ``(S, H)``."""
    cost = (
        np.sum(sig**2, axis=-1)[:, None, :]
        + np.sum(pivot_sig**2, axis=-1)[None, :, None]
        - 2.0 * np.einsum("kf,sjf->skj", pivot_sig, sig)
    )
    perms = np.empty(sig.shape[:2], dtype=np.intp)
    for s in range(sig.shape[0]):
        _, cols = linear_sum_assignment(cost[s])
        perms[s] = cols
    return perms


def align_to_pivot(
    sites: Sites, pivot: Sites, *, sample_ndim: int = 2, strength: float = 0.0
) -> Alignment:
    """Relabel every draw's hidden units to the pivot's, layer by layer from the input.

    Parameters
    ----------
    sites : mapping of str to np.ndarray
        Draws of an MLP's sites, shape ``(*sample_shape, *site_shape)``.
    pivot : mapping of str to np.ndarray
        One network of the same sites without sample axes (e.g. the MF-VI mean).
    sample_ndim : int, default 2
        Number of leading sample axes of ``sites``.
    strength : float, default 0
        Weight of the units' log strength in the signatures (:func:`unit_signatures`).

    Returns
    -------
    Alignment
        The aligned draws and each layer's permutations.
    """
    layers = hidden_layers(sites)
    out = {k: np.asarray(v) for k, v in sites.items()}
    perms: dict[int, np.ndarray] = {}
    for layer in layers:
        last = layer == layers[-1]
        sig = unit_signatures(out, layer, last_hidden=last, strength=strength)
        sample_shape = sig.shape[:sample_ndim]
        flat = sig.reshape(-1, *sig.shape[sample_ndim:])
        piv = unit_signatures(pivot, layer, last_hidden=last, strength=strength)
        perm = _match(flat, piv).reshape(*sample_shape, -1)
        out = permute_units(out, layer, perm, sample_ndim=sample_ndim)
        perms[layer] = perm
    return Alignment(out, perms)


def pivot_from_draws(
    sites: Sites, *, iterations: int = 5, sample_ndim: int = 2, strength: float = 0.0
) -> dict:
    """A pivot for draws whose own start is unknown: Stephens' (2000) relabelling iteration.

    Starts from the first draw of the first chain, then alternates aligning every draw to
    the pivot and taking the aligned draws' mean as the next pivot, until no draw's
    labelling changes (at most ``iterations`` times); ``strength`` as in
    :func:`align_to_pivot`.

    Returns
    -------
    dict of str to np.ndarray
        One network (no sample axes).
    """
    axes = tuple(range(sample_ndim))
    pivot = {k: np.asarray(v)[(0,) * sample_ndim] for k, v in sites.items()}
    perms: dict[int, np.ndarray] | None = None
    for _ in range(iterations):
        out = align_to_pivot(sites, pivot, sample_ndim=sample_ndim, strength=strength)
        pivot = {k: v.mean(axis=axes) for k, v in out.sites.items()}
        if perms is not None and all(np.array_equal(perms[k], out.perms[k]) for k in perms):
            break
        perms = out.perms
    return pivot


def relabel_randomly(
    sites: Sites, rng: np.random.Generator, *, sample_ndim: int = 2
) -> dict[str, np.ndarray]:
    """Give every draw's hidden units of every layer an independent uniform relabelling."""
    out = {k: np.asarray(v) for k, v in sites.items()}
    for layer in hidden_layers(sites):
        w = out[f"layer{layer}.weight"]
        shape = w.shape[:sample_ndim]
        h = w.shape[sample_ndim]
        perm = rng.permuted(np.broadcast_to(np.arange(h), (*shape, h)), axis=-1)
        out = permute_units(out, layer, perm, sample_ndim=sample_ndim)
    return out


def label_switches(perms: np.ndarray) -> np.ndarray:
    """Per chain, how many consecutive draws changed labelling.

    Parameters
    ----------
    perms : np.ndarray
        Shape ``(chain, draw, H)``, one layer's permutations from :func:`align_to_pivot`.

    Returns
    -------
    np.ndarray
        Shape ``(chain,)``: the number of draws whose permutation differs from the draw
        before it in the same chain.
    """
    p = np.asarray(perms)
    return np.any(p[:, 1:] != p[:, :-1], axis=-1).sum(axis=1)


def _flat(sites: Sites, sample_ndim: int) -> np.ndarray:
    names = sorted(sites)
    sample = np.shape(sites[names[0]])[:sample_ndim]
    n = int(np.prod(sample))
    return np.concatenate([np.asarray(sites[k], float).reshape(n, -1) for k in names], axis=1)


def _kl(sites: Sites, sample_ndim: int, jitter: float) -> float:
    return float(kl_diag_full(fit_gaussian(_flat(sites, sample_ndim), jitter=jitter).cov))


def _null_of(
    marginals: dict[str, tuple[np.ndarray, np.ndarray, tuple[int, ...]]],
    pivot: Sites,
    rng: np.random.Generator,
    sample_ndim: int,
    jitter: float,
    strength: float,
) -> float:
    """What aligning adds to the KL of independent Gaussian draws with the aligned draws'
    marginal means and scales (``marginals``: site -> mean, sd, shape of the draws; so the
    alignment meets units as distinct as the cell's own): their aligned KL less their raw
    KL."""
    null = {k: m + sd * rng.standard_normal(shape) for k, (m, sd, shape) in marginals.items()}
    null_aligned = align_to_pivot(null, pivot, sample_ndim=sample_ndim, strength=strength).sites
    return _kl(null_aligned, sample_ndim, jitter) - _kl(null, sample_ndim, jitter)


def kl_by_labelling(
    sites: Sites,
    pivot: Sites,
    *,
    seed: int = 0,
    sample_ndim: int = 2,
    jitter: float = 1e-6,
    strength: float = 0.0,
    null_reps: int = 0,
) -> AlignedKL:
    """KL(q_diag || q_full) of the draws raw, randomly relabelled and aligned, with the null.

    Parameters
    ----------
    sites : mapping of str to np.ndarray
        Draws of an MLP's sites with ``sample_ndim`` leading sample axes.
    pivot : mapping of str to np.ndarray
        The network to align to (no sample axes).
    seed : int, default 0
        Seeds the random relabelling and the null's Gaussian draws.
    sample_ndim : int, default 2
    jitter : float, default 1e-6
        Added to the fitted covariances' diagonal (:func:`reports.gaussian.fit_gaussian`).
    strength : float, default 0
        Weight of the units' log strength in the alignment (:func:`unit_signatures`).
    null_reps : int, default 0
        Further sets of null draws (their own stream, so ``null`` stays the first set's),
        for ``null_sd``.

    Returns
    -------
    AlignedKL
    """
    rng = np.random.default_rng(seed)
    raw = {k: np.asarray(v, dtype=float) for k, v in sites.items()}
    flat = _flat(raw, sample_ndim)
    aligned = align_to_pivot(raw, pivot, sample_ndim=sample_ndim, strength=strength).sites
    axes = tuple(range(sample_ndim))
    marginals = {k: (v.mean(axis=axes), v.std(axis=axes), v.shape) for k, v in aligned.items()}
    args = (sample_ndim, jitter, strength)
    null = _null_of(marginals, pivot, rng, *args)
    relabelled = _kl(relabel_randomly(raw, rng, sample_ndim=sample_ndim), sample_ndim, jitter)
    null_sd = None
    if null_reps > 0:
        more = np.random.default_rng([seed, 1])
        nulls = [null, *(_null_of(marginals, pivot, more, *args) for _ in range(null_reps))]
        null_sd = float(np.std(nulls, ddof=1))
    return AlignedKL(
        raw=_kl(raw, sample_ndim, jitter),
        relabelled=relabelled,
        aligned=_kl(aligned, sample_ndim, jitter),
        null=null,
        n=flat.shape[0],
        d=flat.shape[1],
        null_sd=null_sd,
    )


def aligned_reference(x: np.ndarray, kl: AlignedKL, seed: int, jitter: float) -> dict[str, Any]:
    """The KL's and W2's references on the aligned draws ``x`` ``(chain, draw, D)`` themselves.

    ``kl_aligned_ess_n`` and ``kl_aligned_bias``: the KL's effective n and its exact sampling
    bias there (:func:`reports.kl_reference.debiased_kl_draws`, AR(1)-calibrated, seeded by
    ``seed``); ``kl_aligned_debiased = kl_aligned - kl_aligned_bias - kl_alignment_null``
    with ``kl_aligned_debiased_se``: the chain-group error and, where ``kl`` has replicates
    of its null, the null's own (``kl_alignment_null_sd``), in quadrature; ``w2_aligned``,
    the closed-form W2(q_diag, q_full) of the aligned draws, and ``w2sq_aligned_debiased``
    (``_se``), its square less the chain-group jackknife's bias
    (:func:`reports.w2_reference.debiased_w2_draws`). The KL's are None where the bias has
    no closed form (n not above D).
    """
    deb = debiased_kl_draws(x, jitter=jitter, calibrate=True, seed=seed)
    w2 = debiased_w2_draws(x, jitter=jitter)
    se = deb.se if deb.se is None or kl.null_sd is None else float(np.hypot(deb.se, kl.null_sd))
    return {
        "kl_aligned_ess_n": deb.n,
        "kl_aligned_bias": deb.bias,
        "kl_aligned_debiased": None if deb.bias is None else kl.aligned - deb.bias - kl.null,
        "kl_aligned_debiased_se": None if deb.bias is None else se,
        "kl_alignment_null_sd": kl.null_sd,
        "w2_aligned": float(np.sqrt(max(w2.w2sq, 0.0))),
        "w2sq_aligned_debiased": w2.w2sq_debiased,
        "w2sq_aligned_debiased_se": w2.se,
    }
