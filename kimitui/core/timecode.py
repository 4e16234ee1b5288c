"""A replay's jump target typed by the operator: a position in the run (``mm:ss``, ``h:mm:ss``), a move from
where it is (``+30s``, ``-5m``, ``+1h30m``), or a wall-clock time (``@14:05``, ``@14:05:30``, or
``2026-12-02 14:05[:30]``, local time). Pure: the TUI's ``g`` and any other caller share it."""

from __future__ import annotations

import re
import time

HINT = "mm:ss or h:mm:ss into the run, +30s / -5m from here, @14:05 or YYYY-MM-DD HH:MM wall clock"
_RELATIVE = re.compile(r"([+-])\s*((?:\d+(?:\.\d+)?\s*[hms]?\s*)+)")
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([hms]?)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "": 1.0}
_POSITION = re.compile(r"(?:(\d+):)?(\d+):(\d{1,2}(?:\.\d+)?)")
_WALL = re.compile(r"@\s*(\d{1,2}):(\d{2})(?::(\d{2}))?")
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{1,2}):(\d{2})(?::(\d{2}))?")


def span(seconds: float) -> str:
    """'1:02:03': a length of the run."""
    s = int(max(seconds, 0))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def parse_jump(text: str, start: float, end: float, now: float) -> float:
    """The run time ``text`` names (``start``/``end``: the run's first and last event, ``now``: the replay's
    clock). A move is kept within the run; a position or wall-clock time outside it is refused. ValueError
    with a one-line message for anything else."""
    text = text.strip()
    if not text:
        raise ValueError(f"type where to go: {HINT}")
    m = _RELATIVE.fullmatch(text)
    if m is not None:
        parts = _PART.findall(m.group(2))
        units = [u for _, u in parts]
        if len(parts) > 1 and ("" in units or len(set(units)) != len(units)):
            raise ValueError(f"{text!r}: give each part its unit once, as in +1h30m")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
        target = now + seconds if m.group(1) == "+" else now - seconds
        return min(max(target, start), end)
    m = _POSITION.fullmatch(text)
    if m is not None:
        h, mm, ss = int(m.group(1) or 0), int(m.group(2)), float(m.group(3))
        if ss >= 60 or (m.group(1) is not None and mm >= 60):
            raise ValueError(f"{text!r}: minutes and seconds go up to 59")
        return _inside(start + h * 3600 + mm * 60 + ss, start, end, text)
    m = _WALL.fullmatch(text)
    if m is not None:
        return _inside(_wall_after(start, int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), text),
                       start, end, text)
    m = _DATE.fullmatch(text)
    if m is not None:
        y, mo, d, hh, mi, ss_ = (int(g or 0) for g in m.groups())
        try:
            t = time.mktime((y, mo, d, hh, mi, ss_, 0, 0, -1))
        except (OverflowError, ValueError) as exc:
            raise ValueError(f"{text!r}: not a date and time") from exc
        return _inside(t, start, end, text)
    raise ValueError(f"{text!r}: not a time; {HINT}")


def _wall_after(start: float, hh: int, mm: int, ss: int, text: str) -> float:
    """The first time of day hh:mm:ss at or after the run's start (local time)."""
    if hh > 23 or mm > 59 or ss > 59:
        raise ValueError(f"{text!r}: not a time of day")
    day = time.localtime(start)
    t = time.mktime((day.tm_year, day.tm_mon, day.tm_mday, hh, mm, ss, 0, 0, -1))
    while t < start - 0.5:  # the run began after that time on its first day: the next day's
        day = time.localtime(t + 86400 + 3600)
        t = time.mktime((day.tm_year, day.tm_mon, day.tm_mday, hh, mm, ss, 0, 0, -1))
    return t


def _inside(t: float, start: float, end: float, text: str) -> float:
    if t < start - 0.5 or t > end + 0.5:
        raise ValueError(f"{text!r}: outside the run (it lasts {span(end - start)}, from "
                         f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(start))})")
    return min(max(t, start), end)
