"""The Laplace price of mean field of one cell: mode, curvature, KL and W2 (no sampling).

:class:`LaplaceProbe` takes the fitted point of a cell (a ``map`` or ``mle`` estimate, an svi
posterior's mean: ``Posterior.median()``), refines it to a mode of the negative log
posterior by full-batch L-BFGS (:func:`~zoo.studies.laplace.curvature.find_mode`), takes the
curvature ``H`` there (exact Hessian or generalized Gauss-Newton,
:mod:`zoo.studies.laplace.curvature`) and records, from :func:`reports.laplace.laplace_diag_vs_full`,

- ``laplace_kl`` = KL(q_diag || q_full) = (sum_i log H_ii - log det H) / 2 for q_full =
  N(mode, H^-1) and q_diag its KL-closest diagonal Gaussian (precisions H_ii), and
  ``laplace_w2``, the closed-form 2-Wasserstein distance between them;
- per layer ``laplace_kl_layer{i}`` and ``laplace_w2_layer{i}`` from the layer's block of
  ``H`` (its Gaussian with the other layers held at the mode), and
  ``laplace_kl_marginal_layer{i}`` from its block of ``H^-1`` (its marginal, as the sampled
  study's ``kl_diag_full.layer{i}`` reads it);
- with ``refinements`` R > 1, the spread of the KL and W2 over R modes, one refined from
  the point and R - 1 from jittered copies of it (``laplace_kl_refine_mean``,
  ``laplace_kl_refine_sd``, ``laplace_kl_refine_rel_sd``, ``laplace_w2_refine_sd``): ReLU
  networks have no exact mode, and this measures how much that moves the number;
- ``laplace_min_eig`` (smallest eigenvalue of ``H``), ``laplace_grad_norm`` (the gradient
  norm at the mode), ``laplace_refine_iters`` and ``laplace_refine_shift`` (how far L-BFGS
  moved the point), ``laplace_curvature``; and ``laplace_seconds``, a wall-clock time that
  stays in the cell's record, out of results.csv (:func:`zoo.execution.report.is_timing`).

With ``save_precision``, H itself is stored as the cell artifact
``.laplace_precision.npy`` (:data:`PRECISION_ARTIFACT`): the target of the Gaussian ground
truth (``simulation: {kind: gaussian, cov_file: <that file>, file_holds: precision}``), so
that the samplers, Gaussian fit, null and excess are checked on the Laplace posterior of a
real network.

All in float64 on the cell's device; nothing random but the jitter of the extra starts
(stream :attr:`~zoo.seeds.Stream.LAPLACE_REFINE`).
"""

from __future__ import annotations

import io
import time
from typing import Any

import numpy as np
import pyro
import torch
from threadpoolctl import threadpool_limits

from reports.laplace import laplace_diag_vs_full
from zoo.inference.base import Fit, Hooks
from zoo.runtime import Runtime
from zoo.seeds import Stream, seed_for
from zoo.studies.base import CellContext
from zoo.studies.laplace.curvature import find_mode, flat_weights, ggn, hessian, neg_log_posterior

__all__ = ["PRECISION_ARTIFACT", "LaplaceProbe", "laplace_at_mode", "laplace_metrics"]

#: The cell artifact of ``save_precision``: H, the precision of q_full, as a ``.npy``.
PRECISION_ARTIFACT = ".laplace_precision.npy"


def laplace_metrics(
    model: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    point: dict[str, torch.Tensor],
    *,
    curvature: str,
    refine_steps: int,
) -> dict[str, Any]:
    """The study's metrics for ``model`` on ``(x, y)`` from the starting ``point`` (sites).

    ``x`` and ``y`` are the full training set; they and ``point`` are cast to float64 (class
    labels stay integers). A learned ``noise`` in ``point`` is held fixed.
    """
    return laplace_at_mode(model, x, y, point, curvature=curvature, refine_steps=refine_steps)[0]


def laplace_at_mode(
    model: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    point: dict[str, torch.Tensor],
    *,
    curvature: str,
    refine_steps: int,
) -> tuple[dict[str, Any], np.ndarray]:
    """:func:`laplace_metrics` and the curvature ``H`` itself (NumPy float64, ``(D, D)``,
    weights and biases in model order): the precision of q_full = N(mode, H^-1)."""
    start = time.perf_counter()
    x = x.to(torch.float64)
    y = y.to(torch.float64) if y.is_floating_point() else y
    flat = flat_weights(model, x.device)
    fixed = {k: v.to(torch.float64) for k, v in point.items() if k not in flat.slices}
    u = neg_log_posterior(model, flat, x, y, fixed)
    z0 = flat.ravel(point).to(x.device)
    z, iters = find_mode(u, z0, refine_steps)
    with pyro.validation_enabled(False):
        grad = torch.func.grad(u)(z)
        if curvature == "hessian":
            h = hessian(u, z, width=max(model.dims), n=len(x))
        else:
            h = ggn(model, flat, z, x, y, fixed)
    h_np = Runtime.numpy(h)
    with threadpool_limits(torch.get_num_threads()):  # NumPy's BLAS: the cell's threads
        res = laplace_diag_vs_full(h_np, flat.blocks)
    out: dict[str, Any] = {f"laplace_{k}": v for k, v in res.items()}
    out.update(
        laplace_curvature=curvature,
        laplace_grad_norm=float(grad.norm()),
        laplace_refine_iters=iters,
        laplace_refine_shift=float((z - z0).norm()),
        laplace_seconds=time.perf_counter() - start,
    )
    return out, h_np


class LaplaceProbe:
    """The Laplace study of one point or svi cell (module docstring)."""

    def __init__(self, section: Any, ctx: CellContext) -> None:
        self.section, self.ctx = section, ctx

    @property
    def hooks(self) -> Hooks:
        return Hooks()

    def finish(self, fit: Fit) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The ``laplace_*`` metrics, and with ``save_precision`` the artifact
        :data:`PRECISION_ARTIFACT` (H as a ``.npy``); nothing above ``max_params``."""
        model, data, s = self.ctx.model, self.ctx.data, self.section
        if model.num_params > s.max_params:
            return {
                "laplace_skipped": f"{model.num_params} parameters > max_params {s.max_params}"
            }, {}
        point = {
            k: torch.as_tensor(v, device=data.x_train.device)
            for k, v in fit.posterior.median().items()
        }
        res, h = laplace_at_mode(
            model,
            data.x_train,
            data.y_train,
            point,
            curvature=s.curvature,
            refine_steps=s.refine_steps,
        )
        metrics = {k: (float(v) if isinstance(v, np.floating) else v) for k, v in res.items()}
        if s.refinements > 1:
            metrics.update(self._spread(point, res))
        if not s.save_precision:
            return metrics, {}
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(h, dtype=np.float64), allow_pickle=False)
        return metrics, {PRECISION_ARTIFACT: buf.getvalue()}

    def _spread(self, point: dict[str, torch.Tensor], first: dict[str, Any]) -> dict[str, float]:
        """The KL and W2 over ``refinements`` modes: ``first`` (from ``point``) and
        ``refinements - 1`` refined from ``point`` jittered by ``refine_jitter`` times each
        site's root mean square (a CPU generator seeded from the cell's seed)."""
        model, data, s = self.ctx.model, self.ctx.data, self.section
        gen = torch.Generator().manual_seed(seed_for(self.ctx.seed, Stream.LAPLACE_REFINE))
        kls, w2s = [float(first["laplace_kl"])], [float(first["laplace_w2"])]
        sites = model.site_info()  # weights and biases; a learned noise stays as it is
        for _ in range(s.refinements - 1):
            start = dict(point)
            for k, v in point.items():
                if k not in sites:
                    continue
                rms = float(v.double().pow(2).mean().sqrt()) if v.numel() else 0.0
                eps = torch.randn(v.shape, generator=gen, dtype=torch.float64)
                start[k] = v + (s.refine_jitter * rms * eps).to(v.device, v.dtype)
            res, _ = laplace_at_mode(
                model,
                data.x_train,
                data.y_train,
                start,
                curvature=s.curvature,
                refine_steps=s.refine_steps,
            )
            kls.append(float(res["laplace_kl"]))
            w2s.append(float(res["laplace_w2"]))
        kl, w2 = np.asarray(kls), np.asarray(w2s)
        return {
            "laplace_kl_refine_mean": float(kl.mean()),
            "laplace_kl_refine_sd": float(kl.std(ddof=1)),
            "laplace_kl_refine_rel_sd": float(kl.std(ddof=1) / abs(kl.mean())),
            "laplace_w2_refine_sd": float(w2.std(ddof=1)),
        }
