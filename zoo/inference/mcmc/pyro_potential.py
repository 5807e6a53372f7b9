r"""The flat potential of any Pyro model, batched over chains by ``torch.func.vmap``.

:class:`PyroPotential` gives a user's own Pyro model (a function, or a
:class:`pyro.nn.PyroModule` network whose weights are ``PyroSample`` sites) the interface the
zoo's batched samplers ask of :class:`~zoo.inference.mcmc.potential.FlatPotential`. Pyro's
:func:`pyro.infer.mcmc.util.initialize_model` gives the potential of one point, a dict of
unconstrained latent sites,

.. math:: U(z) = -\log p\big(T^{-1}(z), \text{data}\big)
          - \log\big|\det \partial T^{-1}(z) / \partial z\big|,

with :math:`T` each site's bijection onto the real line (``biject_to(support).inv``), as
Pyro's own NUTS samples it. Here the sites are concatenated into one flat ``z`` (in the
model's trace order), and the potential of ``C`` chains is that function vmapped over the
rows of ``z`` with one backward of the sum (chains do not interact). A model that does not
vmap (Python control flow on a tensor's value, a ``.item()``) is evaluated row by row
instead, with the same numbers; :attr:`PyroPotential.vectorized` says which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyro
import torch
from pyro import poutine
from pyro.infer.mcmc.util import initialize_model
from torch.func import vmap

from zoo.inference.mcmc.potential import flat_layout

__all__ = ["INIT_RADIUS", "PyroPotential"]

#: Chains start uniformly in ``(-INIT_RADIUS, INIT_RADIUS)`` on the unconstrained scale of
#: every site, as Pyro's ``init_to_uniform`` (its default ``radius``).
INIT_RADIUS = 2.0


class PyroPotential:
    """:math:`U(z)` of a Pyro model's posterior over a flat unconstrained ``z``.

    Parameters
    ----------
    model : callable
        A Pyro model (every latent site continuous; discrete sites are not enumerated).
    model_args, model_kwargs
        Its arguments (the data).
    vectorize : bool, default True
        Vmap the potential over the chains; on a model that cannot be vmapped, fall back to
        row by row at the first batch (False: row by row from the start).
    """

    def __init__(
        self,
        model: Callable[..., Any],
        model_args: tuple = (),
        model_kwargs: Mapping[str, Any] | None = None,
        *,
        vectorize: bool = True,
    ) -> None:
        self.model, self.model_args = model, tuple(model_args)
        self.model_kwargs = dict(model_kwargs or {})
        with pyro.validation_enabled(False):
            init, self.pyro_potential_fn, self.transforms, _ = initialize_model(
                model, self.model_args, self.model_kwargs
            )
        if not init:
            raise ValueError("the model has no continuous latent site to sample")
        first = next(iter(init.values()))
        self.x = torch.empty(0, dtype=first.dtype, device=first.device)  # dtype and device
        self.site_shapes = {k: tuple(v.shape) for k, v in init.items()}
        self.site_slices, self.dim = flat_layout(self.site_shapes)
        self.vectorized = vectorize

    # --- parameter maps ------------------------------------------------------------------
    def _sites(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """Unconstrained sites of ``batch + (D,)``."""
        batch = z.shape[:-1]
        return {
            n: z[..., sl].reshape(batch + self.site_shapes[n]) for n, sl in self.site_slices.items()
        }

    def unravel(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{site: constrained value}``, shapes ``batch + site_shape``, from ``batch + (D,)``."""
        return {n: self.transforms[n].inv(u) for n, u in self._sites(z).items()}

    def ravel(self, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Inverse of :meth:`unravel`: constrained values per site (with a common batch
        shape) to the flat unconstrained ``z`` of shape ``batch + (D,)``."""
        missing = [n for n in self.site_slices if n not in params]
        if missing:
            raise KeyError(f"params lack sites {missing}; expected {list(self.site_slices)}")
        name0, shape0 = next(iter(self.site_shapes.items()))
        first = torch.as_tensor(params[name0])
        batch = first.shape[: first.dim() - len(shape0)]
        parts = []
        for name, shape in self.site_shapes.items():
            v = torch.as_tensor(params[name], dtype=self.x.dtype, device=self.x.device)
            if tuple(v.shape[len(batch) :]) != shape:
                raise ValueError(
                    f"site {name!r} has shape {tuple(v.shape)}, expected batch + {shape}"
                )
            parts.append(self.transforms[name](v).reshape(batch + (-1,)))
        return torch.cat(parts, -1)

    # --- energy ---------------------------------------------------------------------------
    def _energy(self, z: torch.Tensor) -> torch.Tensor:
        """U of one flat ``z`` of shape ``(D,)``: Pyro's potential (``pyro_potential_fn``)
        written out without its enumeration handler, which reads ``.data`` (not allowed
        under vmap): the log joint of the model conditioned on the constrained sites, minus
        each site's ``log|det dT/dx|``."""
        unconstrained = self._sites(z)
        values = {n: self.transforms[n].inv(u) for n, u in unconstrained.items()}
        with pyro.validation_enabled(False):
            conditioned = poutine.condition(self.model, values)
            trace = poutine.trace(conditioned).get_trace(*self.model_args, **self.model_kwargs)
            log_joint = trace.log_prob_sum()
        for n, t in self.transforms.items():
            log_joint = log_joint - t.log_abs_det_jacobian(values[n], unconstrained[n]).sum()
        return -log_joint

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """U(z) for ``z`` of shape ``(D,)`` or ``(C, D)``, row by row."""
        if z.dim() == 1:
            return self._energy(z)
        return torch.stack([self._energy(r) for r in z])

    def value_and_grad(self, z: torch.Tensor) -> tuple[float, torch.Tensor]:
        """``(U(z), dU/dz)`` for one flat ``z`` of shape ``(D,)``."""
        z = z.detach().requires_grad_(True)
        u = self._energy(z)
        (g,) = torch.autograd.grad(u, z)
        return u.item(), g

    def value_and_grad_batch(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(U(z), dU/dz)`` for ``C`` flat vectors of shape ``(C, D)``: ``U`` float64
        ``(C,)``, the gradient ``(C, D)``; vmapped when the model allows it."""
        if z.dim() != 2 or z.shape[1] != self.dim:
            raise ValueError(f"z has shape {tuple(z.shape)}; expected (chains, {self.dim})")
        # A chain whose trajectory diverged can reach non-finite positions (the batched NUTS
        # builds a subtree to its end); a model's distributions made while Pyro validates
        # (a PyroModule's priors) would raise on them, so those rows are evaluated at 0 and
        # get NaN, which the samplers read as a divergence. No read back to the host.
        bad = ~torch.isfinite(z).all(1)
        z = torch.where(bad.unsqueeze(1), torch.zeros((), dtype=z.dtype), z)
        z = z.detach().requires_grad_(True)
        if self.vectorized:
            try:
                u = vmap(self._energy)(z)
            except RuntimeError:  # data-dependent control flow or .item() in the model
                self.vectorized = False
        if not self.vectorized:
            u = torch.stack([self._energy(r) for r in z])
        (g,) = torch.autograd.grad(u.sum(), z)
        nan = torch.full((), float("nan"), dtype=g.dtype, device=g.device)
        u = torch.where(bad, nan.double(), u.detach().double())
        return u, torch.where(bad.unsqueeze(1), nan, g)

    def prior_draw(self, gen: torch.Generator) -> torch.Tensor:
        """A chain's start: uniform in ``(-INIT_RADIUS, INIT_RADIUS)`` per unconstrained
        coordinate (Pyro's ``init_to_uniform``), drawn with ``gen`` on the CPU."""
        u = torch.rand(self.dim, generator=gen, dtype=self.x.dtype, device="cpu")
        return ((2 * u - 1) * INIT_RADIUS).to(self.x.device)
