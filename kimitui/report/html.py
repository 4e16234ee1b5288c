"""A report's Markdown as one shareable HTML file (``-o report.html``): the figures inline (their SVG in the
page), no file beside it, nothing fetched. Only the Markdown the reports write is read: headings, tables,
fenced code, lists, block quotes, paragraphs, images on a line of their own, ``**bold**`` and ``code``."""

from __future__ import annotations

import html
import re
from pathlib import Path

STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}th,td{border:1px solid #ccc;padding:3px 8px}
th{background:#f3f3f3}td.r,th.r{text-align:right}pre{background:#f6f6f6;padding:0.8em;overflow-x:auto}
code{font-size:0.92em}figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}blockquote{color:#555;
border-left:3px solid #ccc;margin-left:0;padding-left:1em}"""

_IMAGE = re.compile(r"^!\[(?P<title>[^\]]*)\]\((?P<path>[^)]*)\)$")
_INLINE = re.compile(r"(`[^`]+`|\*\*[^*]+\*\*)")


def inline(text: str) -> str:
    """``code`` and **bold** in a line of Markdown, the rest escaped (a table cell's ``\\|`` is a ``|``)."""
    out = []
    for piece in _INLINE.split(text.replace("\\|", "|")):
        if piece.startswith("`") and piece.endswith("`") and len(piece) > 1:
            out.append(f"<code>{html.escape(piece[1:-1])}</code>")
        elif piece.startswith("**") and piece.endswith("**") and len(piece) > 3:
            out.append(f"<strong>{html.escape(piece[2:-2])}</strong>")
        else:
            out.append(html.escape(piece))
    return "".join(out)


def _cells(line: str) -> list[str]:
    body = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def _table(lines: list[str]) -> str:
    head, marks, rows = _cells(lines[0]), _cells(lines[1]), [_cells(x) for x in lines[2:]]
    cls = [' class="r"' if m.endswith(":") and not m.startswith(":") else "" for m in marks]
    out = ["<table>", "<tr>" + "".join(f"<th{c}>{inline(h)}</th>" for h, c in zip(head, cls, strict=False)) + "</tr>"]
    out += ["<tr>" + "".join(f"<td{c}>{inline(x)}</td>" for x, c in zip(row, cls, strict=False)) + "</tr>"
            for row in rows]
    return "\n".join([*out, "</table>"])


def _figure(title: str, path: str, figures: dict[str, Path]) -> str:
    png = figures.get(path)
    svg = png.with_suffix(".svg") if png is not None else None
    if svg is None or not svg.is_file():
        return f"<p>[figure not available: {html.escape(title)}]</p>"
    text = svg.read_text(encoding="utf-8")
    text = text[text.index("<svg"):]  # the XML declaration and doctype have no place inside a page
    return f'<figure aria-label="{html.escape(title)}">\n{text}\n<figcaption>{html.escape(title)}</figcaption></figure>'


def _list(lines: list[str]) -> str:
    out, depth = [], 0
    for line in lines:
        level = (len(line) - len(line.lstrip(" "))) // 2 + 1
        while depth < level:
            out.append("<ul>")
            depth += 1
        while depth > level:
            out.append("</ul>")
            depth -= 1
        out.append(f"<li>{inline(line.strip()[2:])}</li>")
    return "\n".join(out + ["</ul>"] * depth)


def _is_item(line: str) -> bool:
    return line.lstrip(" ").startswith("- ")


def to_html(markdown: str, figures: dict[str, Path]) -> str:
    """``markdown`` as a page; ``figures``: the image path the Markdown links -> the PNG written (its SVG
    beside it is put in the page)."""
    lines = markdown.splitlines()
    title = next((x[2:] for x in lines if x.startswith("# ")), "kimitui report")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre><code>" + html.escape("\n".join(lines[i + 1:j])) + "</code></pre>")
            i = j + 1
            continue
        if line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(_table(lines[i:j]) if j - i >= 2 else f"<p>{inline(line)}</p>")
            i = j
            continue
        if _is_item(line):
            j = i
            while j < len(lines) and _is_item(lines[j]):
                j += 1
            out.append(_list(lines[i:j]))
            i = j
            continue
        heading = re.match(r"^(#{1,6}) (.*)$", line)
        image = _IMAGE.match(line)
        if heading:
            n = len(heading.group(1))
            out.append(f"<h{n}>{inline(heading.group(2))}</h{n}>")
        elif image:
            out.append(_figure(image.group("title"), image.group("path"), figures))
        elif line.startswith("> "):
            out.append(f"<blockquote>{inline(line[2:])}</blockquote>")
        elif line.strip():
            out.append(f"<p>{inline(line)}</p>")
        i += 1
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>\n"
            + "\n".join(out) + "\n</body>\n</html>\n")
