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
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "DEFAULT_RULE",
    "PAPER_TABLE1",
    "PruningRule",
    "UnitStats",
    "gaussian_kl",
    "pruned_fraction",
    "pruned_units",
    "unit_stats",
]

#: Table 1 of Trippe & Turner (2018): held-out mean log-likelihood (nats) +- 1 SEM over the
#: 20 UCI splits, quoted from the paper (a reference column, not computed here). Their
#: methods ran with hyper-parameters tuned by Bayesian optimization on one split.
PAPER_TABLE1: dict[str, dict[str, tuple[float, float]]] = {
    "boston": {"HMC": (-2.27, 0.03), "SGLD": (-2.40, 0.05), "ES": (-2.53, 0.08),
               "FC": (-2.89, 0.03), "MAP": (-2.68, 0.08), "MF": (-2.62, 0.06),
               "GD": (-2.54, 0.07)},
    "concrete": {"HMC": (-2.72, 0.02), "SGLD": (-3.08, 0.03), "ES": (-3.55, 0.11),
                 "FC": (-3.24, 0.01), "MAP": (-4.29, 0.20), "MF": (-3.00, 0.03),
                 "GD": (-3.07, 0.03)},
}  # fmt: skip


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
    at_prior = [(s.in_kl <= rule.in_kl_max) & (s.in_std_ratio >= rule.in_std_ratio_min)
                for s in layers]  # fmt: skip
    out = {"pruned_frac": float(np.concatenate(masks).mean()) if masks else float("nan")}
    if len(masks) > 1:
        out.update({f"pruned_frac.layer{k}": float(m.mean()) for k, m in enumerate(masks)})
    out["n_pruned"] = float(sum(int(m.sum()) for m in masks))
    out["in_at_prior_frac"] = float(np.concatenate(at_prior).mean()) if masks else float("nan")
    return out
