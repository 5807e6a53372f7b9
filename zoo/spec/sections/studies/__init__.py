"""The ``studies`` section of a spec: what the cells record besides their test metrics.

``studies`` is a top-level list, each entry discriminated by ``kind``:

- ``price_of_mean_field``: on a sampler's draws, KL(q_diag || q_full) and the Wasserstein
  distances between the closest diagonal and the full Gaussian fit, with the shift null of
  that KL (Farquhar, Smith & Gal 2020); optionally draws until the chains are worth
  ``kl_target_draws`` independent draws to the covariance estimate;
- ``ktied``: spectra, rank-k truncation, gradient SNR and -ELBO at steps of a variational
  fit (Swiatkowski et al. 2020);
- ``pruning``: per-unit pruning statistics, pruned fractions and optimization trajectories
  (Trippe & Turner 2018);
- ``product_matrix``: the covariance of the product matrix W_L ... W_1 of a deep linear
  network (Farquhar, Smith & Gal 2020);
- ``laplace``: the price of mean field with no sampling: at a mode (a MAP estimate, or an
  MF-VI mean refined to a mode), KL(q_diag || q_full) and W2 for the Laplace Gaussian
  q_full = N(mode, H^-1), H the Hessian or generalized Gauss-Newton of the negative log
  posterior;
- ``predictive``: the price of mean field in predictions: on a sampler's cell, the
  predictive distributions of q_diag, q_full (the Gaussian fits to the draws), the MF-VI
  posterior the chains started from and the draws themselves, compared on the test set and
  on out-of-distribution inputs (total variation, agreement, KL; NLL, ECE, entropy);
- ``vsbc``: variational simulation-based calibration of an svi method: data simulated from
  the prior, the guide refitted, the true weights ranked in q (Yao et al. 2018).

Each study says which method families it applies to (``families``) and, where it needs one,
which networks (:meth:`applies_to_model`); ``methods`` narrows it to named methods of the
spec (null: every method it applies to).

One module per study, each with its section class; :mod:`~zoo.spec.sections.studies.base`
holds what they share. Add a study: a module here and its member in :data:`StudySpec`
(and its plug-in in :mod:`zoo.studies`). No torch import here.
"""

from typing import Annotated

from pydantic import Field

from zoo.spec.sections.studies.base import GaussianFitSpec, StudySection
from zoo.spec.sections.studies.ktied import KTiedStudy
from zoo.spec.sections.studies.laplace import LaplaceStudy
from zoo.spec.sections.studies.predictive import FAR_MAX_FEATURES, PredictiveStudy
from zoo.spec.sections.studies.price_of_mf import PriceOfMeanFieldStudy
from zoo.spec.sections.studies.product_matrix import ProductMatrixStudy
from zoo.spec.sections.studies.pruning import PruningStudy
from zoo.spec.sections.studies.vsbc import VSBCStudy

__all__ = [
    "FAR_MAX_FEATURES",
    "GaussianFitSpec",
    "KTiedStudy",
    "LaplaceStudy",
    "PredictiveStudy",
    "PriceOfMeanFieldStudy",
    "ProductMatrixStudy",
    "PruningStudy",
    "StudySection",
    "StudySpec",
    "VSBCStudy",
]

StudySpec = Annotated[
    PriceOfMeanFieldStudy
    | KTiedStudy
    | PruningStudy
    | ProductMatrixStudy
    | LaplaceStudy
    | PredictiveStudy
    | VSBCStudy,
    Field(discriminator="kind"),
]
