"""The batched potential's gradient by backpropagation written out: ``hand_backward=True``.

:class:`~zoo.inference.mcmc.potential.FlatPotential` computes one chain's gradient this way
when asked (``hand_backward=True``), where :func:`activation_slope` says the network is
covered. It saves torch's per-call autograd cost, which dominates one chain on a small data
set, but its rounding differs from autograd's (the products' and sums' order), so it is
opt-in: a sampler's draws move. The batched samplers use
:mod:`~zoo.inference.mcmc.replay` instead, which gives autograd's bits, and so does one
chain where the replay covers the network (a batch of one), which is every network this
pass covers: there it is no faster, an opt-in rounding of its own. Measurements:
``docs/notes/samplers.md`` and ``benchmarks/potential_floor.py``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood

__all__ = ["activation_slope", "value_and_grad"]

#: The likelihoods the written-out backward covers.
COVERED = CategoricalLikelihood | BernoulliLikelihood | GaussianLikelihood


def activation_slope(pot: Any) -> float | None:
    """The hidden activation's slope below 0 (relu 0, leaky_relu its slope, linear 1; tanh
    -1 as a tag), or None where :func:`value_and_grad` does not cover the network
    (another activation or likelihood, or a leaky slope below 0)."""
    lik, act = pot.model.likelihood, getattr(pot.model, "act_name", None)
    if not isinstance(lik, COVERED):
        return None
    if act == "relu":
        return 0.0
    if act == "tanh":
        return -1.0
    if act == "linear":
        return 1.0
    if act == "leaky_relu":
        slope = -float(pot.model.act(torch.tensor(-1.0, dtype=torch.float64, device=pot.x.device)))
        return slope if slope >= 0 else None
    return None


def value_and_grad(pot: Any, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(U (C,) float64, dU/dz (C, D))`` by backpropagation written out, no autograd graph.

    The forward pass of ``FlatPotential._energy_batch`` (activations ``(C, units, N)``) keeps each
    layer's output :math:`h_i`; with :math:`\\delta_L = \\partial\\,\\mathrm{nll} /
    \\partial a_L` at the logits (softmax minus one-hot, sigmoid minus ``y``, or the
    scaled residual), :math:`\\partial/\\partial W_i = \\delta_i h_{i-1}^\\top`,
    :math:`\\partial/\\partial b_i = \\sum_n \\delta_i` and :math:`\\delta_{i-1} =
    (W_i^\\top \\delta_i) \\odot \\phi'(a_{i-1})`, :math:`\\phi'` read off :math:`h_{i-1}`
    (relu :math:`[h > 0]`, leaky relu :math:`1` or its slope, tanh :math:`1 - h^2`); the
    prior adds :math:`\\Lambda (z - m)`, a learned noise its own derivative. It saves
    torch's per-call autograd cost, which dominates one chain on a small data set
    (measurements: ``docs/notes/samplers.md``). Rounding differs from autograd's.
    """
    c, slope = z.shape[0], pot._act_slope
    if pot._xt is None:
        pot._xt = pot.x.T.contiguous()
    parts = z.split(pot._sizes, -1)
    h = pot._xt.expand(c, *pot._xt.shape)
    hs, ws = [h], []
    for i, (w, b) in enumerate(zip(parts[0:-1:2], parts[1::2], strict=False)):
        w = w.view(c, *pot._wshapes[i])
        ws.append(w)
        h = torch.baddbmm(b.unsqueeze(2), w, h)
        if i < pot.model.depth:
            h = pot.model.act(h)
            hs.append(h)
    lik, g_noise = pot.model.likelihood, []
    if isinstance(lik, CategoricalLikelihood):
        logp = torch.log_softmax(h, 1)
        idx = pot.y.view(1, 1, -1).expand(c, 1, -1)
        nll = -logp.gather(1, idx).sum((1, 2))
        delta = logp.exp().scatter_add_(1, idx, torch.full_like(idx, -1, dtype=h.dtype))
    elif isinstance(lik, BernoulliLikelihood):
        s = h.squeeze(1)
        nll = F.binary_cross_entropy_with_logits(s, pot.y.expand(c, -1), reduction="none").sum(1)
        delta = (torch.sigmoid(s) - pot.y).unsqueeze(1)
    else:
        res = h.squeeze(1) - pot.y
        sq = (res * res).sum(1)
        if pot.learned_noise:
            zn, n = z[:, -1], len(pot.y)
            e, e2 = (-2 * zn).exp(), (2 * zn).exp()
            nll = 0.5 * e * sq + (n - 1) * zn + 0.5 * pot._noise_prec * e2
            delta = (e.unsqueeze(1) * res).unsqueeze(1)
            g_noise = [((n - 1) - e * sq + pot._noise_prec * e2).unsqueeze(1)]
        else:
            k = 1.0 / float(lik.noise) ** 2
            nll = sq * (0.5 * k)
            delta = (res * k).unsqueeze(1)
    grads = []
    for i in range(len(ws) - 1, -1, -1):
        gw = torch.matmul(delta, pot.x) if i == 0 else torch.bmm(delta, hs[i].mT)
        grads += [delta.sum(2), gw.reshape(c, -1)]
        if i > 0:
            delta = torch.bmm(ws[i].mT, delta)
            hi = hs[i]
            if slope == 0.0:
                delta = delta * (hi > 0)
            elif slope == -1.0:  # tanh
                delta = delta * (1 - hi * hi)
            elif slope != 1.0:
                delta = torch.where(hi > 0, delta, delta * slope)
    g = torch.cat(grads[::-1] + g_noise, 1)
    zw = z[:, : pot.n_weights]
    d = zw if pot._zero_loc else zw - pot._loc
    gw = g[:, : pot.n_weights]
    if pot._uniform_prec is None:
        u = nll + 0.5 * (d * d * pot._prec).sum(-1)
        gw.addcmul_(d, pot._prec)
    else:
        u = nll + (0.5 * pot._uniform_prec) * (d * d).sum(-1)
        gw.add_(d, alpha=pot._uniform_prec)
    return u.double() + pot._offset, g
