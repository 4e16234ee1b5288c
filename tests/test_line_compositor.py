"""The line compositor (kimitui/tui/line_compositor.py): a frame renders only the widgets on its changed lines,
and what it sends leaves the screen as a full repaint would."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from textual._compositor import ChopsUpdate, LayoutUpdate
from textual.geometry import Region
from textual.pilot import Pilot
from textual.strip import Strip
from textual.widget import Widget

from kimitui.core.events import HostSample
from kimitui.core.session import QueueSource, Session
from kimitui.tui import app as app_module
from kimitui.tui.app import KimituiApp
from kimitui.tui.line_compositor import line_runs
from tests.screen_emulator import Terminal
from tests.test_screen_diff import SIZE, sample


@contextmanager
def counting_renders() -> Iterator[Counter[str]]:
    """Widget.render_lines calls by widget class while the block runs."""
    counts: Counter[str] = Counter()
    original = Widget.render_lines

    def render_lines(self: Widget, crop: Region) -> list[Strip]:
        counts[type(self).__name__] += 1
        return original(self, crop)

    Widget.render_lines = render_lines  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        Widget.render_lines = original  # type: ignore[method-assign]


async def drawn(app: KimituiApp, pilot: Pilot[None], source: QueueSource, event: HostSample) -> None:
    """Put a sample and wait until its frame has been drawn and sent."""
    frames = app.frames
    source.put(event)
    deadline = time.monotonic() + 10
    while app.session.state.sample_seq != event.seq or app.frames == frames:
        assert time.monotonic() < deadline, f"sample {event.seq} not drawn"
        await pilot.pause()
    await pilot.pause(0.05)


def same_figures(seq: int, like: HostSample) -> HostSample:
    """A new sample (the header's event count moves) whose GPUs and processes read as ``like``'s."""
    return replace(like, seq=seq, t=like.t + 0.5 * (seq - like.seq))


async def test_a_frame_renders_only_the_widgets_on_its_changed_lines() -> None:
    source = QueueSource()
    app = KimituiApp(Session(), sources=[source], host_label="h")
    async with app.run_test(size=SIZE) as pilot:
        first = sample(1)
        await drawn(app, pilot, source, first)
        for seq in range(2, 30):  # the memory history full: a sample with the same figures changes none of it
            await drawn(app, pilot, source, same_figures(seq, first))
        with counting_renders() as unchanged:
            await drawn(app, pilot, source, same_figures(30, first))
        changed_gpu = replace(first.gpus[3], util_pct=(first.gpus[3].util_pct or 0) + 1)
        with counting_renders() as one_gpu:
            await drawn(app, pilot, source, replace(same_figures(31, first),
                                                    gpus=[*first.gpus[:3], changed_gpu, *first.gpus[4:]]))
    # the header's event count changed, nothing else: only the header is rendered
    assert unchanged["StatusBar"] >= 1
    assert set(unchanged) == {"StatusBar"}, unchanged
    # one GPU's utilisation: the header and the GPU table, not the footer, the process table, the log, the
    # tabs or the containers around them (Textual's own compositor renders all of them every frame)
    assert one_gpu["GpuTable"] >= 1
    assert set(one_gpu) == {"StatusBar", "GpuTable"}, one_gpu


class Capturing(KimituiApp):
    """The dashboard, headless: each partial update with what a full repaint would show at that moment."""

    CSS_PATH = str(Path(app_module.__file__).with_name("app.tcss"))

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.updates: list[tuple[object, LayoutUpdate | None]] = []

    def _display(self, screen, renderable):  # type: ignore[no-untyped-def]
        if isinstance(renderable, ChopsUpdate):
            self.updates.append((renderable, screen._compositor.render_full_update()))
        elif isinstance(renderable, LayoutUpdate):
            self.updates.append((renderable, None))
        super()._display(screen, renderable)


async def test_partial_updates_leave_the_screen_as_a_full_repaint_would() -> None:
    source = QueueSource()
    app = Capturing(Session(), sources=[source], host_label="h")
    async with app.run_test(size=SIZE) as pilot:
        for seq in range(1, 7):
            await drawn(app, pilot, source, sample(seq))
        app.action_show_view("cleanup")
        await pilot.pause(0.2)
        app.action_show_view("dashboard")
        await pilot.pause(0.2)
        await drawn(app, pilot, source, sample(7))
    console = Console(color_system="256", force_terminal=True, width=SIZE[0], height=SIZE[1])
    screen = Terminal(*SIZE)
    partial = 0
    for update, full in app.updates:
        screen.feed(update.render_segments(console))  # type: ignore[attr-defined]
        if full is None:
            continue
        partial += 1
        repainted = Terminal(*SIZE)
        repainted.feed(full.render_segments(console))
        assert screen.cells == repainted.cells, f"partial update {partial}:\n{screen.text()}"
    assert partial >= 7
    assert "GPU" in screen.text()


def test_line_runs() -> None:
    assert line_runs([]) == []
    assert line_runs([0, 4, 5, 6, 9]) == [(0, 1), (4, 7), (9, 10)]
