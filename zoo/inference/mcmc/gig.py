"""Exact draws of the generalised inverse Gaussian distribution, batched in torch.

The GIG law with parameters :math:`(p, a, b)`, :math:`a, b > 0`, has density

.. math:: f(x) \\propto x^{p - 1} \\exp\\big(-(a x + b / x) / 2\\big), \\quad x > 0.

With :math:`\\eta = \\sqrt{b / a}` and :math:`\\omega = \\sqrt{a b}`, :math:`x = \\eta y` where
:math:`y` has the one-parameter density :math:`y^{p-1} \\exp(-\\omega (y + 1/y) / 2)`
(``scipy.stats.geninvgauss(p, omega)``), and :math:`1/y` is that law with :math:`-p`, so it
suffices to draw :math:`y` for :math:`\\lambda = |p| \\ge 0`. :func:`gig` does it by the
three rejection algorithms of Hörmann & Leydold (2014), "Generating generalized inverse
Gaussian random variates", Statistics and Computing 24(4), 547-557, each where it has a
rejection constant bounded over its region (at most 2.73), as ``scipy.stats.geninvgauss``
chooses them:

- :math:`\\lambda \\ge 1` or :math:`\\omega > 1`: ratio of uniforms with the mode shifted to
  the origin, the bounding rectangle from the roots of a cubic (Cardano);
- :math:`\\omega \\ge \\min(1/2, \\tfrac23\\sqrt{1-\\lambda})`: ratio of uniforms without
  the shift;
- otherwise (small :math:`\\omega`, :math:`\\lambda < 1`): rejection from a three-piece
  hat (constant, power, exponential).

Every element has its own :math:`(p, a, b)`; all are drawn together, each round drawing
only for the elements not yet accepted, from one ``torch.Generator``. The arithmetic is in
float64 on the generator's device; the quasi-density is compared on the log scale, so that
large :math:`\\lambda` and :math:`\\omega` do not overflow.
"""

from __future__ import annotations

import math

import torch

__all__ = ["MAX_ROUNDS", "gig"]

#: Rounds of the rejection loop before giving up (every round accepts each element with
#: probability above 1 / 2.73, so 200 rounds leave one in about 1e27 undone).
MAX_ROUNDS = 200


def _log_quasi(x: torch.Tensor, lam: torch.Tensor, om: torch.Tensor) -> torch.Tensor:
    """:math:`(\\lambda - 1)\\log x - \\omega (x + 1/x) / 2`, :math:`-\\infty` off ``x > 0``."""
    out = (lam - 1) * torch.log(x) - om * (x + 1 / x) / 2
    return torch.where(x > 0, out, -math.inf)


def _mode(lam: torch.Tensor, om: torch.Tensor) -> torch.Tensor:
    """The mode, in the two forms that avoid cancellation (Hörmann & Leydold, eq. 2)."""
    r = torch.sqrt((lam - 1) ** 2 + om**2)
    return torch.where(lam < 1, om / (r + 1 - lam), (r - (1 - lam)) / om)


def _ratio_of_uniforms(lam: torch.Tensor, om: torch.Tensor, m: torch.Tensor) -> tuple:
    """The rectangle ``(vmin, vmax, shift)`` of the ratio-of-uniforms methods for the density
    scaled to 1 at the mode: with the mode shift (its extremes at the roots of
    :math:`x^3 + a_2 x^2 + a_1 x + m`) where :math:`\\lambda \\ge 1` or :math:`\\omega > 1`,
    without it (:math:`x_+` the maximum of :math:`x\\sqrt{f(x)}`) elsewhere."""
    lm = _log_quasi(m, lam, om)
    a2 = -2 * (lam + 1) / om - m
    a1 = 2 * m * (lam - 1) / om - 1
    p1 = a1 - a2**2 / 3
    q1 = 2 * a2**3 / 27 - a2 * a1 / 3 + m
    phi = torch.arccos((-q1 * torch.sqrt(-27 / p1**3) / 2).clamp(-1, 1))
    s1 = -torch.sqrt(-4 * p1 / 3)
    root1 = s1 * torch.cos(phi / 3 + math.pi / 3) - a2 / 3
    root2 = -s1 * torch.cos(phi / 3) - a2 / 3
    vmin_s = (root1 - m) * torch.exp(0.5 * (_log_quasi(root1, lam, om) - lm))
    vmax_s = (root2 - m) * torch.exp(0.5 * (_log_quasi(root2, lam, om) - lm))
    shift = (lam >= 1) | (om > 1)
    if bool(shift.all()):  # the selections below would take these everywhere
        return vmin_s, vmax_s, m, lm
    xplus = ((1 + lam) + torch.sqrt((1 + lam) ** 2 + om**2)) / om
    vmax_n = xplus * torch.exp(0.5 * (_log_quasi(xplus, lam, om) - lm))
    zero = torch.zeros_like(m)
    return (
        torch.where(shift, vmin_s, zero),
        torch.where(shift, vmax_s, vmax_n),
        torch.where(shift, m, zero),
        lm,
    )


def _hat(lam: torch.Tensor, om: torch.Tensor, m: torch.Tensor) -> tuple:
    """The three-piece hat of Hörmann & Leydold's new algorithm (:math:`\\lambda < 1`):
    :math:`k_1` on :math:`(0, x_0)`, :math:`k_2 x^{\\lambda-1}` on :math:`(x_0, 2/\\omega)`,
    :math:`k_3 e^{-\\omega x / 2}` beyond, with areas :math:`A_1, A_2, A_3`. The second
    area and its inverse are written with ``expm1``/``log1p``, so that :math:`\\lambda \\to 0`
    reaches the logarithmic case continuously."""
    x0 = om / (1 - lam)
    xs = torch.maximum(x0, 2 / om)
    k1 = torch.exp(_log_quasi(m, lam, om))
    a1 = k1 * x0
    mid = x0 < 2 / om
    k2 = torch.where(mid, torch.exp(-om), torch.zeros_like(om))
    span = torch.log(2 / om) - torch.log(x0)  # log of (2 / omega) / x0
    safe = torch.where(lam > 0, lam, torch.ones_like(lam))
    grow = torch.where(lam > 0, torch.expm1(lam * span) / safe, span)
    a2 = torch.where(mid, k2 * torch.exp(lam * torch.log(x0)) * grow, torch.zeros_like(om))
    k3 = torch.exp((lam - 1) * torch.log(xs))
    a3 = 2 * k3 * torch.exp(-xs * om / 2) / om
    return x0, xs, k1, k2, k3, a1, a2, a3


def _propose_hat(lam, om, hat, u, v):
    """A proposal from the hat and the hat's height there (``v`` uniform on its area)."""
    x0, xs, k1, k2, k3, a1, a2, a3 = hat
    v = v * (a1 + a2 + a3)
    w = (v - a1) / torch.where(k2 > 0, k2, torch.ones_like(k2))
    safe = torch.where(lam > 0, lam, torch.ones_like(lam))
    x_mid = torch.where(
        lam > 0,
        x0 * torch.exp(torch.log1p(w * safe * torch.exp(-lam * torch.log(x0))) / safe),
        x0 * torch.exp(w),
    )
    x_tail = -2 / om * torch.log(torch.exp(-xs * om / 2) - om * (v - a1 - a2) / (2 * k3))
    first, second = v <= a1, v <= a1 + a2
    x = torch.where(first, x0 * v / a1, torch.where(second, x_mid, x_tail))
    h = torch.where(
        first,
        k1,
        torch.where(second, k2 * torch.exp((lam - 1) * torch.log(x)), k3 * torch.exp(-x * om / 2)),
    )
    return x, torch.log(u * h) <= _log_quasi(x, lam, om)


def _standard(lam: torch.Tensor, om: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Draws of :math:`y^{\\lambda-1} e^{-\\omega(y + 1/y)/2}`, :math:`\\lambda \\ge 0`, one
    per element of the flat ``lam`` and ``om`` (module docstring)."""
    m = _mode(lam, om)
    rou = (lam >= 1) | (
        om >= torch.minimum(torch.full_like(om, 0.5), 2 * (1 - lam).clamp(min=0).sqrt() / 3)
    )
    vmin, vmax, shift, lm = _ratio_of_uniforms(lam, om, m)
    # the hat only where an element needs it (where none does, the selections below would
    # take the ratio of uniforms' proposal everywhere: the same draws, half the operations)
    hat = _hat(lam, om, m) if bool((~rou).any()) else None
    out = torch.full_like(om, math.nan)
    todo = torch.arange(om.numel(), device=om.device)
    for _ in range(MAX_ROUNDS):
        if todo.numel() == 0:
            return out
        k = todo.numel()
        u = 1 - torch.rand(k, generator=gen, dtype=om.dtype, device=om.device)  # (0, 1]
        v = torch.rand(k, generator=gen, dtype=om.dtype, device=om.device)
        lt, ot = lam[todo], om[todo]
        x_r = shift[todo] + (vmin[todo] + (vmax[todo] - vmin[todo]) * v) / u
        ok_r = 2 * torch.log(u) <= _log_quasi(x_r, lt, ot) - lm[todo]
        if hat is None:
            x, ok = x_r, ok_r
        else:
            x_h, ok_h = _propose_hat(lt, ot, tuple(h[todo] for h in hat), u, v)
            rt = rou[todo]
            x, ok = torch.where(rt, x_r, x_h), torch.where(rt, ok_r, ok_h)
        out[todo[ok]] = x[ok]
        todo = todo[~ok]
    raise RuntimeError(
        f"gig: {todo.numel()} draws not accepted in {MAX_ROUNDS} rounds (lambda "
        f"{lam[todo][:3].tolist()}, omega {om[todo][:3].tolist()}); the parameters are "
        "outside what float64 can represent"
    )


def gig(
    p: torch.Tensor | float,
    a: torch.Tensor | float,
    b: torch.Tensor | float,
    generator: torch.Generator,
) -> torch.Tensor:
    """Exact draws of :math:`\\mathrm{GIG}(p, a, b)`, density
    :math:`\\propto x^{p-1}\\exp(-(a x + b/x)/2)` (module docstring).

    Parameters
    ----------
    p, a, b : Tensor or float
        Broadcast together; ``a`` and ``b`` finite and positive (checked).
    generator : torch.Generator
        The only source of randomness; the draws are made on its device.

    Returns
    -------
    Tensor
        float64, the broadcast shape, on the generator's device.

    Raises
    ------
    ValueError
        Where an ``a`` or ``b`` is not a finite positive number.
    """
    dev = generator.device
    p, a, b = (torch.as_tensor(t, dtype=torch.float64).to(dev) for t in (p, a, b))
    p, a, b = torch.broadcast_tensors(p, a, b)
    bad = ~(torch.isfinite(a) & torch.isfinite(b) & (a > 0) & (b > 0) & torch.isfinite(p))
    if bool(bad.any()):
        i = int(bad.reshape(-1).nonzero()[0, 0])
        raise ValueError(
            f"gig: need a > 0, b > 0 and p finite; got p={p.reshape(-1)[i].item()}, "
            f"a={a.reshape(-1)[i].item()}, b={b.reshape(-1)[i].item()}"
        )
    ra, rb = a.sqrt().reshape(-1), b.sqrt().reshape(-1)  # no overflow of a * b
    y = _standard(p.abs().reshape(-1), ra * rb, generator)
    y = torch.where(p.reshape(-1) < 0, 1 / y, y)
    return (rb / ra * y).reshape(p.shape)
