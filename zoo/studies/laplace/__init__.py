"""The Laplace / Gauss-Newton price of mean field at a mode: exact, with no sampling.

The study's table entry: its probe, its report section and the words of its columns.
"""

from zoo.studies.base import StudyPlugin
from zoo.studies.laplace.probe import LaplaceProbe
from zoo.studies.laplace.report import laplace_sections

__all__ = ["HIDDEN", "LABELS", "STUDY"]

#: The study's columns for people: metric -> (what it is; unit or None). ``<metric>_layerK``
#: is the measure of layer K's block of the curvature.
LABELS: dict[str, tuple[str, str | None]] = {
    "laplace_kl": ("KL(q_diag ‖ q_full) of the Laplace Gaussian at the mode", "nats"),
    "laplace_w2": ("W2(q_diag, q_full) of the Laplace Gaussian at the mode", "parameter units"),
    "laplace_kl_marginal": ("KL(q_diag ‖ q_full) of the Laplace marginal block", "nats"),
    "laplace_min_eig": ("smallest eigenvalue of the curvature at the mode", None),
    "laplace_dim": ("parameters of the curvature", None),
    "laplace_grad_norm": ("gradient norm at the refined mode", None),
    "laplace_refine_iters": ("L-BFGS refinement iterations", None),
    "laplace_refine_shift": ("distance the refinement moved the mode", "parameter units"),
    # a wall-clock time: in the cell's record, never in results.csv (zoo.execution.report.is_timing)
    "laplace_seconds": ("time to refine the mode and compute its curvature", "s"),
}
#: Text columns (which curvature; why a cell was skipped): no number to tabulate.
HIDDEN = frozenset({"laplace_curvature", "laplace_skipped"})

STUDY = StudyPlugin(
    "laplace",
    LaplaceProbe,
    laplace_sections,
    labels=LABELS,
    hidden=HIDDEN,
    headline=("laplace_kl",),
)
