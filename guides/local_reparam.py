r"""Local reparameterization (Kingma, Salimans & Welling, 2015) as a Pyro messenger.

For a linear layer :math:`b = x W^\top` whose weight entries are independent Gaussians,
:math:`W_{ji} \sim \mathcal{N}(M_{ji}, S_{ji}^2)`, each pre-activation is Gaussian given the
input row :math:`x_n`:

.. math::

    b_{nj} \sim \mathcal{N}\Big(\sum_i x_{ni} M_{ji},\ \sum_i x_{ni}^2 S_{ji}^2\Big),

so instead of sampling :math:`W` once per minibatch one samples :math:`b` with fresh noise
per data row. The per-row marginals, which are all the expected log-likelihood
:math:`\sum_n \mathbb{E}_q[\log p(y_n \mid x_n, W)]` needs, are unchanged, so the ELBO
estimate stays unbiased, while the rows of a minibatch no longer share one weight draw and
the gradient variance drops (their section 2.3).

It is exact only for weights with *independent* entries: :class:`~guides.AutoMeanField`,
:class:`~guides.AutoFixedVarianceNormal` (``Normal`` sites) and
:class:`~guides.AutoKTiedNormal` (:class:`~guides.distributions.KTiedNormal`, a diagonal
Gaussian). Matrix-normal and full-rank guides correlate the entries of :math:`W`, so the
output rows would be correlated too and per-row sampling changes the (joint) law; their
weights fall back to sampling :math:`W` (or raise with ``strict=True``).

Usage::

    with LocalReparameterization():
        loss = svi.step(x, y)

or ``SVI(local_reparam(model), local_reparam(guide), ...)``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import torch
import torch.nn.functional as F
from pyro.poutine.messenger import Messenger
from pyro.poutine.runtime import Message
from torch.distributions import Distribution, Independent, Normal
from torch.utils.weak import WeakIdKeyDictionary

from guides.distributions import KTiedNormal

__all__ = [
    "LocalReparameterization",
    "Moments",
    "local_reparam",
    "register_independent_gaussian",
    "sample_linear",
]

T = TypeVar("T")


class Moments(NamedTuple):
    """Mean and variance of every entry of an independent-Gaussian weight draw."""

    loc: torch.Tensor
    variance: torch.Tensor


_MOMENTS: dict[type, Callable[[Any], Moments]] = {
    Normal: lambda d: Moments(d.loc, d.scale.pow(2)),
    KTiedNormal: lambda d: Moments(d.loc, d.variance),
}


def register_independent_gaussian(cls: type, moments: Callable[[Any], Moments]) -> None:
    """Declare that draws of ``cls`` have independent Gaussian entries.

    Parameters
    ----------
    cls : type
        A distribution class (subclasses match too).
    moments : callable
        ``moments(d) -> Moments(loc, variance)``, both broadcastable to a draw's shape.
    """
    _MOMENTS[cls] = moments


def _moments(fn: Distribution, value: torch.Tensor) -> Moments | None:
    """Moments of each entry of ``value ~ fn`` if its entries are independent Gaussians."""
    while isinstance(fn, Independent):
        fn = fn.base_dist
    for cls in type(fn).__mro__:
        if cls in _MOMENTS:
            loc, var = _MOMENTS[cls](fn)
            try:
                return Moments(loc.expand(value.shape), var.expand(value.shape))
            except RuntimeError:
                return None
    return None


# A weight recorded as drawn from a distribution with correlated entries.
_CORRELATED = object()
# draw -> Moments or _CORRELATED; keyed by identity, entries die with the draw.
_RECORDS: WeakIdKeyDictionary = WeakIdKeyDictionary()
_ACTIVE: list[LocalReparameterization] = []
_LOCK = threading.Lock()
_original_linear: Callable[..., torch.Tensor] = F.linear


def _reparameterized_linear(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``F.linear`` while a :class:`LocalReparameterization` is active."""
    entry = _RECORDS.get(weight) if _ACTIVE and isinstance(weight, torch.Tensor) else None
    if entry is _CORRELATED and any(m.strict for m in _ACTIVE):
        raise ValueError(
            "LocalReparameterization(strict=True): F.linear got a weight drawn from a "
            "distribution with correlated entries (e.g. MatrixNormal or FullRankNormal); "
            "local reparameterization is exact only for independent Gaussian entries "
            "(Normal, KTiedNormal). Use strict=False to sample the weight instead."
        )
    if not isinstance(entry, Moments) or weight.dim() not in (1, 2):
        return _original_linear(input, weight, bias)
    return sample_linear(input, entry.loc, entry.variance, bias)


def sample_linear(
    input: torch.Tensor,
    loc: torch.Tensor,
    variance: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Pre-activations of a linear layer whose weight entries are independent Gaussians
    :math:`\mathcal{N}(\text{loc}, \text{variance})`, drawn from their Gaussian marginals:
    :math:`x\,\text{loc}^\top + b + \sqrt{x^{\circ 2}\,\text{variance}^\top} \circ
    \varepsilon` (the square root clamped at the dtype's smallest normal number), one
    ``randn_like`` draw per output. What :class:`LocalReparameterization` puts in place of
    ``F.linear``, and what a step that does without Pyro's traces calls to draw the same
    numbers (:mod:`zoo.inference.fused_local`). Uses torch's own ``F.linear``, never the
    patched one.
    """
    mean = _original_linear(input, loc, bias)
    var = _original_linear(input * input, variance)
    scale = var.clamp_min(torch.finfo(var.dtype).tiny).sqrt()
    return mean + scale * torch.randn_like(mean)


class LocalReparameterization(Messenger):
    r"""Sample the outputs of ``F.linear`` instead of the weights, for Gaussian weights.

    While active, it (1) records every latent value drawn at a Pyro sample site together
    with the mean and variance of its entries when its distribution has independent
    Gaussian entries (``Normal``, ``Independent(Normal)``, ``KTiedNormal`` or a class
    declared with :func:`register_independent_gaussian`), and (2) replaces
    ``torch.nn.functional.linear`` so that a call whose ``weight`` is such a recorded draw
    (the same tensor object) returns

    .. math::

        x M^\top + b + \sqrt{x^{\circ 2} (S^{\circ 2})^\top} \circ \varepsilon,
        \qquad \varepsilon_{nj} \sim \mathcal{N}(0, 1) \text{ i.i.d.},

    with :math:`M, S^{\circ 2}` the recorded mean and variance and the bias :math:`b` added
    as given (a sampled bias is shared by all rows, as without local reparameterization).
    Other calls of ``F.linear`` are unchanged, e.g. a weight drawn from a correlated
    distribution (``MatrixNormal``, ``FullRankNormal``: its entries are dependent and
    per-row sampling would not be exact), a weight replayed from a trace recorded outside
    any ``LocalReparameterization``, or a batched (vectorized-particles) weight.

    Only draws made at the site itself are recorded: a value supplied by ``replay`` (the
    model replaying the guide's draws) keeps the moments recorded when the guide drew it,
    so the guide and the model must both run inside (``svi.step`` does). Records are keyed
    by tensor identity with weak references, so they vanish with the draws.

    Parameters
    ----------
    strict : bool, default False
        Raise when ``F.linear`` meets a weight drawn from a correlated distribution,
        instead of falling back to the sampled weight.

    Notes
    -----
    ``torch.nn.functional.linear`` is replaced while at least one instance is active (the
    contexts nest) and restored when the outermost exits, also on exceptions. Models that
    call ``torch.matmul`` or ``x @ w.T`` directly are not affected. Not thread-safe with
    respect to other threads entering or leaving the context.

    References
    ----------
    .. [1] D. P. Kingma, T. Salimans and M. Welling, "Variational Dropout and the Local
       Reparameterization Trick", NeurIPS 2015.
    """

    def __init__(self, strict: bool = False) -> None:
        super().__init__()
        self.strict = bool(strict)
        self._pending: dict[int, dict] = {}

    def __enter__(self) -> LocalReparameterization:
        global _original_linear
        with _LOCK:
            if not _ACTIVE and F.linear is not _reparameterized_linear:
                _original_linear = F.linear
            F.linear = _reparameterized_linear
            _ACTIVE.append(self)
        try:
            return super().__enter__()
        except BaseException:
            self._deactivate()
            raise

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        try:
            super().__exit__(exc_type, exc_value, traceback)
        finally:
            self._deactivate()

    def _deactivate(self) -> None:
        with _LOCK:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
            if not _ACTIVE:
                F.linear = _original_linear
        self._pending.clear()

    def _pyro_sample(self, msg: Message) -> None:
        # A value already set (by replay/condition below us on the stack) was not drawn here.
        if msg["value"] is None and not msg["is_observed"]:
            self._pending[id(msg)] = msg["infer"]

    def _pyro_post_sample(self, msg: Message) -> None:
        infer = self._pending.pop(id(msg), None)
        value = msg["value"]
        # Replay processed after us swaps in the guide's `infer` dict: not drawn here either.
        if infer is None or msg["infer"] is not infer or not isinstance(value, torch.Tensor):
            return
        if value in _RECORDS:
            return
        moments = _moments(msg["fn"], value)
        _RECORDS[value] = _CORRELATED if moments is None else moments


def local_reparam(fn: Callable[..., T], *, strict: bool = False) -> Callable[..., T]:
    """Wrap ``fn`` (a model, a guide or an SVI step) to run inside
    :class:`LocalReparameterization`.

    Wrap both the model and the guide (``SVI(local_reparam(model), local_reparam(guide),
    ...)``), or the step (``local_reparam(svi.step)(x, y)``): the guide's draws must be
    recorded for the model's ``F.linear`` calls to use them.
    """

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> T:
        with LocalReparameterization(strict=strict):
            return fn(*args, **kwargs)

    return wrapped
