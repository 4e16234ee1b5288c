"""A tab's view is one module and one entry in ``kimitui/tui/views/registry.py`` (issue 36 item 3): the app
composes a tab for each entry, mounts its widget the first time the tab is shown and calls ``draw(ctx)`` with
the fold, the colours and whether it is live. Shown here with the smallest view there can be, added by one
entry (the app's code untouched), and with the built-in views' entries."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from kimitui.resources import bundled_sample_run
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
