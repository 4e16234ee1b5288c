"""A replay's position as a bar for the status line: played part, where it is, and a mark where each phase
began."""

from __future__ import annotations

from kimitui.tui.replay_info import ReplayInfo

BAR_MIN = 8
BAR_MAX = 30

_STYLES = {"━": "$accent", "╋": "bold $accent", "─": "$text-muted", "┼": "bold $secondary", "●": "bold $primary"}


def bar_cells(replay: ReplayInfo, cells: int) -> str:
    """The bar's characters: ``━`` played, ``─`` to come, ``╋``/``┼`` a phase start, ``●`` the position."""
    span = replay.duration
    frac = 1.0 if replay.finished else (min(max(replay.elapsed / span, 0.0), 1.0) if span > 0 else 0.0)
    head = round(frac * (cells - 1))
    marked = {min(cells - 1, int((m - replay.start) / span * cells)) if span > 0 else 0 for m in replay.marks}
    out = []
    for c in range(cells):
        if c == head:
            out.append("●")
        elif c in marked:
            out.append("╋" if c < head else "┼")
        else:
            out.append("━" if c < head else "─")
    return "".join(out)


def position_bar(replay: ReplayInfo, cells: int) -> list[tuple[str, str]]:
    """The bar as styled runs (one per change of style)."""
    runs: list[tuple[str, str]] = []
    for ch in bar_cells(replay, cells):
        style = _STYLES[ch]
        if runs and runs[-1][1] == style:
            runs[-1] = (runs[-1][0] + ch, style)
        else:
            runs.append((ch, style))
    return runs
