"""The event log: ``state.log`` as lines, appended incrementally, rebuilt after a seek.

Lines are kept as styled text and cut to the panel's width when they are drawn (not when they are
written), so a line uses the whole panel at any size and after a resize; it follows the newest line
unless the operator scrolled up.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kimitui.core.procdisplay import local_time
from kimitui.core.state import LOG_LINES, LogEntry, SessionState
from kimitui.tui.palette import Colors

SOURCE_WIDTH = 10


def log_line(entry: LogEntry, colors: Colors) -> Text:
    level_style = {"warning": colors.warning, "error": colors.error, "debug": colors.muted}.get(entry.level, "")
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(local_time("%H:%M:%S", entry.t), style=colors.muted)
    text.append(f" {entry.source:<{SOURCE_WIDTH}} ", style=colors.primary)
    text.append(entry.message, style=level_style)
    return text


class EventLog(ScrollView):
    DEFAULT_CSS = """
    EventLog { background: $surface; overflow-x: hidden; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._last: LogEntry | None = None
        self._lines: list[Text] = []
        self._strips: LRUCache[tuple[int, int], Strip] = LRUCache(256)
        self._serial = 0
        self._follow = True
        """Keep the newest line in view (until the operator scrolls up; scrolling to the end resumes)."""
        """Bumped when the lines are replaced: the strip cache keys on (serial + index, width)."""
        self.shown: list[str] = []
        """Plain text of the lines shown, oldest first (what tests and copy-out read)."""

    def show(self, state: SessionState, colors: Colors, rebuild: bool = False) -> None:
        entries = state.log
        new: list[LogEntry] = []
        found = False
        if not rebuild and self._last is not None:
            for entry in reversed(entries):
                if entry is self._last:
                    found = True
                    break
                new.append(entry)
        if not found:
            if not entries and not self.shown:
                return  # nothing logged yet: nothing to clear or write
            self._lines, self.shown = [], []
            self._serial += LOG_LINES * 4
            self._strips.clear()
            new = list(entries)
        else:
            new.reverse()
        if not new and found:
            return
        follow = self._follow = self._follow if self.scroll_y >= self.max_scroll_y else False
        for entry in new:
            line = log_line(entry, colors)
            self._lines.append(line)
            self.shown.append(line.plain)
        drop = len(self._lines) - LOG_LINES
        if drop > 0:
            del self._lines[:drop]
            del self.shown[:drop]
            self._serial += drop  # line i is now what line i + drop was
        self._last = entries[-1] if entries else None
        self._fit(follow or not found)
        self.refresh()

    def _fit(self, follow: bool) -> None:
        region = self.scrollable_content_region
        self.virtual_size = Size(region.width, len(self._lines))
        if follow:
            self._follow = True
            # after the new virtual size is in force (scrolling clamps to it)
            self.call_after_refresh(self._to_end)

    def _to_end(self) -> None:
        if self._follow:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    def on_resize(self) -> None:
        self._fit(self._follow)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if new < old:
            self._follow = False
        elif new >= self.max_scroll_y:
            self._follow = True

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index = self.scroll_offset.y + y
        if not 0 <= index < len(self._lines) or width <= 0:
            return Strip([Segment(" " * max(width, 0), self.rich_style)], max(width, 0))
        key = (self._serial + index, width)
        strip = self._strips.get(key)
        if strip is None:
            text = self._lines[index].copy()
            text.truncate(width, overflow="ellipsis", pad=True)
            base = self.rich_style
            segments = [Segment(seg.text, base + seg.style if seg.style else base)
                        for seg in text.render(self.app.console, end="")]
            strip = Strip(segments, width).crop(0, width)
            self._strips[key] = strip
        return strip
