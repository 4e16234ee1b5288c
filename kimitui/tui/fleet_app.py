"""The fleet app (``kimitui fleet``): every host x GPU of a fleet in one table, what needs the operator first.

The sources given to the app (anything with ``events()``: a fleet reader's rounds) are pumped into the session by
workers; the table, the status line and the detail line are drawn from the fold, ``session.state.fleet``, when a
round was folded (at most ``REDRAW_HZ`` times a second) and when a key changes what is shown. A host's full
dashboard is another ``kimitui`` process, run in this terminal while the app is suspended (``open_host`` gives its
argv); it is told that Escape quits it (``keys.ESCAPE_QUITS_ENV``), which brings the fleet back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding, BindingType
from textual.events import Resize
from textual.notifications import SeverityLevel
from textual.widgets import Static

from kimitui.core.events import Event
from kimitui.core.session import EventSource, Session
from kimitui.tui import draw_mode, fmt
from kimitui.tui.diff_draw import DiffDraw
from kimitui.tui.keys import ESCAPE_QUITS_ENV
from kimitui.tui.palette import Colors
from kimitui.tui.themes import load_themes, resolve_theme
from kimitui.tui.views.fleet_view import SORTS, FleetTable, host_key, host_of, is_gpu_row, status_line
from kimitui.tui.widgets.key_footer import KeyFooter

OpenHost = Callable[[str], list[str] | None]
"""A host's name -> the argv of its dashboard (None: it cannot be opened from here)."""
REDRAW_HZ = 8.0
TABLE_ACTIONS = frozenset({"expand", "collapse", "toggle_host", "open_host", "sort"})
"""Keys of the fleet's table: not while another screen (the command palette) is on top."""


class FleetApp(DiffDraw):
    CSS_PATH = "fleet.tcss"
    TITLE = "kimitui fleet"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_host", "Dashboard", key_display="Enter"),
        Binding("o", "open_host", show=False),
        Binding("space", "toggle_host", "GPUs", key_display="Space/→/←"),
        # over the table's own arrows (a horizontal scroll it never needs: the columns are fitted to the width)
        Binding("right", "expand", show=False, priority=True),
        Binding("left", "collapse", show=False, priority=True),
        Binding("s", "sort", "Sort"),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", show=False, priority=True),
    ]

    def __init__(self, session: Session, sources: Iterable[EventSource] = (), open_host: OpenHost | None = None,
                 title: str = "", *, theme: str | None = None, plain_draw: bool | None = None) -> None:
        super().__init__()
        # every round moves most rows' figures: only the cells that changed are sent (diff_draw.py)
        self.start_diff_draw(draw_mode.plain_draw_asked() if plain_draw is None else plain_draw)
        self.session = session
        self.sources = list(sources)
        self.open_host = open_host
        self.fleet_title = title
        if title:
            self.title = title
        loaded = load_themes(None)
        for t in loaded.themes:
            self.register_theme(t)
        self.theme, warning = resolve_theme(theme, list(self.available_themes))
        self._warnings = [*loaded.warnings, *([warning] if warning else [])]
        self.expanded: set[str] = set()
        """The hosts whose GPUs are shown under them."""
        self.sort = SORTS[0]
        self._colors: tuple[str, Colors] | None = None
        self._status_text: Text | None = None
        self._detail_text: str | None = None
        self._last_redraw = 0.0
        self._redraw_pending = False
        self._unsubscribe: Callable[[], None] | None = None
        self._status = Static(id="fleet-status")
        self._table = FleetTable(id="fleet-table")
        self._detail = Static(id="fleet-detail")
        self._footer = KeyFooter()

    def compose(self) -> ComposeResult:
        yield from (self._status, self._table, self._detail, self._footer)

    def on_mount(self) -> None:
        self.forget_on_suspend()
        for warning in self._warnings:
            self.notify(warning, title="kimitui", severity="warning", timeout=12)
        self._unsubscribe = self.session.subscribe(self._on_event)
        for source in self.sources:
            self.run_worker(self._pump(source), group="sources", exit_on_error=False)
        self._table.focus()
        self._fit(self.size.width)
        self.redraw()

    def on_unmount(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def on_resize(self, event: Resize) -> None:
        if self._table.is_attached:  # a first size may come before the widgets are mounted (on_mount fits them)
            self._fit(event.size.width)
            self.redraw()

    def _fit(self, width: int) -> None:
        self._table.fit(width)
        self._footer.fit(width)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        # host names, the source's errors: outside text, printable and never read as markup
        super().notify(fmt.printable_lines(message), title=fmt.printable(title), severity=severity,
                       timeout=timeout, markup=markup)

    @property
    def colors(self) -> Colors:
        if self._colors is None or self._colors[0] != self.theme:
            self._colors = (self.theme, Colors.of(self))
        return self._colors[1]

    # -- the sources and the redraw

    async def _pump(self, source: EventSource) -> None:
        try:
            await self.session.pump(source)
        except Exception as exc:  # said, not raised: the rows folded so far stay on screen
            self.notify(f"the fleet's source stopped: {type(exc).__name__}: {exc}", title="fleet",
                        severity="error", timeout=30)

    def _on_event(self, event: Event) -> None:
        """A published event schedules one redraw, as soon as the cap allows."""
        if self._redraw_pending or not self.is_running:
            return
        self._redraw_pending = True
        delay = self._last_redraw + 1 / REDRAW_HZ - time.monotonic()
        if delay > 0:
            self.set_timer(delay, self._scheduled_redraw, name="redraw")
        else:
            self.call_later(self._scheduled_redraw)

    def _scheduled_redraw(self) -> None:
        self._redraw_pending = False
        self.redraw()

    def redraw(self) -> None:
        """Show the fold: the rows whose host's round changed them (``FleetTable.show``), the status line, the
        detail line."""
        if not self._table.is_attached:
            return  # shutting down: a last timer may still come
        self._last_redraw = time.monotonic()
        fleet = self.session.state.fleet
        colors = self.colors
        self._table.show(fleet, self.expanded, self.sort, colors)
        error = fleet.error if fleet is not None else ""
        status = status_line(fleet, error, self.sort, self._table.attention_count, self.fleet_title, colors)
        if status != self._status_text:
            self._status_text = status
            self._status.update(status, layout=False)
        self._show_detail()

    def _show_detail(self) -> None:
        detail = self._table.detail(self._table.cursor_key)
        if detail != self._detail_text:
            self._detail_text = detail
            self._detail.update(Text(detail, style=self.colors.muted))

    def on_fleet_table_cursor_moved(self, _message: FleetTable.CursorMoved) -> None:
        self._show_detail()

    # -- keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in TABLE_ACTIONS:
            return len(self.screen_stack) == 1
        return True

    def _cursor_host(self) -> str | None:
        key = self._table.cursor_key
        return host_of(key) if key is not None else None

    def action_expand(self) -> None:
        """→: the cursor's host's GPUs under it."""
        name = self._cursor_host()
        fleet = self.session.state.fleet
        if name is None or name in self.expanded or fleet is None or not fleet.hosts[name].gpus:
            return
        self.expanded.add(name)
        self.redraw()

    def action_collapse(self) -> None:
        """←: the cursor's host (or the host of the GPU it is on) folded back to its row, the cursor on it."""
        name = self._cursor_host()
        if name is None or name not in self.expanded:
            return
        self._table.move_to_key(host_key(name))  # before its GPU rows go: the table keeps the cursor on its row
        self.expanded.discard(name)
        self.redraw()

    def action_toggle_host(self) -> None:
        key = self._table.cursor_key
        if key is None:
            return
        if is_gpu_row(key) or host_of(key) in self.expanded:
            self.action_collapse()
        else:
            self.action_expand()

    def action_sort(self) -> None:
        """s: the next order (``SORTS``); the cursor stays on its row, and in view."""
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self.redraw()
        self._table.move_cursor(self._table.cursor_row)

    def action_open_host(self) -> None:
        """o: the cursor's host's full dashboard, in this terminal; the fleet comes back when it exits."""
        name = self._cursor_host()
        if name is None:
            return
        argv = self.open_host(name) if self.open_host is not None else None
        if not argv:
            self.notify(f"{name}: its dashboard cannot be opened from here", title="dashboard", severity="warning")
            return
        self.run_dashboard(name, argv)

    def run_dashboard(self, name: str, argv: list[str]) -> int | None:
        """Run ARGV in this terminal, the app suspended until it exits; its exit status (None: it did not run)."""
        env = {**os.environ, ESCAPE_QUITS_ENV: "1"}
        code: int | None = None
        failed = ""
        try:
            with self.suspend():
                # Ctrl-C while the child is starting or ending reaches the whole foreground group: it is the
                # child's. A Python handler, not SIG_IGN, which the child would inherit across exec.
                previous = _hold_sigint()
                try:
                    code = subprocess.run(argv, env=env, check=False).returncode
                except OSError as exc:  # raised out of the block, it would leave the app suspended
                    failed = str(exc)
                finally:
                    _restore_sigint(previous)
        except SuspendNotSupported:
            self.notify("this terminal cannot be handed to another program", title="dashboard", severity="error")
            return None
        if failed:
            self.notify(f"{name}: its dashboard did not start: {failed}", title="dashboard", severity="error")
        elif code:
            self.notify(f"{name}: its dashboard exited with status {code}", title="dashboard", severity="warning")
        self.redraw()
        return code


def _hold_sigint() -> object:
    try:
        return signal.signal(signal.SIGINT, lambda *_: None)
    except ValueError:  # not the main thread: nothing to hold
        return None


def _restore_sigint(previous: object) -> None:
    if previous is not None:
        signal.signal(signal.SIGINT, previous)  # type: ignore[arg-type]
