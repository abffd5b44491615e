"""A report as a small document model (headline, paragraphs, tables, images in sections) and its two
renderings: self-contained HTML (inline CSS, figures as base64 PNG data URIs, no script and no remote
reference) and Markdown (the same tables; figures referenced as PNG files beside it).

The HTML fits a 1,300 px wide page: cells wrap (values over ``LONG_CELL`` characters, such as ranges and
paths, anywhere; column names after each ``_``), and each table sits in a container that scrolls sideways
rather than run off the page should a table still be too wide (tests/harness/report/test_browser.py
checks this in headless Chromium)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field

import pandas as pd


@dataclass(frozen=True)
class Headline:
    title: str
    status: str                      # pass | fail | unknown
    lines: list[tuple[str, str]]


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    title: str
    frame: pd.DataFrame
    note: str | None = None
    empty: str = "none"


@dataclass(frozen=True)
class Image:
    name: str                        # file stem under figures/
    caption: str
    png: bytes


Block = Headline | Paragraph | Table | Image


@dataclass(frozen=True)
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    anchor: str = ""


@dataclass(frozen=True)
class Document:
    title: str
    sections: list[Section]
    files: list[str]                 # data files written beside the report (linked, relative)
    generated: str

    def images(self) -> list[Image]:
        return [block for section in self.sections for block in section.blocks if isinstance(block, Image)]


FIGURES_DIR = "figures"
LONG_CELL = 24  # characters: longer cell values may wrap anywhere

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 auto;max-width:1300px;
padding:16px 24px;color:#222;line-height:1.4;overflow-wrap:break-word}
h1{font-size:1.5em;margin:0 0 8px}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:3px;
margin-top:28px}h3{font-size:1.05em;margin:18px 0 6px}
.headline{border:1px solid #ccc;border-left:8px solid #999;padding:8px 14px;margin:8px 0 12px;
background:#fafafa}.headline.pass{border-left-color:#2e7d32}.headline.fail{border-left-color:#c62828}
.headline.unknown{border-left-color:#f9a825}.headline h2{border:0;margin:2px 0 6px}
.badge{display:inline-block;padding:1px 8px;border-radius:4px;color:#fff;font-size:.85em;
vertical-align:middle}.badge.pass{background:#2e7d32}.badge.fail{background:#c62828}
.badge.unknown{background:#f9a825;color:#222}
.headline table{border:0}.headline td{border:0;padding:1px 10px 1px 0;vertical-align:top}
.headline td:first-child{font-weight:600;white-space:nowrap}.headline td+td{overflow-wrap:anywhere}
.table-wrap{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-size:.85em;margin:4px 0 6px}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:left}th{background:#f0f0f0}
td.long{overflow-wrap:anywhere}
tr:nth-child(even) td{background:#fbfbfb}.note,.empty{color:#666;font-size:.85em}
figure{margin:10px 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#555;font-size:.85em}nav a{margin-right:12px}
"""


def to_html(document: Document) -> str:
    """The whole report as one self-contained HTML page."""
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(document.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(document.title)}</h1>",
    ]
    anchored = [s for s in document.sections if s.anchor]
    if anchored:
        parts.append("<nav>" + "".join(f'<a href="#{_e(s.anchor)}">{_e(s.title)}</a>' for s in anchored)
                     + "</nav>")
    for section in document.sections:
        anchor = f' id="{_e(section.anchor)}"' if section.anchor else ""
        if section.title:
            parts.append(f"<h2{anchor}>{_e(section.title)}</h2>")
        parts.extend(_html_block(block) for block in section.blocks)
    if document.files:
        links = ", ".join(f'<a href="{_e(name)}">{_e(name)}</a>' for name in document.files)
        parts.append(f'<p class="note">Data: {links}. {_e(document.generated)}</p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _html_block(block: Block) -> str:
    if isinstance(block, Headline):
        rows = "".join(f"<tr><td>{_e(label)}</td><td>{_e(text)}</td></tr>" for label, text in block.lines)
        return (f'<div class="headline {block.status}"><h2>{_e(block.title)} '
                f'<span class="badge {block.status}">{_e(_status_word(block.status))}</span></h2>'
                f"<table>{rows}</table></div>")
    if isinstance(block, Paragraph):
        return f"<p>{_e(block.text)}</p>"
    if isinstance(block, Table):
        out = [f"<h3>{_e(block.title)}</h3>"] if block.title else []
        if block.frame.empty:
            out.append(f'<p class="empty">{_e(block.empty)}</p>')
        else:
            head = "".join(f"<th>{_column(str(c))}</th>" for c in block.frame.columns)
            body = "".join("<tr>" + "".join(_html_cell(_cell(v)) for v in row) + "</tr>"
                           for row in block.frame.itertuples(index=False, name=None))
            out.append(f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
                       "</table></div>")
        if block.note:
            out.append(f'<p class="note">{_e(block.note)}</p>')
        return "".join(out)
    data = base64.b64encode(block.png).decode("ascii")
    return (f'<figure><img alt="{_e(block.caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(block.caption)}</figcaption></figure>")


def to_markdown(document: Document) -> str:
    """The report in Markdown: the same headline and tables; figures as links to ``figures/*.png``."""
    parts = [f"# {_m(document.title)}", ""]
    for section in document.sections:
        if section.title:
            parts += [f"## {_m(section.title)}", ""]
        for block in section.blocks:
            parts += [*_markdown_block(block), ""]
    if document.files:
        parts += ["Data: " + ", ".join(f"[{name}]({name})" for name in document.files) + ". "
                  + document.generated, ""]
    return "\n".join(parts)


def _markdown_block(block: Block) -> list[str]:
    if isinstance(block, Headline):
        return [f"**{_m(block.title)}: {_status_word(block.status)}**", "",
                *(f"- **{_m(label)}**: {_m(text)}" for label, text in block.lines)]
    if isinstance(block, Paragraph):
        return [_m(block.text)]
    if isinstance(block, Table):
        out = [f"### {_m(block.title)}", ""] if block.title else []
        if block.frame.empty:
            out.append(f"_{_m(block.empty)}_")
        else:
            out.append("| " + " | ".join(_m(str(c)) for c in block.frame.columns) + " |")
            out.append("|" + "---|" * len(block.frame.columns))
            out += ["| " + " | ".join(_m(_cell(v)) for v in row) + " |"
                    for row in block.frame.itertuples(index=False, name=None)]
        if block.note:
            out += ["", f"_{_m(block.note)}_"]
        return out
    return [f"![{_m(block.caption)}]({FIGURES_DIR}/{block.name}.png)", "", f"_{_m(block.caption)}_"]


def _status_word(status: str) -> str:
    return {"pass": "valid", "fail": "INVALID"}.get(status, "unknown")


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return str(value)


def _html_cell(text: str) -> str:
    """A table cell; a long value (ranges, paths, sentences) may wrap anywhere, a short one stays whole."""
    return f'<td class="long">{_e(text)}</td>' if len(text) > LONG_CELL else f"<td>{_e(text)}</td>"


def _column(name: str) -> str:
    """A column name that may wrap after each ``_`` (``recovery_p50_ms``), escaped."""
    return "_<wbr>".join(_e(part) for part in name.split("_"))


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _m(text: str) -> str:
    """Text safe inside a Markdown table cell or line: HTML escaped (a Markdown viewer renders raw HTML), and
    the characters that would start a link, code, emphasis or a new cell or line escaped."""
    text = html.escape(text, quote=False).replace("\\", "\\\\")
    for char in "|*`[]":
        text = text.replace(char, "\\" + char)
    return text.replace("\n", " ")
