"""Matrix-normal guide (Louizos & Welling, 2016): Kronecker-structured covariance per matrix."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.infer.autoguide.initialization import init_to_median
from pyro.infer.autoguide.utils import deep_setattr
from pyro.nn import PyroParam
from torch.distributions.utils import vec_to_tril_matrix

from guides._sites import LatentSite, check_structural
from guides.distributions import MatrixNormal, matrix_shape
from guides.k_tied import _MatrixSiteGuide, is_matrix_site

__all__ = ["AutoMatrixNormal"]

_COV_KINDS = ("diag", "full")


def _normalized_factor(raw: torch.Tensor, kind: str) -> torch.Tensor:
    """Lower-triangular factor with positive diagonal of unit geometric mean.

    ``raw`` holds the log diagonal (``kind="diag"``, shape ``batch + (size,)``) or the
    lower triangle row by row with the diagonal in the log domain (``kind="full"``,
    ``batch + (size (size + 1) / 2,)``).
    """
    if kind == "diag":
        return torch.diag_embed((raw - raw.mean(-1, keepdim=True)).exp())
    tril = vec_to_tril_matrix(raw)
    log_diag = tril.diagonal(dim1=-2, dim2=-1)
    offdiag = tril - torch.diag_embed(log_diag)
    tril = offdiag + torch.diag_embed(log_diag.exp())
    return tril * (-log_diag.mean(-1)).exp()[..., None, None]


def _num_raw(size: int, kind: str) -> int:
    return size if kind == "diag" else size * (size + 1) // 2


class AutoMatrixNormal(_MatrixSiteGuide):
    r"""Matrix-normal guide (Louizos & Welling, 2016) over any Pyro model.

    Every matrix site :math:`W \in \mathbb{R}^{m \times n}` (see
    :func:`~guides.k_tied.is_matrix_site`; a convolution kernel is viewed as a matrix
    with all dims but the first flattened into columns) gets

    .. math::

        q(W) = \mathcal{MN}(M, U, V):\quad
        \operatorname{vec}(W) \sim \mathcal{N}(\operatorname{vec}(M), V \otimes U),
        \qquad U = A A^\top, \quad V = B B^\top,

    .. math::

        A = e^{s} \frac{L_r}{g(L_r)}, \qquad B = \frac{L_c}{g(L_c)}, \qquad
        g(L) = \Big(\prod_i L_{ii}\Big)^{1/\dim L},

    with :math:`L_r, L_c` lower triangular with positive diagonal (``"full"``) or
    diagonal (``"diag"``). ``row_cov="diag", col_cov="diag"`` is the 1-tied case of
    Louizos & Welling (2016): :math:`\operatorname{sd}(W_{ij}) = a_i b_j`. Every other
    site gets the mean-field factor of :class:`~guides.AutoMeanField`. Matrix sites are
    sampled from :class:`~guides.distributions.MatrixNormal`, whose KL to a diagonal
    Normal prior is registered (closed form in :class:`~pyro.infer.TraceMeanField_ELBO`).

    Why this parameterisation: :math:`V \otimes U` is unchanged by
    :math:`(U, V) \to (cU, V / c)`, so unnormalised factors leave a flat direction along
    which Adam's per-coordinate steps let :math:`U` and :math:`V` drift apart in scale
    (one tiny and one huge factor, badly conditioned triangular solves). Dividing each
    factor by the geometric mean of its diagonal removes that direction; the overall
    magnitude of all :math:`mn` standard deviations lives in the single scalar :math:`s`,
    so a global change of the posterior width is one well-scaled coordinate rather than a
    coordinated move of :math:`m + n` diagonal entries. The factors carry only shape.

    Parameters
    ----------
    model : callable
        A Pyro model.
    row_cov, col_cov : {"diag", "full"}, default "diag"
        Structure of :math:`U` (among the m rows) and :math:`V` (among the n columns).
        These positional arguments are structural, unlike Pyro's ``AutoNormal(model,
        init_loc_fn)``: pass ``init_loc_fn`` by keyword.
    init_loc_fn : callable, default ``init_to_median``
        Initialisation of the means, as in :class:`~guides.AutoMeanField` (not Pyro's
        ``AutoNormal`` default ``init_to_feasible``, on purpose: see there).
    init_scale : float, default 0.1
        Every marginal standard deviation starts at this value (:math:`s = \log`
        ``init_scale``, :math:`L_r = I`, :math:`L_c = I`).
    create_plates : callable, optional
        As in :class:`~guides.AutoMeanField`.

    Notes
    -----
    Parameters of a matrix site: ``locs.<site>`` (:math:`mn`), ``log_scale.<site>``
    (:math:`s`, 1), ``row.<site>`` and ``col.<site>`` (:math:`m` or :math:`m(m+1)/2`, and
    :math:`n` or :math:`n(n+1)/2`; log diagonal, then the lower triangle row by row).
    That is Table 1 of Swiatkowski et al. (2020) plus one stored scalar (:math:`s`; the
    normalisation removes one degree of freedom from each factor, so the number of
    identifiable parameters is Table 1's minus one). A draw costs
    :math:`O(m^2 n + m n^2)` even with ``"diag"`` factors (dense triangular products).

    References
    ----------
    .. [1] C. Louizos and M. Welling, "Structured and Efficient Variational Deep Learning
       with Matrix Gaussian Posteriors", ICML 2016.
    .. [2] J. Swiatkowski et al., "The k-tied Normal Distribution", ICML 2020 (Table 1).
    """

    _extra_modules = ("log_scale", "row", "col")
    #: ``scales.<site>`` (mean-field sites); ``log_scale.<site>`` (:math:`s`) and the
    #: normalised factors ``row.<site>``, ``col.<site>`` of the covariance of matrix sites.
    std_params: ClassVar[frozenset[str]] = frozenset({"scales", "log_scale", "row", "col"})

    def __init__(
        self,
        model: Callable[..., Any],
        row_cov: str = "diag",
        col_cov: str = "diag",
        *,
        init_loc_fn: Callable[[dict], torch.Tensor] = init_to_median,
        init_scale: float = 0.1,
        create_plates: Callable[..., pyro.plate | Sequence[pyro.plate]] | None = None,
    ) -> None:
        for field, value in (("row_cov", row_cov), ("col_cov", col_cov)):
            check_structural(value, "AutoMatrixNormal", field)
            if value not in _COV_KINDS:
                raise ValueError(f"{field} must be one of {list(_COV_KINDS)}, got {value!r}")
        self.row_cov = row_cov
        self.col_cov = col_cov
        super().__init__(
            model, init_loc_fn=init_loc_fn, init_scale=init_scale, create_plates=create_plates
        )

    def _init_matrix_params(self, info: LatentSite, init_loc: torch.Tensor) -> None:
        batch = info.unconstrained_batch_shape
        m, n = matrix_shape(info.unconstrained_event_shape)
        opts = {"dtype": init_loc.dtype, "device": init_loc.device}
        log_scale = torch.full(batch, math.log(self.init_scale), **opts)
        deep_setattr(self.log_scale, info.name, PyroParam(log_scale, constraints.real, 0))
        for module, size, kind in ((self.row, m, self.row_cov), (self.col, n, self.col_cov)):
            raw = torch.zeros(batch + (_num_raw(size, kind),), **opts)
            deep_setattr(module, info.name, PyroParam(raw, constraints.real, 1))

    def _scale_trils(self, info: LatentSite) -> tuple[torch.Tensor, torch.Tensor]:
        """:math:`(A, B)` of one site (inside its plates: subsampled like the params)."""
        log_scale = attrgetter(info.name)(self.log_scale)
        row = _normalized_factor(attrgetter(info.name)(self.row), self.row_cov)
        col = _normalized_factor(attrgetter(info.name)(self.col), self.col_cov)
        return log_scale.exp()[..., None, None] * row, col

    def _matrix_dist(self, info: LatentSite, loc: torch.Tensor) -> dist.TorchDistribution:
        row, col = self._scale_trils(info)
        return MatrixNormal(loc, row, col, event_dim=info.unconstrained_event_dim)

    def _matrix_stddev(self, info: LatentSite) -> torch.Tensor:
        row, col = self._scale_trils(info)
        row_var, col_var = row.pow(2).sum(-1), col.pow(2).sum(-1)
        return (row_var.unsqueeze(-1) * col_var.unsqueeze(-2)).sqrt()

    def _site_scale_tril(self, info: LatentSite) -> torch.Tensor | None:
        r"""Block-diagonal :math:`A \otimes B` over the site's batch dims (matrix sites).

        Row-major flattening of :math:`W` puts :math:`W_{ij}` at :math:`i n + j`, where the
        covariance is :math:`U \otimes V`, whose Cholesky factor is :math:`A \otimes B`.
        """
        if not is_matrix_site(info):
            return super()._site_scale_tril(info)
        row, col = self._scale_trils(info)
        m, n = row.shape[-1], col.shape[-1]
        kron = row[..., :, None, :, None] * col[..., None, :, None, :]
        return torch.block_diag(*kron.reshape(-1, m * n, m * n))

    def get_covariances(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        r"""Row and column covariances :math:`(U, V)` of a matrix site (full size).

        Parameters
        ----------
        name : str
            Name of a matrix site (see :attr:`matrix_sites`).

        Returns
        -------
        tuple of torch.Tensor
            :math:`U` (``batch + (m, m)``) and :math:`V` (``batch + (n, n)``), normalised
            as in the class docstring; only :math:`V \otimes U` is identified.
        """
        sites = self._require_setup()
        if name not in sites or not is_matrix_site(sites[name]):
            raise KeyError(f"{name!r} is not a matrix site; matrix sites are {self.matrix_sites}")
        row, col = self._scale_trils(sites[name])
        return row @ row.mT, col @ col.mT
