r"""Variational over-pruning of hidden units (Trippe & Turner 2018): statistics and the rule.

NumPy only. For hidden unit :math:`j` of layer :math:`l` with Gaussian posterior marginals
:math:`N(m, s^2)` on its weights and a :math:`N(m_0, s_0^2)` prior:

- outgoing weights (column :math:`j` of the next layer's weight matrix): the signal-to-noise
  ratio :math:`\max_k |m_{kj}| / s_{kj}` (small: confidently near zero);
- incoming weights and bias (row :math:`j` of this layer's weights, and bias :math:`j`): the
  mean KL to the prior,

  .. math::

      \mathrm{KL}\left(N(m, s^2) \,\|\, N(m_0, s_0^2)\right)
      = \log\frac{s_0}{s} + \frac{s^2 + (m - m_0)^2}{2 s_0^2} - \frac12,

  and the mean ratio :math:`s / s_0` (1: at the prior);
- the variance of its activation over the training inputs (mean over posterior draws).

The rule (:func:`pruned_units`): a unit is pruned when every outgoing SNR is below
``out_snr_max`` (default 2: zero lies inside the central ~95% interval of each outgoing
weight) and the incoming weights sit at the prior (mean KL at most ``in_kl_max`` and
mean std ratio at least ``in_std_ratio_min``). Point estimates (std 0) have infinite SNR
and are never pruned by this rule; the report leaves them out.

The rule-free functional measure (:func:`contribution_variance`, :func:`variance_shares`,
:func:`effective_units`) needs no posterior std, so it applies to every method (point
estimates, the fixed-variance GD, samplers). Unit :math:`j` of hidden layer :math:`l` with
activation :math:`a_j(x)` contributes :math:`c_j(x) = a_j(x)\, W^{(l+1)}_{:,j}` to the
pre-activations of the next layer (the network's output for the last hidden layer). Its
variance :math:`v_j = \sum_k \operatorname{Var}_{s,n}\, c_{jk}` over the test inputs
:math:`n` and the posterior draws :math:`s` (one draw for a point estimate), normalised
over the layer, is the unit's share of output variance :math:`s_j = v_j / \sum_i v_i`.
By the law of total variance it is the mean over draws of the variance over inputs (the
function the unit adds) plus the variance over draws of its mean over inputs (a random
offset); both parts are kept. The effective number of units of the layer is the
participation ratio :math:`(\sum_j v_j)^2 / \sum_j v_j^2 = 1 / \sum_j s_j^2`.

The rule and the measure answer the same question by different routes: a unit the rule
calls pruned should carry (almost) none of the output variance, and the effective number
should sit near the number of units the rule leaves active (below it when the active units
carry unequal shares). Their agreement is the check on the rule's thresholds.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "DEFAULT_RULE",
    "PAPER_TABLE1",
    "PruningRule",
    "UnitStats",
    "contribution_variance",
    "effective_units",
    "effective_units_per_draw",
    "functional_metrics",
    "gaussian_kl",
    "pruned_fraction",
    "pruned_units",
    "unit_stats",
    "variance_shares",
]

#: Table 1 of Trippe & Turner (2018): held-out mean log-likelihood (nats) +- 1 SEM over the
#: 20 UCI splits, quoted from the paper (a reference column, not computed here). Their
#: methods ran with hyper-parameters tuned by Bayesian optimization on one split.
PAPER_TABLE1: dict[str, dict[str, tuple[float, float]]] = {
    "boston": {
        "HMC": (-2.27, 0.03),
        "SGLD": (-2.40, 0.05),
        "ES": (-2.53, 0.08),
        "FC": (-2.89, 0.03),
        "MAP": (-2.68, 0.08),
        "MF": (-2.62, 0.06),
        "GD": (-2.54, 0.07),
    },
    "concrete": {
        "HMC": (-2.72, 0.02),
        "SGLD": (-3.08, 0.03),
        "ES": (-3.55, 0.11),
        "FC": (-3.24, 0.01),
        "MAP": (-4.29, 0.20),
        "MF": (-3.00, 0.03),
        "GD": (-3.07, 0.03),
    },
}


class PruningRule(NamedTuple):
    """Thresholds of the pruning rule (defaults: the paper's description, 20% std rule)."""

    out_snr_max: float = 2.0
    in_kl_max: float = 0.1
    in_std_ratio_min: float = 0.8


#: The default rule.
DEFAULT_RULE = PruningRule()


class UnitStats(NamedTuple):
    """Per-unit statistics of one hidden layer (arrays of length ``n_units``).

    Attributes
    ----------
    out_snr : max over outgoing weights of |mean| / std
    out_abs_mean : max over outgoing weights of |mean|
    out_std : mean std of the outgoing weights
    in_kl : mean KL (nats per weight) of the incoming weights and bias to the prior
    in_std_ratio : mean posterior std / prior std of the incoming weights and bias
    act_var : variance of the activation over the training inputs (mean over draws)
    """

    out_snr: np.ndarray
    out_abs_mean: np.ndarray
    out_std: np.ndarray
    in_kl: np.ndarray
    in_std_ratio: np.ndarray
    act_var: np.ndarray


def gaussian_kl(m: np.ndarray, s: np.ndarray, m0: float, s0: float) -> np.ndarray:
    """Elementwise KL(N(m, s^2) || N(m0, s0^2)); ``inf`` where ``s == 0``."""
    m, s = np.asarray(m, np.float64), np.asarray(s, np.float64)
    with np.errstate(divide="ignore"):
        return np.log(s0) - np.log(s) + (s**2 + (m - m0) ** 2) / (2 * s0**2) - 0.5


def unit_stats(
    w_in: tuple[np.ndarray, np.ndarray],
    b_in: tuple[np.ndarray, np.ndarray],
    w_out: tuple[np.ndarray, np.ndarray],
    prior_in: tuple[float, float],
    prior_bias: tuple[float, float] | None = None,
    act_var: np.ndarray | None = None,
) -> UnitStats:
    """Statistics of the units of one hidden layer from posterior means and stds.

    Parameters
    ----------
    w_in : (mean, std), each (n_units, fan_in)
        Incoming weights (rows of this layer's weight matrix).
    b_in : (mean, std), each (n_units,)
        Biases of the units.
    w_out : (mean, std), each (n_next, n_units)
        The next layer's weight matrix: column j holds unit j's outgoing weights.
    prior_in, prior_bias : (loc, scale)
        Priors of the incoming weights and of the biases (default: ``prior_in``).
    act_var : (n_units,), optional
        Activation variances over the training inputs; NaN if not given.
    """
    prior_bias = prior_bias or prior_in
    wm, ws = (np.asarray(a, np.float64) for a in w_in)
    bm, bs = (np.asarray(a, np.float64) for a in b_in)
    om, os_ = (np.asarray(a, np.float64) for a in w_out)
    if wm.shape != ws.shape or bm.shape != (wm.shape[0],) or om.shape[1] != wm.shape[0]:
        raise ValueError(
            f"shapes do not fit one layer: w_in {wm.shape}, b_in {bm.shape}, w_out {om.shape}"
        )
    kl = np.concatenate(
        [gaussian_kl(wm, ws, *prior_in), gaussian_kl(bm, bs, *prior_bias)[:, None]], axis=1
    )
    ratio = np.concatenate([ws / prior_in[1], (bs / prior_bias[1])[:, None]], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        snr = np.where(os_ > 0, np.abs(om) / np.where(os_ > 0, os_, 1.0), np.inf)
    n = wm.shape[0]
    return UnitStats(
        out_snr=snr.max(0),
        out_abs_mean=np.abs(om).max(0),
        out_std=os_.mean(0),
        in_kl=kl.mean(1),
        in_std_ratio=ratio.mean(1),
        act_var=np.full(n, np.nan) if act_var is None else np.asarray(act_var, np.float64),
    )


def pruned_units(stats: UnitStats, rule: PruningRule = DEFAULT_RULE) -> np.ndarray:
    """Boolean mask of the pruned units of a layer under ``rule`` (see the module docstring)."""
    return (
        (stats.out_snr < rule.out_snr_max)
        & (stats.in_kl <= rule.in_kl_max)
        & (stats.in_std_ratio >= rule.in_std_ratio_min)
    )


def pruned_fraction(layers: list[UnitStats], rule: PruningRule = DEFAULT_RULE) -> dict[str, float]:
    """Pruned fraction of all hidden units (``pruned_frac``) and per layer (``.layerK``).

    Also ``n_pruned`` and ``in_at_prior_frac``: the fraction of units whose incoming weights
    sit at the prior, whatever their outgoing weights (the rule's second half alone).
    """
    masks = [pruned_units(s, rule) for s in layers]
    at_prior = [
        (s.in_kl <= rule.in_kl_max) & (s.in_std_ratio >= rule.in_std_ratio_min) for s in layers
    ]
    out = {"pruned_frac": float(np.concatenate(masks).mean()) if masks else float("nan")}
    if len(masks) > 1:
        out.update({f"pruned_frac.layer{k}": float(m.mean()) for k, m in enumerate(masks)})
    out["n_pruned"] = float(sum(int(m.sum()) for m in masks))
    out["in_at_prior_frac"] = float(np.concatenate(at_prior).mean()) if masks else float("nan")
    return out


def contribution_variance(act: np.ndarray, w_next: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Variance of each unit's contribution to the next layer, within and between draws.

    Parameters
    ----------
    act : (S, N, n_units)
        Activations of one hidden layer for S posterior draws (1 for a point estimate) at
        N inputs.
    w_next : (S, n_next, n_units)
        The next layer's weights in the same draws: column j holds unit j's outgoing weights.

    Returns
    -------
    within, between : (n_units,) each
        Summed over the next layer's units k, with :math:`c_{snjk} = a_{snj} W_{skj}`:
        ``within`` the mean over draws of the variance over inputs of c and ``between`` the
        variance over draws of its mean over inputs (both with divisor N or S). Their sum is
        the variance of c over all (draw, input) pairs (law of total variance); computed
        this way, without the cancellation of E[c^2] - E[c]^2.
    """
    a = np.asarray(act, np.float64)
    w = np.asarray(w_next, np.float64)
    if a.ndim != 3 or w.ndim != 3 or a.shape[0] != w.shape[0] or a.shape[2] != w.shape[2]:
        raise ValueError(
            f"act (S, N, n) and w_next (S, n_next, n) do not fit: {a.shape}, {w.shape}"
        )
    w2 = (w**2).sum(1)  # (S, n): sum over k of W_skj^2
    within = (a.var(1) * w2).mean(0)
    between = (a.mean(1)[:, None, :] * w).var(0).sum(0)  # (n_next, n) -> (n,)
    return within, between


def variance_shares(v: np.ndarray) -> np.ndarray:
    """Each unit's share ``v / v.sum()`` of its layer's output variance; NaN if all are 0."""
    v = np.asarray(v, np.float64)
    total = v.sum()
    if not np.isfinite(total) or total <= 0:
        return np.full(v.shape, np.nan)
    return v / total


def effective_units(shares: np.ndarray) -> float:
    r"""Effective number of units: the participation ratio :math:`1 / \sum_j s_j^2`.

    For shares :math:`s_j \ge 0` summing to 1 this is :math:`(\sum v)^2 / \sum v^2` of the
    unnormalised variances: ``n`` when all n units carry equal shares, 1 when one unit carries
    everything, and in general the number of equal units with the same sum of squared shares
    (the inverse Simpson index, Hill's diversity of order 2).

    Why this and not :math:`\exp` of the Shannon entropy (order 1, also n and 1 in those
    two cases): pruning leaves many units with tiny but non-zero shares, and the entropy
    counts that tail (:math:`-s \log s` falls slowly as s -> 0) while the participation
    ratio weighs each unit by its share and all but ignores it. With 5 units at 0.19 and 45
    sharing the remaining 0.05, the ratio is 5.5 and the exp-entropy 6.8. It is also closed
    form in the variances, needs no log of a zero share and is scale-free. NaN for a layer
    without output variance (shares all NaN).
    """
    s = np.asarray(shares, np.float64)
    if s.size == 0 or not np.all(np.isfinite(s)):
        return float("nan")
    q = float((s**2).sum())
    return float(s.sum() ** 2 / q) if q > 0 else float("nan")


def effective_units_per_draw(act: np.ndarray, w_next: np.ndarray) -> np.ndarray:
    """:func:`effective_units` of each draw on its own (``(S,)``): one network's function.

    The null of an untrained network is per draw: pooled over draws of the prior, whose units
    are exchangeable, the shares even out and the ratio tends to the layer's width, however
    few units carry each single network's output.
    """
    a = np.asarray(act, np.float64)
    w = np.asarray(w_next, np.float64)
    return np.array(
        [
            effective_units(
                variance_shares(np.sum(contribution_variance(a[i : i + 1], w[i : i + 1]), 0))
            )
            for i in range(a.shape[0])
        ]
    )


def functional_metrics(
    shares: list[np.ndarray], pruned: list[np.ndarray] | None = None
) -> dict[str, float]:
    """The rule-free metrics of a network from the variance shares of its hidden layers.

    Per hidden layer k: ``units_eff.layerK`` (:func:`effective_units`) and
    ``units_eff_frac.layerK`` (divided by the layer's width); for the whole network
    ``units_eff_frac``, the effective units of all layers over all hidden units. Given the
    rule's masks (``pruned``, one per layer), also ``pruned_var_share.layerK``: the share of
    the layer's output variance carried by the units the rule calls pruned (0 if the rule
    is right about them).
    """
    out: dict[str, float] = {}
    total_eff, total_n = 0.0, 0
    for k, s in enumerate(shares):
        eff = effective_units(s)
        out[f"units_eff.layer{k}"] = eff
        out[f"units_eff_frac.layer{k}"] = eff / len(s) if len(s) else float("nan")
        total_eff += eff
        total_n += len(s)
    out["units_eff_frac"] = total_eff / total_n if total_n else float("nan")
    for k, (s, m) in enumerate(zip(shares, pruned or [], strict=False)):
        out[f"pruned_var_share.layer{k}"] = float(np.asarray(s)[np.asarray(m, bool)].sum())
    return out
