"""Every matplotlib figure of the reports, one module per concept.

Figures are built with matplotlib's object-oriented API on an Agg canvas (no GUI backend,
no global ``pyplot`` state) and returned as :class:`matplotlib.figure.Figure` objects;
:func:`figure_png` turns one into PNG bytes. The numbers they draw are computed elsewhere in
:mod:`reports` (this package only draws), so a figure can change without touching a metric.
"""

from __future__ import annotations

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["DPI", "figure_png"]

#: Resolution of every report PNG.
DPI = 120


def figure_png(fig: Figure) -> bytes:
    """The PNG bytes of a matplotlib Figure (Agg canvas, no timestamp in the metadata)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()
