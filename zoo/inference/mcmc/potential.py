"""The potential energy of a :class:`~zoo.models.mlp.BayesianMLP` as one function of a flat vector.

:class:`FlatPotential` is :math:`U(z) = -\\log p(z \\mid x, y) + c` as one function of a flat
unconstrained vector ``z`` (sites concatenated in model order, ``noise`` as
:math:`\\log\\sigma` with its Jacobian), computed from the network function and the Normal
prior parameters, never through a Pyro trace: the HMC and NUTS kernels of :mod:`zoo.inference.mcmc.samplers`
call :meth:`FlatPotential.value_and_grad` once per leapfrog step. Gradients come from autograd
(the reference); the batched gradient of the networks :mod:`~zoo.inference.mcmc.replay`
covers calls autograd's own derivative formulas without recording a graph (the same bits),
and one chain's there is that of a batch of one; ``hand_backward=True`` computes one
chain's by backpropagation written out (:mod:`~zoo.inference.mcmc.hand_backward`, another
rounding).
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Mapping

import pyro
import torch
import torch.nn.functional as F

from zoo.inference.mcmc import hand_backward, replay
from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP

__all__ = ["FlatPotential", "flat_layout"]

_LOG_2PI = math.log(2 * math.pi)
#: The likelihoods whose energy is written batched over chains (:meth:`FlatPotential._energy_batch`);
#: another goes row by row.
BATCHED_LIKELIHOODS = CategoricalLikelihood | BernoulliLikelihood | GaussianLikelihood


def flat_layout(site_shapes: Mapping[str, tuple[int, ...]]) -> tuple[dict[str, slice], int]:
    """Each site's slice of the flat vector, in the mapping's order, and its length."""
    slices: dict[str, slice] = {}
    pos = 0
    for name, shape in site_shapes.items():
        slices[name] = slice(pos, pos + math.prod(shape))
        pos += math.prod(shape)
    return slices, pos


class FlatPotential:
    """Potential energy of a BayesianMLP posterior over a flat unconstrained vector.

    .. math:: U(z) = -\\Big(\\sum_s \\log \\mathcal N(\\theta_s; m_s, s_s^2)
              + \\log p(\\sigma) + \\log\\sigma
              + \\sum_n \\log p(y_n \\mid x_n, \\theta, \\sigma)\\Big),
              \\quad z = (\\mathrm{vec}\\,\\theta, \\log\\sigma)

    Parameters
    ----------
    model : BayesianMLP
    x, y : Tensor
        The full training set (no minibatching in MCMC).
    hand_backward : bool
        :meth:`value_and_grad` (one chain) by the hand-written backward pass
        (:meth:`_hand_value_and_grad`) instead of autograd or the replay, where the network
        is supported (:attr:`hand_backward` says whether it is in use). Opt-in: its gradient
        equals autograd's to float rounding, not bitwise, so one-chain samplers' draws move.
    """

    def __init__(
        self, model: BayesianMLP, x: torch.Tensor, y: torch.Tensor, hand_backward: bool = False
    ) -> None:
        self.model = model
        self.x = torch.as_tensor(x, device=x.device if isinstance(x, torch.Tensor) else "cpu")
        self._xt: torch.Tensor | None = None  # x transposed, made on first batched use
        self._batch_energy = self._energy_batch  # torch.compile'd by compile()
        self._own_energy_batch = type(self)._energy_batch is FlatPotential._energy_batch  # replay
        self._own_energy = type(self)._energy is FlatPotential._energy  # and one chain's
        self.compiled = False
        lik = model.likelihood
        cat = isinstance(lik, CategoricalLikelihood)  # class indices; Bernoulli 0/1 as floats
        y = torch.as_tensor(y, device=self.x.device)  # the labels live with the inputs
        self.y = y.long() if cat else y.to(self.x.dtype)
        # every weight and bias site in model order (an MLP's layer0.weight, layer0.bias, ...)
        self.site_shapes: dict[str, tuple[int, ...]] = {
            name: tuple(shape) for name, (shape, _) in model.site_info().items()
        }
        self.n_weights = model.num_params
        self.learned_noise = isinstance(lik, GaussianLikelihood) and lik.noise is None
        if self.learned_noise:
            self.site_shapes["noise"] = ()
        self.site_slices, self.dim = flat_layout(self.site_shapes)
        # prior over the weights, hoisted: loc, precision and normalizing constant
        loc, scale = [], []
        for name in model.prior_params:
            n = math.prod(self.site_shapes[name])
            loc += [model.prior_params[name][0]] * n
            scale += [model.prior_params[name][1]] * n
        dev = self.x.device  # the prior lives where the data does (CUDA included)
        self._loc = torch.tensor(loc, dtype=self.x.dtype, device=dev)
        sc = torch.tensor(scale, dtype=torch.float64, device="cpu")
        self._prec = (1 / sc**2).to(device=dev, dtype=self.x.dtype)
        self._const = float(-(sc.log().sum() + 0.5 * _LOG_2PI * len(scale)))
        self._zero_loc = bool((self._loc == 0).all())
        self._uniform_prec = (
            float(self._prec[0]) if bool((self._prec == self._prec[0]).all()) else None
        )
        if self.learned_noise:
            s = lik.prior_scale
            self._noise_const = math.log(2) - 0.5 * _LOG_2PI - math.log(s)
            self._noise_prec = 1 / s**2
        self._sizes = [sl.stop - sl.start for sl in self.site_slices.values()]
        self._wshapes = [self.site_shapes[w] for w, _ in model.layer_sites()]
        # constants of U left out of _energy: prior normalizers and the Gaussian's
        self._offset = -self._const
        if isinstance(lik, GaussianLikelihood):
            n = len(self.y)
            s = 1.0 if self.learned_noise else float(lik.noise)
            self._offset += n * (math.log(s) + 0.5 * _LOG_2PI)
        if self.learned_noise:
            self._offset -= self._noise_const
        self._act_slope = self._hand_activation()
        self.hand_backward = hand_backward and self._act_slope is not None

    # --- parameter maps ------------------------------------------------------------------
    def unravel(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{site: constrained tensor}``, shapes ``batch + site_shape``, from ``batch + (D,)``."""
        batch = z.shape[:-1]
        out = {
            n: z[..., sl].reshape(batch + self.site_shapes[n]) for n, sl in self.site_slices.items()
        }
        if self.learned_noise:
            out["noise"] = out["noise"].exp()
        return out

    def ravel(self, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Inverse of :meth:`unravel`: flat unconstrained ``z`` of shape ``batch + (D,)``."""
        missing = [n for n in self.site_slices if n not in params]
        if missing:
            raise KeyError(f"params lack sites {missing}; expected {list(self.site_slices)}")
        name0, shape0 = next(iter(self.site_shapes.items()))  # a conv kernel has 4 dims
        first = torch.as_tensor(params[name0], device=self.x.device)
        batch = first.shape[: first.dim() - len(shape0)]
        parts = []
        for name, shape in self.site_shapes.items():
            v = torch.as_tensor(params[name], dtype=self.x.dtype, device=self.x.device)
            if name == "noise":
                v = v.log()
            if tuple(v.shape[len(batch) :]) != shape:
                raise ValueError(
                    f"site {name!r} has shape {tuple(v.shape)}, expected batch + {shape}"
                )
            parts.append(v.reshape(batch + (-1,)))
        return torch.cat(parts, -1)

    # --- energy ---------------------------------------------------------------------------
    def _log_prior(self, z: torch.Tensor) -> torch.Tensor:
        zw = z[..., : self.n_weights]
        d = zw if self._zero_loc else zw - self._loc
        if self._uniform_prec is None:
            quad = (d * d * self._prec).sum(-1)
        else:  # one dot product in the sampler's unbatched case
            quad = self._uniform_prec * (d.dot(d) if z.dim() == 1 else (d * d).sum(-1))
        lp = self._const - 0.5 * quad
        if self.learned_noise:  # HalfNormal on sigma = exp(z_n), plus log|d sigma / d z_n| = z_n
            zn = z[..., -1]
            lp = lp + self._noise_const - 0.5 * self._noise_prec * (2 * zn).exp() + zn
        return lp

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """U(z) for ``z`` of shape ``batch + (D,)``, through ``model.log_likelihood``."""
        with pyro.validation_enabled(False):
            ll = self.model.log_likelihood(self.x, self.y, self.unravel(z)).sum(-1)
        return -(ll + self._log_prior(z))

    def _energy(self, z: torch.Tensor) -> torch.Tensor:
        """U(z) - c for one flat z with few autograd nodes: one split, fused bias and loss."""
        parts = z.split(self._sizes)
        h = self.x
        for i, (w, b) in enumerate(zip(parts[0:-1:2], parts[1::2], strict=False)):
            h = F.linear(h, w.view(self._wshapes[i]), b)
            if i < self.model.depth:
                h = self.model.act(h)
        zn = parts[-1].squeeze() if self.learned_noise else None
        return self._energy_of_output(h, z, zn)

    def _energy_of_output(
        self, h: torch.Tensor, z: torch.Tensor, zn: torch.Tensor | None
    ) -> torch.Tensor:
        """U(z) - c given the network's output ``h`` at the training inputs for one flat
        ``z`` (``zn``: its log noise scale, with a learned noise): the likelihood's fused
        loss (otherwise its ``log_prob``) and the Normal prior. Shared by every potential
        that computes ``h`` its own way (:class:`~zoo.inference.mcmc.functional.ModulePotential`)."""
        lik = self.model.likelihood
        if isinstance(lik, CategoricalLikelihood):
            nll = F.cross_entropy(h, self.y, reduction="sum")
        elif isinstance(lik, BernoulliLikelihood):
            nll = F.binary_cross_entropy_with_logits(h.squeeze(-1), self.y, reduction="sum")
        elif isinstance(lik, GaussianLikelihood):
            sq = F.mse_loss(h.squeeze(-1), self.y, reduction="sum")
            if self.learned_noise:  # N log sigma, the prior on sigma and the Jacobian
                n = len(self.y)
                nll = 0.5 * (-2 * zn).exp() * sq + (n - 1) * zn
                nll = nll + 0.5 * self._noise_prec * (2 * zn).exp()
            else:
                nll = sq * (0.5 / float(lik.noise) ** 2)
        else:
            with pyro.validation_enabled(False):
                nll = -lik.log_prob(h, self.y, self.unravel(z)).sum()
        zw = z[: self.n_weights] if self.learned_noise else z
        d = zw if self._zero_loc else zw - self._loc
        if self._uniform_prec is None:
            return nll + 0.5 * (d * d * self._prec).sum()
        return nll + (0.5 * self._uniform_prec) * d.dot(d)

    def value_and_grad(self, z: torch.Tensor) -> tuple[float, torch.Tensor]:
        """``(U(z), dU/dz)`` for one flat ``z`` of shape ``(D,)``: one forward, one backward.

        Known likelihoods (categorical, Bernoulli, Gaussian) use fused losses; constants are added as a
        Python float. Equal to :meth:`__call__` (which follows the model) up to rounding.
        On the networks :func:`~zoo.inference.mcmc.replay.replays_one` covers it is
        :meth:`value_and_grad_batch` of a batch of one, bit for bit: the batched layout (the
        N points along the products' long side) and autograd's formulas without its graph
        cost less than autograd through ``F.linear`` (``benchmarks/potential_floor.py``).
        """
        if self.hand_backward:
            u, g = self._hand_value_and_grad(z.detach().unsqueeze(0))
            return u.item(), g[0]
        if replay.replays_one(self):  # a batch of one, replayed: batched autograd's bits
            u, g = self.value_and_grad_batch(z.detach().unsqueeze(0))
            return u.item(), g[0]
        z = z.detach().requires_grad_(True)
        u = self._energy(z)
        (g,) = torch.autograd.grad(u, z)
        return u.item() + self._offset, g

    # --- the hand-written backward pass (:mod:`~zoo.inference.mcmc.hand_backward`) -----------
    def _hand_activation(self) -> float | None:
        """:func:`~zoo.inference.mcmc.hand_backward.activation_slope` of this potential."""
        return hand_backward.activation_slope(self)

    def _hand_value_and_grad(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`~zoo.inference.mcmc.hand_backward.value_and_grad` of this potential."""
        return hand_backward.value_and_grad(self, z)

    def _energy_batch(
        self, z: torch.Tensor, keep: list | None = None, into: torch.Tensor | None = None
    ) -> torch.Tensor:
        """U(z) - c for ``z`` of shape ``(C, D)``: one batched matmul per layer, shape ``(C,)``
        (written into ``into`` if given: no graph); ``keep`` gets each layer's (input, W,
        pre-activation, output), then the logits (categorical: their log-softmax; a learned
        noise: with its terms' tensors, for the replay), then the prior's term."""
        c = z.shape[0]
        parts = z.split(self._sizes, -1)
        if self._xt is None:
            self._xt = self.x.T.contiguous()
        # Units x points, h (C, units, N): W (out, in) @ h (in, N) per chain, N the long side of
        # every product: 1.6-2.6x faster than (C, N, units) @ W^T for widths 4-21.
        h = self._xt.expand(c, *self._xt.shape)
        for i, (w, b) in enumerate(zip(parts[0:-1:2], parts[1::2], strict=False)):
            w = w.view(c, *self._wshapes[i])
            a = torch.baddbmm(b.unsqueeze(2), w, h)
            out = self.model.act(a) if i < self.model.depth else a
            if keep is not None:
                keep.append((h, w, a, out))
            h = out
        lik = self.model.likelihood
        if isinstance(lik, CategoricalLikelihood):  # classes in dim 1: vectorized over N
            # cross_entropy's own two steps, so that replay's backward can keep the first
            h = torch.log_softmax(h, 1)
            nll = F.nll_loss(h, self.y.expand(c, -1), reduction="none").sum(1)
        elif isinstance(lik, BernoulliLikelihood):  # one logit: h is (C, 1, N)
            nll = F.binary_cross_entropy_with_logits(
                h.squeeze(1), self.y.expand(c, -1), reduction="none"
            ).sum(1)
        else:  # Gaussian (value_and_grad_batch checked the kind)
            res = h.squeeze(1) - self.y
            sq = (res * res).sum(1)
            if self.learned_noise:  # as in _energy, the operations in its order
                zn, n = z[:, -1], len(self.y)
                e_neg = (-2 * zn).exp()
                half = 0.5 * e_neg
                nll = half * sq + (n - 1) * zn
                e_pos = (2 * zn).exp()
                nll = nll + 0.5 * self._noise_prec * e_pos
                if keep is not None:  # what replay's backward reads of the noise's terms
                    h = (h, res, sq, e_neg, half, e_pos)
            else:
                nll = sq * (0.5 / float(lik.noise) ** 2)
        if keep is not None:  # for replay's backward: the logits (categorical: log-softmax)
            keep.append(h)
        zw = z[:, : self.n_weights] if self.learned_noise else z
        d = zw if self._zero_loc else zw - self._loc
        if self._uniform_prec is None:
            prior = 0.5 * (d * d * self._prec).sum(-1)
        else:
            prior = (0.5 * self._uniform_prec) * (d * d).sum(-1)
        if keep is not None:
            keep.append(prior)
        return torch.add(nll, prior, out=into)

    def value_and_grad_batch(
        self, z: torch.Tensor, finish: bool = True, into: tuple | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(U(z), dU/dz)`` for ``C`` flat vectors ``z`` of shape ``(C, D)`` at once.

        One forward and one backward for all rows (``torch.baddbmm`` per layer on activations
        of shape ``(C, units, N)``, the loss on logits of shape ``(C, K, N)``, which torch's softmax vectorizes over the N points: 1.5
        to 4 times faster than over ``(C * N, K)`` for K = 2 to 10), so C chains of a small
        network cost little more than one. Rows do not interact: a non-finite row leaves the others unchanged.
        The backward is autograd's, or on the networks :func:`~zoo.inference.mcmc.replay.replays`
        covers its formulas called without a graph (:mod:`~zoo.inference.mcmc.replay`): the same
        bits for less CPU time (``benchmarks/potential_floor.py`` measures how much).

        Parameters
        ----------
        z : Tensor
        finish : bool, default True
            False: ``u`` before its last step (:meth:`finish_batch` takes it there), so that a
            sampler that keeps many points finishes them in one operation. Batched NUTS asks
            so when this method carries ``finishes_later`` (a subclass that overrides it
            does not, unless it sets that too).
        into : (Tensor, Tensor), optional
            Tensors to write ``u`` (as ``finish=False`` gives it: ``(C,)``, the dtype of
            ``z``) and the gradient into, which are then returned, so that a sampler keeping
            many points writes each into its stack without a copy. Batched NUTS passes them
            when this method carries ``writes_into`` (as ``finishes_later``).

        Returns
        -------
        u : Tensor
            ``U`` per row, float64, shape ``(C,)``; the same constants as :meth:`value_and_grad`.
        grad : Tensor
            ``dU/dz``, shape ``(C, D)``, the dtype of ``z``.
        """
        if z.dim() != 2 or z.shape[1] != self.dim:
            raise ValueError(f"z has shape {tuple(z.shape)}; expected (chains, {self.dim})")
        lik = self.model.likelihood
        if not isinstance(lik, BATCHED_LIKELIHOODS):
            pairs = [self.value_and_grad(zc) for zc in z]  # unknown likelihood: row by row
            return torch.tensor(
                [u for u, _ in pairs], dtype=torch.float64, device=z.device
            ), torch.stack([g for _, g in pairs])
        if replay.replays(self):  # autograd's formulas without its graph: the same bits
            u, g = replay.value_and_grad(self, z.detach(), into)
        else:
            z = z.detach().requires_grad_(True)
            u = self._batch_energy(z)
            (g,) = torch.autograd.grad(u.sum(), z)
            u = u.detach()
            if into is not None:
                u, g = into[0].copy_(u), into[1].copy_(g)
        return (u.double() + self._offset if finish else u), g

    value_and_grad_batch.finishes_later = True
    value_and_grad_batch.writes_into = True

    def finish_batch(self, u: torch.Tensor) -> torch.Tensor:
        """``U`` from the ``u`` of :meth:`value_and_grad_batch` with ``finish=False``, of any
        shape: the energy in float64 plus the constants left out of it, elementwise, so the
        same bits for a stack of rows as row by row (an unknown likelihood's rows come
        finished)."""
        lik = self.model.likelihood
        if not isinstance(lik, BATCHED_LIKELIHOODS):
            return u
        return u.double() + self._offset

    def grad_batch(self, z: torch.Tensor) -> torch.Tensor:
        """``dU/dz`` of :meth:`value_and_grad_batch` alone (the same numbers), for the leapfrog
        steps that need no energy (all but a trajectory's last)."""
        lik = self.model.likelihood
        if z.dim() != 2 or z.shape[1] != self.dim or not isinstance(lik, BATCHED_LIKELIHOODS):
            return self.value_and_grad_batch(z)[1]
        if replay.replays(self):
            return replay.value_and_grad(self, z.detach())[1]
        z = z.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(self._batch_energy(z).sum(), z)
        return g

    def compile(self, rows: int | None = None) -> float:
        """Run :meth:`value_and_grad_batch` through ``torch.compile`` from now on.

        Inductor fuses the batched forward and backward (the activation, its mask and the
        bias into the products' epilogues), which the eager batch cannot (the speed-up
        measured: ``docs/notes/samplers.md``). Values and gradients equal the eager ones to
        float rounding (the order of the sums changes). Known likelihoods only (an unknown
        one goes row by row, eagerly).

        Parameters
        ----------
        rows : int, optional
            Compile now for batches of this many rows (a sampler's chains), so that the
            compilation is not timed as sampling; otherwise at the first call. Another
            number of rows compiles again (``dynamic=False``: every shape is specialized).

        Returns
        -------
        float
            Seconds spent compiling now (0 without ``rows``).

        Raises
        ------
        RuntimeError
            On a CPU without a C++ compiler (inductor writes C++ for the CPU).
        """
        if self.x.device.type == "cpu":
            cxx = os.environ.get("CXX", "c++")
            if shutil.which(cxx) is None and shutil.which("g++") is None:
                raise RuntimeError(
                    f"compile: torch.compile needs a C++ compiler on the CPU and found none "
                    f"({cxx!r}, 'g++'); install one (Debian: apt-get install g++) or set "
                    "compile: false"
                )
        if self._xt is None:  # made before tracing, so the compiled code only reads it
            self._xt = self.x.T.contiguous()
        if not self.compiled:
            self._batch_energy = torch.compile(self._energy_batch, dynamic=False)
            self.compiled = True
        if rows is None:
            return 0.0
        t0 = time.perf_counter()
        self.value_and_grad_batch(
            torch.zeros(rows, self.dim, dtype=self.x.dtype, device=self.x.device)
        )
        return time.perf_counter() - t0

    def prior_scale(self) -> float:
        """The largest prior standard deviation of a weight: the widest scale the prior
        gives a coordinate (what ``min_trajectory: prior`` of NUTS and HMC reads)."""
        return float(self._prec.min().rsqrt())

    def prior_draw(self, gen: torch.Generator) -> torch.Tensor:
        """A flat ``z`` drawn from the prior with ``gen`` (a CPU generator: the draw is made
        on the CPU, so it is the same number on every device, then moved to the data's)."""
        loc, sd = self._loc.cpu(), self._prec.rsqrt().cpu()
        zw = loc + torch.randn(self.n_weights, generator=gen, device="cpu") * sd
        if self.learned_noise:
            sigma = torch.randn(1, generator=gen, device="cpu").abs() / math.sqrt(self._noise_prec)
            zw = torch.cat([zw, sigma.log()])
        return zw.to(self.x.device)


# --- functional core ----------------------------------------------------------------------
