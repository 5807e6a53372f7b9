"""The k-tied study on a fitted svi cell (Swiatkowski et al. 2020): the torch side.

:class:`KTiedProbe` hooks into the fit (:class:`~zoo.inference.base.Hooks`: ``on_grads``
and ``on_step``) to record the gradient signal-to-noise ratio of the standard-deviation
parameters (:func:`guides.is_std_param`) over the last ``snr_window`` batches at chosen
steps, and -ELBO per example on the validation split at chosen steps. After training,
:meth:`KTiedProbe.finish` takes the posterior means and standard deviations of every weight
site, their spectra (:mod:`reports.spectrum`), evaluates the posterior on the test set
(:func:`evaluate_loc_std`: the predictive mixture's metrics and the per-draw ones), and
evaluates it again with every std matrix replaced by its clamped rank-k truncation and, as
the control that says whether the std matrices' arrangement matters at all, with every std
matrix shuffled (:func:`reports.spectrum.shuffle_entries`: the same entries in random
positions; :data:`CONTROL_SHUFFLES` shuffles), untruncated and truncated. It returns a few
metrics (top singular-value fractions, the per-draw NLL) and the cell artifact
``.ktied.npz``: the mean and std matrices plus the tables as JSON text.

Draws here use their own seeded generators, never torch's global one, so a run with the
study gives the same fit as one without.
"""

from __future__ import annotations

import io
import json
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

import guides
from reports.calibration import classification_metrics, per_draw_metrics
from reports.spectrum import (
    gradient_snr,
    shuffle_entries,
    snr_summary,
    std_param_count,
    top_fraction,
    truncate,
    variance_fractions,
)
from zoo.inference.base import Fit, Hooks
from zoo.runtime import Runtime
from zoo.seeds import Stream, seed_for
from zoo.spec.sections.inference import KTiedGuide
from zoo.studies.base import CellContext

__all__ = [
    "ARTIFACT",
    "CONTROL_SHUFFLES",
    "RECORD_KEY",
    "KTiedProbe",
    "diag_normal_kl",
    "evaluate_loc_std",
    "load_artifact",
    "site_loc_std",
]

#: Suffix of the cell artifact: an npz of ``<site>/mean`` and ``<site>/std`` arrays plus the
#: JSON text of the tables under :data:`RECORD_KEY`.
ARTIFACT = ".ktied.npz"
RECORD_KEY = "record_json"
#: Floor of truncated (clamped-at-0) standard deviations inside the KL's log term.
KL_STD_FLOOR = 1e-6
#: Shuffled copies of the std matrices evaluated as the truncation's control (each one
#: untruncated and at every truncation rank), from the streams
#: :attr:`~zoo.seeds.Stream.KTIED_SHUFFLE` ``+ i``.
CONTROL_SHUFFLES = 3
_CHUNK = 1000

LocStd = Mapping[str, tuple[torch.Tensor, torch.Tensor]]


def site_loc_std(guide) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{site: (loc, std)}`` of every latent site of a location-scale guide (detached)."""
    out = {}
    for name in guide.latent_sites:
        loc, sd = guide.loc_scale(name)
        out[name] = (loc.detach().clone(), sd.detach().clone())
    return out


def diag_normal_kl(
    loc_std: LocStd, prior: Mapping[str, tuple[float, float]], floor: float = KL_STD_FLOOR
) -> float:
    """KL(q || p) of independent Normals, q from ``loc_std``, p from ``prior`` (loc, scale).

    Standard deviations below ``floor`` (truncated ones clamped at 0) count as ``floor``.
    """
    total = 0.0
    for site, (mu, sd) in loc_std.items():
        p_loc, p_scale = prior[site]
        s = sd.double().clamp_min(floor)
        r = (s / p_scale) ** 2 + ((mu.double() - p_loc) / p_scale) ** 2
        total += float(0.5 * (r - 1.0 - torch.log((s / p_scale) ** 2)).sum())
    return total


def _draws(loc_std: LocStd, n: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        site: loc
        + sd * torch.randn((n, *loc.shape), generator=gen, dtype=loc.dtype, device=loc.device)
        for site, (loc, sd) in loc_std.items()
    }


def _log_probs(model, x: torch.Tensor, draws: Mapping[str, torch.Tensor]) -> np.ndarray:
    """Per-draw log class probabilities ``(S, N, C)``, in chunks of inputs."""
    with torch.no_grad():
        lik = model.likelihood
        parts = [lik.class_log_probs(model.apply(xc, draws)) for xc in x.split(_CHUNK)]
    return Runtime.numpy(torch.cat(parts, -2).double())


def evaluate_loc_std(
    model,
    x: torch.Tensor,
    y: np.ndarray,
    loc_std: LocStd,
    *,
    n_draws: int,
    gen: torch.Generator,
    n_train: int,
    n_bins: int = 15,
) -> dict[str, float]:
    """-ELBO per example, NLL, accuracy, Brier and ECE of N(loc, std^2) on ``(x, y)``.

    ``neg_elbo`` is the expected negative log-likelihood per example (mean over ``n_draws``
    draws from ``gen``) plus KL(q || prior) / ``n_train``; ``nll``, ``accuracy``, ``brier``
    and ``ece`` are metrics of the predictive mixture
    (:func:`reports.calibration.classification_metrics`); ``nll_per_draw``,
    ``accuracy_per_draw`` and their ``_sem`` are the means over draws of each draw's own
    metric (:func:`reports.calibration.per_draw_metrics`; the paper's Table 2 convention).
    """
    logp = _log_probs(model, x, _draws(loc_std, n_draws, gen))
    res = classification_metrics(logp, np.asarray(y), n_bins=n_bins)
    res.update(per_draw_metrics(logp, np.asarray(y)))
    exp_nll = res["nll_per_draw"]  # the expected NLL under q, the ELBO's data term
    res["neg_elbo"] = exp_nll + diag_normal_kl(loc_std, model.prior_params) / n_train
    return {k: float(v) for k, v in res.items()}


class KTiedProbe:
    """The k-tied study of one svi cell: SNR and -ELBO during the fit, spectra after it.

    Parameters
    ----------
    section : KTiedStudy
        The study's settings.
    ctx : CellContext
        The cell (classification data; -ELBO at steps uses the validation split, the test
        split when there is none). Draws are seeded from the cell's seed.
    """

    def __init__(self, section: Any, ctx: CellContext) -> None:
        if ctx.ds.n_classes == 0:
            raise ValueError("studies: the k-tied study needs classification data")
        m = ctx.cell.method
        self.study, self.ctx, self.seed = section, ctx, ctx.seed
        self.model = ctx.model
        #: the k of a k-tied guide (None for an untied one): for the parameter counts
        self.rank = m.guide.rank if isinstance(m.guide, KTiedGuide) else None
        #: the optimizer settings, so the report compares SNRs only between alike fits
        self.optim = {
            "lr": m.lr,
            "scale_lr": m.scale_lr,
            "batch_size": m.batch_size,
            "betas": list(m.betas),
        }
        self.guide = None
        self.sites = [w for w, _ in ctx.model.layer_sites()]
        self._snr_due = {
            s - 1 - k for s in section.snr_steps for k in range(section.snr_window)
        }  # 0-based steps whose gradients are kept
        self._buf: deque = deque(maxlen=section.snr_window)
        self.snr: dict[str, dict[str, dict[str, float]]] = {site: {} for site in self.sites}
        self.elbo: dict[str, float] = {}
        self.init_std_top1: dict[str, float] = {}
        has_val = ctx.data.x_val is not None
        self.val_name = "validation" if has_val else "test"
        self.x_val = ctx.data.x_val if has_val else ctx.data.x_test
        self.y_val = ctx.ds.y_val if has_val else ctx.ds.y_test

    @property
    def hooks(self) -> Hooks:
        return Hooks(on_start=self.on_start, on_step=self.on_step, on_grads=self.on_grads)

    def on_start(self, guide) -> None:
        """Remember the guide being fitted (before training starts)."""
        self.guide = guide

    def on_grads(self, step: int, grads: Mapping[str, torch.Tensor]) -> None:
        """Keep the std parameters' gradients of the steps inside SNR windows."""
        if step == 0 and self.guide is not None:
            for site, (_, sd) in site_loc_std(self.guide).items():
                if site in self.sites:
                    self.init_std_top1[site] = top_fraction(Runtime.numpy(sd), 1)
        if step not in self._snr_due:
            return
        keep = {}
        for site in self.sites:
            parts = [
                g.reshape(-1)
                for name, g in sorted(grads.items())
                if name.endswith(f".{site}") and guides.is_std_param(self.guide, name)
            ]
            if parts:
                keep[site] = Runtime.numpy(torch.cat(parts).double())
        self._buf.append((step, keep))
        window = self.study.snr_window
        if step + 1 in self.study.snr_steps and len(self._buf) == window:
            steps = [s for s, _ in self._buf]
            if steps[-1] - steps[0] == window - 1:  # consecutive batches
                for site in self.sites:
                    if all(site in k for _, k in self._buf):
                        g = np.stack([k[site] for _, k in self._buf])
                        self.snr[site][str(step + 1)] = snr_summary(gradient_snr(g))

    def on_step(self, step: int, guide, loss: float) -> None:
        """-ELBO per example on the validation split at chosen steps."""
        if step + 1 not in self.study.elbo_steps:
            return
        res = evaluate_loc_std(
            self.model,
            self.x_val,
            self.y_val,
            site_loc_std(guide),
            n_draws=self.study.elbo_draws,
            gen=self.ctx.runtime.generator(seed_for(self.seed, Stream.KTIED_ELBO_STEP, step)),
            n_train=len(self.ctx.ds.x_train),
        )
        self.elbo[str(step + 1)] = res["neg_elbo"]

    def finish(self, fit: Fit) -> tuple[dict[str, Any], dict[str, bytes]]:
        """Spectra, truncation table and parameter counts: ``(metrics, {ARTIFACT: npz})``."""
        loc_std = site_loc_std(fit.posterior.guide)
        study, ds, rt = self.study, self.ctx.ds, self.ctx.runtime
        layers, arrays = {}, {}
        for site in self.sites:
            loc, sd = (Runtime.numpy(t) for t in loc_std[site])
            arrays[f"{site}/mean"], arrays[f"{site}/std"] = loc, sd
            layers[site] = {
                "shape": list(loc.shape),
                "mean_fractions": variance_fractions(loc).tolist(),
                "std_fractions": variance_fractions(sd).tolist(),
                "init_std_top1": self.init_std_top1.get(site),
                "std_params_mean_field": std_param_count(loc.shape),
                "std_params_k_tied": {str(k): std_param_count(loc.shape, k) for k in (1, 2, 3)},
                "std_params": std_param_count(loc.shape, self.rank),
            }
        sds = {site: Runtime.numpy(loc_std[site][1]).astype(np.float64) for site in self.sites}
        ranks = list(study.truncation_ranks)

        def evaluate(stds: dict[str, np.ndarray], k: int | None) -> dict[str, float]:
            """Test metrics with the std matrices ``stds`` (others as fitted) truncated at k."""
            ls, clamped = dict(loc_std), 0
            for site, sd in stds.items():
                loc = loc_std[site][0]
                t = sd if k is None else truncate(sd, k)
                clamped += int((t <= 0).sum()) if k is not None else 0
                ls[site] = (loc, rt.tensor(t, dtype=loc.dtype))
            res = evaluate_loc_std(
                self.model,
                self.ctx.data.x_test,
                ds.y_test,
                ls,
                n_draws=study.truncation_draws,
                gen=rt.generator(seed_for(self.seed, Stream.KTIED_EVAL)),
                n_train=len(ds.x_train),
                n_bins=self.ctx.cell.spec.metrics.ece_bins,
            )
            res["clamped_entries"] = clamped
            return res

        def key(k: int | None) -> str:
            return "none" if k is None else str(k)

        # every row uses the same weight-noise draws (common random numbers); "none" is the
        # posterior as fitted, evaluated for every cell (per-draw and mixture NLL)
        trunc = {key(k): evaluate(sds if k else {}, k) for k in ([None, *ranks] if ranks else [])}
        predictive = trunc["none"] if ranks else evaluate({}, None)
        control: dict[str, list[dict[str, float]]] = {}
        for i in range(CONTROL_SHUFFLES if ranks else 0):
            rng = np.random.default_rng(seed_for(self.seed, Stream.KTIED_SHUFFLE, i))
            shuffled = {site: shuffle_entries(sd, rng) for site, sd in sds.items()}
            for k in [None, *ranks]:
                control.setdefault(key(k), []).append(evaluate(shuffled, k))
        record = {
            "rank": self.rank,
            "optim": self.optim,
            "layers": layers,
            "truncation": trunc,
            "truncation_control": control,
            "control_shuffles": CONTROL_SHUFFLES if ranks else 0,
            "predictive": predictive,
            "predictive_draws": study.truncation_draws,
            "snr": self.snr,
            "snr_window": study.snr_window,
            "elbo_steps": self.elbo,
            "elbo_split": self.val_name,
            "kl_std_floor": KL_STD_FLOOR,
        }
        buf = io.BytesIO()
        arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
        arrays[RECORD_KEY] = np.array(json.dumps(record, sort_keys=True))
        np.savez_compressed(buf, **arrays)
        metrics: dict[str, Any] = {}
        for site, info in layers.items():
            metrics[f"std_top1.{site}"] = info["std_fractions"][0]
            metrics[f"mean_top1.{site}"] = info["mean_fractions"][0]
        for name in ("nll_per_draw", "nll_per_draw_sem", "accuracy_per_draw"):
            metrics[name] = predictive[name]
        return metrics, {ARTIFACT: buf.getvalue()}


def load_artifact(source) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The (tables, ``{"<site>/mean"|"<site>/std": array}``) of a ``.ktied.npz`` file.

    ``source`` is a path, a file object or the file's bytes.
    """
    if isinstance(source, bytes):
        source = io.BytesIO(source)
    with np.load(source, allow_pickle=False) as f:
        record = json.loads(str(f[RECORD_KEY]))
        arrays = {k: f[k] for k in f.files if k != RECORD_KEY}
    return record, arrays
