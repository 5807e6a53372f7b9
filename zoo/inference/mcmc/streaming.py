r"""Running means and covariances of many chains' draws, without keeping the draws.

A cell that runs thousands of chains for thousands of draws each (``C`` up to 8192 chains,
``D`` about 1000 parameters) cannot hold its draws: :class:`StreamingMoments` takes one draw
per chain at a time, ``z`` of shape ``(C, D)``, and keeps

- per chain, the running mean and the sum of squared deviations of every coordinate
  (Welford 1962), ``(C, D)`` each: they give the within-chain variances and the variance of
  the chain means, hence :meth:`Moments.ess` and :meth:`Moments.rhat`;
- per *group* of chains, the running mean ``(D,)`` and the full co-moment
  :math:`M = \sum_t (x_t - \bar x)(x_t - \bar x)^\top` ``(D, D)``, updated with the ``C_g``
  new rows of the group at once by the parallel formula of Chan, Golub & LeVeque (1979):
  with :math:`n_a` rows so far (mean :math:`\bar x_a`, co-moment :math:`M_a`) and a batch of
  :math:`n_b` rows (mean :math:`\bar x_b`, co-moment :math:`M_b` about its own mean),

  .. math::

      \delta = \bar x_b - \bar x_a, \qquad
      \bar x = \bar x_a + \delta \frac{n_b}{n_a + n_b}, \qquad
      M = M_a + M_b + \delta \delta^\top \frac{n_a n_b}{n_a + n_b}.

  The groups merge by the same formula into the pooled mean and covariance of all chains
  and draws (:meth:`StreamingMoments.summary`); separately they show how much the covariance
  varies between independent sets of chains.

Every accumulator is float64 on the device of the draws (or the ``device`` given), whatever
the draws' dtype: a float32 sampler's draws are cast row by row, and the sums carry no
float32 rounding. Merging centred co-moments (rather than summing :math:`x x^\top`) keeps the
result exact to float64 rounding for draws far from the origin (tests compare with NumPy's
two-pass ``mean`` and ``cov`` of the same draws).

Chains are assigned to groups in contiguous blocks, as :func:`numpy.array_split` splits
``range(C)``: with ``C = qG + r`` the first ``r`` groups hold ``q + 1`` chains and the others
``q``; ``groups`` is lowered to ``C`` when there are fewer chains than groups.

Batching: a product with few rows is a memory-bound pass over the ``(D, D)`` co-moment (one
chain: a rank-1 update that reads and writes ``8 D^2`` bytes per draw, 7 MB at ``D = 954``,
which cost ChEES 15 % of its speed at ``C = 1``, see ``benchmarks/chees.py``). So draws wait
in a float64 buffer of ``B`` draws per chain until every group has at least
:data:`MIN_ROWS` rows (``B = ceil(MIN_ROWS / min C_g)``, at most :data:`BUFFER_BYTES`), and
join the group co-moments as one batch of ``B C_g`` rows: the same formula, the same numbers
to float64 rounding. With :data:`MIN_ROWS` or more chains per group ``B = 1`` and nothing
waits. The per-chain moments are updated at every draw; :meth:`StreamingMoments.summary`
merges what is waiting first.

Memory: ``8 D^2 + 8 D`` bytes per group (co-moment and mean), ``16 D`` bytes per chain
(mean and squared deviations) and the buffer, ``8 B C D`` bytes: at ``D = 1000`` that is
8 MB per group (64 MB for the default 8 groups), at ``C = 8192`` 131 MB for the chains and
66 MB for a buffer of one draw; an update allocates one float64 copy of the draws and no
``(D, D)`` temporary. The cost per draw is :math:`O(C D^2)` (one ``(D, B C_g) @ (B C_g, D)``
product per group every ``B`` draws).

:class:`Moments` is the summary in NumPy float64, with the between-chain effective sample
size and the potential scale reduction of the chains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from zoo.inference.mcmc.welford import Welford, chan_merge, welford_update

__all__ = ["BUFFER_BYTES", "MIN_ROWS", "Moments", "StreamingMoments", "group_sizes"]

#: Rows (draws x chains) a group's co-moment update waits for (module docstring: Batching).
MIN_ROWS = 64
#: At most this many bytes of draws wait (the buffer holds at least one draw per chain).
BUFFER_BYTES = 64 * 2**20


def group_sizes(chains: int, groups: int) -> tuple[int, ...]:
    """Chains per group: contiguous blocks as :func:`numpy.array_split` makes them.

    Parameters
    ----------
    chains, groups : int
        ``groups`` is lowered to ``chains`` when larger.

    Returns
    -------
    tuple of int
        ``min(groups, chains)`` sizes summing to ``chains``, the larger ones first.
    """
    if chains < 1 or groups < 1:
        raise ValueError(f"chains and groups must be at least 1, got {chains} and {groups}")
    g = min(groups, chains)
    q, r = divmod(chains, g)
    return (q + 1,) * r + (q,) * (g - r)


def _ess(chain_mean: Any, chain_var: Any, n: int) -> Any:
    """Between-chain ESS per coordinate, uncapped (NumPy or torch arrays; see Moments.ess)."""
    c = chain_mean.shape[0]
    dev = chain_mean - chain_mean.mean(0)
    var_means = (dev * dev).sum(0) / (c - 1)
    within = chain_var.mean(0)
    pooled = ((n - 1) * c * within + n * (c - 1) * var_means) / (c * n - 1)
    return c * pooled / var_means


@dataclass(frozen=True, eq=False)
class Moments:
    r"""Streamed first and second moments of ``C`` chains of ``n`` draws each (NumPy float64).

    Attributes
    ----------
    n : int
        Draws per chain.
    chains : int
        Number of chains ``C``.
    mean : np.ndarray
        Pooled mean over all chains and draws, ``(D,)``.
    cov : np.ndarray
        Pooled covariance over all ``C n`` draws, ``ddof=1`` (NumPy's ``np.cov`` of the
        stacked draws), ``(D, D)``.
    chain_mean : np.ndarray
        Mean of each chain, ``(C, D)``.
    chain_var : np.ndarray
        Variance of each coordinate within each chain, ``ddof=1``, ``(C, D)``.
    group_mean : np.ndarray
        Mean of each group of chains, ``(G, D)`` (groups: :func:`group_sizes`).
    group_cov : np.ndarray
        Covariance within each group over its ``C_g n`` draws, ``ddof=1``, ``(G, D, D)``.
    """

    n: int
    chains: int
    mean: np.ndarray
    cov: np.ndarray
    chain_mean: np.ndarray
    chain_var: np.ndarray
    group_mean: np.ndarray
    group_cov: np.ndarray

    @property
    def dim(self) -> int:
        """Number of coordinates ``D``."""
        return int(self.mean.shape[0])

    @property
    def group_sizes(self) -> tuple[int, ...]:
        """Chains per group, in order (contiguous blocks of chains)."""
        return group_sizes(self.chains, self.group_mean.shape[0])

    def ess(self, *, cap: bool = True) -> np.ndarray:
        r"""Between-chain effective sample size of each coordinate's mean.

        For a stationary chain with variance :math:`\sigma^2` and integrated
        autocorrelation time :math:`\tau = 1 + 2 \sum_{k \ge 1} \rho_k`, the mean of ``n``
        draws has :math:`\operatorname{Var}(\bar x_c) \approx \sigma^2 \tau / n`. With ``C``
        independent chains the variance of the chain means
        :math:`s_m^2 = \frac{1}{C-1} \sum_c (\bar x_c - \bar x)^2` estimates it, so
        :math:`\hat\tau = n s_m^2 / \hat\sigma^2` and the ``C`` chains are worth

        .. math::

            \widehat{\mathrm{ESS}} = \frac{C n}{\hat\tau}
            = \frac{C \hat\sigma^2}{s_m^2}, \qquad
            \hat\sigma^2 = \frac{(n-1) C W + n (C-1) s_m^2}{C n - 1},

        :math:`W` being the mean within-chain variance (``chain_var``, ``ddof=1``) and
        :math:`\hat\sigma^2` the pooled variance of all :math:`C n` draws (``ddof=1``;
        the same number as ``diag(cov)``, computed from the chain statistics). For i.i.d.
        Gaussian draws :math:`(C-1) s_m^2 n / \sigma^2 \sim \chi^2_{C-1}`, so
        :math:`C n / \widehat{\mathrm{ESS}}` has mean 1 and relative standard deviation
        :math:`\sqrt{2 / (C - 1)}`: the estimator needs many chains (about 20% at
        ``C = 50``, 5% at ``C = 1000``), which is the regime it is for. Chains that have not
        forgotten their starts, or have not converged to the same distribution, inflate
        :math:`s_m^2` and lower the ESS. It is the ESS of each coordinate's mean (what
        arviz's ``method="mean"`` estimates from autocorrelations), not the rank-normalized
        bulk ESS.

        Parameters
        ----------
        cap : bool, default True
            Cap at ``C n`` (more than independent draws is noise of :math:`s_m^2` here).

        Returns
        -------
        np.ndarray
            ``(D,)``; NaN for a coordinate with no variance at all, or with one chain.
        """
        if self.chains < 2:
            return np.full(self.dim, np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            ess = _ess(self.chain_mean, self.chain_var, self.n)
        return np.minimum(ess, self.chains * self.n) if cap else ess

    def rhat(self) -> np.ndarray:
        r"""Potential scale reduction of Gelman & Rubin (1992), classic: no split, no ranks.

        .. math::

            \hat R = \sqrt{\frac{\frac{n-1}{n} W + B / n}{W}}, \qquad
            \frac{B}{n} = \frac{1}{C-1} \sum_c (\bar x_c - \bar x)^2,

        with :math:`W` the mean within-chain variance. Chains are not split in halves (a
        trend within every chain goes unseen) and draws are not rank-normalized (Vehtari et
        al. 2021), since neither can be streamed in this form.

        Returns
        -------
        np.ndarray
            ``(D,)``; NaN with one chain or where no chain moves.
        """
        if self.chains < 2:
            return np.full(self.dim, np.nan)
        dev = self.chain_mean - self.chain_mean.mean(0)
        b_n = (dev * dev).sum(0) / (self.chains - 1)
        w = self.chain_var.mean(0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.sqrt(((self.n - 1) / self.n * w + b_n) / w)

    @property
    def n_eff(self) -> float:
        """Median over coordinates of :meth:`ess` (capped): the draws' worth as one number.

        NaN when any coordinate's ESS is NaN (a coordinate that never moved, one chain).
        """
        return float(np.median(self.ess()))

    def restrict(self, index: Any) -> Moments:
        """The moments of the coordinates ``index`` (an index array or slice), in its order."""
        idx = np.arange(self.dim)[index]
        return Moments(
            self.n,
            self.chains,
            self.mean[idx],
            self.cov[np.ix_(idx, idx)],
            self.chain_mean[:, idx],
            self.chain_var[:, idx],
            self.group_mean[:, idx],
            self.group_cov[:, idx][:, :, idx],
        )


class StreamingMoments:
    """Welford / Chan running moments of ``chains`` chains, one draw per chain per update.

    Parameters
    ----------
    dim : int
        Number of coordinates ``D``.
    chains : int
        Number of chains ``C``: every :meth:`update` gets one row per chain.
    groups : int, default 8
        Chain groups with a full co-moment each (lowered to ``chains`` if larger); chains
        go to groups in contiguous blocks (:func:`group_sizes`).
    device : torch.device or str, optional
        Where the float64 accumulators live; by default the device of the first draws.

    Attributes
    ----------
    n : int
        Draws per chain so far.
    buffered : int
        Draws per chain that wait to join the group co-moments (``B``, module docstring).
    """

    def __init__(self, dim: int, chains: int, *, groups: int = 8, device: Any = None) -> None:
        if dim < 1:
            raise ValueError(f"dim must be at least 1, got {dim}")
        self.dim, self.chains = int(dim), int(chains)
        self.sizes = group_sizes(self.chains, groups)
        stops = np.cumsum(self.sizes)
        self._bounds = list(zip((0, *stops[:-1].tolist()), stops.tolist(), strict=True))
        self.n = 0
        self.buffered = max(
            1, min(-(-MIN_ROWS // min(self.sizes)), BUFFER_BYTES // (8 * self.chains * self.dim))
        )
        self._waiting = 0
        self.device = None if device is None else torch.device(device)
        if self.device is not None:
            self._allocate(self.device)

    def _allocate(self, device: torch.device) -> None:
        c, d, g = self.chains, self.dim, len(self.sizes)
        kw: dict[str, Any] = {"dtype": torch.float64, "device": device}
        self.device = device
        self._chain_mean = torch.zeros(c, d, **kw)
        self._chain_m2 = torch.zeros(c, d, **kw)
        self._group_mean = torch.zeros(g, d, **kw)
        self._group_m2 = torch.zeros(g, d, d, **kw)
        self._buffer = torch.empty(self.buffered, c, d, **kw)

    @torch.no_grad()
    def update(self, z: torch.Tensor) -> None:
        """Add one draw per chain.

        Parameters
        ----------
        z : torch.Tensor
            ``(C, D)``, any floating dtype, on any device (cast to float64 on the
            accumulators' device; ``z`` itself is not changed).
        """
        if tuple(z.shape) != (self.chains, self.dim):
            raise ValueError(f"z has shape {tuple(z.shape)}, expected ({self.chains}, {self.dim})")
        if self.device is None:
            self._allocate(z.device)
        x = self._buffer[self._waiting]
        x.copy_(z.detach())
        self.n += 1
        self._waiting += 1
        w = welford_update(Welford(self.n - 1, self._chain_mean, self._chain_m2), x, fused=True)
        self._chain_mean, self._chain_m2 = w.mean, w.m2
        if self._waiting == self.buffered:
            self._merge()

    @torch.no_grad()
    def _merge(self) -> None:
        """Add the waiting draws to the group means and co-moments (Chan's batch formula)."""
        k, d = self._waiting, self.dim
        if k == 0:
            return
        done = self.n - k  # draws per chain already in the group moments
        for g, (a, b) in enumerate(self._bounds):
            nb = k * (b - a)
            na = done * (b - a)
            xb = self._buffer[:k, a:b].reshape(nb, d)
            chan_merge(Welford(na, self._group_mean[g], self._group_m2[g]), xb, full=True)
        self._waiting = 0

    def ess(self) -> torch.Tensor:
        """:meth:`Moments.ess` (capped) computed on the accumulators' device, ``(D,)``."""
        if self.n < 2 or self.chains < 2:
            return torch.full((self.dim,), float("nan"), dtype=torch.float64, device=self.device)
        var = self._chain_m2 / (self.n - 1)
        return _ess(self._chain_mean, var, self.n).clamp(max=self.chains * self.n)

    def n_eff(self) -> float:
        """:attr:`Moments.n_eff` without building the summary (no ``(D, D)`` transfer)."""
        return float(np.median(self.ess().cpu().numpy()))

    def summary(self) -> Moments:
        """The moments so far, merged over groups, as NumPy float64.

        Raises
        ------
        ValueError
            With fewer than 2 draws per chain (no ``ddof=1`` variance).
        """
        if self.n < 2:
            raise ValueError(f"{self.n} draws per chain: need at least 2 for the variances")
        self._merge()
        with torch.no_grad():
            counts = torch.tensor(self.sizes, dtype=torch.float64, device=self.device) * self.n
            total = float(counts.sum())
            mean = (counts[:, None] * self._group_mean).sum(0) / total
            dev = self._group_mean - mean
            m2 = self._group_m2.sum(0) + (dev.T * counts) @ dev
            cov = m2 / (total - 1)
            group_cov = self._group_m2 / (counts - 1)[:, None, None]

        def out(t: torch.Tensor) -> np.ndarray:
            return t.cpu().numpy().astype(np.float64, copy=True)

        return Moments(
            n=self.n,
            chains=self.chains,
            mean=out(mean),
            cov=out(0.5 * (cov + cov.T)),
            chain_mean=out(self._chain_mean),
            chain_var=out(self._chain_m2 / (self.n - 1)),
            group_mean=out(self._group_mean),
            group_cov=out(0.5 * (group_cov + group_cov.transpose(1, 2))),
        )
