"""Exact Gibbs moves along an MLP's weight-space symmetries, for C chains at once.

A hidden unit :math:`j` of layer :math:`i` has incoming weights and bias
:math:`u = (W_i[j, :], b_i[j])` (:math:`n_{in}` numbers) and outgoing weights
:math:`v = W_{i+1}[:, j]` (:math:`n_{out}` numbers). Two groups act on :math:`(u, v)`
without changing the network's function:

- **rescaling** (relu, leaky relu, linear: :math:`\\phi(c h) = c\\,\\phi(h)` for
  :math:`c > 0`): :math:`g_c(u, v) = (c u, v / c)`;
- **sign flips** (tanh, linear: :math:`\\phi(-h) = -\\phi(h)`):
  :math:`(u, v) \\mapsto (-u, -v)`.

The likelihood is invariant; with independent zero-mean Normal priors the posterior changes
along a rescaling orbit only through the prior and the change of volume. The generalised
Gibbs sampler (Liu & Sabatti 2000, "Generalised Gibbs sampler and multigrid Monte Carlo",
Biometrika 87(2), 353-369) draws the group element :math:`c` with density

.. math:: q(c) \\propto \\pi(g_c(x))\\, |J_{g_c}(x)|\\, H(dc)

where :math:`H` is the group's left Haar measure and :math:`J` the map's Jacobian, and
moves to :math:`g_c(x)`: that leaves :math:`\\pi` invariant. For the multiplicative group
:math:`H(dc) = dc / c`; the map scales :math:`n_{in}` coordinates by :math:`c` and
:math:`n_{out}` by :math:`1/c`, so :math:`|J| = c^{n_{in} - n_{out}}`. With
:math:`A = \\sum_k u_k^2 / s_{u_k}^2` and :math:`B = \\sum_k v_k^2 / s_{v_k}^2` (each
weight over its prior variance: a layer's weights and bias may have different scales)

.. math:: q(c) \\propto c^{n_{in} - n_{out} - 1}
          \\exp\\big(-(c^2 A + B / c^2) / 2\\big),

and with :math:`t = c^2` (:math:`dc = dt / (2\\sqrt t)`)

.. math:: q(t) \\propto t^{(n_{in} - n_{out})/2 - 1} \\exp\\big(-(A t + B / t) / 2\\big),

the generalised inverse Gaussian :math:`\\mathrm{GIG}(p = (n_{in} - n_{out})/2, A, B)`,
drawn exactly by :func:`~zoo.inference.mcmc.gig.gig`. The units of one layer touch disjoint
weights and their conditionals factorize, so they are drawn together; the layers are moved
one after the other (unit :math:`j` of layer :math:`i` and unit :math:`k` of layer
:math:`i+1` share :math:`W_{i+1}[k, j]`), each move exact given the others. A sign flip
leaves the posterior unchanged, so flipping each unit with probability 1/2 (a uniform
draw of the finite group) leaves it invariant too.

The move does not use the likelihood; the sampler re-evaluates the potential and gradient at
the moved point and goes on from there (the momentum, drawn afresh or carried, is not
touched: the move is a Gibbs step in the position alone).
"""

from __future__ import annotations

import numpy as np
import torch

from zoo.inference.mcmc.gig import gig
from zoo.seeds import Stream, seed_for
from zoo.spec.sections.models import UNIT_SYMMETRIES

__all__ = ["MOVES", "SymmetryMove", "symmetry_move"]

#: The moves of each hidden activation, and what ``auto`` takes (the spec's table).
MOVES: dict[str, tuple[str, ...]] = UNIT_SYMMETRIES


class SymmetryMove:
    """The exact symmetry moves of an MLP's hidden units on flat vectors ``(C, D)``.

    Parameters
    ----------
    kinds : tuple of str
        ``"rescale"`` and/or ``"sign"``, in the order applied.
    layers : tuple
        Per hidden layer ``(w, b, w_next, units, n_prev, n_next, s_w, s_b, s_next)``: the
        flat offsets of its weight ``(units, n_prev)``, its bias and the next layer's weight
        ``(n_next, units)``, and their prior scales.
    seed : int
        The cell's seed: the move's own generator (on ``device``) is seeded from its
        :attr:`~zoo.seeds.Stream.SYMMETRY_MOVES` stream, apart from the kernel's.
    device : torch.device
        Where the chains live.

    All attributes are plain numbers, tuples and a generator, so that a checkpoint saves the
    move whole (:func:`zoo.inference.mcmc.loop.sample` carries it).
    """

    def __init__(
        self, kinds: tuple[str, ...], layers: tuple, seed: int, device: torch.device
    ) -> None:
        self.kinds, self.layers = tuple(kinds), tuple(layers)
        self.label = "+".join(self.kinds)
        ss = np.random.SeedSequence([seed_for(seed, Stream.SYMMETRY_MOVES)])
        s = int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))
        self.gen = torch.Generator(device=device).manual_seed(s)

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """The moved chains: a new ``(C, D)`` tensor (``z`` is not modified)."""
        z = z.clone()
        for kind in self.kinds:
            for layer in self.layers:
                if kind == "rescale":
                    self._rescale(z, layer)
                else:
                    self._flip(z, layer)
        return z

    @staticmethod
    def _views(z: torch.Tensor, layer: tuple) -> tuple[torch.Tensor, ...]:
        w0, b0, v0, h, n_prev, n_next = layer[:6]
        c = z.shape[0]
        w = z[:, w0 : w0 + h * n_prev].view(c, h, n_prev)
        v = z[:, v0 : v0 + n_next * h].view(c, n_next, h)
        return w, z[:, b0 : b0 + h], v

    def _rescale(self, z: torch.Tensor, layer: tuple) -> None:
        """Every unit of ``layer`` along its rescaling orbit, in place (module docstring)."""
        w, b, v = self._views(z, layer)
        n_prev, n_next, s_w, s_b, s_v = layer[4:]
        f64 = torch.float64
        a = (w.to(f64) ** 2).sum(-1) / s_w**2 + b.to(f64) ** 2 / s_b**2
        bb = (v.to(f64) ** 2).sum(1) / s_v**2
        ok = torch.isfinite(a) & torch.isfinite(bb) & (a > 0) & (bb > 0)
        one = torch.ones_like(a)  # a unit with all-zero weights (measure zero) stays
        t = gig(
            (n_prev + 1 - n_next) / 2, torch.where(ok, a, one), torch.where(ok, bb, one), self.gen
        )
        c = torch.where(ok, t, one).sqrt().to(z.dtype)
        w.mul_(c.unsqueeze(-1))
        b.mul_(c)
        v.div_(c.unsqueeze(1))

    def _flip(self, z: torch.Tensor, layer: tuple) -> None:
        """Every unit of ``layer`` flipped with probability 1/2, in place."""
        w, b, v = self._views(z, layer)
        s = torch.randint(0, 2, b.shape, generator=self.gen, device=z.device).to(z.dtype)
        s = 2 * s - 1
        w.mul_(s.unsqueeze(-1))
        b.mul_(s)
        v.mul_(s.unsqueeze(1))


def symmetry_move(setting: str, pot: object, seed: int) -> SymmetryMove | None:
    """The move of a sampler's ``symmetry_moves`` setting on ``pot``'s network; None for
    ``"off"``.

    ``"auto"`` takes the moves of the hidden activation (:data:`MOVES`); ``"rescale"`` and
    ``"sign"`` one of them. ``pot`` is a :class:`~zoo.inference.mcmc.potential.FlatPotential`
    of a :class:`~zoo.models.mlp.BayesianMLP` (its ``model`` and ``site_slices``).

    Raises
    ------
    ValueError
        Naming ``symmetry_moves``: where the network is not an MLP with hidden layers, its
        activation has no such symmetry, or a prior of a moved site is not centred at 0.
    """
    if setting == "off":
        return None
    model = getattr(pot, "model", None)
    act = getattr(model, "act_name", None)
    if act not in MOVES or getattr(model, "depth", 0) < 1:
        raise ValueError(
            f"symmetry_moves: {setting!r} needs an MLP with hidden layers (relu, leaky_relu, "
            f"tanh or linear); this network has {act or 'no MLP activation'} and depth "
            f"{getattr(model, 'depth', None)}; set symmetry_moves: off"
        )
    kinds = MOVES[act] if setting == "auto" else (setting,)
    if not set(kinds) <= set(MOVES[act]):
        raise ValueError(
            f"symmetry_moves: {setting!r} is not a symmetry of {act} units (they have "
            f"{' and '.join(MOVES[act])}); set symmetry_moves: auto or off"
        )
    return SymmetryMove(kinds, _layers(model, pot.site_slices), seed, pot.x.device)


def _layers(model: object, slices: dict) -> tuple:
    """The :class:`SymmetryMove` layout of each hidden layer of ``model``."""
    out = []
    prior, dims = model.prior_params, model.dims
    for i in range(model.depth):
        w, b, v = f"layer{i}.weight", f"layer{i}.bias", f"layer{i + 1}.weight"
        off_centre = [s for s in (w, b, v) if prior[s][0] != 0]
        if off_centre:
            raise ValueError(
                f"symmetry_moves: the priors of {off_centre} are not centred at 0, so the "
                "rescaling and sign moves do not leave them invariant; set symmetry_moves: off"
            )
        out.append(
            (
                slices[w].start,
                slices[b].start,
                slices[v].start,
                dims[i + 1],
                dims[i],
                dims[i + 2],
                float(prior[w][1]),
                float(prior[b][1]),
                float(prior[v][1]),
            )
        )
    return tuple(out)
