"""The torch side of the over-pruning study: posterior moments, activations, trajectories.

- :func:`guide_moments`: per-weight posterior means and stds of a fitted guide
  (``guide.loc_scale``: the guide's parameters for mean-field and fixed-variance guides,
  the marginals of a full-rank one);
- :func:`draw_moments`: the same from posterior draws (NUTS/HMC: a moment-matched Gaussian
  per weight);
- :func:`pruning_outputs`: per-unit statistics of every hidden layer
  (:func:`reports.pruning.unit_stats`), the pruned fractions for the cell's metrics and an
  ``.pruning.npz`` artifact the report reads back;
- :func:`functional_outputs`: the rule-free measure of every hidden layer, each unit's share
  of the variance of its contribution to the next layer over the test inputs and the
  posterior draws, and the effective number of units (:mod:`reports.pruning`);
- :class:`TrajectoryRecorder`: an ``on_step`` hook of the fit that records KL, -ELBO,
  expected train NLL and predictive train and test NLL during optimization (their Figure
  4). It draws with its own seed and restores torch's generator, so the optimization is the
  same with and without it;
- :func:`function_arrays`: for one-dimensional inputs, posterior function draws on a grid
  with the teacher's function where the data have one (their Figure 3's panels);
- :class:`PruningProbe`: the study's probe of one cell (svi, sampler or point estimate).

MAP and ES are point estimates: they have no posterior std and get no rule-based
statistics, but they do get the functional measure (from their one set of weights), as do
GD (whose fixed std the rule cannot judge) and the samplers.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyro.distributions as dist
import torch
from torch.distributions import kl_divergence

from reports.pruning import (
    PruningRule,
    contribution_variance,
    functional_metrics,
    pruned_fraction,
    pruned_units,
    unit_stats,
    variance_shares,
)
from zoo.inference.base import Fit, Hooks
from zoo.inference.point import PointPosterior
from zoo.inference.sampling import SampledPosterior
from zoo.inference.svi import VIPosterior
from zoo.models.base import BayesianNet
from zoo.runtime import Runtime
from zoo.seeds import Stream, seed_for
from zoo.studies.base import CellContext
from zoo.studies.pruning.nulls import functional_nulls, hidden_activations, prior_draws

__all__ = [
    "ARTIFACT",
    "PruningProbe",
    "TrajectoryRecorder",
    "draw_moments",
    "function_arrays",
    "functional_outputs",
    "guide_moments",
    "hidden_activations",
    "pruning_outputs",
    "rule_of",
]

#: Suffix of the cell artifact: per-unit statistics, moments, histograms, trajectories.
ARTIFACT = ".pruning.npz"

Moments = dict[str, tuple[np.ndarray, np.ndarray]]


def rule_of(p: Any) -> PruningRule:
    """The :class:`reports.pruning.PruningRule` of a pruning study section."""
    return PruningRule(p.out_snr_max, p.in_kl_max, p.in_std_ratio_min)


def guide_moments(guide: Any, model: BayesianNet) -> Moments:
    """Posterior mean and marginal std of every weight and bias site of a fitted guide."""
    out: Moments = {}
    with torch.no_grad():
        for w, b in model.layer_sites():
            for name in (w, b):
                # unconstrained = constrained for real-valued weights; marginal stds for
                # full-rank blocks (row norms of the Cholesky factor)
                loc, scale = guide.loc_scale(name)
                out[name] = (
                    Runtime.numpy(loc.double()).copy(),
                    Runtime.numpy(scale.double()).copy(),
                )
    return out


def draw_moments(draws: Mapping[str, torch.Tensor], model: BayesianNet) -> Moments:
    """Mean and std over the leading (draw) dimension of every weight and bias site."""
    out: Moments = {}
    for w, b in model.layer_sites():
        for name in (w, b):
            a = Runtime.numpy(draws[name].double())
            out[name] = (a.mean(0), a.std(0, ddof=1))
    return out


def functional_outputs(
    model: BayesianNet, x: torch.Tensor, draws: Mapping[str, torch.Tensor]
) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Each hidden unit's share of output variance, per hidden layer, at inputs ``x``.

    For layer ``k``: the variance of ``a_j(x) W_{k+1}[:, j]`` (summed over the next layer's
    units) within draws (``layer{k}.var_within``: mean over draws of the variance over
    inputs) and between draws (``layer{k}.var_between``), and their normalised sum
    (``layer{k}.var_share``; :func:`reports.pruning.contribution_variance`). Returns the
    shares per layer and these arrays.
    """
    acts = hidden_activations(model, x, draws)
    shares, arrays = [], {}
    for k in range(model.depth):
        w_next = draws[model.layer_sites()[k + 1][0]]
        within, between = contribution_variance(
            Runtime.numpy(acts[k].double()), Runtime.numpy(w_next.double())
        )
        share = variance_shares(within + between)
        shares.append(share)
        arrays[f"layer{k}.var_within"] = within
        arrays[f"layer{k}.var_between"] = between
        arrays[f"layer{k}.var_share"] = share
    return shares, arrays


def pruning_outputs(
    model: BayesianNet,
    x_train: torch.Tensor,
    moments: Moments | None,
    draws: Mapping[str, torch.Tensor],
    spec: Any,
    trajectory: dict[str, np.ndarray] | None = None,
    x_test: torch.Tensor | None = None,
    prior: Mapping[str, torch.Tensor] | None = None,
    null_seed: int = 0,
    extra: Mapping[str, np.ndarray] | None = None,
) -> tuple[dict[str, float], bytes]:
    """Pruned fractions and effective units (metrics) and the per-unit statistics as ``.npz``.

    The npz holds, per hidden layer ``k``: with ``moments`` (methods with a posterior std),
    the :class:`reports.pruning.UnitStats` fields as ``layer{k}.<field>``,
    ``layer{k}.pruned``, the incoming/outgoing means and stds (``layer{k}.in_mean`` ...)
    and a 20-bin histogram of the activations over the training inputs and draws in
    [-1, 1] (``layer{k}.act_hist``); for every method the variance shares of
    :func:`functional_outputs` at ``x_test`` (default ``x_train``); plus ``traj.<name>``
    arrays. Metrics: :func:`reports.pruning.pruned_fraction` (with ``moments``),
    :func:`reports.pruning.functional_metrics` (always) and, given ``prior`` draws,
    :func:`functional_nulls` (shuffles seeded with ``null_seed``). ``extra`` arrays are
    stored as given (:func:`function_arrays`).
    """
    rule = rule_of(spec)
    layers, masks, arrays = [], [], {}
    if moments is not None:
        acts = hidden_activations(model, x_train, draws)
        for k in range(model.depth):
            w, b = model.layer_sites()[k]
            w_next = model.layer_sites()[k + 1][0]
            a = Runtime.numpy(acts[k].double())
            st = unit_stats(
                moments[w],
                moments[b],
                moments[w_next],
                model.prior_params[w],
                model.prior_params[b],
                act_var=a.var(1).mean(0),
            )
            layers.append(st)
            for field, v in st._asdict().items():
                arrays[f"layer{k}.{field}"] = v
            masks.append(pruned_units(st, rule))
            arrays[f"layer{k}.pruned"] = masks[-1]
            arrays[f"layer{k}.in_mean"] = np.column_stack([moments[w][0], moments[b][0]])
            arrays[f"layer{k}.in_std"] = np.column_stack([moments[w][1], moments[b][1]])
            arrays[f"layer{k}.out_mean"] = moments[w_next][0]
            arrays[f"layer{k}.out_std"] = moments[w_next][1]
            edges = np.linspace(-1.0, 1.0, 21)
            arrays[f"layer{k}.act_hist"] = np.stack(
                [np.histogram(np.clip(a[..., j], -1, 1), edges)[0] for j in range(a.shape[-1])]
            )
    shares, fn_arrays = functional_outputs(model, x_train if x_test is None else x_test, draws)
    arrays.update(fn_arrays)
    for name, v in (trajectory or {}).items():
        arrays[f"traj.{name}"] = v
    arrays.update(extra or {})
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    metrics = pruned_fraction(layers, rule) if layers else {}
    metrics.update(functional_metrics(shares, masks if layers else None))
    if prior is not None:
        x_null = x_train if x_test is None else x_test
        metrics.update(functional_nulls(model, x_null, draws, prior, null_seed))
    return metrics, buf.getvalue()


#: Grid points and stored draws of :func:`function_arrays`.
FUNCTION_GRID, FUNCTION_DRAWS = 200, 20


def function_arrays(ctx: CellContext, draws: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Posterior functions of a regression on one input, in original units (empty otherwise).

    On :data:`FUNCTION_GRID` points spanning the training and test inputs: ``fn.x``, the
    first :data:`FUNCTION_DRAWS` draws' functions ``fn.draws``, the mean and std of all
    draws' functions (``fn.mean``, ``fn.sd``; no noise), the teacher's function ``fn.true``
    where the data have one, and the training points ``fn.x_train``, ``fn.y_train``. The
    posterior-function panels of Trippe & Turner (2018, Figure 3). No random draw of its own.
    """
    ds, model = ctx.ds, ctx.model
    if ds.n_classes or ds.x_train.shape[1] != 1:
        return {}
    xs = np.concatenate([ds.x_train[:, 0], ds.x_test[:, 0]])
    grid = np.linspace(xs.min(), xs.max(), FUNCTION_GRID)
    x = torch.as_tensor(grid[:, None], dtype=ctx.data.x_train.dtype, device=ctx.data.x_train.device)
    with torch.no_grad():
        f = Runtime.numpy(model.apply(x, draws)[..., 0].double()) * ds.y_scale + ds.y_shift
    out = {
        "fn.x": grid,
        "fn.draws": f[:FUNCTION_DRAWS],
        "fn.mean": f.mean(0),
        "fn.sd": f.std(0),
        "fn.x_train": ds.x_train[:, 0],
        "fn.y_train": ds.y_train * ds.y_scale + ds.y_shift,
    }
    if ds.true_params is not None:
        true = {
            k: torch.as_tensor(v, dtype=x.dtype, device=x.device)[None]
            for k, v in ds.true_params.items()
        }
        with torch.no_grad():
            out["fn.true"] = (
                Runtime.numpy(model.apply(x, true)[0, :, 0].double()) * ds.y_scale + ds.y_shift
            )
    return out


def _kl_to_prior(
    guide: Any, model: BayesianNet, draws: Mapping[str, torch.Tensor], rt: Runtime
) -> float:
    """KL(q || prior): closed form per weight site, Monte Carlo (``draws``) for the noise."""
    total = 0.0
    for name in guide.latent_sites:
        q = guide.get_posterior(name)
        if name in model.prior_params:
            loc, scale = model.prior_params[name]
            shape = q.event_shape
            p = dist.Normal(rt.tensor(float(loc)), float(scale)).expand(shape)
            p = p.to_event(len(shape))
            try:
                total += float(kl_divergence(q, p).sum())
                continue
            except NotImplementedError:
                pass
        else:  # the learned noise: HalfNormal prior
            p = dist.HalfNormal(rt.tensor(float(model.likelihood.prior_scale)))
        z = draws[name]
        total += float((q.log_prob(z) - p.log_prob(z)).mean())
    return total


class TrajectoryRecorder:
    """``on_step`` hook: KL, -ELBO and NLLs every ``every`` steps (their Figure 4).

    All per-point values; predictive NLLs are in the original units of y (``log y_scale``
    added), the KL and -ELBO in the model's (standardized) units. Draws use ``seed`` and
    torch's global generator is restored, so training is unaffected.
    """

    def __init__(self, ctx: CellContext, every: int, n_draws: int, seed: int) -> None:
        self.model, self.ctx = ctx.model, ctx
        self.every, self.n_draws, self.seed = every, n_draws, seed
        self.rows: list[tuple[float, ...]] = []

    def on_step(self, step: int, guide: Any, loss: float) -> None:
        if (step + 1) % self.every != 0 and step != 0:
            return
        data = self.ctx.data
        xtr, ytr, xte, yte = data.x_train, data.y_train, data.x_test, data.y_test
        post = VIPosterior(guide, (xtr[:1],))
        draws = post.sample(self.n_draws, seed=self.seed)  # restores the global generator
        with torch.no_grad():
            ll_tr = self.model.log_likelihood(xtr, ytr, draws).double()
            ll_te = self.model.log_likelihood(xte, yte, draws).double()
            kl = _kl_to_prior(guide, self.model, draws, self.ctx.runtime)
        n = len(xtr)
        log_s = math.log(self.n_draws)
        log_scale = math.log(self.ctx.ds.y_scale)
        exp_nll = -float(ll_tr.sum(1).mean()) / n
        nll_tr = -float((torch.logsumexp(ll_tr, 0) - log_s).mean()) + log_scale
        nll_te = -float((torch.logsumexp(ll_te, 0) - log_s).mean()) + log_scale
        self.rows.append((step + 1, kl / n, exp_nll + kl / n, exp_nll, nll_tr, nll_te, loss))

    def arrays(self) -> dict[str, np.ndarray]:
        """``step, kl, neg_elbo, exp_nll_train, nll_train, nll_test, loss`` as arrays."""
        names = ("step", "kl", "neg_elbo", "exp_nll_train", "nll_train", "nll_test", "loss")
        a = np.array(self.rows, dtype=np.float64).reshape(-1, len(names))
        return {k: a[:, i] for i, k in enumerate(names)}


#: Posterior class -> its per-weight (mean, std): a guide's own, or moments of all draws.
#: Point estimates have none, and get no rule-based statistics (the functional measure only).
MOMENTS = {
    VIPosterior: lambda post, model: guide_moments(post.guide, model),
    SampledPosterior: lambda post, model: draw_moments(post.all(), model),
}


class PruningProbe:
    """The over-pruning study of one cell: trajectories during an svi fit, stats after it.

    ``finish`` takes the posterior's moments (:data:`MOMENTS`) and ``section.draws`` draws
    (stream :attr:`~zoo.seeds.Stream.PRUNING`; one for a point estimate) for the activation
    variances on the training inputs and the variance shares on the test inputs;
    trajectories use the stream :attr:`~zoo.seeds.Stream.PRUNING_TRAJECTORY`.
    """

    def __init__(self, section: Any, ctx: CellContext) -> None:
        self.section, self.ctx = section, ctx
        self.trajectory: TrajectoryRecorder | None = None
        if section.trajectory_every:
            self.trajectory = TrajectoryRecorder(
                ctx,
                section.trajectory_every,
                section.trajectory_draws,
                seed_for(ctx.seed, Stream.PRUNING_TRAJECTORY),
            )

    @property
    def hooks(self) -> Hooks:
        return Hooks(on_step=self.trajectory.on_step if self.trajectory is not None else None)

    def finish(self, fit: Fit) -> tuple[dict[str, Any], dict[str, bytes]]:
        """Pruned fractions, effective units and ``{ARTIFACT: npz}``.

        A point estimate gets the effective units only (no posterior std for the rule).
        """
        post = fit.posterior
        moments = MOMENTS.get(type(post))
        traj = (
            self.trajectory.arrays()
            if self.trajectory is not None and self.trajectory.rows
            else None
        )
        n = 1 if isinstance(post, PointPosterior) else self.section.draws
        draws = post.sample(n, seed_for(self.ctx.seed, Stream.PRUNING))
        data = self.ctx.data
        null_seed = seed_for(self.ctx.seed, Stream.PRUNING_NULL)
        metrics, npz = pruning_outputs(
            self.ctx.model,
            data.x_train,
            moments(post, self.ctx.model) if moments is not None else None,
            draws,
            self.section,
            traj,
            x_test=data.x_test,
            prior=prior_draws(self.ctx.model, draws, self.section.draws, null_seed),
            null_seed=null_seed,
            extra=function_arrays(self.ctx, draws),
        )
        return metrics, {ARTIFACT: npz}
