"""The kimitui dashboard: one Textual app for live sessions and replays.

Views render ``session.state`` only, at most ``REDRAW_HZ`` times a second and only when
``session.version`` changed (a new event or a seek). Live, nothing wakes the app between events: each
published event schedules a redraw (one for a burst, no sooner than the cap allows). In replay mode a
timer drives the player at ``TICK_HZ`` and another redraws at ``REDRAW_HZ``. Sources given to the app
are pumped into the session by workers.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.notifications import SeverityLevel
from textual.timer import Timer
from textual.widgets import Static, TabbedContent, TabPane

from kimitui.core.events import Event
from kimitui.core.replay import Player
from kimitui.core.session import EventSource, Session
from kimitui.live.context import LiveContext
from kimitui.live.process_clock import mark, since_process_start
from kimitui.tui import draw_mode, fmt, keys
from kimitui.tui.commands import KimituiCommands
from kimitui.tui.controllers.base import Controller
from kimitui.tui.controllers.campaign import CampaignController
from kimitui.tui.controllers.cleanup import CleanupController
from kimitui.tui.controllers.macro import MacroController
from kimitui.tui.controllers.micro import MicroController
from kimitui.tui.diff_draw import DiffDraw
from kimitui.tui.host_keys import HostKeys
from kimitui.tui.keys import BINDINGS, CAMPAIGN_ACTIONS, LIVE_ACTIONS, REPLAY_ACTIONS
from kimitui.tui.palette import Colors
from kimitui.tui.replay_controls import ReplayControls
from kimitui.tui.replay_info import ReplayInfo
from kimitui.tui.screens.help_screen import HelpScreen
from kimitui.tui.screenshot_delivery import ScreenshotDelivery, plain_notice
from kimitui.tui.terminal_size import apply_size
from kimitui.tui.themes import load_themes, resolve_theme
from kimitui.tui.views import registry
from kimitui.tui.views.base import View, ViewContext
from kimitui.tui.views.campaign_view import CampaignStrip
from kimitui.tui.views.macro_progress import TAB_LABEL, tab_label
from kimitui.tui.widgets.event_log import EventLog
from kimitui.tui.widgets.gpu_table import GpuTable
from kimitui.tui.widgets.key_footer import KeyFooter
from kimitui.tui.widgets.memory_history import MemoryHistory
from kimitui.tui.widgets.proc_table import ProcTable
from kimitui.tui.widgets.refresh_batch import refresh_batch
from kimitui.tui.widgets.status_bar import StatusBar

if TYPE_CHECKING:
    from textual.driver import Driver
    from textual.screen import Screen


TICK_HZ = 20.0
REDRAW_HZ = 8.0
EXIT_AFTER_FIRST_FRAME_ENV = "KIMITUI_EXIT_AFTER_FIRST_FRAME"
"""1: exit once the first frame is drawn; sample: once the first frame showing a host sample is drawn (the
startup benchmark, benchmarks/startup.py, reads the time printed then)."""
PLAIN_DRAW_ENV = draw_mode.PLAIN_DRAW_ENV
"""1: draw on Textual's own path, not kimitui's (kimitui/tui/draw_mode.py); read once, when the app is made."""


class KimituiApp(DiffDraw, ScreenshotDelivery, ReplayControls, HostKeys):
    CSS_PATH = "app.tcss"
    TITLE = "kimitui"
    COMMANDS = App.COMMANDS | {KimituiCommands}
    BINDINGS: ClassVar[list[BindingType]] = BINDINGS

    def __init__(
        self,
        session: Session,
        player: Player | None = None,
        theme: str | None = None,
        themes_dir: Path | None = None,
        host_label: str = "",
        sources: list[EventSource] | None = None,
        run_path: Path | None = None,
        live: LiveContext | None = None,
        read_only: bool | None = None,
        plain_draw: bool | None = None,
    ) -> None:
        self.plain_draw = draw_mode.plain_draw_asked() if plain_draw is None else plain_draw
        """Draw on Textual's own path (draw_mode.py); set first: Textual's ``__init__`` asks for the driver."""
        super().__init__()
        self.session = session
        self.live = live
        """The host behind a live session (for actions: cleanup, benchmarks); None in replay."""
        self.player = player
        self.host_label = host_label or (player.reader.header.host if player is not None else "")
        self.sources = list(sources or [])
        recorder = getattr(session, "recorder", None)
        self.run_path = run_path or (Path(recorder.path) if recorder is not None else None)
        """The run file: the replayed one, or the one this live session records to (shown in the help)."""
        loaded = load_themes(themes_dir)
        for t in loaded.themes:
            self.register_theme(t)
        self.loaded_theme_names: list[str] = loaded.names
        self.startup_warnings: list[str] = list(loaded.warnings)
        chosen, warning = resolve_theme(theme, list(self.available_themes))
        if warning:
            self.startup_warnings.append(warning)
        self.theme = chosen
        if player is not None:
            self.startup_warnings += player.reader.warnings
        self.first_frame_s: float | None = None
        self._exit_after: str | None = None
        self._drawn: dict[str, tuple[int, str]] = {}
        self._tab_label = TAB_LABEL
        self._status_key: tuple[object, ...] | None = None
        self._running_key: tuple[object, ...] | None = None
        self._colors: tuple[str, Colors] | None = None
        self._last_redraw = 0.0
        """When redraw last ran (time.monotonic), for the cap."""
        self._redraw_pending = False
        """An event scheduled a redraw that has not run yet (live mode)."""
        self._unsubscribe: Callable[[], None] | None = None
        self._replay_timers: list[Timer] = []
        self._loop_thread = threading.get_ident()
        self.start_diff_draw(self.plain_draw)  # diff_draw.py: a partial update sends only the cells that changed
        self.macro = MacroController(self)
        """The macro sweep started from the dashboard (live only): dialog, worker, progress, cancel."""
        self.micro = MicroController(self)
        """The micro benchmarks started from the dashboard (live only): worker, cancel, override."""
        self.cleanup = CleanupController(self)
        """The cleanup and the restart started from the dashboard (live only): dialog, consent, cancel."""
        self.campaign = CampaignController(self)
        """The campaign this dashboard runs (kimitui campaign FILE: ``load``), started when the app mounts."""
        self.controllers: tuple[Controller, ...] = (self.cleanup, self.campaign, self.macro, self.micro)
        """Each acting on the host, in the order Ctrl-C's question names the first one running."""
        self.read_only = os.environ.get(keys.READ_ONLY_ENV) == "1" if read_only is None else read_only
        """No action on the host can start here (kimitui serve's visitors): ``keys.make_read_only``."""
        if self.read_only:
            keys.make_read_only(self)
        if os.environ.get(keys.ESCAPE_QUITS_ENV) == "1":
            # opened from kimitui fleet: Escape is Ctrl-C's quit (asking first while something acts on the host),
            # which brings the fleet back; not a priority binding, so a dialog's own Escape still closes the dialog
            self.bind("escape", "interrupt", show=False)

    # -- layout

    def get_default_screen(self) -> Screen[object]:
        if self.plain_draw:
            return super().get_default_screen()
        from kimitui.tui.band_compositor import BandScreen
        return BandScreen(id="_default")

    def get_driver_class(self) -> type[Driver]:
        if self.plain_draw:
            return super().get_driver_class()
        from textual.drivers.linux_driver import LinuxDriver

        from kimitui.tui.quiet_driver import QuietLinuxDriver

        driver = super().get_driver_class()
        return QuietLinuxDriver if driver is LinuxDriver else driver  # not another one named (a browser's)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        # Notices carry outside text (an error body, a note, a reason): printable, and not read as markup
        message, title = fmt.printable_lines(plain_notice(message, title)), fmt.printable(title)
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield CampaignStrip(id="campaign-strip")
        with TabbedContent(initial="dashboard", id="views"):
            with TabPane("Dashboard", id="dashboard"):
                with Horizontal(id="gpu-row"):
                    yield GpuTable(id="gpu-table")
                    with Vertical(id="mem-box"):  # the border and padding are the box's: the history draws bare lines
                        yield MemoryHistory(id="mem-history")
                yield ProcTable(id="proc-table")
                yield EventLog(id="event-log")
            # The other views are mounted the first time they are shown: a faster first frame.
            for entry in registry.VIEWS:
                yield TabPane(entry.label, id=entry.id)
        yield Static(id="too-small")
        yield KeyFooter()

    def on_mount(self) -> None:
        # Kept as references: while a modal screen (help, palette) is on top, app.query_one would
        # search that screen, not the dashboard.
        self._status = self.query_one(StatusBar)
        self._status.read_only = self.read_only
        self._strip = self.query_one(CampaignStrip)
        self._tabs = self.query_one("#views", TabbedContent)
        self._gpu_table = self.query_one(GpuTable)
        self._mem_history = self.query_one(MemoryHistory)
        self._proc_table = self.query_one(ProcTable)
        self._event_log = self.query_one(EventLog)
        self._panes = {pane.id or "": pane for pane in self.query(TabPane)}
        self._views: dict[str, View | None] = {entry.id: None for entry in registry.VIEWS}
        self._sample_free = frozenset(entry.id for entry in registry.VIEWS if not entry.samples)
        """Each tab's view once mounted (registry.py)."""
        self._mounting: set[str] = set()
        self.query_one("#gpu-row").border_title = "GPUs"
        self.query_one("#proc-table").border_title = "Processes"
        self.query_one("#event-log").border_title = "Events"
        apply_size(self.screen_stack[0], *self.size)
        self.forget_on_suspend()
        for warning in self.startup_warnings:
            self.log.warning(warning)
            self.notify(warning, title="kimitui", severity="warning", timeout=12)
        for source in self.sources:
            self.run_worker(self.session.pump(source), group="sources", exit_on_error=False)
        if self.player is not None:
            self.player.advance()
            self.player.advance()  # publishes the events at the run's first instant
            # The header's clock moves while no event is due: a steady redraw (a no-op when the
            # header and the state are as drawn). Both timers stop while the replay is paused or
            # over, and start again with the controls.
            self._replay_timers = [self.set_interval(1 / TICK_HZ, self._tick, name="replay-tick"),
                                   self.set_interval(1 / REDRAW_HZ, self.redraw, name="redraw")]
        else:
            self._unsubscribe = self.session.subscribe(self._on_event)
        self.campaign.start()  # when it was given one
        self._exit_after = os.environ.get(EXIT_AFTER_FIRST_FRAME_ENV)
        self.redraw()
        if self._exit_after == "1":
            self.call_after_refresh(self._first_frame_drawn)

    def _first_frame_drawn(self) -> None:
        if self.first_frame_s is None:
            self.first_frame_s = since_process_start()
            mark("first-frame")
            self.exit()

    def on_resize(self, event: Resize) -> None:
        apply_size(self.screen_stack[0], *event.size)

    # -- drawing

    @property
    def colors(self) -> Colors:
        if self._colors is None or self._colors[0] != self.theme:
            self._colors = (self.theme, Colors.of(self))
        return self._colors[1]

    @property
    def active_view(self) -> str:
        return self._tabs.active or "dashboard"

    def on_unmount(self) -> None:
        for controller in self.controllers:
            controller.close()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _tick(self) -> None:
        if self.player is not None:
            self.player.advance()
            if self.player.paused or (self.player.finished and not self.player.loop):
                self.redraw()  # END or PAUSED, before the timers stop
                self._sync_replay_timers()

    def _sync_replay_timers(self) -> None:
        """Replay timers run only while the replay plays (the controls are the app's actions: they
        start them again)."""
        idle = self.player is None or self.player.paused or (self.player.finished and not self.player.loop)
        for timer in self._replay_timers:
            if idle:
                timer.pause()
            else:
                timer.resume()

    def _on_event(self, _event: Event) -> None:
        """Live: a published event schedules one redraw, as soon as the cap allows."""
        if threading.get_ident() != self._loop_thread:
            self.call_from_thread(self._on_event, _event)
            return
        if self._redraw_pending or not self.is_running:
            return  # one is already scheduled: it draws this event too
        self._redraw_pending = True
        delay = self._last_redraw + 1 / REDRAW_HZ - time.monotonic()
        if delay > 0:
            self.set_timer(delay, self._scheduled_redraw, name="redraw")
        else:
            self.call_later(self._scheduled_redraw)  # after the events published with this one

    def _scheduled_redraw(self) -> None:
        self._redraw_pending = False
        self.redraw()

    def redraw(self) -> None:
        """Draw what changed: the header when the clock or controls moved, the visible view when
        the session has a new version or the theme changed."""
        if not self._status.is_attached:
            return  # shutting down: the widgets are gone, a last timer tick may still come
        with refresh_batch(not self.plain_draw):  # the widgets it repaints tell the screen from here (refresh_batch.py)
            self._redraw()

    def _redraw(self) -> None:
        self._last_redraw = time.monotonic()
        state = self.session.state
        replay = ReplayInfo.of(self.player) if self.player is not None else None
        key = (self.session.version, self.theme, replay.key() if replay else None)
        if key != self._status_key:
            self._status_key = key
            self._status.show(state, replay, live=bool(self.sources), host=self.host_label)
            self._strip.show(state, live=self.campaign.running)
            label = tab_label(state.sweep)
            if label != self._tab_label:
                self._tab_label = label
                self._tabs.get_tab("bench").label = label
        view = self.active_view
        # a view that reads no sample is not drawn again for one (the fold says what moved: core/changes.py)
        stamp = (self.session.version if view not in self._sample_free else state.events_rev, self.theme)
        running = (view, *(c.running for c in self.controllers))
        if running != self._running_key:  # the footer's x and the keys that apply
            self._running_key = running
            self.refresh_bindings()
        if self._drawn.get(view) == stamp:
            return
        self._drawn[view] = stamp
        colors = self.colors
        if view == "dashboard":
            self._gpu_table.show(state, colors)
            self._mem_history.show(state)
            self._proc_table.show(state, colors)
            title = f"Processes ({len(state.procs)})"
            if self._proc_table.border_title != title:  # setting it repaints, even to the same text
                self._proc_table.border_title = title
            self._event_log.show(state, colors)
            if state.gpus and self._exit_after == "sample":
                self._exit_after = None
                self.call_after_refresh(self._first_frame_drawn)
        elif view in self._views:
            shown = self._views[view]
            if shown is None:
                self._mount_view(view)
            else:
                shown.draw(ViewContext(state, colors, live=self.live is not None))

    def _mount_view(self, view: str) -> None:
        """Mount a view on first show, then draw it (until then it counts as not drawn)."""
        self._drawn.pop(view, None)
        if view in self._mounting:
            return
        self._mounting.add(view)

        async def mount() -> None:
            widget = next(entry for entry in registry.VIEWS if entry.id == view).make()
            await self._panes[view].mount(widget)
            if not self.is_running:  # the app began to exit meanwhile: the view's children are gone
                return
            self._views[view] = widget  # type: ignore[assignment]
            self.redraw()

        self.run_worker(mount(), group="views", name=f"mount {view}")

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if hasattr(self, "_status"):
            self.redraw()

    # -- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in CAMPAIGN_ACTIONS:  # while it runs: a campaign done has nothing to pause, skip or abort
            return self.campaign.running
        if action in LIVE_ACTIONS:  # False: not in a replay's footer, and the key goes to in_replay
            return self.player is None
        if action == "in_replay":
            return self.player is not None
        if action == "cancel_macro_key":  # the x keys: in the footer while what they cancel runs
            return self.macro.running and self.active_view == "bench"
        if action == "cancel_micro_key":
            return self.micro.running and self.active_view == "micro"
        if action == "seek_by":  # left/right take the focused tabs' arrows, not a dialog's
            return self.player is not None and len(self.screen_stack) == 1
        if action in ("cancel_cleanup", "cancel_cleanup_idle"):
            return self.cleanup.running == (action == "cancel_cleanup")
        return not (action in REPLAY_ACTIONS and self.player is None)

    def action_in_replay(self, action: str) -> None:
        """A live key pressed in a replay: its action, which says what it needs."""
        if action in LIVE_ACTIONS:
            getattr(self, f"action_{action}")()

    def _after_control(self) -> None:
        self._sync_replay_timers()
        self.redraw()

    def action_scroll_view(self, action: str) -> None:
        """Scroll the view shown (the Dashboard: its process table), whatever has focus on the dashboard."""
        if self.screen is not self.screen_stack[0]:
            raise SkipAction()  # a modal screen's keys are its own
        views: dict[str, object] = {"dashboard": self._proc_table, **self._views}
        view = views.get(self.active_view)
        if view is None:
            raise SkipAction()
        getattr(view, f"action_{action}")()

    def action_show_view(self, view: str) -> None:
        if view == "dashboard" or view in self._views:
            self._tabs.active = view
            self.redraw()

    def action_set_theme(self, name: str) -> None:
        if name not in self.available_themes:
            self.notify(f"unknown theme {name!r}", severity="warning")
            return
        self.theme = name
        self.redraw()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(replay=self.player is not None,
                                        run_path=str(self.run_path) if self.run_path else None))


def print_first_frame(app: KimituiApp) -> None:
    """The line the startup benchmark reads, printed once the terminal is restored."""
    if app.first_frame_s is not None:
        print(f"first-frame {app.first_frame_s:.3f}", file=sys.stderr, flush=True)
