"""Tests for reports.document: one document model, each block rendered once per format."""

import re

import pytest
from matplotlib.figure import Figure as MplFigure

from reports.document import (
    Bullets,
    Code,
    Document,
    Figure,
    Heading,
    Paragraph,
    Section,
    Table,
    render,
    section,
    simulation_document,
    to_html,
    to_markdown,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _doc(png: bytes = PNG_MAGIC + b"x") -> Document:
    return Document(
        "Depth <sweep>",
        [
            Paragraph("KL(q_diag || q_full) falls", headline=True),
            Paragraph("r_hat <= 1.01 & ESS > 400, a < b; not &amp; nor &#60;"),
            Heading("Settings of this run"),
            Bullets(["a note with <script>alert(1)</script>"]),
            Bullets([]),  # nothing to list: no block at all
            Table(
                ["model.depth", "error"], [["1", "RuntimeError: <b>nan</b> | loss"]], cls="failed"
            ),
            Figure("figures/accuracy_vs_model_depth.png", png, "accuracy [%] against depth"),
            Section("Extra", [Paragraph("text"), Figure("figures/extra.png", png)]),
            Code("name: demo\nx: ```\n", "yaml"),
        ],
    )


def test_markdown_renders_every_block_once_escaped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    md = to_markdown(_doc())
    # plain text where Markdown reads no markup; a tag's "<" and an entity's "&" escaped
    # a pipe outside a table cell is text, written as it is (no visible backslash)
    assert md.startswith(
        "# Depth \\<sweep>\n\n**KL(q_diag || q_full) falls**\n\nr_hat <= 1.01 & ESS > 400, "
    )
    assert "a < b; not \\&amp; nor \\&#60;\n\n## Settings of this run\n\n- a" in md
    assert not re.search(r"(?<!\\)<(script|b|/b)>", md) and "\\<script>" in md
    assert "| model.depth | error |\n|---|---|\n| 1 | RuntimeError: \\<b>nan\\</b> \\| loss |" in md
    assert md.count("](figures/accuracy_vs_model_depth.png)") == 1
    assert "\n*accuracy [%] against depth*\n" in md
    assert "## Extra\n\ntext\n\n![figures/extra.png](figures/extra.png)\n" in md
    # a fence longer than any run of backticks inside the code
    assert "````yaml\nname: demo\nx: ```\n````\n" in md
    assert md.endswith("\n") and "\n\n\n" not in md
    assert list(tmp_path.iterdir()) == []  # pure


def test_html_is_self_contained_and_escaped():
    page = to_html(_doc())
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    assert "<title>Depth &lt;sweep&gt;</title>" in page and "<h1>Depth &lt;sweep&gt;</h1>" in page
    assert '<p class="headline"><strong>KL(q_diag || q_full) falls</strong></p>' in page
    assert page.count("data:image/png;base64,") == 2
    srcs = re.findall(r'src="([^"]*)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "http://" not in page and "https://" not in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '<table class="failed">' in page and "&lt;b&gt;nan&lt;/b&gt;" in page
    assert "<figcaption>accuracy [%] against depth</figcaption>" in page
    assert page.count("<ul>") == 1  # the empty list renders nothing
    assert "<pre><code>name: demo" in page


def test_table_alignment_counts_text_columns():
    page = to_html(Document("t", [Table(["k", "v"], [["a", "1"]], n_text=1)]))
    assert '<th class="text">k</th>\n<th>v</th>' in page
    assert '<td class="text">a</td><td>1</td>' in page
    page = to_html(Document("t", [Table(["k", "v"], [["a", "1"]])]))  # None: every column
    assert '<td class="text">a</td><td class="text">1</td>' in page


def test_render_returns_the_files_and_the_figures_once():
    files = render(_doc())
    assert set(files) == {
        "report.md",
        "report.html",
        "figures/accuracy_vs_model_depth.png",
        "figures/extra.png",
    }
    assert all(isinstance(b, bytes) for b in files.values())


def test_section_orders_paragraphs_tables_figures_and_renders_figures_once():
    fig = MplFigure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    sec = section("S", ["p"], [(["a"], [["1"]])], [("my fig.x", fig)])
    kinds = [type(b) for b in sec.blocks]
    assert kinds == [Paragraph, Table, Figure]
    assert sec.blocks[2].path == "figures/my_fig_x.png" and sec.figures == [("my_fig_x", fig)]
    assert sec.blocks[2].png.startswith(PNG_MAGIC)
    files = render(Document("t", [sec]))
    assert files["figures/my_fig_x.png"] == sec.blocks[2].png


def test_simulation_document_has_no_empty_summary():
    md = to_markdown(simulation_document("t", 3, "desc", [Section("S")], "a: 1\n"))
    assert "3 cell(s): 3 ok, 0 failed." in md and "- desc" in md
    assert "Summary" not in md and "```yaml\na: 1\n```" in md


def test_an_unknown_block_is_refused():
    with pytest.raises(TypeError, match="not a report block"):
        to_markdown(Document("t", ["raw string"]))
