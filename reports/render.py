"""Figures and report files (Markdown, HTML, PNG) for a finished run, as bytes.

Nothing here writes a file: :func:`render_report` returns every report file as bytes keyed
by its path relative to the run directory, and the run store (``zoo.run.store``) writes
them atomically. Figures are drawn with matplotlib's object-oriented API on an Agg canvas,
so no GUI backend is needed and the global ``pyplot`` state is never touched.

The report leads with what was found (:func:`headline`, computed from the summary) and the
settings of the run, titles figures and axes for people (:data:`METRIC_LABELS`, with units),
says what the error bars are (one standard error over the repeats, with their number), shows
the single repeats as points when there are few, and splits wide tables into narrower ones.

The HTML report is self-contained: figures are embedded as base64 ``data:`` URIs, the CSS is
inline and every piece of text is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = [
    "AXIS_LABELS",
    "COMPANIONS",
    "METRIC_LABELS",
    "Section",
    "axis_label",
    "figure_name",
    "figure_png",
    "headline",
    "metric_label",
    "plot_metric_vs",
    "render_report",
]

_DPI = 120
_MAX_ERROR_CHARS = 500
#: Metric columns per summary table: wider tables are split into several.
TABLE_METRICS_PER_TABLE = 5
#: Repeats (seeds) up to which every single repeat is drawn as a point.
MAX_REPEAT_POINTS = 5
_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; display: block;
        max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th { background: #f2f2f2; }
td.text, th.text { text-align: left; }
img { max-width: 100%; height: auto; }
figure { margin: 1em 0; }
pre { background: #f6f8fa; padding: 1em; overflow-x: auto; }
.failed td { color: #a00; }
p.headline { font-size: 1.1em; }
"""

#: Metric column -> (what it is, for people; unit or None). Columns not listed keep their name.
METRIC_LABELS: dict[str, tuple[str, str | None]] = {
    "accuracy": ("test accuracy", None),
    "nll": ("test negative log-likelihood per point", "nats"),
    "brier": ("test Brier score", None),
    "ece": ("expected calibration error", None),
    "rmse": ("test RMSE", "target units"),
    "neg_elbo": ("negative ELBO", "nats"),
    "elbo": ("ELBO", "nats"),
    "kl_diag_full": ("KL(q_diag ‖ q_full)", "nats"),
    "kl_null": ("KL shift null (chains with the correlations removed)", "nats"),
    "kl_null_sd": ("spread of the KL shift null", "nats"),
    "kl_excess": ("KL(q_diag ‖ q_full) above its shift null", "nats"),
    "kl_output_columns": ("KL of the output layer's columns", "nats"),
    "kl_null_draws": ("independent draws the chains are worth", "draws"),
    "kl_bias_ess": ("closed-form KL sampling bias at the ESS-based n", "nats"),
    "kl_ess_n": ("ESS-based n of the closed-form KL bias", "draws"),
    "kl_excess_ess": ("KL(q_diag ‖ q_full) above its ESS-based closed-form bias", "nats"),
    "w2_diag_full": ("W2(q_diag, q_full) of the Gaussian fits, closed form", "parameter units"),
    "w2_null": ("sampling floor of the closed-form W2 (shift-null draws)", "parameter units"),
    "w_error": (
        "empirical Wasserstein error of samples W2(q_diag, draws) − W2(q_full, draws), "
        "an assignment-problem estimate biased below 0",
        "parameter units",
    ),
    "w_excess": (
        "Wasserstein excess of q_diag over q_full, self-terms removed",
        "squared parameter units",
    ),
    "agreement_vi": ("agreement of predicted classes, VI vs sampler", None),
    "tv_vi": ("total variation between VI and sampler predictives", None),
    "nll_per_draw": ("mean over draws of each draw's test NLL", "nats"),
    "nll_per_draw_sem": ("s.e. over draws of the per-draw test NLL", "nats"),
    "accuracy_per_draw": ("mean over draws of each draw's test accuracy", None),
    "product_offdiag_mass": ("off-diagonal share of the product-matrix covariance", None),
    "pruned_frac": ("fraction of hidden units pruned", None),
    "units_eff": ("effective number of hidden units (participation ratio)", "units"),
    "units_eff_frac": ("effective fraction of hidden units", None),
    "pruned_var_share": ("share of output variance on rule-pruned units", None),
    "n_params": ("parameters", None),
    "width": ("hidden width", "units"),
    "max_r_hat": ("largest R-hat", None),
    "min_ess_bulk": ("smallest bulk ESS", "draws"),
    "min_ess_tail": ("smallest tail ESS", "draws"),
    "n_divergent": ("divergent transitions", None),
    "draws_per_chain": ("draws per chain", "draws"),
}
#: Sweep axis -> (axis label; short word used in sentences, e.g. "at depth 2").
AXIS_LABELS: dict[str, tuple[str, str]] = {
    "model.depth": ("hidden layers (model.depth)", "depth"),
    "model.width": ("hidden units per layer (model.width)", "width"),
    "model.param_budget": ("parameter budget (model.param_budget)", "budget"),
    "data.n_train": ("training points (data.n_train)", "n_train"),
    "seed": ("seed", "seed"),
    "split": ("train/test split", "split"),
    "method": ("method", "method"),
}
#: A metric that is never plotted alone: its figure gets a second panel with the companion
#: (``w_error`` is biased below zero for finite draws; ``w_excess`` removes that bias). The
#: closed-form ``w2_diag_full``, the headline Wasserstein measure, gets the empirical
#: ``w_error`` beside it as the secondary one.
COMPANIONS: dict[str, str] = {"w_error": "w_excess", "w2_diag_full": "w_error"}
_LAYER = re.compile(r"^(?P<base>.+)\.layer(?P<k>\d+)$")


def metric_label(metric: str, *, unit: bool = True) -> str:
    """A metric's name for people, with its unit: ``kl_diag_full`` -> ``KL(q_diag ‖ q_full) [nats]``.

    Parameters
    ----------
    metric : str
        Column name; ``<metric>.layerK`` is the metric within layer K.
    unit : bool, default True
        Append the unit in brackets when there is one.

    Returns
    -------
    str
        The label, or ``metric`` itself when it is not in :data:`METRIC_LABELS`.
    """
    text, u = METRIC_LABELS.get(metric, (metric, None))
    m = _LAYER.match(metric)
    if metric not in METRIC_LABELS and m and m["base"] in METRIC_LABELS:
        text, u = METRIC_LABELS[m["base"]]
        text = f"{text} within layer {m['k']}"
    return f"{text} [{u}]" if unit and u else text


def _metric_unit(metric: str) -> str | None:
    m = _LAYER.match(metric)
    base = m["base"] if metric not in METRIC_LABELS and m else metric
    return METRIC_LABELS.get(base, (metric, None))[1]


def axis_label(axis: str) -> str:
    """A sweep axis' name for people: ``model.depth`` -> ``hidden layers (model.depth)``."""
    return AXIS_LABELS.get(axis, (axis, axis))[0]


def _axis_word(axis: str) -> str:
    return AXIS_LABELS.get(axis, (axis, axis.split(".")[-1]))[1]


def _plural(word: str, n: int) -> str:
    return word if n == 1 else (word + "es" if word.endswith("s") else word + "s")


def _repeat_word(over: str | None) -> str:
    return {"seed": "seed", "split": "split", None: "cell"}.get(over, str(over))


# --------------------------------------------------------------------------- helpers


def _sanitize(name: str) -> str:
    """File-name-safe version of a column name (``model.depth`` -> ``model_depth``)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", str(name)).strip("_") or "x"


def figure_name(metric: str, x: str) -> str:
    """File name of the figure of ``metric`` against ``x``: ``<metric>_vs_<x>.png``.

    Parameters
    ----------
    metric : str
        Metric name.
    x : str
        x-axis column, e.g. ``model.depth``; characters other than letters, digits, ``_``
        and ``-`` become ``_``.

    Returns
    -------
    str
        For example ``accuracy_vs_model_depth.png``.
    """
    return f"{_sanitize(metric)}_vs_{_sanitize(x)}.png"


def _is_missing(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _fmt_value(value: Any) -> str:
    """Format a group-key or plain cell value for a table."""
    if _is_missing(value):
        return "-"
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        v = float(value)
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.4g}"
    return str(value)


def _fmt_mean_sem(mean: Any, sem: Any, n_finite: Any = None, n: Any = None) -> str:
    """``mean ± sem`` (4 significant digits, 2 for the error); ``[k/n]`` when only ``k`` of
    the group's ``n`` values were finite; ``-`` when none was."""
    if _is_missing(mean):
        return "-"
    text = f"{float(mean):.4g}"
    if not _is_missing(sem) and math.isfinite(float(sem)):
        text += f" ± {float(sem):.2g}"
    if not _is_missing(n_finite) and not _is_missing(n) and int(n_finite) < int(n):
        text += f" [{int(n_finite)}/{int(n)}]"
    return text


def _is_stat_column(summary: pd.DataFrame, column: Any) -> bool:
    """Whether ``column`` of a :func:`reports.tables.summarize` frame is a statistic."""
    c = str(column)
    if c == "n" or c.endswith("_mean") or c.endswith("_sem"):
        return True
    return c.endswith("_n") and f"{c[:-2]}_mean" in summary.columns


def _key_columns(summary: pd.DataFrame) -> list[str]:
    """Group-key columns of a :func:`reports.tables.summarize` frame."""
    return [c for c in summary.columns if not _is_stat_column(summary, c)]


def _summary_tables(
    summary: pd.DataFrame, metrics: Sequence[str], per_table: int = TABLE_METRICS_PER_TABLE
) -> list[tuple[list[str], list[list[str]]]]:
    """The summary as tables of at most ``per_table`` metrics each.

    Each table repeats the group keys and ``n``; rows without a value in any of the table's
    metrics (e.g. a variational method in a table of sampler metrics) are left out.
    """
    keys = _key_columns(summary)
    have_n = "n" in summary.columns
    tables = []
    for start in range(0, len(metrics), per_table):
        chunk = list(metrics[start : start + per_table])
        header = [str(k) for k in keys] + chunk + (["n"] if have_n else [])
        rows = []
        for _, rec in summary.iterrows():
            cells = [
                _fmt_mean_sem(
                    rec.get(f"{m}_mean"), rec.get(f"{m}_sem"), rec.get(f"{m}_n"), rec.get("n")
                )
                for m in chunk
            ]
            if all(c == "-" for c in cells):
                continue
            rows.append(
                [_fmt_value(rec[k]) for k in keys]
                + cells
                + ([_fmt_value(rec["n"])] if have_n else [])
            )
        if rows:
            tables.append((header, rows))
    return tables


def _failed_rows(failed: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the failed-cells table: identifying columns plus the error."""
    drop = {"status", "time_s", "error", "nonfinite"}
    # cell id and sweep axes; columns empty for every failed cell (metrics) are left out
    ident = [c for c in failed.columns if c not in drop and failed[c].notna().any()]
    header = [str(c) for c in ident] + ["error"]
    rows = []
    for _, rec in failed.iterrows():
        err = rec.get("error", "")
        err = "" if _is_missing(err) else str(err).strip()
        if len(err) > _MAX_ERROR_CHARS:
            err = err[: _MAX_ERROR_CHARS - 3] + "..."
        rows.append([_fmt_value(rec[c]) for c in ident] + [err])
    return header, rows


def _md_escape(text: str) -> str:
    """Escape text for a Markdown paragraph or table cell (no raw HTML, no pipes)."""
    text = html.escape(str(text), quote=False)
    text = text.replace("|", "\\|")
    return " ".join(text.split())


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = [
        "| " + " | ".join(_md_escape(h) for h in header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _html_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, n_text: int = 0, cls: str = ""
) -> str:
    """An HTML table; the first ``n_text`` columns are left-aligned text."""

    def cell(tag: str, i: int, value: str) -> str:
        attr = ' class="text"' if i < n_text else ""
        return f"<{tag}{attr}>{html.escape(str(value))}</{tag}>"

    cls_attr = f' class="{html.escape(cls)}"' if cls else ""
    out = [f"<table{cls_attr}>", "<thead><tr>"]
    out += [cell("th", i, h) for i, h in enumerate(header)]
    out.append("</tr></thead>")
    out.append("<tbody>")
    for row in rows:
        out.append("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _fence(text: str) -> str:
    """A fence of backticks longer than any run of backticks inside ``text``."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


# --------------------------------------------------------------------------- figures


class _XAxis(NamedTuple):
    """Where the values of an x column go: positions, ticks, labels, categorical or not."""

    ticks: list[float]
    labels: list[str]
    categorical: bool
    integral: bool
    index: dict[str, int]

    def positions(self, values: pd.Series) -> np.ndarray:
        if self.categorical:
            return np.array([self.index.get(_fmt_value(v), np.nan) for v in values], dtype=float)
        return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)


def _x_axis(values: pd.Series) -> _XAxis:
    """A numeric axis when every value is a number (not a bool), else evenly spaced categories."""
    present = values[values.notna()]
    numeric = pd.to_numeric(present, errors="coerce")
    if len(present) and numeric.notna().all() and not pd.api.types.is_bool_dtype(values):
        uniq = np.unique(numeric.to_numpy(dtype=float))
        integral = bool(uniq.size) and bool(np.all(uniq == np.round(uniq)))
        return _XAxis([float(u) for u in uniq], [_fmt_value(u) for u in uniq], False, integral, {})
    cats = list(dict.fromkeys(_fmt_value(v) for v in values))
    return _XAxis(
        [float(i) for i in range(len(cats))], cats, True, True, {c: i for i, c in enumerate(cats)}
    )


def figure_png(fig: Figure) -> bytes:
    """The PNG bytes of a matplotlib Figure (Agg canvas, no timestamp in the metadata)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    return buf.getvalue()


def _count_phrase(counts: Sequence[int], over: str | None) -> str:
    """``over 3 seeds`` / ``over 2-3 seeds`` for the numbers of values behind the means."""
    counts = sorted({int(c) for c in counts if c == c})
    word = _repeat_word(over)
    if not counts:
        return ""
    lo, hi = counts[0], counts[-1]
    return f"over {lo} {_plural(word, hi)}" if lo == hi else f"over {lo}-{hi} {_plural(word, hi)}"


def _error_phrase(data: pd.DataFrame, metric: str, over: str | None) -> str:
    """What the error bars are, e.g. ``mean ± 1 s.e. over 3 seeds`` (``one seed``: no bars)."""
    col = f"{metric}_n" if f"{metric}_n" in data.columns else "n"
    if col not in data.columns or over is None:
        return "one value per cell"
    counts = data[col].dropna().astype(int).tolist()
    if counts and max(counts) <= 1:
        return f"one {_repeat_word(over)}: no error bars"
    return f"mean ± 1 s.e. {_count_phrase(counts, over)}"


def _line_groups(
    data: pd.DataFrame, summary: pd.DataFrame, x: str, hue: str | None
) -> tuple[list[str], list[tuple[str | None, tuple, pd.DataFrame]]]:
    """Line keys (hue, then other keys that still vary) and the groups of ``data`` by them."""
    keys = [k for k in _key_columns(summary) if k not in (x, hue)]
    varying = [k for k in keys if data[k].nunique(dropna=False) > 1]
    line_keys = ([hue] if hue is not None else []) + varying
    if not line_keys:
        return [], [(None, (), data)]
    groups = []
    for key, sub in data.groupby(line_keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        parts = []
        for name, value in zip(line_keys, key, strict=True):
            shown = _fmt_value(value)
            parts.append(shown if name == hue and isinstance(value, str) else f"{name}={shown}")
        groups.append((", ".join(parts), key, sub))
    return line_keys, groups


def _matching(frame: pd.DataFrame, keys: Sequence[str], values: tuple) -> pd.DataFrame:
    """Rows of ``frame`` whose ``keys`` equal ``values`` (missing matches missing)."""
    mask = np.ones(len(frame), dtype=bool)
    for k, v in zip(keys, values, strict=True):
        if k not in frame.columns:
            return frame.iloc[0:0]
        col = frame[k]
        mask &= (col.isna() if _is_missing(v) else (col == v)).to_numpy(dtype=bool)
    return frame[mask]


def _draw_panel(
    ax: Axes,
    summary: pd.DataFrame,
    x: str,
    metric: str,
    hue: str | None,
    *,
    results: pd.DataFrame | None,
    over: str | None,
) -> str:
    """Draw one metric against ``x`` on ``ax``; return what the error bars are."""
    mean_col, sem_col = f"{metric}_mean", f"{metric}_sem"
    ax.grid(True, alpha=0.35)
    ax.set_xlabel(axis_label(x))
    data = summary if summary.empty else summary[np.isfinite(summary[mean_col].astype(float))]
    if data.empty:
        ax.text(0.5, 0.5, "no successful cells", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        return "no successful cells"
    axis = _x_axis(data[x])
    line_keys, groups = _line_groups(data, summary, x, hue)
    errors = _error_phrase(data, metric, over)
    repeats = int(data["n"].max()) if "n" in data.columns else 1
    points = (
        results is not None
        and over is not None
        and over in results.columns
        and metric in results.columns
        and 1 < repeats <= MAX_REPEAT_POINTS
    )
    ok = None
    if points:
        ok = results[results["status"] == "ok"] if "status" in results.columns else results
    dodge = axis.categorical and hue is not None and hue != x and len(groups) > 1
    width = 0.5 / max(1, len(groups))
    for gi, (label, key, sub) in enumerate(groups):
        sub = sub.assign(_x=axis.positions(sub[x])).sort_values("_x")
        shift = (gi - (len(groups) - 1) / 2) * width if dodge else 0.0
        px = sub["_x"].to_numpy(dtype=float) + shift
        mean = sub[mean_col].to_numpy(dtype=float)
        sem = sub[sem_col].to_numpy(dtype=float) if sem_col in sub.columns else np.zeros_like(mean)
        sem = np.where(np.isfinite(sem), sem, 0.0)
        if axis.categorical:
            bars = ax.errorbar(px, mean, yerr=sem, fmt="o", capsize=4, label=label)
            color = bars.lines[0].get_color()
        else:
            (line,) = ax.plot(px, mean, marker="o", label=label)
            color = line.get_color()
            if np.any(sem > 0):
                ax.fill_between(px, mean - sem, mean + sem, color=color, alpha=0.2, linewidth=0)
        if ok is not None:
            rows = _matching(ok, line_keys, key)
            y = pd.to_numeric(rows[metric], errors="coerce").to_numpy(dtype=float)
            rx = axis.positions(rows[x]) + shift
            keep = np.isfinite(y) & np.isfinite(rx)
            if keep.any():
                ax.scatter(
                    rx[keep],
                    y[keep],
                    s=14,
                    color=color,
                    alpha=0.55,
                    marker="x",
                    linewidths=1.0,
                    zorder=3,
                )
    if points:
        errors += f"; crosses: single {_plural(_repeat_word(over), 2)}"
    if axis.integral:
        ax.set_xticks(axis.ticks, labels=axis.labels)
    if axis.categorical:
        ax.set_xlim(-0.6, len(axis.ticks) - 0.4)
    if any(label is not None for label, _, _ in groups):
        ax.legend(title=hue if hue is not None and line_keys == [hue] else None, fontsize="small")
    return errors


def _wrap(text: str, width: int = 58) -> str:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    return "\n".join([*lines, cur])


def _plot(
    summary: pd.DataFrame,
    x: str,
    metric: str,
    hue: str | None,
    *,
    title: str | None = None,
    ylabel: str | None = None,
    results: pd.DataFrame | None = None,
    over: str | None = "seed",
    companion: str | None = None,
) -> tuple[bytes, str]:
    """PNG bytes of ``metric`` (and its companion panel) against ``x``, and its caption."""
    metrics = [metric] + ([companion] if companion else [])
    if len(summary.columns):
        missing = [c for c in (x, *(f"{m}_mean" for m in metrics)) if c not in summary.columns]
        if hue is not None and hue not in summary.columns:
            missing.append(hue)
        if missing:
            raise KeyError(
                f"cannot plot {metric!r} vs {x!r}: column(s) {missing} not in the summary; "
                f"available: {list(summary.columns)}"
            )
    fig = Figure(figsize=(6.4 * len(metrics), 4.4), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    captions = []
    for i, (ax, m) in enumerate(zip(axes, metrics, strict=True)):
        errors = _draw_panel(ax, summary, x, m, hue, results=results, over=over)
        name = metric_label(m, unit=False)
        head = title if (i == 0 and title is not None) else f"{name} vs {_axis_word(x)}"
        ax.set_title(_wrap(f"{head} ({errors})"), fontsize=10)
        ax.set_ylabel(ylabel if (i == 0 and ylabel is not None) else _wrap(metric_label(m), 40))
        if m == "w_error" or (i == 0 and companion):
            ax.axhline(0.0, color="0.5", lw=0.8)
        captions.append(f"{metric_label(m)} against {axis_label(x)}: {errors}")
    caption = "; right: ".join(captions) if companion else captions[0]
    if companion:
        caption = "Left: " + caption
    return figure_png(fig), caption


def plot_metric_vs(
    summary: pd.DataFrame,
    x: str,
    metric: str,
    hue: str | None,
    *,
    title: str | None = None,
    ylabel: str | None = None,
    results: pd.DataFrame | None = None,
    over: str | None = "seed",
    companion: str | None = None,
) -> bytes:
    r"""Plot a summarized metric against a sweep axis; return the PNG bytes.

    One line with markers per ``hue`` value (and per value of any other group key that
    still varies), with a shaded band :math:`\bar x \pm \mathrm{sem}`. A numeric ``x``
    with integer values gets one tick per value; a non-numeric ``x`` (``method``, an
    activation, a data path) is drawn as evenly spaced categories with error bars and no
    connecting lines. The title says what the bars are (``mean ± 1 s.e. over 3 seeds``).

    Parameters
    ----------
    summary : pd.DataFrame
        Output of :func:`reports.tables.summarize`: group keys, ``<metric>_mean``,
        ``<metric>_sem`` and ``<metric>_n`` (optional) and ``n``.
    x : str
        Column on the x axis, e.g. ``model.depth`` or ``method``.
    metric : str
        Metric name; the columns ``<metric>_mean`` and ``<metric>_sem`` are plotted.
    hue : str or None
        Column that separates the lines, e.g. ``method``; None for a single line.
    title, ylabel : str, optional
        Axes title (default: the metric's label against the axis, :func:`metric_label`)
        and y label (default: the label with its unit).
    results : pd.DataFrame, optional
        The per-cell rows: with at most :data:`MAX_REPEAT_POINTS` repeats per point, each
        repeat is drawn as a cross.
    over : str or None, default "seed"
        The repeat axis of the summary (named in the title).
    companion : str, optional
        A second metric drawn in a panel to the right (see :data:`COMPANIONS`).

    Returns
    -------
    bytes
        The PNG file.

    Raises
    ------
    KeyError
        If ``x``, ``hue`` or ``<metric>_mean`` is not a column of a non-empty summary.

    Notes
    -----
    An empty summary gives a figure that says there were no successful cells.
    """
    png, _ = _plot(
        summary,
        x,
        metric,
        hue,
        title=title,
        ylabel=ylabel,
        results=results,
        over=over,
        companion=companion,
    )
    return png


# --------------------------------------------------------------------------- headline


def _fmt_num(mean: float, sem: float) -> str:
    text = f"{mean:.3g}"
    return text + (f" ± {sem:.2g}" if math.isfinite(sem) and sem > 0 else "")


def headline(
    summary: pd.DataFrame,
    metric: str,
    x: str,
    hue: str | None,
    *,
    over: str | None = "seed",
    max_groups: int = 4,
) -> str | None:
    """One sentence saying what ``metric`` does along ``x``, computed from the summary.

    For a numeric ``x``, per line (``hue`` value): the mean at the first and at the last
    ``x`` and whether it rises or falls (by more than twice the combined standard error)
    or changes by less, e.g. ``KL(q_diag ‖ q_full) [nats] of nuts falls from 34.8 ± 1.2 at
    depth 1 to 20.1 ± 0.9 at depth 4 (mean ± 1 s.e. over 3 seeds).`` For a categorical
    ``x``, the mean at each value.

    Parameters
    ----------
    summary : pd.DataFrame
        Output of :func:`reports.tables.summarize`.
    metric, x, hue : str
        As in :func:`plot_metric_vs`.
    over : str or None
        The repeat axis of the summary.
    max_groups : int, default 4
        Lines described; the others are counted.

    Returns
    -------
    str or None
        None when the metric has no finite mean.
    """
    mean_col, sem_col = f"{metric}_mean", f"{metric}_sem"
    if summary.empty or mean_col not in summary.columns or x not in summary.columns:
        return None
    data = summary[np.isfinite(summary[mean_col].astype(float))]
    if data.empty:
        return None
    axis = _x_axis(data[x])
    line_keys, groups = _line_groups(data, summary, x, None if hue == x else hue)
    word = _axis_word(x)
    parts = []
    for label, _, sub in groups[:max_groups]:
        sub = sub.assign(_x=axis.positions(sub[x])).sort_values("_x")
        m = sub[mean_col].to_numpy(dtype=float)
        s = (
            sub[sem_col].to_numpy(dtype=float)
            if sem_col in sub.columns
            else np.full_like(m, np.nan)
        )
        xs = [_fmt_value(v) for v in sub[x]]
        who = f"of {label} " if label else ""
        if axis.categorical or len(sub) == 1:
            values = ", ".join(
                f"{xv} {_fmt_num(a, b)}" if axis.categorical else f"{_fmt_num(a, b)} at {word} {xv}"
                for xv, a, b in zip(xs, m, s, strict=True)
            )
            if axis.categorical:
                parts.append(f"{label}: {values}" if label else values)
            else:
                parts.append(f"{who}is {values}")
            continue
        a, b, sa, sb = m[0], m[-1], s[0], s[-1]
        se = math.sqrt(sum(v**2 for v in (sa, sb) if math.isfinite(v)))
        ends = f"{_fmt_num(a, sa)} at {word} {xs[0]} to {_fmt_num(b, sb)} at {word} {xs[-1]}"
        if (se > 0 and abs(b - a) <= 2 * se) or b == a:
            both = f"{_fmt_num(a, sa)} at {word} {xs[0]}, {_fmt_num(b, sb)} at {word} {xs[-1]}"
            parts.append(f"{who}changes by less than 2 s.e.: {both}")
        else:
            parts.append(f"{who}{'rises' if b > a else 'falls'} from {ends}")
    more = len(groups) - max_groups
    text = "; ".join(parts) + (f"; and {more} more {_plural('line', more)}" if more > 0 else "")
    errors = _error_phrase(data, metric, over)
    sep = ": " if axis.categorical else " "
    return f"{metric_label(metric)}{sep}{text} ({errors})."


# --------------------------------------------------------------------------- report


class Section(NamedTuple):
    """An extra report section after the figures: text, tables, figures.

    ``figures`` are ``(file stem, matplotlib Figure)`` pairs, rendered as
    ``figures/<stem>.png``; ``table`` is ``(header, rows)`` of strings, and ``tables`` more
    such tables after it (a wide table split into narrower ones).
    """

    title: str
    paragraphs: Sequence[str] = ()
    table: tuple[Sequence[str], Sequence[Sequence[str]]] | None = None
    figures: Sequence[tuple[str, Figure]] = ()
    tables: Sequence[tuple[Sequence[str], Sequence[Sequence[str]]]] = ()


def render_report(
    *,
    title: str,
    spec_text: str | None,
    results: pd.DataFrame,
    summary: pd.DataFrame,
    x: str,
    hue: str | None,
    metrics: list[str],
    notes: list[str] | None = None,
    failed: pd.DataFrame | None = None,
    table_metrics: list[str] | None = None,
    sections: Sequence[Section] = (),
    headlines: Sequence[str] = (),
    settings: Sequence[str] = (),
    over: str | None = "seed",
    figure_summary: pd.DataFrame | None = None,
) -> dict[str, bytes]:
    """Render the figures, ``report.md`` and a self-contained ``report.html``.

    Parameters
    ----------
    title : str
        Report title.
    spec_text : str or None
        The resolved spec as YAML text, shown verbatim at the end; omitted if None.
    results : pd.DataFrame
        Per-cell results (cell counts in the run description; single repeats on figures).
    summary : pd.DataFrame
        Output of :func:`reports.tables.summarize`. May be empty (every cell failed): the
        report then says so and has no figures.
    x : str
        Sweep axis on the x axis of every figure (numeric or categorical).
    hue : str or None
        Column separating the lines of a figure.
    metrics : list of str
        Metrics to plot, one figure each; a metric of :data:`COMPANIONS` gets its
        companion's panel beside it.
    notes : list of str, optional
        Free-text notes listed under the settings.
    failed : pd.DataFrame, optional
        Failed cells with an ``error`` column. Defaults to the rows of ``results`` whose
        ``status`` is not ``"ok"``.
    table_metrics : list of str, optional
        Metrics of the summary tables (at most :data:`TABLE_METRICS_PER_TABLE` per table);
        defaults to ``metrics``.
    sections : sequence of Section
        Extra sections (e.g. sampler diagnostics) placed after the figures.
    headlines : sequence of str
        What was found (:func:`headline`), shown first.
    settings : sequence of str
        The settings of the run as run (data, model, methods, seeds), listed under the
        headline.
    over : str or None, default "seed"
        The repeat axis the summary averages over (named in captions and tables).
    figure_summary : pd.DataFrame, optional
        The summary the figures are drawn from, one row per cell, when the x axis or hue
        is the repeat axis itself (``x: seed``): the figures then show single cells.

    Returns
    -------
    dict[str, bytes]
        File contents keyed by their path relative to the run directory (``"report.md"``,
        ``"report.html"``, ``"figures/<metric>_vs_<x>.png"``, ``"figures/<stem>.png"``);
        the caller writes them.
    """
    notes = [str(n) for n in (notes or [])]
    if failed is None:
        if "status" in results.columns:
            failed = results[results["status"] != "ok"]
        else:
            failed = results.iloc[0:0]
    fig_summary = summary if figure_summary is None else figure_summary

    have_summary = not summary.empty and all(f"{m}_mean" in fig_summary.columns for m in metrics)
    if not summary.empty and not have_summary:
        missing = [m for m in metrics if f"{m}_mean" not in fig_summary.columns]
        raise KeyError(f"metric(s) {missing} have no '<metric>_mean' column in the summary")

    written: dict[str, bytes] = {}
    figures: list[tuple[str, str, bytes]] = []  # (caption, relative path, png bytes)
    if have_summary:
        for m in metrics:
            companion = COMPANIONS.get(m)
            if companion is not None and f"{companion}_mean" not in fig_summary.columns:
                companion = None
            rel = f"figures/{figure_name(m, x)}"
            png, caption = _plot(
                fig_summary,
                x,
                m,
                hue,
                results=results,
                over=over if figure_summary is None else None,
                companion=companion,
            )
            written[rel] = png
            figures.append((caption, rel, png))

    n_total = len(results)
    n_failed = len(failed)
    n_ok = int((results["status"] == "ok").sum()) if "status" in results.columns else n_total
    word = _plural(_repeat_word(over), 2)
    desc = f"{n_total} cell(s): {n_ok} ok, {n_failed} failed."
    table_note = (
        f"Each entry is the mean ± 1 standard error over {word} (n: {word} per row); "
        f"[k/n] marks a mean over only the k finite values of the row's n (the others are "
        f"NaN or infinite: see the notes); - means no value."
    )
    empty_msg = "No cell finished successfully, so there is no summary and no figure."
    table_metrics = [m for m in (table_metrics or metrics) if f"{m}_mean" in summary.columns]
    s_tables = _summary_tables(summary, table_metrics) if have_summary else []
    f_header, f_rows = _failed_rows(failed) if n_failed else ([], [])
    extra: list[tuple[Section, list[tuple[str, bytes]]]] = []
    for sec in sections:
        pngs = []
        for stem, fig in sec.figures:
            rel = f"figures/{_sanitize(stem)}.png"
            png = figure_png(fig)
            written[rel] = png
            pngs.append((rel, png))
        extra.append((sec, pngs))

    def sec_tables(sec: Section) -> list[tuple[Sequence[str], Sequence[Sequence[str]]]]:
        return ([sec.table] if sec.table is not None else []) + list(sec.tables)

    # ---- Markdown
    md: list[str] = [f"# {_md_escape(title)}", ""]
    md += [f"**{_md_escape(h)}**\n" for h in headlines]
    if settings:
        md += ["## Settings of this run", ""]
        md += [f"- {_md_escape(s)}" for s in settings] + [""]
    md += [_md_escape(desc), ""]
    md += [f"- {_md_escape(n)}" for n in notes]
    if notes:
        md.append("")
    md += ["## Summary", ""]
    if have_summary:
        md += [_md_escape(table_note), ""]
        for header, rows in s_tables:
            md += [_md_table(header, rows), ""]
    else:
        md += [_md_escape(empty_msg), ""]
    if figures:
        md += ["## Figures", ""]
        for caption, rel, _ in figures:
            md += [f"![{_md_escape(caption)}]({rel})", "", f"*{_md_escape(caption)}*", ""]
    for sec, pngs in extra:
        md += [f"## {_md_escape(sec.title)}", ""]
        for para in sec.paragraphs:
            md += [_md_escape(para), ""]
        for table in sec_tables(sec):
            md += [_md_table(*table), ""]
        md += [f"![{_md_escape(rel)}]({rel})\n" for rel, _ in pngs]
    if n_failed:
        md += ["## Failed cells", "", _md_table(f_header, f_rows), ""]
    if spec_text is not None:
        fence = _fence(spec_text)
        md += ["## Spec (as run)", "", f"{fence}yaml", spec_text.rstrip("\n"), fence, ""]
    written["report.md"] = "\n".join(md).encode("utf-8")

    # ---- HTML
    esc = html.escape
    n_keys = len(_key_columns(summary)) if have_summary else 0
    h: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>{esc(title)}</h1>",
    ]
    h += [f'<p class="headline"><strong>{esc(hl)}</strong></p>' for hl in headlines]
    if settings:
        h += ["<h2>Settings of this run</h2>", "<ul>"]
        h += [f"<li>{esc(s)}</li>" for s in settings] + ["</ul>"]
    h.append(f"<p>{esc(desc)}</p>")
    if notes:
        h += ["<ul>"] + [f"<li>{esc(n)}</li>" for n in notes] + ["</ul>"]
    h.append("<h2>Summary</h2>")
    if have_summary:
        h.append(f"<p>{esc(table_note)}</p>")
        h += [_html_table(header, rows, n_text=n_keys) for header, rows in s_tables]
    else:
        h.append(f"<p>{esc(empty_msg)}</p>")
    if figures:
        h.append("<h2>Figures</h2>")
        for caption, _, png in figures:
            data = base64.b64encode(png).decode("ascii")
            h.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{esc(caption)}">'
                f"<figcaption>{esc(caption)}</figcaption></figure>"
            )
    for sec, pngs in extra:
        h.append(f"<h2>{esc(sec.title)}</h2>")
        h += [f"<p>{esc(para)}</p>" for para in sec.paragraphs]
        for header, rows in sec_tables(sec):
            h.append(_html_table(header, rows, n_text=len(header)))
        for rel, png in pngs:
            data = base64.b64encode(png).decode("ascii")
            h.append(f'<figure><img src="data:image/png;base64,{data}" alt="{esc(rel)}"></figure>')
    if n_failed:
        h.append("<h2>Failed cells</h2>")
        h.append(_html_table(f_header, f_rows, n_text=len(f_header), cls="failed"))
    if spec_text is not None:
        h += ["<h2>Spec (as run)</h2>", f"<pre><code>{esc(spec_text)}</code></pre>"]
    h += ["</body>", "</html>", ""]
    written["report.html"] = "\n".join(h).encode("utf-8")
    return written
