"""A report as a document of blocks, rendered once per format.

A :class:`Document` is a title and a sequence of blocks: :class:`Heading`,
:class:`Paragraph`, :class:`Bullets`, :class:`Table`, :class:`Figure` (PNG bytes and the
path the store writes them to) and :class:`Code`. The caller builds it once (the run layer,
``zoo.execution.report``, or a simulation); :func:`to_markdown` and :func:`to_html` each render
every block once, and :func:`render` returns every file of the report (``report.md``,
``report.html`` and the figures' PNG files) as bytes keyed by their path relative to the
run directory. Nothing here writes a file: the run store does.

A study contributes a :class:`Section` (a titled group of blocks, :func:`section` builds the
usual paragraphs-tables-figures one). The HTML is self-contained: figures are embedded as
base64 ``data:`` URIs, the CSS is inline and every piece of text is HTML-escaped; the
Markdown escapes HTML and table pipes, so no text of a run can inject markup.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from functools import singledispatch
from typing import NamedTuple

from matplotlib.figure import Figure as MplFigure

from reports.figures import figure_png

__all__ = [
    "Block",
    "Bullets",
    "Code",
    "Details",
    "Document",
    "Figure",
    "Heading",
    "Paragraph",
    "Section",
    "Table",
    "TableData",
    "figure_path",
    "render",
    "section",
    "simulation_document",
    "to_html",
    "to_markdown",
]

#: A table as ``(header, rows)`` of strings.
TableData = tuple[Sequence[str], Sequence[Sequence[str]]]

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


class Heading(NamedTuple):
    """A heading; ``level`` 1 is the title, 2 a section."""

    text: str
    level: int = 2


class Paragraph(NamedTuple):
    """A paragraph; a ``headline`` one is set in bold (what the run found)."""

    text: str
    headline: bool = False


class Bullets(NamedTuple):
    """An unordered list of short lines."""

    items: Sequence[str]


class Table(NamedTuple):
    """A table of strings.

    ``n_text`` columns from the left are left-aligned text in HTML (None: every column);
    ``cls`` is an HTML class (``"failed"`` colours the rows).
    """

    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    n_text: int | None = None
    cls: str = ""


class Figure(NamedTuple):
    """An image written to ``path`` (relative to the run directory), with its caption.

    ``image`` is the PNG bytes, or a matplotlib Figure that :func:`render` draws to PNG
    once (so a section's figure can still be inspected before the report is rendered).
    """

    path: str
    image: bytes | MplFigure
    caption: str | None = None

    @property
    def png(self) -> bytes:
        """The PNG bytes (drawn now from a matplotlib Figure)."""
        return self.image if isinstance(self.image, bytes) else figure_png(self.image)


class Code(NamedTuple):
    """A verbatim block of text (the spec as run), with its language for Markdown."""

    text: str
    language: str = ""


class Details(NamedTuple):
    """Text and tables behind a title: folded (``<details>``) in HTML, a titled section of
    its own in Markdown. For what a reader may want but need not read first (every metric
    of the summary); it holds no figures."""

    title: str
    blocks: Sequence[Paragraph | Bullets | Table] = ()


Block = Heading | Paragraph | Bullets | Table | Figure | Code | Details


class Section(NamedTuple):
    """A titled group of blocks a study contributes to a report."""

    title: str
    blocks: Sequence[Block] = ()

    @property
    def paragraphs(self) -> list[str]:
        """The text of its paragraphs, in order."""
        return [b.text for b in self.blocks if isinstance(b, Paragraph)]

    @property
    def tables(self) -> list[TableData]:
        """Its tables as ``(header, rows)``, in order."""
        return [(b.header, b.rows) for b in self.blocks if isinstance(b, Table)]

    @property
    def figures(self) -> list[tuple[str, bytes | MplFigure]]:
        """Its figures as ``(file stem, image)``, in order."""
        return [
            (b.path.removeprefix("figures/").removesuffix(".png"), b.image)
            for b in self.blocks
            if isinstance(b, Figure)
        ]


class Document(NamedTuple):
    """A report: its title and its blocks in order (sections flattened by :func:`render`)."""

    title: str
    blocks: Sequence[Block | Section]


def _sanitize(name: str) -> str:
    """File-name-safe version of a name (``model.depth`` -> ``model_depth``)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", str(name)).strip("_") or "x"


def figure_path(stem: str) -> str:
    """Where a report figure named ``stem`` goes: ``figures/<stem>.png`` (stem sanitized)."""
    return f"figures/{_sanitize(stem)}.png"


def section(
    title: str,
    paragraphs: Sequence[str] = (),
    tables: Sequence[TableData] = (),
    figures: Sequence[tuple[str, MplFigure]] = (),
) -> Section:
    """The usual study section: paragraphs, then tables, then figures.

    Parameters
    ----------
    title : str
    paragraphs : sequence of str
    tables : sequence of (header, rows)
        Tables of strings; every column left-aligned in HTML.
    figures : sequence of (stem, matplotlib Figure)
        Written as ``figures/<stem>.png`` (drawn to PNG once, by :func:`render`).
    """
    blocks: list[Block] = [Paragraph(p) for p in paragraphs]
    blocks += [Table(header, rows) for header, rows in tables]
    blocks += [Figure(figure_path(stem), fig) for stem, fig in figures]
    return Section(title, blocks)


def simulation_document(
    title: str,
    n_rows: int,
    description: str | None,
    sections: Sequence[Section],
    spec_text: str,
) -> Document:
    """The report of a simulation spec (no cells, no sweep): its rows, description and
    sections, then the spec as run."""
    return Document(
        title,
        [
            Paragraph(f"{n_rows} cell(s): {n_rows} ok, 0 failed."),
            Bullets([description] if description else []),
            *sections,
            Heading("Spec (as run)"),
            Code(spec_text, "yaml"),
        ],
    )


def _flat(doc: Document) -> list[Block]:
    out: list[Block] = [Heading(doc.title, 1)]
    for b in doc.blocks:
        out += [Heading(b.title), *b.blocks] if isinstance(b, Section) else [b]
    return out


# --------------------------------------------------------------------------- Markdown


#: What Markdown would read as markup rather than text: a ``<`` that opens a tag or a
#: comment (a letter, ``/``, ``!`` or ``?`` follows) and a ``&`` that spells an entity
#: (``&amp;``, ``&#60;``). Each gets a backslash; every other character stays as written.
_MD_MARKUP = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?[A-Za-z0-9]+;)")


def _md_escape(text: str, cell: bool = False) -> str:
    """Escape text for a Markdown paragraph or, with ``cell``, a table cell: plain text
    where it cannot be read as raw HTML (``<=``, ``a & b`` stay as they are; ``<b>`` becomes
    ``\\<b>``), and in a cell its pipes (elsewhere a ``|`` is text, and a backslash before
    it would show in the file: ``KL(q_diag || q_full)`` stays as written)."""
    text = _MD_MARKUP.sub(lambda m: "\\" + m.group(0), str(text))
    if cell:
        text = text.replace("|", "\\|")
    return " ".join(text.split())


def _fence(text: str) -> str:
    """A fence of backticks longer than any run of backticks inside ``text``."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


@singledispatch
def _md(block: object) -> list[str]:
    raise TypeError(f"not a report block: {type(block).__name__}")


@_md.register
def _(b: Heading) -> list[str]:
    return ["#" * b.level + " " + _md_escape(b.text)]


@_md.register
def _(b: Paragraph) -> list[str]:
    return [f"**{_md_escape(b.text)}**" if b.headline else _md_escape(b.text)]


@_md.register
def _(b: Bullets) -> list[str]:
    return [f"- {_md_escape(s)}" for s in b.items]


@_md.register
def _(b: Table) -> list[str]:
    lines = [
        "| " + " | ".join(_md_escape(h, cell=True) for h in b.header) + " |",
        "|" + "|".join("---" for _ in b.header) + "|",
    ]
    rows = ["| " + " | ".join(_md_escape(c, cell=True) for c in row) + " |" for row in b.rows]
    return lines + rows


@_md.register
def _(b: Figure) -> list[str]:
    if b.caption is None:
        return [f"![{_md_escape(b.path)}]({b.path})"]
    return [f"![{_md_escape(b.caption)}]({b.path})", "", f"*{_md_escape(b.caption)}*"]


@_md.register
def _(b: Code) -> list[str]:
    fence = _fence(b.text)
    return [f"{fence}{b.language}", b.text.rstrip("\n"), fence]


@_md.register
def _(b: Details) -> list[str]:
    lines = _md(Heading(b.title))
    for inner in b.blocks:
        lines += ["", *_md(inner)]
    return lines


def to_markdown(doc: Document) -> str:
    """The document as GitHub-flavoured Markdown: each block, then a blank line."""
    lines: list[str] = []
    for block in _flat(doc):
        if not (isinstance(block, Bullets) and not block.items):
            lines += [*_md(block), ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- HTML


@singledispatch
def _html(block: object) -> str:
    raise TypeError(f"not a report block: {type(block).__name__}")


@_html.register
def _(b: Heading) -> str:
    return f"<h{b.level}>{html.escape(b.text)}</h{b.level}>"


@_html.register
def _(b: Paragraph) -> str:
    if b.headline:
        return f'<p class="headline"><strong>{html.escape(b.text)}</strong></p>'
    return f"<p>{html.escape(b.text)}</p>"


@_html.register
def _(b: Bullets) -> str:
    return "\n".join(["<ul>", *(f"<li>{html.escape(s)}</li>" for s in b.items), "</ul>"])


@_html.register
def _(b: Table) -> str:
    n_text = len(b.header) if b.n_text is None else b.n_text

    def cell(tag: str, i: int, value: str) -> str:
        attr = ' class="text"' if i < n_text else ""
        return f"<{tag}{attr}>{html.escape(str(value))}</{tag}>"

    cls_attr = f' class="{html.escape(b.cls)}"' if b.cls else ""
    out = [f"<table{cls_attr}>", "<thead><tr>"]
    out += [cell("th", i, h) for i, h in enumerate(b.header)]
    out += ["</tr></thead>", "<tbody>"]
    out += ["<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in b.rows]
    out.append("</tbody></table>")
    return "\n".join(out)


@_html.register
def _(b: Figure) -> str:
    data = base64.b64encode(b.png).decode("ascii")
    if b.caption is None:
        alt = html.escape(b.path)
        return f'<figure><img src="data:image/png;base64,{data}" alt="{alt}"></figure>'
    cap = html.escape(b.caption)
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{cap}">'
        f"<figcaption>{cap}</figcaption></figure>"
    )


@_html.register
def _(b: Code) -> str:
    return f"<pre><code>{html.escape(b.text)}</code></pre>"


@_html.register
def _(b: Details) -> str:
    inner = [_html(x) for x in b.blocks]
    return "\n".join(
        [
            "<details>",
            f"<summary><strong>{html.escape(b.title)}</strong></summary>",
            *inner,
            "</details>",
        ]
    )


def to_html(doc: Document) -> str:
    """The document as one self-contained HTML page (inline CSS, embedded figures)."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{html.escape(doc.title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
    ]
    body = [_html(b) for b in _flat(doc) if not (isinstance(b, Bullets) and not b.items)]
    return "\n".join([*head, *body, "</body>", "</html>", ""])


def _drawn(block: Block | Section) -> Block | Section:
    if isinstance(block, Section):
        return Section(block.title, [_drawn(b) for b in block.blocks])
    return block._replace(image=block.png) if isinstance(block, Figure) else block


def render(doc: Document) -> dict[str, bytes]:
    """Every file of the report: ``report.md``, ``report.html`` and each figure's PNG.

    Each figure is drawn to PNG once, then both formats render every block once.

    Returns
    -------
    dict[str, bytes]
        File contents keyed by their path relative to the run directory; the caller (the
        run store) writes them.
    """
    doc = Document(doc.title, [_drawn(b) for b in doc.blocks])
    files = {b.path: b.png for b in _flat(doc) if isinstance(b, Figure)}
    files["report.md"] = to_markdown(doc).encode("utf-8")
    files["report.html"] = to_html(doc).encode("utf-8")
    return files
