"""The batched potential's gradient by autograd's own formulas, called without a graph.

:meth:`FlatPotential.value_and_grad_batch
<zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch>` differentiates
``U(z).sum()`` over ``C`` rows with ``torch.autograd.grad``. On a network as small as the
default spec's, much of that is not arithmetic but the graph: a node recorded per operation
in the forward pass, then walked by the engine in the backward. :func:`value_and_grad` runs
the same forward (``FlatPotential._energy_batch``, keeping each layer's tensors) without
recording, then calls the derivative formulas that autograd's nodes
would call (torch's ``tools/autograd/derivatives.yaml``), on the same operands, in the
engine's order:

- ``baddbmm(b, W, h)``: :math:`\\partial W = g\\, h^\\top` (``g.bmm(h.transpose(1, 2))``),
  :math:`\\partial h = W^\\top g` (``W.transpose(1, 2).bmm(g)``), :math:`\\partial b =
  \\sum_n g` (the engine's ``sum_to`` of the broadcast bias);
- ``relu``: ``threshold_backward(g, result, 0)``; ``tanh``: ``tanh_backward(g, result)``;
  ``leaky_relu``: ``leaky_relu_backward(g, input, slope, False)``;
- ``binary_cross_entropy_with_logits``: :math:`\\sigma(f) - y`; the fixed-noise Gaussian's
  :math:`k \\sum r^2`: :math:`k\\, r` once per factor of ``r * r``; ``cross_entropy`` over
  ``K`` logits (``log_softmax``, then ``nll_loss2d`` on ``(C, K, 1, N)``): their backwards,
  ``nll_loss2d_backward`` then ``_log_softmax_backward_data`` (:math:`\\mathrm{softmax}(f) -
  \\mathrm{onehot}(y)` in their rounding);
- the Normal prior's :math:`\\tfrac{\\lambda}{2} \\sum d^2`: :math:`a =
  \\tfrac{\\lambda}{2}\\, d` once per factor of ``d * d`` (autograd multiplies the sums'
  ones by the constant first; a product with 1 is exact).

The engine adds what reaches ``z`` as :math:`(a + a) + s`, ``s`` the network's part (the
split's ``cat``): the prior's nodes were recorded last, so they run first. The same kernels
on the same operands in the same order give autograd's bits, row for row;
``tests/zoo/inference/mcmc/test_replay.py`` checks them bitwise on every network this
covers, so a torch whose formulas or engine order differ from these fails there. The speed:
``benchmarks/potential_floor.py``. Covered (:func:`replays`): an MLP potential on the CPU
whose hidden activation is relu, leaky relu, tanh or linear, with a Bernoulli, categorical or
Gaussian likelihood (a fixed noise, or a learned one: :func:`_learned_noise_grads`); anything
else (a compiled potential, another device, a subclass with its own energy) keeps autograd.

One chain's :meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad` (the kernels
of :mod:`~zoo.inference.mcmc.kernel`, which every sampler runs unless ``vectorize_chains``)
is this replay on a batch of one where :func:`replays_one` says so: the same networks, through
the potential's own one-chain energy, unless the opt-in written-out backward
(:mod:`~zoo.inference.mcmc.hand_backward`) is asked for.
"""

from __future__ import annotations

from typing import Any

import torch

from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood

__all__ = ["replays", "replays_one", "value_and_grad"]

#: Hidden activations whose backward is replayed, by the model's ``act_name``.
ACTIVATIONS = ("relu", "leaky_relu", "tanh", "linear")


def replays(pot: Any) -> bool:
    """Whether :func:`value_and_grad` covers ``pot`` (a
    :class:`~zoo.inference.mcmc.potential.FlatPotential`) now: module docstring."""
    lik = pot.model.likelihood
    return (
        getattr(pot, "_own_energy_batch", False)
        and not pot.compiled
        and pot.x.device.type == "cpu"
        and getattr(pot.model, "act_name", None) in ACTIVATIONS
        and (pot.model.act_name != "leaky_relu" or (pot._act_slope or 0.0) > 0.0)
        and isinstance(lik, BernoulliLikelihood | CategoricalLikelihood | GaussianLikelihood)
    )


def replays_one(pot: Any) -> bool:
    """Whether ``pot.value_and_grad`` (one chain) is :func:`value_and_grad` of a batch of one:
    where :func:`replays` covers the potential, its one-chain energy is the base class's (the
    batched energy's math) and the opt-in written-out backward (``hand_backward``) is off."""
    return getattr(pot, "_own_energy", False) and not pot.hand_backward and replays(pot)


def value_and_grad(
    pot: Any, z: torch.Tensor, into: tuple | None = None, prior: list | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u, dU/dz)`` for ``z`` of shape ``(C, D)``: ``u`` the rows' ``U - c`` in the
    energy's dtype (``FlatPotential._energy_batch``, which also keeps the layers' tensors),
    the gradient autograd's to the bit; written into ``into = (u, grad)`` if given.
    ``prior``: a list that gets the prior's term of ``u``, ``(C,)``."""
    c = z.shape[0]
    layers: list = []
    u = pot._energy_batch(z, layers, None if into is None else into[0])
    if prior is not None:
        prior.append(layers[-1])
    layers.pop()  # the prior's term
    if pot.learned_noise:
        g, g_noise = _learned_noise_grads(pot, layers.pop())
    else:
        g = _loss_grad(pot, layers.pop(), c)
    grads = [None] * (2 * len(layers))
    for i in range(len(layers) - 1, -1, -1):
        h, w, _, _ = layers[i]
        grads[2 * i + 1] = g.sum(2)
        grads[2 * i] = g.bmm(h.transpose(1, 2)).reshape(c, -1)
        if i > 0:
            _, _, pre, out = layers[i - 1]
            g = _act_backward(pot, w.transpose(1, 2).bmm(g), pre, out)
    out = into and into[1]
    if not pot.learned_noise:
        d = z if pot._zero_loc else z - pot._loc
        return u, torch.add(_prior_grad(pot, d), torch.cat(grads, -1), out=out)
    # what reaches z: the prior's slice, the noise's select, the split's cat (its unused last
    # part zeros), each a full (C, D) tensor, added in the order the engine runs their nodes
    zw = z[:, : pot.n_weights]
    d = zw if pot._zero_loc else zw - pot._loc
    prior, noise = z.new_zeros(z.shape), z.new_zeros(z.shape)
    prior[:, : pot.n_weights] = _prior_grad(pot, d)
    noise[:, -1] = g_noise
    split = torch.cat([*grads, z.new_zeros(c, 1)], -1)
    return u, torch.add(prior + noise, split, out=out)


def _loss_grad(pot: Any, h: torch.Tensor, c: int) -> torch.Tensor:
    """The likelihood energy's gradient with respect to the logits ``(C, K, N)``, as autograd
    takes it through ``FlatPotential._energy_batch``; ``h``: the logits, or for a
    categorical likelihood their log-softmax."""
    if isinstance(pot.model.likelihood, CategoricalLikelihood):
        # log_softmax, then nll_loss2d on (C, K, 1, N) (cross_entropy's steps): their backwards
        k, n = h.shape[1:]
        logp = h
        ones = h.new_ones(()).expand(c, 1, n)  # the sum's, per point
        target = pot.y.expand(c, -1).view(c, 1, n)
        unused = h.new_zeros(())  # the total weight: no reduction reads it
        g = torch.ops.aten.nll_loss2d_backward(
            ones, logp.view(c, k, 1, n), target, None, 0, -100, unused
        )
        return torch.ops.aten._log_softmax_backward_data(g.view(c, k, n), logp, 1, h.dtype)
    f = h.squeeze(1)
    if isinstance(pot.model.likelihood, BernoulliLikelihood):
        return (f.sigmoid() - pot.y.expand(c, -1)).unsqueeze(1)  # times the sum's ones: exact
    k = 0.5 / float(pot.model.likelihood.noise) ** 2
    res = f - pot.y
    a = res * k
    return (a + a).unsqueeze(1)


def _learned_noise_grads(pot: Any, kept: tuple) -> tuple:
    """A learned noise's Gaussian energy (``FlatPotential._energy_batch``:
    :math:`\\tfrac12 e^{-2 s} \\sum r^2 + (N - 1) s + \\tfrac{\\lambda}{2} e^{2 s}`, ``s`` the
    log noise scale ``z[:, -1]``), its gradients with respect to the logits ``(C, 1, N)`` and
    to ``s`` ``(C,)``, as autograd takes them: :math:`b + b` with :math:`b =
    \\tfrac12 e^{-2s} r` once per factor of ``r * r``; for ``s`` the three terms' nodes run
    last-made first, so :math:`(2 \\cdot \\tfrac{\\lambda}{2} e^{2s} + (N - 1)) - 2\\,
    \\tfrac12 \\sum r^2\\, e^{-2s}` in that order of sums (each product in autograd's order).
    ``kept``: the forward's logits, residuals, their sum of squares, :math:`e^{-2s}`,
    :math:`\\tfrac12 e^{-2s}` (the gradient the sum of squares receives) and :math:`e^{2s}`."""
    _, res, sq, e_neg, half, e_pos = kept
    n = res.shape[1]
    b = half.unsqueeze(1) * res
    g_logits = (b + b).unsqueeze(1)
    g_noise = (e_pos * (0.5 * pot._noise_prec)) * 2 + (n - 1)
    return g_logits, g_noise + ((sq * 0.5) * e_neg) * -2


def _act_backward(pot: Any, g: torch.Tensor, pre: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The hidden activation's backward: ``g`` at its output to ``g`` at its input."""
    name = pot.model.act_name
    if name == "relu":
        return torch.ops.aten.threshold_backward(g, out, 0)
    if name == "tanh":
        return torch.ops.aten.tanh_backward(g, out)
    if name == "leaky_relu":
        return torch.ops.aten.leaky_relu_backward(g, pre, pot._act_slope, False)
    return g


def _prior_grad(pot: Any, d: torch.Tensor) -> torch.Tensor:
    """``a + a``, the Normal prior's part of the gradient (module docstring)."""
    if pot._uniform_prec is None:
        a = d * pot._prec * 0.5
    else:
        a = d * (0.5 * pot._uniform_prec)
    return a + a
