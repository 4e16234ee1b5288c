"""A tab's view is one module and one entry in ``kimitui/tui/views/registry.py`` (issue 36 item 3): the app
composes a tab for each entry, mounts its widget the first time the tab is shown and calls ``draw(ctx)`` with
the fold, the colours and whether it is live. Shown here with the smallest view there can be, added by one
entry (the app's code untouched), and with the built-in views' entries."""

from __future__ import annotations

from dataclasses import replace

import pytest
from textual.widgets import Static

from kimitui.core.events import GpuSample, HostSample, MacroPoint
from kimitui.core.session import Session
from kimitui.resources import bundled_sample_run
from kimitui.tui.app import KimituiApp
from kimitui.tui.views import registry
from kimitui.tui.views.base import ViewContext
from tests.screen_text import screen_text
from tests.support import BIG, replay_app
from tests.waiting import pilot_until


class GpuCount(Static):
    """The smallest view: one line of the fold."""

    def draw(self, ctx: ViewContext) -> None:
        self.update(f"{len(ctx.state.gpus)} GPUs in the fold; live: {ctx.live}")


async def test_a_view_added_by_one_entry_is_a_tab_mounted_and_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "VIEWS", (*registry.VIEWS,
                                            registry.ViewEntry("count", "Count", lambda: GpuCount(id="count-view"))))
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=BIG) as pilot:
        assert app.player is not None
        app.player.paused = True
        app.player.seek_index(len(app.player.reader) // 2)  # the run halfway: its GPUs in the fold
        app.redraw()
        await pilot_until(pilot, lambda: app.session.state.gpus, "a sample in the fold")
        tabs = next(line for line in screen_text(app).splitlines() if "Dashboard" in line and "Analysis" in line)
        assert tabs.split()[-1] == "Count" and app._views["count"] is None  # a tab, last, not mounted yet
        app.action_show_view("count")
        await pilot_until(pilot, lambda: "8 GPUs in the fold; live: False" in screen_text(app), "the view drawn")
        assert isinstance(app._views["count"], GpuCount)


def test_every_built_in_view_is_an_entry_whose_widget_draws() -> None:
    """The registry's entries are the tabs after the Dashboard, in order, and each widget has ``draw``."""
    assert [(e.id, e.label) for e in registry.VIEWS] == [("bench", "Benchmarks"), ("cleanup", "Cleanup"),
                                                         ("micro", "Micro"), ("analysis", "Analysis")]
    for entry in registry.VIEWS:
        widget = entry.make()
        assert callable(getattr(widget, "draw", None)) and widget.id == f"{entry.id}-view", entry


class LevelCount(Static):
    """A view that reads no sample: the macro levels in the fold, and how many times it was drawn."""

    draws = 0

    def draw(self, ctx: ViewContext) -> None:
        LevelCount.draws += 1
        self.update(f"{len(ctx.state.macro_by_level)} levels in the fold")


async def test_a_view_that_reads_no_sample_is_not_drawn_again_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36 item 2: the fold says what moved (``events_rev``); a view whose entry says it reads no sample is
    drawn again for the next other event, not for the samples between (the Dashboard is, for each)."""
    monkeypatch.setattr(registry, "VIEWS", (*registry.VIEWS, registry.ViewEntry(
        "levels", "Levels", lambda: LevelCount(id="levels-view"), samples=False)))
    monkeypatch.setattr(LevelCount, "draws", 0)
    session = Session()
    app = KimituiApp(session)
    gpu = GpuSample(index=0, uuid="GPU-0", name="H200", mem_used_mib=1.0, mem_total_mib=143771.0)
    async with app.run_test(size=BIG) as pilot:
        app.action_show_view("levels")
        await pilot_until(pilot, lambda: "0 levels in the fold" in screen_text(app), "the view drawn")
        drawn = LevelCount.draws
        for seq in range(1, 6):
            session.publish(HostSample(float(seq), seq=seq, gpus=[replace(gpu, util_pct=10.0 * seq)]))
            app.redraw()
        await pilot.pause()
        assert LevelCount.draws == drawn and len(app.session.state.gpus) == 1
        session.publish(MacroPoint(7.0, concurrency=4, metrics={"completed": 4, "output_throughput": 100.0}))
        app.redraw()
        await pilot_until(pilot, lambda: "1 levels in the fold" in screen_text(app), "the level drawn")
        assert LevelCount.draws == drawn + 1
