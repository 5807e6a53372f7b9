r"""The potential of any network over C chains, through ``torch.func``.

:class:`ModulePotential` is the :class:`~zoo.inference.mcmc.potential.FlatPotential` of a
network known only as a pure function ``forward(params, x)`` of a dict of weights: by
default the :class:`~zoo.models.base.BayesianNet`'s own ``apply`` (so a
:class:`~zoo.models.lenet.BayesianLeNet` samples), or :func:`module_forward` of a plain
``torch.nn.Module`` (``torch.func.functional_call`` with the weights swapped in). The
energy of one chain,

.. math:: U(z) = -\Big(\sum_n \log p\big(y_n \mid f(x_n; \theta)\big)
          + \sum_s \log \mathcal N(\theta_s; m_s, s_s^2)\Big) + \ldots,

is written for one flat ``z`` of shape ``(D,)`` and batched over the chains by
``torch.func.vmap``; its gradient is one backward through the vmapped forward (the chains do
not interact, so :math:`\nabla_z \sum_c U(z_c)` is every chain's own gradient), or, with
``grad="func"``, ``vmap(grad_and_value(U))``. The priors, the Gaussian noise's prior and
Jacobian, the constants and the parameter maps are the hand-written potential's, so both
give the same numbers on an MLP (to float rounding; ``tests/zoo/inference/mcmc/
test_functional.py``). Which is faster per chain-gradient: ``benchmarks/potential_generic.py``
and ``docs/notes/samplers.md``; :func:`potential_for` picks the hand-written one for MLPs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from zoo.inference.mcmc.potential import BATCHED_LIKELIHOODS, FlatPotential
from zoo.models.base import BayesianNet
from zoo.models.mlp import BayesianMLP

__all__ = ["CPU_CHUNK", "Forward", "ModulePotential", "module_forward", "potential_for"]

#: A network as a pure function: ``forward(params, x) -> outputs (len(x), out_dim)``, where
#: ``params`` maps each weight site to one tensor of the site's shape (no batch dimension).
Forward = Callable[[Mapping[str, torch.Tensor], torch.Tensor], torch.Tensor]


def module_forward(module: nn.Module) -> Forward:
    """``forward(params, x)`` of a plain ``torch.nn.Module``: ``module(x)`` with its
    parameters replaced by ``params`` (``torch.func.functional_call``; names as in
    ``module.named_parameters()``), differentiable and vmappable in ``params``."""

    def forward(params: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(module, dict(params), (x,))

    return forward


class ModulePotential(FlatPotential):
    """:class:`~zoo.inference.mcmc.potential.FlatPotential` of any network, by ``torch.func``.

    Parameters
    ----------
    model : BayesianNet
        Gives the sites and their Normal priors (``site_info``, ``prior_params``), the
        likelihood and, unless ``forward`` is given, the network (``apply``).
    x, y : Tensor
        The full training set.
    forward : Forward, optional
        The network as a pure function of one chain's weights; default
        ``model.apply(x, params)``.
    grad : {"autograd", "func"}
        How :meth:`value_and_grad_batch` differentiates the vmapped energy: one
        ``torch.autograd.grad`` of the sum over chains, or ``vmap(grad_and_value(U))``.
    chunk : int, optional
        Chains per vmapped call (``vmap``'s ``chunk_size``); None: all at once. A CPU runs
        a vmapped convolution of many chains (one grouped convolution) slower per chain
        than a few at a time (``benchmarks/potential_generic.py``).
    """

    def __init__(
        self,
        model: BayesianNet,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        forward: Forward | None = None,
        grad: Literal["autograd", "func"] = "autograd",
        chunk: int | None = None,
    ) -> None:
        if grad not in ("autograd", "func"):
            raise ValueError(f"grad={grad!r}; use 'autograd' or 'func'")
        if chunk is not None and chunk < 1:
            raise ValueError(f"chunk={chunk}; use a positive number of chains or None")
        super().__init__(model, x, y)
        self.forward: Forward = forward or (lambda params, x: model.apply(x, params))
        self.grad, self.chunk = grad, chunk
        self._weight_sites = [s for pair in model.layer_sites() for s in pair]
        self._known = isinstance(model.likelihood, BATCHED_LIKELIHOODS)

    def _weights(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """One chain's weight sites as views of ``z`` (shape ``(D,)``)."""
        parts = z.split(self._sizes)
        return {
            n: p.view(self.site_shapes[n])
            for n, p in zip(self.site_shapes, parts, strict=True)
            if n in self._weight_sites
        }

    def _energy(self, z: torch.Tensor) -> torch.Tensor:
        """U(z) - c for one flat ``z`` of shape ``(D,)``: the network, the fused loss of a
        known likelihood (otherwise its ``log_prob``), the Normal prior."""
        h = self.forward(self._weights(z), self.x)
        return self._energy_of_output(h, z, z[-1] if self.learned_noise else None)

    def _energy_batch(self, z: torch.Tensor) -> torch.Tensor:
        """U(z) - c for ``z`` of shape ``(C, D)``: :meth:`_energy` vmapped, shape ``(C,)``."""
        return vmap(self._energy, chunk_size=self.chunk)(z)

    def value_and_grad_batch(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(U(z), dU/dz)`` for ``C`` flat vectors ``z`` of shape ``(C, D)``.

        Returns
        -------
        u : Tensor
            ``U`` per row, float64, shape ``(C,)``, with the constants of
            :meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad`.
        grad : Tensor
            ``dU/dz``, shape ``(C, D)``.
        """
        if z.dim() != 2 or z.shape[1] != self.dim:
            raise ValueError(f"z has shape {tuple(z.shape)}; expected (chains, {self.dim})")
        if not self._known:  # a likelihood's log_prob may not vmap: row by row
            return super().value_and_grad_batch(z)
        if self.grad == "func" and not self.compiled:
            g, u = vmap(grad_and_value(self._energy), chunk_size=self.chunk)(z.detach())
            return u.detach().double() + self._offset, g
        z = z.detach().requires_grad_(True)
        u = self._batch_energy(z)
        (g,) = torch.autograd.grad(u.sum(), z)
        return u.detach().double() + self._offset, g


#: Chains per vmapped call of a network's potential on the CPU (:func:`potential_for`): a CPU
#: runs a vmapped convolution of 64 chains at half the chain-gradients per second of 8 at a
#: time (``benchmarks/potential_generic.py``); a GPU wants the whole batch (None).
CPU_CHUNK = 8


def potential_for(model: BayesianNet, x: torch.Tensor, y: torch.Tensor) -> FlatPotential:
    """The samplers' potential of ``model`` on the device of ``x``.

    The hand-written :class:`~zoo.inference.mcmc.potential.FlatPotential` for a
    :class:`~zoo.models.mlp.BayesianMLP` (2 to 3 times the generic one's chain-gradients per
    second at 1, 16 and 64 chains on a CPU, ``docs/notes/samplers.md``);
    :class:`ModulePotential` for any other network, its chains vmapped :data:`CPU_CHUNK` at
    a time on a CPU and all at once elsewhere.
    """
    if isinstance(model, BayesianMLP):
        return FlatPotential(model, x, y)
    return ModulePotential(model, x, y, chunk=CPU_CHUNK if x.device.type == "cpu" else None)
