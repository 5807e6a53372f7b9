"""The k-tied study on a fitted svi cell (Swiatkowski et al. 2020): the torch side.

:class:`StudyRecorder` hooks into :func:`zoo.inference.svi.fit_svi` (its ``callback`` and
``grad_callback``) to record the gradient signal-to-noise ratio of the standard-deviation
parameters over the last ``snr_window`` batches at chosen steps, and -ELBO per example on
the validation split at chosen steps. After training, :meth:`StudyRecorder.finish` takes the
posterior means and standard deviations of every weight site, their spectra
(:mod:`reports.spectrum`), and evaluates the posterior with every std matrix replaced by its
clamped rank-k truncation. It returns a few metrics (top singular-value fractions) and the
cell artifact ``.ktied.npz``: the mean and std matrices plus the tables as JSON text.

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

from reports.calibration import classification_metrics
from reports.spectrum import (
    gradient_snr,
    snr_summary,
    std_param_count,
    top_fraction,
    truncate,
    variance_fractions,
)
from zoo.data import base as zdata
from zoo.spec.sections.ktied import KTiedStudy

__all__ = [
    "ARTIFACT",
    "RECORD_KEY",
    "StudyRecorder",
    "load_artifact",
    "diag_normal_kl",
    "evaluate_loc_std",
    "site_loc_std",
]

#: Suffix of the cell artifact: an npz of ``<site>/mean`` and ``<site>/std`` arrays plus the
#: JSON text of the tables under :data:`RECORD_KEY`.
ARTIFACT = ".ktied.npz"
RECORD_KEY = "record_json"
#: Floor of truncated (clamped-at-0) standard deviations inside the KL's log term.
KL_STD_FLOOR = 1e-6
_CHUNK = 1000


def site_loc_std(guide) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{site: (loc, std)}`` of every latent site of a location-scale guide (detached)."""
    out = {}
    for name, info in guide.latent_sites.items():
        loc, sd = guide._unconstrained_loc_scale(info)
        out[name] = (loc.detach().clone(), sd.detach().clone().reshape(loc.shape))
    return out


def diag_normal_kl(
    loc_std: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    prior: Mapping[str, tuple[float, float]],
    floor: float = KL_STD_FLOOR,
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


def _draws(loc_std, n: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        site: loc + sd * torch.randn((n, *loc.shape), generator=gen)
        for site, (loc, sd) in loc_std.items()
    }


def _log_probs(model, x: np.ndarray, draws: Mapping[str, torch.Tensor]) -> np.ndarray:
    """Per-draw log class probabilities ``(S, N, C)``, in chunks of inputs."""
    xt = torch.as_tensor(x)
    with torch.no_grad():
        parts = [torch.log_softmax(model.apply(xc, draws), -1) for xc in xt.split(_CHUNK)]
    return torch.cat(parts, -2).double().numpy()


def evaluate_loc_std(
    model,
    x: np.ndarray,
    y: np.ndarray,
    loc_std: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    *,
    n_draws: int,
    seed: int,
    n_train: int,
    n_bins: int = 15,
) -> dict[str, float]:
    """-ELBO per example, NLL, accuracy, Brier and ECE of N(loc, std^2) on ``(x, y)``.

    ``neg_elbo`` is the expected negative log-likelihood per example (mean over draws)
    plus KL(q || prior) / ``n_train``; the others are metrics of the predictive mixture
    (:func:`reports.calibration.classification_metrics`).
    """
    logp = _log_probs(model, x, _draws(loc_std, n_draws, seed))
    res = classification_metrics(logp, np.asarray(y), n_bins=n_bins)
    exp_nll = -float(np.take_along_axis(logp, np.asarray(y)[None, :, None], -1).mean())
    res["neg_elbo"] = exp_nll + diag_normal_kl(loc_std, model.prior_params) / n_train
    return {k: float(v) for k, v in res.items()}


def _weight_sites(model) -> list[str]:
    return [w for w, _ in model.layer_sites()]


class StudyRecorder:
    """Collects the k-tied study outputs of one svi cell.

    Parameters
    ----------
    model
        A zoo model (``layer_sites``, ``apply``, ``prior_params``).
    ds : Dataset
        Classification data; -ELBO at steps uses ``ds.x_val`` (``x_test`` if None).
    study : KTiedStudy
    seed : int
        Seeds the draws of the evaluations.
    rank : int or None
        The k of a k-tied guide (None for mean field): for the parameter counts.
    optim : dict, optional
        The optimizer settings of the fit (lr, batch size, betas), recorded so that the
        report compares gradient SNRs only between fits trained alike.
    """

    def __init__(self, model, ds: zdata.Dataset, study: KTiedStudy, seed: int,
                 rank: int | None = None, optim: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        if ds.n_classes == 0:
            raise ValueError("inference.ktied: the k-tied study needs classification data")
        self.model, self.ds, self.study, self.seed, self.rank = model, ds, study, seed, rank
        self.optim = dict(optim or {})
        self.guide = None
        self.sites = _weight_sites(model)
        self._snr_due = {
            s - 1 - k for s in study.snr_steps for k in range(study.snr_window)
        }  # 0-based steps whose gradients are kept
        self._buf: deque = deque(maxlen=study.snr_window)
        self.snr: dict[str, dict[str, dict[str, float]]] = {site: {} for site in self.sites}
        self.elbo: dict[str, float] = {}
        self.init_std_top1: dict[str, float] = {}
        self.val_name = "validation" if ds.x_val is not None else "test"

    def attach(self, guide) -> None:
        """Remember the guide being fitted (before training starts)."""
        self.guide = guide

    # fit_svi hooks ---------------------------------------------------------------
    def on_grads(self, step: int, grads: Mapping[str, torch.Tensor]) -> None:
        """``grad_callback`` of fit_svi: keep std-parameter gradients inside SNR windows."""
        if step == 0 and self.guide is not None:
            for site, (_, sd) in site_loc_std(self.guide).items():
                if site in self.sites:
                    self.init_std_top1[site] = top_fraction(sd.numpy(), 1)
        if step not in self._snr_due:
            return
        keep = {}
        for site in self.sites:
            parts = [g.reshape(-1) for name, g in sorted(grads.items())
                     if name.endswith((f"scales.{site}", f"log_u.{site}", f"log_v.{site}"))]  # fmt: skip
            if parts:
                keep[site] = torch.cat(parts).double().numpy()
        self._buf.append((step, keep))
        if step + 1 in self.study.snr_steps and len(self._buf) == self.study.snr_window:
            steps = [s for s, _ in self._buf]
            if steps[-1] - steps[0] == self.study.snr_window - 1:  # consecutive batches
                for site in self.sites:
                    if all(site in k for _, k in self._buf):
                        g = np.stack([k[site] for _, k in self._buf])
                        self.snr[site][str(step + 1)] = snr_summary(gradient_snr(g))

    def on_step(self, step: int, loss: float, idx: torch.Tensor) -> None:
        """``callback`` of fit_svi: -ELBO per example on the validation split at chosen steps."""
        if step + 1 not in self.study.elbo_steps or self.guide is None:
            return
        x, y = (self.ds.x_val, self.ds.y_val) if self.ds.x_val is not None else (
            self.ds.x_test, self.ds.y_test)  # fmt: skip
        res = evaluate_loc_std(
            self.model, x, y, site_loc_std(self.guide), n_draws=self.study.elbo_draws,
            seed=self.seed + 1000 + step, n_train=len(self.ds.x_train),
        )  # fmt: skip
        self.elbo[str(step + 1)] = res["neg_elbo"]

    # after training ----------------------------------------------------------------
    def finish(self, guide, n_bins: int = 15) -> tuple[dict[str, Any], dict[str, bytes]]:
        """Spectra, truncation table and parameter counts; returns (metrics, artifacts)."""
        loc_std = site_loc_std(guide)
        study, ds = self.study, self.ds
        layers = {}
        arrays = {}
        for site in self.sites:
            loc, sd = (t.numpy() for t in loc_std[site])
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
        trunc = {}
        for k in [None, *study.truncation_ranks] if study.truncation_ranks else []:
            ls = dict(loc_std)
            clamped = 0
            for site in self.sites:
                loc, sd = loc_std[site]
                if k is not None:
                    t = truncate(sd.numpy().astype(np.float64), k)
                    clamped += int((t <= 0).sum())
                    ls[site] = (loc, torch.as_tensor(t, dtype=loc.dtype))
            res = evaluate_loc_std(
                self.model, ds.x_test, ds.y_test, ls, n_draws=study.truncation_draws,
                seed=self.seed + 500, n_train=len(ds.x_train), n_bins=n_bins,
            )  # fmt: skip
            res["clamped_entries"] = clamped
            trunc["none" if k is None else str(k)] = res
        record = {
            "rank": self.rank,
            "optim": self.optim,
            "layers": layers,
            "truncation": trunc,
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
        return metrics, {ARTIFACT: buf.getvalue()}


def load_artifact(path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The (tables, ``{"<site>/mean"|"<site>/std": array}``) of a ``.ktied.npz`` file."""
    with np.load(path, allow_pickle=False) as f:
        record = json.loads(str(f[RECORD_KEY]))
        arrays = {k: f[k] for k in f.files if k != RECORD_KEY}
    return record, arrays
