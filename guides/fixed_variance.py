r"""Mean-field Gaussian guide whose standard deviations are fixed: only the means are learned."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import pyro
import torch
from pyro.infer.autoguide.initialization import init_to_median

from guides._sites import LatentSite, check_scale, check_structural
from guides.mean_field import AutoMeanField

__all__ = ["AutoFixedVarianceNormal"]


class AutoFixedVarianceNormal(AutoMeanField):
    r"""Mean-field Gaussian guide with fixed standard deviations ("GD" of Trippe & Turner).

    With :math:`w` all latent variables in unconstrained space and :math:`s(i)` the site of
    coordinate :math:`i`,

    .. math::

        q(w) = \prod_i \mathcal{N}(w_i \mid \mu_i, \sigma_{s(i)}^2),

    where only the means :math:`\mu` are variational parameters and the standard deviations
    :math:`\sigma_s` are constants (``scale``). Trippe & Turner (2018) use it (their "GD",
    Gaussian dropout-like noise of fixed variance) to show that overpruning comes from
    learning the variances. With small :math:`\sigma` it approaches MAP with weight noise.

    Sites are sampled from real ``Normal`` objects as in :class:`~guides.AutoMeanField`,
    so closed-form KLs (the entropy term is then a constant) and local reparameterization
    apply.

    Parameters
    ----------
    model : callable
        A Pyro model.
    scale : float or dict of str to float
        Standard deviation of every unconstrained coordinate, or one per latent site (the
        dict must name every latent site and nothing else). This second positional
        argument is structural, unlike Pyro's ``AutoNormal(model, init_loc_fn)``.
    init_loc_fn : callable, default ``init_to_median``
        Per-site initialisation of :math:`\mu`, as in :class:`~guides.AutoMeanField` (not
        Pyro's ``AutoNormal`` default ``init_to_feasible``, on purpose: see there).
    create_plates : callable, optional
        As in :class:`~guides.AutoMeanField`.

    Notes
    -----
    The means are stored as ``locs.<site>`` (as in :class:`~guides.AutoMeanField`); the
    scales are not parameters and not in ``state_dict``: a fresh instance restored from a
    ``state_dict`` must be built with the same ``scale``. :attr:`std_params` is empty: no
    parameter is a standard deviation (:meth:`loc_scale` still returns the fixed ones).
    :attr:`num_variational_params` counts the means only.

    References
    ----------
    .. [1] B. Trippe and R. Turner, "Overpruning in Variational Bayesian Neural Networks",
       NeurIPS 2017 workshop on Advances in Approximate Bayesian Inference, 2018.
    """

    #: Empty: the standard deviations are constants, not parameters.
    std_params: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        model: Callable[..., Any],
        scale: float | Mapping[str, float],
        *,
        init_loc_fn: Callable[[dict], torch.Tensor] = init_to_median,
        create_plates: Callable[..., pyro.plate | Sequence[pyro.plate]] | None = None,
    ) -> None:
        check_structural(scale, "AutoFixedVarianceNormal", "scale")
        if isinstance(scale, Mapping):
            self.fixed_scale: float | dict[str, float] = {
                str(k): check_scale(v, f"scale[{k!r}]") for k, v in scale.items()
            }
        else:
            self.fixed_scale = check_scale(scale, "scale")
        super().__init__(model, init_loc_fn=init_loc_fn, create_plates=create_plates)

    def _setup_prototype(self, *args: Any, **kwargs: Any) -> None:
        super()._setup_prototype(*args, **kwargs)
        if isinstance(self.fixed_scale, dict):
            sites = set(self._require_setup())
            missing = sorted(sites - set(self.fixed_scale))
            unknown = sorted(set(self.fixed_scale) - sites)
            if missing or unknown:
                self._latent_sites = None
                self.prototype_trace = None
                raise ValueError(
                    f"scale must give a standard deviation for every latent site; missing "
                    f"{missing}, unknown {unknown}; latent sites are {sorted(sites)}"
                )

    def _init_site_params(self, info: LatentSite, init_loc: torch.Tensor) -> None:
        self._init_loc(info, init_loc)

    def site_scale(self, name: str) -> float:
        """The fixed standard deviation of site ``name`` (unconstrained space)."""
        if isinstance(self.fixed_scale, dict):
            return self.fixed_scale[name]
        return self.fixed_scale

    def _get_loc_and_scale(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        loc = self._site_loc(name)
        return loc, loc.new_tensor(self.site_scale(name)).expand(loc.shape)
