"""The header line: host, connection, phase, clock; in replay also elapsed/duration, the position bar with
its phase marks (where the line has room), speed, paused, loop."""

from __future__ import annotations

from rich.cells import cell_len
from textual.content import Content

from kimitui.core.replay import SPEEDS
from kimitui.core.state import SessionState
from kimitui.tui import fmt
from kimitui.tui.replay_info import ReplayInfo
from kimitui.tui.widgets.part_lines import Line, Part, PartLines
from kimitui.tui.widgets.position_bar import BAR_MAX, BAR_MIN, position_bar

CONNECTION_STYLES = {
    "connected": "bold $success",
    "connecting": "$warning",
    "reconnecting": "$warning",
    "lost": "bold $error",
    "failed": "bold $error",
    "closed": "$text-muted",
}


CAMPAIGN_WORDS = {"cleanup": "transition"}
"""A phase as the campaign calls it, where that is not its recorded name."""

NARROW = 100
"""Below this width the header drops the date and the event position (the controls stay)."""
NO_PHASE = "  no phase"
SPEED_ROOM = max(len(f"  {fmt.speed(s)}") for s in SPEEDS)
STATE_ROOM = len("  PAUSED")
"""END or PAUSED: the room kept for them whether shown or not (so is the phase's, for the longest phase of the run,
and the speed's): the position bar starts at one column and has one width while the replay plays, its ● only
moves on."""


def cells_of(parts: list[Part]) -> int:
    return sum(cell_len(p if isinstance(p, str) else p[0]) for p in parts)


def status_content(state: SessionState, replay: ReplayInfo | None, live: bool, host: str = "",
                   width: int = 120, read_only: bool = False) -> Content:
    """The header as styled content; colours are theme variables, so a theme switch restyles it."""
    return Content.assemble(*status_parts(state, replay, live, host, width, read_only))


def status_parts(state: SessionState, replay: ReplayInfo | None, live: bool, host: str = "",
                 width: int = 120, read_only: bool = False) -> Line:
    """The header's parts: ``"text"`` or ``("text", style)``."""
    narrow = width < NARROW
    clock = fmt.time_of_day if narrow else fmt.clock

    def named(phase: str) -> str:  # in a campaign, the campaign's word (the strip's): the cleanup is its transition
        return CAMPAIGN_WORDS.get(phase, phase) if state.campaign is not None else phase

    parts: list[Part] = [] if narrow else [(" kimitui ", "bold reverse $primary")]
    if replay is not None:  # what is shown is a record, whatever the host's connection was then
        parts += [" ", (" REPLAY ", "bold reverse $secondary")]
    if read_only:  # kimitui serve's visitors: nothing on the host can be started from here
        parts += [" ", (" READ-ONLY ", "bold reverse $warning")]
    parts.append(" ")
    parts.append((fmt.printable(state.host or host or "no host"), "bold"))
    conn = state.connection
    if replay is None:
        parts += ["  ", (conn, CONNECTION_STYLES.get(conn, ""))]
    elif conn not in ("unknown", "connected"):  # the run's connection at this point, when it was not up
        parts += ["  ", (f"was {conn}", CONNECTION_STYLES.get(conn, ""))]
    phase_at = len(parts)
    phase = state.phase
    if phase is not None:
        parts += [("  " if narrow else "  phase ", "$text-muted"), (named(phase.phase), "bold $accent")]
    elif state.phases and state.phases[-1].outcome in ("ok", "unfinished"):
        parts += [("  after ", "$text-muted"), (named(state.phases[-1].phase), "$accent")]
    elif state.phases:  # a phase that did not run as asked is named with how it ended, not "after" it
        last = state.phases[-1]
        style = "bold $error" if last.outcome == "FAILED" else "bold $warning"
        parts += ["  ", (f"{named(last.phase)} {last.outcome}", style)]
    else:
        parts.append((NO_PHASE, "$text-muted"))
    phase_end = len(parts)
    parts.append("  ")
    if replay is not None:
        parts.append(clock(replay.run_time))
        whole = fmt.duration(replay.duration)
        parts.append(f"  {fmt.duration(min(replay.elapsed, replay.duration)):>{len(whole)}}/{whole}")
        bar_at = len(parts)
        parts.append((f"  {fmt.speed(replay.speed)}", "bold"))
        if replay.finished and not replay.loop:
            parts.append(("  END", "bold $success"))
        elif replay.paused:
            parts.append(("  PAUSED", "bold $warning"))
        if replay.loop:
            parts.append(("  LOOP", "bold $accent"))
        if not narrow:
            parts.append((f"  event {replay.position}/{replay.total}", "$text-muted"))
    else:
        parts.append(clock(state.clock))
        if live and not narrow:
            parts.append((f"  events {state.events_folded}", "$text-muted"))
    if replay is not None:  # the position bar, as wide as the line has room for whatever its changing parts say
        phase_cells = cells_of(parts[phase_at:phase_end])
        words = [w for p in replay.phases for w in (p, CAMPAIGN_WORDS.get(p, p))]  # a campaign's once it has begun
        room = max([len(NO_PHASE), phase_cells, *(cell_len(f"  after {w}") for w in words)])
        kept = (room + cells_of(parts[phase_end:bar_at]) + SPEED_ROOM + STATE_ROOM + (replay.loop and len("  LOOP"))
                + (0 if narrow else len(f"  event {replay.total}/{replay.total}")))
        cells = min(BAR_MAX, width - cells_of(parts[:phase_at]) - kept - 2)
        if cells >= BAR_MIN:
            parts[bar_at:bar_at] = ["  ", *position_bar(replay, cells)]
            parts.insert(phase_end, " " * (room - phase_cells))
    return tuple(parts)


class StatusBar(PartLines):
    """One line of what and where, drawn from the state and, in replay, the player's position."""

    DEFAULT_CSS = """
    StatusBar { height: 1; background: $panel; color: $foreground; }
    """

    overflow_ellipsis = True

    _last: tuple[SessionState, ReplayInfo | None, bool, str] | None = None
    read_only = False
    """Said in the header (set by the app when no action on the host can start)."""

    def show(self, state: SessionState, replay: ReplayInfo | None, live: bool, host: str = "") -> None:
        self._last = (state, replay, live, host)
        # One line whatever it says: only the line is repainted, and only when it changed.
        self.set_lines([status_parts(state, replay, live, host, self.size.width or 120, self.read_only)])

    def on_resize(self) -> None:
        if self._last is not None:
            self.show(*self._last)
