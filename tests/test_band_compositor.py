"""The band compositor (kimitui/tui/band_compositor.py) renders a partial update from the widgets and lines
that changed. What matters is what the terminal then shows: after every update the dashboard sends, the
screen (the shadow of what was written, tests/test_screen_diff.py holds it to the terminal) is what a full
render of the app at that moment shows, cell by cell, through samples, tab switches, a modal, a toast, a
scroll, a theme change and a resize; and a frame where the header and the GPU rows changed renders neither
the process table, the event log nor the footer."""

from __future__ import annotations

from collections import Counter

from rich.color import ColorSystem
from rich.console import Console
from textual._compositor import ChopsUpdate, LayoutUpdate
from textual.pilot import Pilot
from textual.widget import Widget

from kimitui.core.events import GpuSample, HostSample, LogLine, ProcSample
from kimitui.core.session import QueueSource, Session
from kimitui.tui.band_compositor import BandCompositor
from kimitui.tui.screen_diff import ScreenShadow, minimal_update, strip_cells
from kimitui.tui.widgets.event_log import EventLog
from kimitui.tui.widgets.gpu_table import GpuTable
from kimitui.tui.widgets.keyed_table import KeyedTable
from kimitui.tui.widgets.proc_table import ProcTable
from tests.app_probe import ProbedApp
from tests.waiting import pilot_until

SIZE = (120, 40)


class Checked(ProbedApp):
    """The dashboard, headless: every update goes through the screen diff into a shadow of the terminal."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.console_256 = Console(color_system="256", force_terminal=True, width=SIZE[0], height=SIZE[1])
        self.terminal = ScreenShadow()
        self.updates = Counter[str]()
        self.compared = 0
        self.mismatches: list[str] = []

    def _display(self, screen, renderable):  # type: ignore[no-untyped-def]
        if isinstance(renderable, LayoutUpdate | ChopsUpdate) and screen is self.screen:
            minimal_update(self.terminal, renderable, (self.size.width, self.size.height), self.console_256)
            self.updates[type(renderable).__name__] += 1
        super()._display(screen, renderable)

    async def settled(self, pilot: Pilot[None], what: str) -> None:
        """Once every refresh asked for is drawn (and every animation done): the terminal shows what a full
        render shows. Compared where the dashboard's screen is on top (a modal draws the one under it through
        its stack)."""
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        if len(self.screen_stack) != 1:
            return
        whole = self.screen._compositor.render_strips()
        assert len(whole) == len(self.terminal.rows), what
        self.compared += 1
        for y, strip in enumerate(whole):
            painted = strip_cells(strip, ColorSystem.EIGHT_BIT)
            assert painted is not None
            if self.terminal.rows[y] != painted[0][: self.size.width]:
                shown = "".join(c[0] for c in self.terminal.rows[y])
                meant = "".join(c[0] for c in painted[0])
                self.mismatches.append(f"{what}, row {y}:\n{shown}\n{meant}")


def sample(seq: int, procs: int = 24) -> HostSample:
    gpus = [GpuSample(i, f"GPU-{i}", "NVIDIA H200", mem_used_mib=90000.0 + (seq * 37 + i) % 900 * (i % 3),
                      mem_total_mib=143771.0, util_pct=float((seq * 7 + i) % 100), temp_c=50.0 + seq % 3,
                      power_w=300.0 + seq % 50, sm_clock_mhz=1980.0) for i in range(8)]
    holders = [ProcSample(pid=1000 + k, start_time=5000 + k, user="vllm", gpu_mem_mib={k % 8: 1400.0 + seq * (k % 2)},
                          kind="cuda", cmdline=f"python3 worker {k}", state="S", gpus=[k % 8]) for k in range(procs)]
    return HostSample(t=1000.0 + seq / 2, host="h", seq=seq, gpus=gpus, procs=holders)


async def test_the_terminal_shows_what_a_full_render_shows_after_every_update() -> None:
    source = QueueSource()
    app = Checked(Session(), sources=[source], host_label="h")
    rendered: Counter[type[Widget]] = Counter()
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen._compositor, BandCompositor)
        seq = 0

        async def feed(n: int, procs: int = 24, what: str = "a sample") -> None:
            nonlocal seq
            for _ in range(n):
                seq += 1
                source.put(sample(seq, procs))
                await pilot_until(pilot, lambda n=seq: app.session.state.sample_seq == n, f"sample {seq} folded")
                await app.settled(pilot, f"{what} (sample {seq})")

        await feed(6)
        # one frame of new figures: what the band compositor renders, counted
        originals = {cls: cls.__dict__["render_lines"] for cls in (Widget, KeyedTable)}  # a table draws its own

        def counting(cls: type[Widget]):  # type: ignore[no-untyped-def]
            def render_lines(widget: Widget, crop):  # type: ignore[no-untyped-def]
                rendered[type(widget)] += 1
                return originals[cls](widget, crop)
            return render_lines

        seq += 1
        for cls in originals:
            cls.render_lines = counting(cls)  # type: ignore[method-assign]
        try:
            source.put(sample(seq))
            await pilot_until(pilot, lambda: app.session.state.sample_seq == seq, f"sample {seq} folded")
            # the frame is drawn on the app's own clock: waited for
            await pilot_until(pilot, lambda: rendered[GpuTable], f"a frame that drew sample {seq}")
        finally:
            for cls, method in originals.items():
                cls.render_lines = method  # type: ignore[method-assign]
        await app.settled(pilot, "new figures")
        await feed(2, procs=40, what="more processes")  # a layout change
        source.put(LogLine(t=1010.0, level="warning", source="test", message="a line in the event log"))
        await feed(1, what="a log line")
        await pilot.press("pagedown")
        await feed(2, procs=40, what="the process table scrolled")
        app.notify("a toast over the tables", timeout=1)
        await feed(2, what="a toast")
        for view in ("bench", "cleanup", "dashboard"):
            app.action_show_view(view)
            await feed(1, what=f"the {view} tab")
        app.action_help()
        await feed(2, what="the help")
        await pilot.press("escape")
        await feed(2, what="the help closed")
        app.action_set_theme("kimitui-light" if "kimitui-light" in app.available_themes else "textual-light")
        await feed(2, what="another theme")
        await pilot.resize_terminal(100, 32)
        await feed(3, what="resized")
        await pilot_until(pilot, lambda: not app.screen.query("Toast"), "the toast gone")
        await feed(1, what="the toast gone")
    assert app.mismatches == [], app.mismatches[0]
    # compared after every update but the help's (a modal on top): counted by the calls above, not by time;
    # both kinds of update went through the shadow (how many frames a run draws is the machine's)
    assert app.compared >= 20, app.compared  # 27 calls, the help's 2 (and any with the help on its way out) not
    assert app.updates["ChopsUpdate"] >= 1 and app.updates["LayoutUpdate"] >= 1, app.updates
    assert not {ProcTable, EventLog} & set(rendered), rendered  # rows the frame did not change: not rendered
