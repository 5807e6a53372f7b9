r"""Predictive metrics for classification and regression from per-draw predictions.

Every function here takes plain NumPy arrays: per-draw predictions of a posterior (``S``
draws, ``N`` test points, ``C`` classes) and the observed targets. Nothing here knows about
Pyro, torch or the run store; the runner converts its tensors with ``.numpy()`` first.

The predictive distribution of a posterior sample set is the equally weighted mixture of
the per-draw predictive distributions,

.. math::

    p(y \mid x, \mathcal{D}) \approx \frac{1}{S} \sum_{s=1}^{S} p(y \mid x, \theta_s),

and all log-likelihood metrics are computed from it with a log-sum-exp, never by averaging
log probabilities over draws. :func:`per_draw_metrics` gives the other convention, the
mean over draws of each draw's own metric, which papers that report "mean and SEM across
weight samples" use (Swiatkowski et al. 2020, Tables 2 and 3); by Jensen's inequality its
NLL is never below the mixture's.

Brier score: ours is :math:`\sum_k (p_k - [y = k])^2`, in [0, 2]. TensorFlow Probability's
``tfp.stats.brier_score``, which the k-tied paper uses (its footnote 2), is
:math:`\sum_k p_k^2 - 2 p_y`, that is ours minus 1, in [-1, 1]: subtract 1 from ours before
comparing with the paper's numbers.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm

__all__ = [
    "predictive_log_probs",
    "accuracy",
    "nll",
    "brier",
    "ece",
    "classification_metrics",
    "per_draw_metrics",
    "regression_metrics",
]


def _as_labels(y: np.ndarray, n: int, n_classes: int) -> np.ndarray:
    """Check integer class labels of shape ``(n,)`` in ``[0, n_classes)`` and return them."""
    y = np.asarray(y)
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},) to match the predictions, got {y.shape}")
    if y.dtype.kind not in "iub":
        if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        else:
            raise ValueError(f"y must hold integer class labels, got dtype {y.dtype}")
    y = y.astype(np.int64, copy=False)
    if n and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError(
            f"y must hold class labels in [0, {n_classes}), got values in [{y.min()}, {y.max()}]"
        )
    return y


def _as_probs(probs: np.ndarray) -> np.ndarray:
    """Check a ``(N, C)`` array of class probabilities and return it as float."""
    probs = np.asarray(probs, dtype=float)
    if probs.ndim != 2:
        raise ValueError(f"probs must have shape (N, C), got {probs.shape}")
    return probs


def predictive_log_probs(log_probs: np.ndarray) -> np.ndarray:
    r"""Log class probabilities of the predictive mixture over posterior draws.

    Parameters
    ----------
    log_probs : np.ndarray
        Per-draw log class probabilities, shape ``(S, N, C)``: draw ``s``, test point ``n``,
        class ``c``. Each ``log_probs[s, n]`` is assumed normalized.

    Returns
    -------
    np.ndarray
        Shape ``(N, C)``, the log of the mixture probabilities

        .. math::

            \log \bar p_{nc} = \operatorname{logsumexp}_s \log p_{snc} - \log S.

    Raises
    ------
    ValueError
        If ``log_probs`` is not 3-dimensional or has no draws.
    """
    log_probs = np.asarray(log_probs, dtype=float)
    if log_probs.ndim != 3:
        raise ValueError(f"log_probs must have shape (S, N, C), got {log_probs.shape}")
    n_draws = log_probs.shape[0]
    if n_draws == 0:
        raise ValueError("log_probs has no draws (S == 0)")
    return logsumexp(log_probs, axis=0) - np.log(n_draws)


def accuracy(probs: np.ndarray, y: np.ndarray) -> float:
    r"""Fraction of points whose most probable class is the true class.

    Parameters
    ----------
    probs : np.ndarray
        Predictive class probabilities, shape ``(N, C)``.
    y : np.ndarray
        Integer labels, shape ``(N,)``.

    Returns
    -------
    float
        :math:`\frac{1}{N} \sum_n [\arg\max_c p_{nc} = y_n]`. Ties go to the lowest class
        index (``np.argmax``).
    """
    probs = _as_probs(probs)
    y = _as_labels(y, probs.shape[0], probs.shape[1])
    return float(np.mean(np.argmax(probs, axis=1) == y))


def nll(log_pred: np.ndarray, y: np.ndarray) -> float:
    r"""Mean negative log predictive probability of the true class.

    Parameters
    ----------
    log_pred : np.ndarray
        Log predictive class probabilities, shape ``(N, C)``, e.g. from
        :func:`predictive_log_probs`.
    y : np.ndarray
        Integer labels, shape ``(N,)``.

    Returns
    -------
    float
        .. math::

            \mathrm{NLL} = -\frac{1}{N} \sum_{n=1}^{N} \log \bar p_{n, y_n}.
    """
    log_pred = _as_probs(log_pred)
    y = _as_labels(y, log_pred.shape[0], log_pred.shape[1])
    return float(-np.mean(log_pred[np.arange(y.shape[0]), y]))


def brier(probs: np.ndarray, y: np.ndarray) -> float:
    r"""Multi-class Brier score.

    Parameters
    ----------
    probs : np.ndarray
        Predictive class probabilities, shape ``(N, C)``.
    y : np.ndarray
        Integer labels, shape ``(N,)``.

    Returns
    -------
    float
        .. math::

            \mathrm{Brier} = \frac{1}{N} \sum_{n=1}^{N} \sum_{c=1}^{C}
            \left(p_{nc} - [y_n = c]\right)^2,

        0 for confident correct predictions, :math:`1 - 1/C` for uniform ones, 2 at worst.
        TensorFlow Probability's ``tfp.stats.brier_score`` (the k-tied paper's) is this
        minus 1.
    """
    probs = _as_probs(probs)
    y = _as_labels(y, probs.shape[0], probs.shape[1])
    onehot = np.zeros_like(probs)
    onehot[np.arange(y.shape[0]), y] = 1.0
    return float(np.mean(np.sum((probs - onehot) ** 2, axis=1)))


def ece(probs: np.ndarray, y: np.ndarray, n_bins: int = 15) -> float:
    r"""Expected calibration error with equal-width confidence bins.

    The confidence of point ``n`` is :math:`\mathrm{conf}_n = \max_c p_{nc}` and its
    prediction :math:`\hat y_n = \arg\max_c p_{nc}`. The unit interval is cut into
    ``n_bins`` equal-width bins :math:`B_b = (\tfrac{b-1}{K}, \tfrac{b}{K}]`,
    :math:`b = 1, \dots, K`, open on the left and closed on the right, except that the first
    bin also contains 0. Then

    .. math::

        \mathrm{ECE} = \sum_{b=1}^{K} \frac{|B_b|}{N}
        \left| \mathrm{acc}(B_b) - \mathrm{conf}(B_b) \right|,

    with :math:`\mathrm{acc}(B_b)` the fraction of correct predictions and
    :math:`\mathrm{conf}(B_b)` the mean confidence in bin :math:`b`; empty bins contribute 0.

    Parameters
    ----------
    probs : np.ndarray
        Predictive class probabilities, shape ``(N, C)``.
    y : np.ndarray
        Integer labels, shape ``(N,)``.
    n_bins : int, default 15
        Number of bins :math:`K`.

    Returns
    -------
    float
        The ECE in ``[0, 1]``.
    """
    probs = _as_probs(probs)
    y = _as_labels(y, probs.shape[0], probs.shape[1])
    if int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    n_bins = int(n_bins)
    n = probs.shape[0]
    if n == 0:
        raise ValueError("ece needs at least one point, got N == 0")
    conf = np.max(probs, axis=1)
    correct = (np.argmax(probs, axis=1) == y).astype(float)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # side="left" puts a value equal to an edge in the bin that edge closes: (lo, hi].
    idx = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, n_bins - 1)
    sum_conf = np.bincount(idx, weights=conf, minlength=n_bins)
    sum_acc = np.bincount(idx, weights=correct, minlength=n_bins)
    # sum_b |B_b|/N |acc_b - conf_b| = sum_b |sum_acc_b - sum_conf_b| / N
    return float(np.sum(np.abs(sum_acc - sum_conf)) / n)


def classification_metrics(
    log_probs: np.ndarray, y: np.ndarray, n_bins: int = 15
) -> dict[str, float]:
    """Accuracy, NLL, Brier score and ECE of the predictive mixture.

    Parameters
    ----------
    log_probs : np.ndarray
        Per-draw log class probabilities, shape ``(S, N, C)``.
    y : np.ndarray
        Integer labels, shape ``(N,)``.
    n_bins : int, default 15
        Number of ECE bins.

    Returns
    -------
    dict[str, float]
        Keys ``accuracy``, ``nll``, ``brier``, ``ece``, all computed from the mixture
        :func:`predictive_log_probs` (not averaged over draws).
    """
    log_pred = predictive_log_probs(log_probs)
    probs = np.exp(log_pred)
    return {
        "accuracy": accuracy(probs, y),
        "nll": nll(log_pred, y),
        "brier": brier(probs, y),
        "ece": ece(probs, y, n_bins=n_bins),
    }


def per_draw_metrics(log_probs: np.ndarray, y: np.ndarray) -> dict[str, float]:
    r"""NLL and accuracy of each draw on its own, averaged over draws, with standard errors.

    .. math::

        \mathrm{NLL}_\text{per draw} = \frac1S \sum_s \Bigl(-\frac1N \sum_n
        \log p_{s n y_n}\Bigr) \;\ge\; -\frac1N \sum_n \log \frac1S \sum_s p_{s n y_n}
        = \mathrm{NLL}_\text{mixture}

    (Jensen's inequality, per point): the per-draw NLL scores each weight sample as a
    network of its own, the mixture NLL (:func:`nll` of :func:`predictive_log_probs`)
    scores the Bayesian model average. "Mean and SEM across 100 weight samples"
    (Swiatkowski et al. 2020, Tables 2 and 3, Figure 6) is this per-draw convention.

    Parameters
    ----------
    log_probs : np.ndarray
        Per-draw log class probabilities, shape ``(S, N, C)``.
    y : np.ndarray
        Integer labels, shape ``(N,)``.

    Returns
    -------
    dict[str, float]
        ``nll_per_draw`` and ``accuracy_per_draw`` (means over draws) and
        ``nll_per_draw_sem`` and ``accuracy_per_draw_sem`` (standard errors of those means
        over the ``S`` draws, ``ddof=1``; NaN for one draw).
    """
    log_probs = np.asarray(log_probs, dtype=float)
    if log_probs.ndim != 3 or log_probs.shape[0] == 0:
        raise ValueError(f"log_probs must have shape (S, N, C) with S >= 1, got {log_probs.shape}")
    s, n, c = log_probs.shape
    y = _as_labels(y, n, c)
    nll_s = -log_probs[:, np.arange(n), y].mean(axis=1)
    acc_s = (np.argmax(log_probs, axis=2) == y[None, :]).mean(axis=1)

    def sem(v: np.ndarray) -> float:
        return float(v.std(ddof=1) / np.sqrt(s)) if s > 1 else float("nan")

    return {
        "nll_per_draw": float(nll_s.mean()),
        "nll_per_draw_sem": sem(nll_s),
        "accuracy_per_draw": float(acc_s.mean()),
        "accuracy_per_draw_sem": sem(acc_s),
    }


def regression_metrics(
    loc: np.ndarray,
    scale: np.ndarray | float,
    y: np.ndarray,
    y_scale: float = 1.0,
    y_shift: float = 0.0,
) -> dict[str, float]:
    r"""RMSE and test NLL of a Gaussian predictive mixture, in the original units of ``y``.

    Models are usually fitted to standardized targets :math:`\tilde y = (y - b) / a` with
    ``a = y_scale`` and ``b = y_shift``. ``loc``, ``scale`` and ``y`` are given in those
    standardized units and are mapped back before scoring:
    :math:`\mu = a \tilde\mu + b`, :math:`\sigma = a \tilde\sigma`, :math:`y = a \tilde y + b`.
    Hence the RMSE is multiplied by ``a`` and, because a density transforms with the Jacobian
    :math:`1/a`, the NLL is that of the standardized problem plus :math:`\log a`.
    The shift ``b`` cancels in both metrics. With the defaults the data are taken as already
    in original units.

    Parameters
    ----------
    loc : np.ndarray
        Per-draw predictive means, shape ``(S, N)``.
    scale : np.ndarray or float
        Per-draw predictive standard deviations, broadcastable to ``(S, N)``: a scalar,
        shape ``(S, 1)`` (one noise scale per draw) or ``(S, N)``. Must be positive.
    y : np.ndarray
        Observed targets, shape ``(N,)``.
    y_scale : float, default 1.0
        Standard deviation ``a > 0`` used to standardize the targets.
    y_shift : float, default 0.0
        Mean ``b`` used to standardize the targets.

    Returns
    -------
    dict[str, float]
        ``rmse``: root mean squared error of the predictive mean
        :math:`\bar\mu_n = \frac{1}{S}\sum_s \mu_{sn}`,

        .. math::

            \mathrm{RMSE} = \sqrt{\frac{1}{N} \sum_n (\bar\mu_n - y_n)^2};

        ``nll``: negative test log-likelihood per point of the mixture,

        .. math::

            \mathrm{NLL} = -\frac{1}{N} \sum_n \left(
            \operatorname{logsumexp}_s \log \mathcal{N}(y_n \mid \mu_{sn}, \sigma_{sn}^2)
            - \log S \right).
    """
    loc = np.asarray(loc, dtype=float)
    y = np.asarray(y, dtype=float)
    if loc.ndim != 2:
        raise ValueError(f"loc must have shape (S, N), got {loc.shape}")
    n_draws, n = loc.shape
    if n_draws == 0 or n == 0:
        raise ValueError(f"loc must have at least one draw and one point, got {loc.shape}")
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},) to match loc {loc.shape}, got {y.shape}")
    try:
        scale = np.broadcast_to(np.asarray(scale, dtype=float), loc.shape)
    except ValueError:
        raise ValueError(
            f"scale must broadcast to loc's shape {loc.shape} (scalar, (S, 1) or (S, N)), "
            f"got {np.shape(scale)}"
        ) from None
    if not np.all(scale > 0):
        raise ValueError("scale must be positive everywhere")
    if not (np.isfinite(y_scale) and y_scale > 0):
        raise ValueError(f"y_scale must be a positive finite number, got {y_scale!r}")

    loc_o = loc * y_scale + y_shift
    scale_o = scale * y_scale
    y_o = y * y_scale + y_shift
    rmse = float(np.sqrt(np.mean((loc_o.mean(axis=0) - y_o) ** 2)))
    log_dens = norm.logpdf(y_o[None, :], loc=loc_o, scale=scale_o)
    lppd = logsumexp(log_dens, axis=0) - np.log(n_draws)
    return {"rmse": rmse, "nll": float(-np.mean(lppd))}
