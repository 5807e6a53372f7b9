"""The torch side of the over-pruning study: posterior moments, activations, trajectories.

- :func:`guide_moments`: per-weight posterior means and stds of a fitted guide (the guide's
  parameters for mean-field and fixed-variance guides, the marginals of a full-rank one);
- :func:`draw_moments`: the same from posterior draws (NUTS/HMC: a moment-matched Gaussian
  per weight);
- :func:`pruning_outputs`: per-unit statistics of every hidden layer
  (:func:`reports.pruning.unit_stats`), the pruned fractions for the cell's metrics and an
  ``.pruning.npz`` artifact the report reads back;
- :class:`TrajectoryRecorder`: a :func:`zoo.inference.svi.fit_svi` callback that records KL, -ELBO,
  expected train NLL and predictive train and test NLL during optimization (their Figure
  4). It draws with its own seed and restores torch's generator, so the optimization is the
  same with and without it.

MAP and ES are point estimates: they have no posterior std and get no pruning statistics.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from reports.pruning import PruningRule, pruned_fraction, pruned_units, unit_stats
from zoo.data import base as zdata
from zoo.inference.svi import VIPosterior
from zoo.models import mlp as zm
from zoo.spec.sections.pruning import PruningSpec

__all__ = [
    "PruningHook",
    "TrajectoryRecorder",
    "draw_moments",
    "guide_moments",
    "hidden_activations",
    "pruning_outputs",
    "rule_of",
]

Moments = dict[str, tuple[np.ndarray, np.ndarray]]


def rule_of(p: PruningSpec) -> PruningRule:
    """The :class:`reports.pruning.PruningRule` of a spec's ``metrics.pruning`` section."""
    return PruningRule(p.out_snr_max, p.in_kl_max, p.in_std_ratio_min)


def guide_moments(guide: Any, model: zm.BayesianMLP) -> Moments:
    """Posterior mean and marginal std of every weight and bias site of a fitted guide."""
    out: Moments = {}
    sites = guide.latent_sites
    with torch.no_grad():
        for w, b in model.layer_sites():
            for name in (w, b):
                # unconstrained = constrained for real-valued weights; marginal stds for
                # full-rank blocks (row norms of the Cholesky factor)
                loc, scale = guide._unconstrained_loc_scale(sites[name])
                out[name] = (loc.double().numpy().copy(), scale.double().numpy().copy())
    return out


def draw_moments(draws: Mapping[str, torch.Tensor], model: zm.BayesianMLP) -> Moments:
    """Mean and std over the leading (draw) dimension of every weight and bias site."""
    out: Moments = {}
    for w, b in model.layer_sites():
        for name in (w, b):
            a = torch.as_tensor(draws[name]).double().numpy()
            out[name] = (a.mean(0), a.std(0, ddof=1))
    return out


def hidden_activations(
    model: zm.BayesianMLP, x: torch.Tensor, draws: Mapping[str, torch.Tensor]
) -> list[torch.Tensor]:
    """Activations of every hidden layer, each of shape ``(S, len(x), width)``."""
    acts = []
    h = x
    with torch.no_grad():
        for w, b in model.layer_sites()[:-1]:
            h = model.act(torch.matmul(h, draws[w].transpose(-1, -2)) + draws[b].unsqueeze(-2))
            acts.append(h)
    return acts


def pruning_outputs(
    model: zm.BayesianMLP,
    ds: zdata.Dataset,
    moments: Moments,
    draws: Mapping[str, torch.Tensor],
    spec: PruningSpec,
    trajectory: dict[str, np.ndarray] | None = None,
) -> tuple[dict[str, float], bytes]:
    """Pruned fractions (metrics) and the per-unit statistics as ``.npz`` bytes.

    The npz holds, per hidden layer ``k``: the :class:`reports.pruning.UnitStats` fields as
    ``layer{k}.<field>``, ``layer{k}.pruned``, the incoming/outgoing means and stds
    (``layer{k}.in_mean`` ...) and a 20-bin histogram of the activations over the training
    inputs and draws in [-1, 1] (``layer{k}.act_hist``); plus ``traj.<name>`` arrays.
    """
    rule = rule_of(spec)
    acts = hidden_activations(model, torch.as_tensor(ds.x_train), draws)
    layers, arrays = [], {}
    for k in range(model.depth):
        w, b = model.layer_sites()[k]
        w_next = model.layer_sites()[k + 1][0]
        a = acts[k].double().numpy()
        st = unit_stats(moments[w], moments[b], moments[w_next], model.prior_params[w],
                        model.prior_params[b], act_var=a.var(1).mean(0))  # fmt: skip
        layers.append(st)
        for field, v in st._asdict().items():
            arrays[f"layer{k}.{field}"] = v
        arrays[f"layer{k}.pruned"] = pruned_units(st, rule)
        arrays[f"layer{k}.in_mean"] = np.column_stack([moments[w][0], moments[b][0]])
        arrays[f"layer{k}.in_std"] = np.column_stack([moments[w][1], moments[b][1]])
        arrays[f"layer{k}.out_mean"] = moments[w_next][0]
        arrays[f"layer{k}.out_std"] = moments[w_next][1]
        edges = np.linspace(-1.0, 1.0, 21)
        arrays[f"layer{k}.act_hist"] = np.stack(
            [np.histogram(np.clip(a[..., j], -1, 1), edges)[0] for j in range(a.shape[-1])]
        )
    for name, v in (trajectory or {}).items():
        arrays[f"traj.{name}"] = v
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    metrics = pruned_fraction(layers, rule) if layers else {}
    return metrics, buf.getvalue()


def _kl_to_prior(guide: Any, model: zm.BayesianMLP, draws: Mapping[str, torch.Tensor]) -> float:
    """KL(q || prior): closed form per weight site, Monte Carlo (``draws``) for the noise."""
    import pyro.distributions as dist
    from torch.distributions import kl_divergence

    total = 0.0
    for name in guide.latent_sites:
        q = guide.get_posterior(name)
        if name in model.prior_params:
            loc, scale = model.prior_params[name]
            shape = q.event_shape
            p = dist.Normal(torch.tensor(float(loc)), float(scale)).expand(shape)
            p = p.to_event(len(shape))
            try:
                total += float(kl_divergence(q, p).sum())
                continue
            except NotImplementedError:
                pass
        else:  # the learned noise: HalfNormal prior
            p = dist.HalfNormal(torch.tensor(float(model.likelihood.prior_scale)))
        z = draws[name]
        total += float((q.log_prob(z) - p.log_prob(z)).mean())
    return total


class TrajectoryRecorder:
    """``fit_svi`` callback: KL, -ELBO and NLLs every ``every`` steps (their Figure 4).

    All per-point values; predictive NLLs are in the original units of y (``log y_scale``
    added), the KL and -ELBO in the model's (standardized) units. Draws use ``seed`` and
    torch's global generator is restored, so training is unaffected.
    """

    def __init__(self, model: zm.BayesianMLP, guide: Any, ds: zdata.Dataset, every: int,
                 n_draws: int, seed: int) -> None:  # fmt: skip
        self.model, self.guide, self.ds = model, guide, ds
        self.every, self.n_draws, self.seed = every, n_draws, seed
        self.xtr, self.ytr = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
        self.xte, self.yte = torch.as_tensor(ds.x_test), torch.as_tensor(ds.y_test)
        self.rows: list[tuple[float, ...]] = []

    def __call__(self, step: int, loss: float, idx: torch.Tensor) -> None:
        if (step + 1) % self.every != 0 and step != 0:
            return
        post = VIPosterior(self.guide, (self.xtr[:1],))
        draws = post.sample(self.n_draws, seed=self.seed)  # restores the global generator
        with torch.no_grad():
            ll_tr = self.model.log_likelihood(self.xtr, self.ytr, draws).double()
            ll_te = self.model.log_likelihood(self.xte, self.yte, draws).double()
            kl = _kl_to_prior(self.guide, self.model, draws)
        n = len(self.xtr)
        log_s = math.log(self.n_draws)
        log_scale = math.log(self.ds.y_scale)
        exp_nll = -float(ll_tr.sum(1).mean()) / n
        nll_tr = -float((torch.logsumexp(ll_tr, 0) - log_s).mean()) + log_scale
        nll_te = -float((torch.logsumexp(ll_te, 0) - log_s).mean()) + log_scale
        self.rows.append((step + 1, kl / n, exp_nll + kl / n, exp_nll, nll_tr, nll_te, loss))

    def arrays(self) -> dict[str, np.ndarray]:
        """``step, kl, neg_elbo, exp_nll_train, nll_train, nll_test, loss`` as arrays."""
        names = ("step", "kl", "neg_elbo", "exp_nll_train", "nll_train", "nll_test", "loss")
        a = np.array(self.rows, dtype=np.float64).reshape(-1, len(names))
        return {k: a[:, i] for i, k in enumerate(names)}


class PruningHook:
    """The over-pruning study of one svi cell: trajectories during the fit, stats after it."""

    def __init__(self, spec: PruningSpec, model: zm.BayesianMLP, ds: zdata.Dataset,
                 seed: int) -> None:  # fmt: skip
        self.spec, self.model, self.ds, self.seed = spec, model, ds, seed
        self.trajectory: TrajectoryRecorder | None = None

    def recorder(self, guide: Any) -> TrajectoryRecorder | None:
        """The ``fit_svi`` callback for ``guide`` (None without ``trajectory_every``)."""
        if self.spec.trajectory_every:
            self.trajectory = TrajectoryRecorder(self.model, guide, self.ds,
                                                 self.spec.trajectory_every,
                                                 self.spec.trajectory_draws, self.seed + 5)  # fmt: skip
        return self.trajectory

    def finish(self, guide: Any, draws: Mapping[str, torch.Tensor],
               artifacts: dict[str, bytes]) -> dict[str, float]:  # fmt: skip
        """Pruned fractions; stores ``.pruning.npz`` in ``artifacts``."""
        traj = self.trajectory.arrays() if self.trajectory is not None else None
        metrics, data = pruning_outputs(self.model, self.ds, guide_moments(guide, self.model),
                                        draws, self.spec, traj)  # fmt: skip
        artifacts[".pruning.npz"] = data
        return metrics
