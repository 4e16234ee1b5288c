"""Markdown pieces the report's sections share (kimitui.report.markdown, kimitui.report.campaign)."""

from __future__ import annotations

import math
from typing import Any

from kimitui.core.printable import printable
from kimitui.core.typed import finite


def fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds):  # the difference of two far-apart times in a hand-edited run
        return "n/a"
    if seconds < 0:  # a hand-edited run's end before its start: the same words, signed
        return "-" + fmt_duration(-seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(round(seconds), 60)
    if m < 60:
        return f"{m}m {s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m {s:02d}s"


def document(lines: list[str]) -> str:
    """Lines of a report or summary as one text, each line printable (``core.printable``): what came from a
    host, a server or the run file cannot write to the reader's terminal, and a newline inside a field
    cannot start a line of its own; lone surrogates (JSON's ``\\ud800`` escapes, in the plain JSON inside
    events that decoding does not look into) are escaped too, so the text can be written as UTF-8."""
    return "\n".join(printable(line) for line in lines)


def _cell(text: Any) -> str:
    """A table cell: one printable line, its ``|`` escaped so it cannot split the cell."""
    return printable(str(text)).replace("|", "\\|")


def table(head: list[str], rows: list[list[Any]], align: str = "") -> list[str]:
    """A Markdown table; ``align`` gives one of l/r per column (default: first left, rest right)."""
    align = align or "l" + "r" * (len(head) - 1)
    marks = [":---" if a == "l" else "---:" for a in align]
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join(marks) + " |"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def fmt_bytes(n: int) -> str:
    for unit, scale in (("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n < 100 * scale else f"{n / scale:.0f} {unit}"
    return f"{n} B"


def fmt_num(v: Any, spec: str = ".1f") -> str:
    """A number of plain JSON (a level's metrics) or an optional field, as ``spec`` says; "n/a" for anything
    else (None, NaN, a string, a count that is no integer)."""
    if spec.endswith("d"):
        return format(v, spec) if type(v) is int else "n/a"
    x = finite(v)
    return "n/a" if x is None else format(x, spec)
