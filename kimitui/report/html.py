"""A report's Markdown as one shareable HTML file (``-o report.html``): the figures inline (their SVG in the
page), no file beside it, nothing fetched. The Markdown is read by markdown-it-py (CommonMark and its GFM
tables), with raw HTML off: a process name or a server's error in the report is text, never markup. An image
alone in its paragraph (a figure the report links) is replaced by its SVG."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}th,td{border:1px solid #ccc;padding:3px 8px}
th{background:#f3f3f3}pre{background:#f6f6f6;padding:0.8em;overflow-x:auto}
code{font-size:0.92em}figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}blockquote{color:#555;
border-left:3px solid #ccc;margin-left:0;padding-left:1em}"""


def _figure(title: str, path: str, figures: dict[str, Path]) -> str:
    png = figures.get(path)
    svg = png.with_suffix(".svg") if png is not None else None
    if svg is None or not svg.is_file():
        return f"<p>[figure not available: {html.escape(title)}]</p>"
    text = svg.read_text(encoding="utf-8")
    text = text[text.index("<svg"):]  # the XML declaration and doctype have no place inside a page
    return f'<figure aria-label="{html.escape(title)}">\n{text}\n<figcaption>{html.escape(title)}</figcaption></figure>'


def to_html(markdown: str, figures: dict[str, Path]) -> str:
    """``markdown`` as a page; ``figures``: the image path the Markdown links -> the PNG written (its SVG
    beside it is put in the page)."""
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(markdown)
    for i, tok in enumerate(tokens):  # a figure is a block of its own: not inside a <p>
        if tok.type == "inline" and tok.children and [c.type for c in tok.children] == ["image"]:
            tokens[i - 1].hidden = tokens[i + 1].hidden = True

    def image(self: Any, toks: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        tok = toks[idx]
        title = self.renderInlineAsText(tok.children or [], options, env)
        return _figure(title, str(tok.attrGet("src") or ""), figures)

    md.add_render_rule("image", image)
    title = next((t.content for i, t in enumerate(tokens) if t.type == "inline" and i and
                  tokens[i - 1].type == "heading_open" and tokens[i - 1].tag == "h1"), "kimitui report")
    body = md.renderer.render(tokens, md.options, {})
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>\n"
            + body + "</body>\n</html>\n")
