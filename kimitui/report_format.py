"""Markdown pieces the report's sections share (kimitui.report, kimitui.campaign.report)."""

from __future__ import annotations

import math
from typing import Any


def fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds):  # the difference of two far-apart times in a hand-edited run
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(round(seconds), 60)
    if m < 60:
        return f"{m}m {s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m {s:02d}s"


def writable(text: str) -> str:
    """``text`` with any lone surrogate escaped (``\\ud800``), so it can be written as UTF-8: JSON's
    ``\\ud800`` escapes make them, in the plain JSON inside events that decoding does not look into."""
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(head: list[str], rows: list[list[Any]], align: str = "") -> list[str]:
    """A Markdown table; ``align`` gives one of l/r per column (default: first left, rest right)."""
    align = align or "l" + "r" * (len(head) - 1)
    marks = [":---" if a == "l" else "---:" for a in align]
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join(marks) + " |"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out
