"""The HTML and Markdown renderings: text is escaped, tables come out the same in both, images are inline."""

from __future__ import annotations

import re

import pandas as pd

from harness.report.render import Document, Headline, Image, Paragraph, Section, Table, to_html, to_markdown


def document() -> Document:
    table = pd.DataFrame({"pk": ["CONN#<b>", "CONN#a|b"], "lost_ranges": ["25-27", None]})
    return Document("t <&>", [
        Section("", [Headline("crash / blog", "fail", [("Verdict", "INVALID <x>")])]),
        Section("Sequences", [Paragraph("a <script>alert(1)</script> b"), Table("Lost", table, note="n"),
                              Table("Empty", table.head(0), empty="nothing here"),
                              Image("fig", "a figure", b"\x89PNG-bytes")], "seq"),
    ], ["phases.csv"], "Generated.")


def test_html_escapes_text_and_inlines_images() -> None:
    page = to_html(document())
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<td>CONN#&lt;b&gt;</td>" in page and "<td></td>" in page
    assert 'src="data:image/png;base64,iVBORy1ieXRlcw=="' in page
    assert '<span class="badge fail">INVALID</span>' in page
    assert '<a href="#seq">Sequences</a>' in page and '<a href="phases.csv">phases.csv</a>' in page
    assert "nothing here" in page


def test_markdown_has_the_same_tables() -> None:
    text = to_markdown(document())
    assert "| pk | lost_ranges |" in text
    assert "| CONN#&lt;b&gt; | 25-27 |" in text
    assert "| CONN#a\\|b |  |" in text
    assert "![a figure](figures/fig.png)" in text
    assert "**crash / blog: INVALID**" in text and "- **Verdict**: INVALID &lt;x&gt;" in text
    assert "_nothing here_" in text


def test_markdown_escapes_what_it_quotes() -> None:
    """A Markdown viewer renders raw HTML and links: text from a history or a scenario file (names, paths,
    descriptions, errors) must come out as text, in the title, the section titles and every block."""
    hostile = "<img src=x onerror=alert(1)> [click](javascript:alert(1)) `code`"
    text = to_markdown(Document(f"t {hostile}", [Section(f"s {hostile}", [
        Headline(hostile, "pass", [(hostile, hostile)]), Paragraph(hostile),
        Table(hostile, pd.DataFrame({hostile: [hostile]}), note=hostile),
        Image("fig", hostile, b"png")])], [], "Generated."))
    assert "<img" not in text and not re.search(r"[^\\]\]\(javascript", text) and "`code`" not in text
    assert text.count("&lt;img src=x onerror=alert(1)&gt; \\[click\\](javascript:alert(1)) \\`code\\`") >= 9
    assert "# t &lt;img" in text and "## s &lt;img" in text and "![&lt;img" in text
