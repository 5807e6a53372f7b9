r"""Structured Gaussian distributions over weight matrices, with closed-form KL divergences.

Both distributions describe a random matrix :math:`W \in \mathbb{R}^{m \times n}`. An event
with more than two dims (e.g. a convolution kernel) is handled by viewing its event shape
``(d_1, ..., d_r)`` as the matrix ``(d_1, d_2 \cdots d_r)`` (all dims but the first are
flattened into columns). For a PyTorch convolution kernel ``(out, in, kh, kw)`` this puts
one output filter per row: the transpose of the view of Swiatkowski et al. (2020, D.3),
who flatten all dims but the last of a TensorFlow kernel ``(kh, kw, in, out)`` and so put
one filter per column; singular values and low-rank structure are the same. Samples, means
and variances keep the original event shape.

- :class:`KTiedNormal`: :math:`W \sim \mathcal{N}(M, \operatorname{diag}(\operatorname{vec}
  ((U V^\top)^{\circ 2})))` with positive :math:`U` (m x k) and :math:`V` (n x k)
  (Swiatkowski et al., 2020).
- :class:`MatrixNormal`: :math:`\operatorname{vec}(W) \sim \mathcal{N}(\operatorname{vec}(M),
  V \otimes U)` with :math:`U = A A^\top`, :math:`V = B B^\top` (Louizos & Welling, 2016);
  the Kronecker product is never formed.
- :class:`FullRankNormal`: :math:`\operatorname{vec}(W) \sim \mathcal{N}(\mu, L L^\top)`
  over a tensor-valued event, whose correlated batch dims (``coupled_shape``) let a site
  inside plates keep one joint covariance (used by :class:`~guides.AutoFullRankNormal`).

KL divergences are registered with :func:`torch.distributions.kl.register_kl` (which
:func:`pyro.distributions.kl_divergence` and :class:`~pyro.infer.TraceMeanField_ELBO` use)
for each distribution against itself and against a diagonal Normal prior
``Normal(loc, scale).to_event(event_dim)`` with the same event shape. Other pairs raise
``NotImplementedError`` so that Pyro falls back to the Monte Carlo estimate.

References
----------
.. [1] J. Swiatkowski, K. Roth, B. S. Veeling, L. Tran, J. V. Dillon, J. Snoek, S. Mandt,
   T. Salimans, R. Jenatton and S. Nowozin, "The k-tied Normal Distribution: A Compact
   Parameterization of Gaussian Mean Field Posteriors in Bayesian Neural Networks",
   ICML 2020.
.. [2] C. Louizos and M. Welling, "Structured and Efficient Variational Deep Learning with
   Matrix Gaussian Posteriors", ICML 2016.
"""

from guides.distributions.full_rank_normal import FullRankNormal
from guides.distributions.ktied_normal import KTiedNormal
from guides.distributions.matrix_normal import MatrixNormal
from guides.distributions.shared import matrix_shape

__all__ = ["FullRankNormal", "KTiedNormal", "MatrixNormal", "matrix_shape"]
