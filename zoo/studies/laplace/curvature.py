r"""The negative log posterior over the flat weight vector, its mode, Hessian and Gauss-Newton.

For a :class:`~zoo.models.base.BayesianNet` with independent Normal priors
:math:`\mathcal{N}(\mu_s, s_s^2)` on its weight and bias sites, flattened in model order
into :math:`z \in \mathbb{R}^D`,

.. math:: U(z) = -\sum_n \log p(y_n \mid x_n, z) + \tfrac12 \sum_i (z_i - \mu_i)^2 / s_i^2
          + \mathrm{const},

computed through :meth:`~zoo.models.base.BayesianNet.log_likelihood` (so any likelihood of
:data:`zoo.models.LIKELIHOODS` works; a learned noise is held fixed). Everything is done
in float64 with ``torch.func``:

- :func:`find_mode`: full-batch L-BFGS with a strong Wolfe line search from a starting point;
- :func:`hessian`: the exact :math:`\nabla^2 U`, one Hessian-vector product
  (forward-over-reverse) per column, in chunks of columns;
- :func:`ggn`: the generalized Gauss-Newton matrix :math:`\sum_n J_n^\top \Lambda_n J_n +
  \operatorname{diag}(1/s^2)`, with :math:`J_n = \partial f(x_n) / \partial z` the
  per-example Jacobian of the network outputs and :math:`\Lambda_n` the Hessian of
  :math:`-\log p(y_n \mid f)` in the outputs (for the exponential-family likelihoods here,
  the Fisher information: :math:`p(1-p)` for a Bernoulli logit,
  :math:`\operatorname{diag}(p) - p p^\top` for a softmax, :math:`1/\sigma^2` for a
  Gaussian). It drops the network's own second derivatives, so it is positive definite at
  every point; it equals the Hessian where the network is linear in :math:`z` (Martens
  2020, "New insights and perspectives on the natural gradient method"; Immer, Korzepa &
  Bauer 2021).

The cost is :math:`O(N D^2)` for the Gauss-Newton matrix and about :math:`D` gradient
evaluations for the Hessian; memory :math:`O(N K D + D^2)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import NamedTuple

import pyro
import torch

from zoo.models.base import BayesianNet

__all__ = ["FlatWeights", "find_mode", "flat_weights", "ggn", "hessian", "neg_log_posterior"]

#: Activations held at once by a chunk of Hessian-vector products or per-example Jacobians.
_CHUNK_ELEMENTS = 4_000_000


class FlatWeights(NamedTuple):
    """The weight and bias sites of a network as one flat vector, in model order.

    Attributes
    ----------
    shapes : dict of str to tuple of int
        Site shapes.
    slices : dict of str to slice
        Where each site lies in the flat vector.
    blocks : dict of str to slice
        One slice per layer (``layer{i}``: its weight and bias).
    loc, prec : Tensor
        The prior mean and precision of every coordinate, shape ``(D,)``, float64.
    """

    shapes: dict[str, tuple[int, ...]]
    slices: dict[str, slice]
    blocks: dict[str, slice]
    loc: torch.Tensor
    prec: torch.Tensor

    @property
    def dim(self) -> int:
        return int(self.loc.shape[0])

    def unravel(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{site: tensor}`` of a flat ``z`` of shape ``(D,)``."""
        return {n: z[sl].reshape(self.shapes[n]) for n, sl in self.slices.items()}

    def ravel(self, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The flat float64 vector of the weight and bias sites of ``params``."""
        return torch.cat([params[n].reshape(-1).to(torch.float64) for n in self.slices])


def flat_weights(model: BayesianNet, device: torch.device | str = "cpu") -> FlatWeights:
    """The :class:`FlatWeights` layout of ``model``'s weight and bias sites."""
    info = model.site_info()
    shapes, slices, blocks, loc, prec = {}, {}, {}, [], []
    pos = 0
    for w_site, b_site in model.layer_sites():
        start = pos
        for name in (w_site, b_site):
            shape = tuple(info[name][0])
            size = math.prod(shape)
            shapes[name], slices[name] = shape, slice(pos, pos + size)
            m, s = model.prior_params[name]
            loc += [m] * size
            prec += [1.0 / s**2] * size
            pos += size
        blocks[w_site.rsplit(".", 1)[0]] = slice(start, pos)
    kw = {"dtype": torch.float64, "device": device}
    return FlatWeights(shapes, slices, blocks, torch.tensor(loc, **kw), torch.tensor(prec, **kw))


def neg_log_posterior(
    model: BayesianNet,
    flat: FlatWeights,
    x: torch.Tensor,
    y: torch.Tensor,
    fixed: Mapping[str, torch.Tensor] | None = None,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """:math:`U(z)` (without its constant) on ``(x, y)``; ``fixed`` holds other sites
    (a learned ``noise``) at given values."""
    fixed = dict(fixed or {})

    def u(z: torch.Tensor) -> torch.Tensor:
        ll = model.log_likelihood(x, y, {**fixed, **flat.unravel(z)}).sum()
        d = z - flat.loc
        return 0.5 * (flat.prec * d * d).sum() - ll

    return u


def find_mode(
    u: Callable[[torch.Tensor], torch.Tensor], z0: torch.Tensor, steps: int
) -> tuple[torch.Tensor, int]:
    """A mode of ``u`` by full-batch L-BFGS from ``z0`` (at most ``steps`` iterations).

    Returns the point and the number of iterations taken; ``z0`` itself with 0 steps.
    """
    z = z0.detach().clone().requires_grad_(True)
    if steps == 0:
        return z.detach(), 0
    opt = torch.optim.LBFGS(
        [z],
        lr=1.0,
        max_iter=steps,
        max_eval=2 * steps + 10,
        tolerance_grad=1e-10,
        tolerance_change=1e-14,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        with pyro.validation_enabled(False):
            loss = u(z)
        loss.backward()
        return loss

    opt.step(closure)
    return z.detach(), int(opt.state[z].get("n_iter", 0))


def _chunk(n: int, per_item: int) -> int:
    return max(1, min(n, _CHUNK_ELEMENTS // max(per_item, 1)))


def hessian(
    u: Callable[[torch.Tensor], torch.Tensor], z: torch.Tensor, width: int, n: int
) -> torch.Tensor:
    """The exact Hessian of ``u`` at ``z``, ``(D, D)``, one Hessian-vector product per column.

    ``width`` (the widest layer) and ``n`` (data points) size the chunks of columns.
    """
    grad = torch.func.grad(u)

    def hvp(v: torch.Tensor) -> torch.Tensor:
        return torch.func.jvp(grad, (z,), (v,))[1]

    eye = torch.eye(z.shape[0], dtype=z.dtype, device=z.device)
    with pyro.validation_enabled(False):
        h = torch.func.vmap(hvp, chunk_size=_chunk(len(eye), 8 * n * width))(eye)
    return 0.5 * (h + h.T)


def ggn(
    model: BayesianNet,
    flat: FlatWeights,
    z: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    fixed: Mapping[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    r"""The generalized Gauss-Newton matrix of :math:`U` at ``z``, ``(D, D)``.

    :math:`\sum_n J_n^\top \Lambda_n J_n + \operatorname{diag}(1/s^2)` (module docstring).
    """
    fixed = dict(fixed or {})
    params = {**fixed, **flat.unravel(z)}
    lik = model.likelihood

    def out_one(zz: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
        return model.apply(xi[None], {**fixed, **flat.unravel(zz)})[0]

    def nll_one(f: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return -lik.log_prob(f[None], yi[None], params).sum()

    chunk = _chunk(len(x), 4 * (flat.dim + sum(model.dims)))
    with pyro.validation_enabled(False), torch.no_grad():
        per_example = torch.func.vmap(
            torch.func.jacrev(out_one), in_dims=(None, 0), chunk_size=chunk
        )
        jac = per_example(z, x)  # (N, K, D)
        lam = torch.func.vmap(torch.func.hessian(nll_one))(model.apply(x, params), y)
    lj = torch.einsum("nkl,nld->nkd", lam, jac).reshape(-1, flat.dim)
    g = jac.reshape(-1, flat.dim).T @ lj  # lam is (N, K, K)
    g = 0.5 * (g + g.T)
    return g + torch.diag(flat.prec)
