"""Figures and report files (Markdown, HTML, PNG) for a finished run, as bytes.

Nothing here writes a file: :func:`render_report` returns every report file as bytes keyed
by its path relative to the run directory, and the run store (``zoo.run.store``) writes
them atomically. Figures are drawn with matplotlib's object-oriented API on an Agg canvas,
so no GUI backend is needed and the global ``pyplot`` state is never touched.

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
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["Section", "figure_name", "figure_png", "plot_metric_vs", "render_report"]

_DPI = 120
_MAX_ERROR_CHARS = 500
_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th { background: #f2f2f2; }
td.text, th.text { text-align: left; }
img { max-width: 100%; height: auto; }
figure { margin: 1em 0; }
pre { background: #f6f8fa; padding: 1em; overflow-x: auto; }
.failed td { color: #a00; }
"""


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


def _fmt_mean_sem(mean: Any, sem: Any) -> str:
    """``mean ± sem`` with 4 significant digits for the mean and 2 for the error."""
    if _is_missing(mean):
        return "-"
    if _is_missing(sem) or not math.isfinite(float(sem)):
        return f"{float(mean):.4g}"
    return f"{float(mean):.4g} ± {float(sem):.2g}"


def _key_columns(summary: pd.DataFrame) -> list[str]:
    """Group-key columns of a :func:`reports.tables.summarize` frame."""
    return [
        c
        for c in summary.columns
        if c != "n" and not (str(c).endswith("_mean") or str(c).endswith("_sem"))
    ]


def _summary_rows(
    summary: pd.DataFrame, metrics: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of the summary table."""
    keys = _key_columns(summary)
    header = [str(k) for k in keys] + list(metrics) + (["n"] if "n" in summary.columns else [])
    rows = []
    for _, rec in summary.iterrows():
        row = [_fmt_value(rec[k]) for k in keys]
        row += [_fmt_mean_sem(rec.get(f"{m}_mean"), rec.get(f"{m}_sem")) for m in metrics]
        if "n" in summary.columns:
            row.append(_fmt_value(rec["n"]))
        rows.append(row)
    return header, rows


def _failed_rows(failed: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the failed-cells table: identifying columns plus the error."""
    drop = {"status", "time_s", "error"}
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


def _x_positions(values: pd.Series) -> tuple[np.ndarray, list[float], list[str], bool]:
    """Numeric x positions, tick positions and labels for an x column."""
    numeric = pd.to_numeric(values, errors="coerce")
    if values.notna().any() and numeric[values.notna()].notna().all():
        xs = numeric.to_numpy(dtype=float)
        uniq = np.unique(xs[np.isfinite(xs)])
        integral = bool(uniq.size) and bool(np.all(uniq == np.round(uniq)))
        ticks = [float(u) for u in uniq]
        labels = [_fmt_value(u) for u in uniq]
        return xs, ticks, labels, integral
    cats = sorted({_fmt_value(v) for v in values}, key=str)
    pos = {c: i for i, c in enumerate(cats)}
    xs = np.array([pos[_fmt_value(v)] for v in values], dtype=float)
    return xs, [float(i) for i in range(len(cats))], cats, True


def figure_png(fig: Figure) -> bytes:
    """The PNG bytes of a matplotlib Figure (Agg canvas, no timestamp in the metadata)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    return buf.getvalue()


def _plot_png(
    summary: pd.DataFrame,
    x: str,
    metric: str,
    hue: str | None,
    *,
    title: str | None,
    ylabel: str | None,
) -> bytes:
    """Draw ``metric`` against ``x`` and return the PNG bytes."""
    mean_col, sem_col = f"{metric}_mean", f"{metric}_sem"
    if len(summary.columns):
        missing = [c for c in (x, mean_col) if c not in summary.columns]
        if hue is not None and hue not in summary.columns:
            missing.append(hue)
        if missing:
            raise KeyError(
                f"cannot plot {metric!r} vs {x!r}: column(s) {missing} not in the summary; "
                f"available: {list(summary.columns)}"
            )

    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title if title is not None else f"{metric} vs {x}")
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel if ylabel is not None else metric)
    ax.grid(True, alpha=0.35)

    data = summary if summary.empty else summary[summary[mean_col].notna()]
    if data.empty:
        ax.text(0.5, 0.5, "no successful cells", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        return figure_png(fig)

    xs, ticks, tick_labels, integral = _x_positions(data[x])
    data = data.assign(_x=xs)
    # Lines are keyed by hue and by any other group key that still varies, so that two
    # different widths never get joined into one zig-zag line.
    keys = [k for k in _key_columns(summary) if k not in (x, hue)]
    varying = [k for k in keys if data[k].nunique(dropna=False) > 1]
    line_keys = ([hue] if hue is not None else []) + varying

    groups: list[tuple[str | None, pd.DataFrame]]
    if line_keys:
        groups = []
        for key, sub in data.groupby(line_keys, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            parts = []
            for name, value in zip(line_keys, key, strict=True):
                shown = _fmt_value(value)
                parts.append(shown if name == hue and not varying else f"{name}={shown}")
            groups.append((", ".join(parts), sub))
    else:
        groups = [(None, data)]

    for label, sub in groups:
        sub = sub.sort_values("_x")
        px = sub["_x"].to_numpy(dtype=float)
        mean = sub[mean_col].to_numpy(dtype=float)
        (line,) = ax.plot(px, mean, marker="o", label=label)
        if sem_col in sub.columns:
            sem = sub[sem_col].to_numpy(dtype=float)
            sem = np.where(np.isfinite(sem), sem, 0.0)
            if np.any(sem > 0):
                ax.fill_between(
                    px, mean - sem, mean + sem, color=line.get_color(), alpha=0.2, linewidth=0
                )

    if integral:
        ax.set_xticks(ticks, labels=tick_labels)
    if any(label is not None for label, _ in groups):
        ax.legend(title=hue if hue is not None and not varying else None, fontsize="small")
    return figure_png(fig)


def plot_metric_vs(
    summary: pd.DataFrame,
    x: str,
    metric: str,
    hue: str | None,
    *,
    title: str | None = None,
    ylabel: str | None = None,
) -> bytes:
    r"""Plot a summarized metric against a sweep axis; return the PNG bytes.

    One line with markers per ``hue`` value (and per value of any other group key that
    still varies), with a shaded band :math:`\bar x \pm \mathrm{sem}`. A numeric ``x``
    with integer values gets one tick per value; a non-numeric ``x`` is drawn as evenly
    spaced categories.

    Parameters
    ----------
    summary : pd.DataFrame
        Output of :func:`reports.tables.summarize`: group keys, ``<metric>_mean``,
        ``<metric>_sem`` (optional) and ``n``.
    x : str
        Column on the x axis, e.g. ``model.depth``.
    metric : str
        Metric name; the columns ``<metric>_mean`` and ``<metric>_sem`` are plotted.
    hue : str or None
        Column that separates the lines, e.g. ``method``; None for a single line.
    title, ylabel : str, optional
        Axes title (default ``"<metric> vs <x>"``) and y label (default ``metric``).

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
    return _plot_png(summary, x, metric, hue, title=title, ylabel=ylabel)


# --------------------------------------------------------------------------- report


class Section(NamedTuple):
    """An extra report section after the figures: text, an optional table, figures.

    ``figures`` are ``(file stem, matplotlib Figure)`` pairs, rendered as
    ``figures/<stem>.png``; ``table`` is ``(header, rows)`` of strings.
    """

    title: str
    paragraphs: Sequence[str] = ()
    table: tuple[Sequence[str], Sequence[Sequence[str]]] | None = None
    figures: Sequence[tuple[str, Figure]] = ()


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
) -> dict[str, bytes]:
    """Render the figures, ``report.md`` and a self-contained ``report.html``.

    Parameters
    ----------
    title : str
        Report title.
    spec_text : str or None
        The resolved spec as YAML text, shown verbatim at the end; omitted if None.
    results : pd.DataFrame
        Per-cell results (used for the cell counts in the run description).
    summary : pd.DataFrame
        Output of :func:`reports.tables.summarize`. May be empty (every cell failed): the
        report then says so and has no figures.
    x : str
        Sweep axis on the x axis of every figure.
    hue : str or None
        Column separating the lines of a figure.
    metrics : list of str
        Metrics to tabulate and plot, one figure each.
    notes : list of str, optional
        Free-text notes listed under the title.
    failed : pd.DataFrame, optional
        Failed cells with an ``error`` column. Defaults to the rows of ``results`` whose
        ``status`` is not ``"ok"``.
    table_metrics : list of str, optional
        Metrics of the summary table; defaults to ``metrics``.
    sections : sequence of Section
        Extra sections (e.g. sampler diagnostics) placed after the figures.

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

    have_summary = not summary.empty and all(f"{m}_mean" in summary.columns for m in metrics)
    if not summary.empty and not have_summary:
        missing = [m for m in metrics if f"{m}_mean" not in summary.columns]
        raise KeyError(f"metric(s) {missing} have no '<metric>_mean' column in the summary")

    written: dict[str, bytes] = {}
    figures: list[tuple[str, str, bytes]] = []  # (metric, relative path, png bytes)
    if have_summary:
        for m in metrics:
            rel = f"figures/{figure_name(m, x)}"
            png = _plot_png(summary, x, m, hue, title=f"{m} vs {x}", ylabel=m)
            written[rel] = png
            figures.append((m, rel, png))

    n_total = len(results)
    n_failed = len(failed)
    n_ok = int((results["status"] == "ok").sum()) if "status" in results.columns else n_total
    desc = (
        f"{n_total} cell(s): {n_ok} ok, {n_failed} failed. "
        f"Metrics are shown as mean ± standard error over repeats; n is the number of "
        f"repeats per row."
    )
    empty_msg = "No cell finished successfully, so there is no summary and no figure."
    table_metrics = [m for m in (table_metrics or metrics) if f"{m}_mean" in summary.columns]
    s_header, s_rows = _summary_rows(summary, table_metrics) if have_summary else ([], [])
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

    # ---- Markdown
    md: list[str] = [f"# {_md_escape(title)}", "", _md_escape(desc), ""]
    md += [f"- {_md_escape(n)}" for n in notes]
    if notes:
        md.append("")
    md += ["## Summary", ""]
    md += [_md_table(s_header, s_rows) if have_summary else _md_escape(empty_msg), ""]
    if figures:
        md += ["## Figures", ""]
        for m, rel, _ in figures:
            md += [f"![{_md_escape(m)} vs {_md_escape(x)}]({rel})", ""]
    for sec, pngs in extra:
        md += [f"## {_md_escape(sec.title)}", ""]
        for para in sec.paragraphs:
            md += [_md_escape(para), ""]
        if sec.table is not None:
            md += [_md_table(*sec.table), ""]
        md += [f"![{_md_escape(rel)}]({rel})\n" for rel, _ in pngs]
    if n_failed:
        md += ["## Failed cells", "", _md_table(f_header, f_rows), ""]
    if spec_text is not None:
        fence = _fence(spec_text)
        md += ["## Spec", "", f"{fence}yaml", spec_text.rstrip("\n"), fence, ""]
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
        f"<p>{esc(desc)}</p>",
    ]
    if notes:
        h += ["<ul>"] + [f"<li>{esc(n)}</li>" for n in notes] + ["</ul>"]
    h.append("<h2>Summary</h2>")
    h.append(
        _html_table(s_header, s_rows, n_text=n_keys) if have_summary else f"<p>{esc(empty_msg)}</p>"
    )
    if figures:
        h.append("<h2>Figures</h2>")
        for m, _, png in figures:
            data = base64.b64encode(png).decode("ascii")
            h.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{esc(m)} vs {esc(x)}">'
                f"<figcaption>{esc(m)} vs {esc(x)}</figcaption></figure>"
            )
    for sec, pngs in extra:
        h.append(f"<h2>{esc(sec.title)}</h2>")
        h += [f"<p>{esc(para)}</p>" for para in sec.paragraphs]
        if sec.table is not None:
            h.append(_html_table(*sec.table, n_text=len(sec.table[0])))
        for rel, png in pngs:
            data = base64.b64encode(png).decode("ascii")
            h.append(f'<figure><img src="data:image/png;base64,{data}" alt="{esc(rel)}"></figure>')
    if n_failed:
        h.append("<h2>Failed cells</h2>")
        h.append(_html_table(f_header, f_rows, n_text=len(f_header), cls="failed"))
    if spec_text is not None:
        h += ["<h2>Spec</h2>", f"<pre><code>{esc(spec_text)}</code></pre>"]
    h += ["</body>", "</html>", ""]
    written["report.html"] = "\n".join(h).encode("utf-8")
    return written
