"""The event log: ``state.log`` as lines, appended incrementally, rebuilt after a seek."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import RichLog

from kimitui.core.state import LOG_LINES, LogEntry, SessionState
from kimitui.tui.palette import Colors


def log_line(entry: LogEntry, colors: Colors) -> Text:
    level_style = {"warning": colors.warning, "error": colors.error, "debug": colors.muted}.get(entry.level, "")
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(time.strftime("%H:%M:%S", time.localtime(entry.t)), style=colors.muted)
    text.append(f" {entry.source:<10} ", style=colors.primary)
    text.append(entry.message, style=level_style)
    return text


class EventLog(RichLog):
    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, max_lines=LOG_LINES, wrap=False, markup=False,
                         auto_scroll=True)
        self._last: LogEntry | None = None
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
                return  # nothing logged yet: nothing to clear or write (a clear repaints the log)
            self.clear()
            self.shown = []
            new = list(entries)
        else:
            new.reverse()
        for entry in new:
            line = log_line(entry, colors)
            self.write(line)
            self.shown.append(line.plain)
        if len(self.shown) > LOG_LINES:
            del self.shown[: len(self.shown) - LOG_LINES]
        self._last = entries[-1] if entries else None
