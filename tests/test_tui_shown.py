"""What the screen shows is current and whole (issue 20, items 1 and 5): a table updated while its tab was
hidden shows the new values when the tab comes back; numbers are not cut, safety columns are kept, and every
scrollable tab scrolls from the keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.screen_text import screen_text
from tests.support import BIG, FakeClock, replay_app
from tests.tui_runs import write_test_run
from tests.waiting import pilot_until


@pytest.fixture(scope="module")
def run_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_run(tmp_path_factory.mktemp("shown") / "campaign.jsonl")


def gpu_line(app: object, index: int) -> str:
    """GPU ``index``'s line of the GPU table as the terminal shows it."""
    lines = [ln for ln in screen_text(app).splitlines() if "RTX PRO 6000" in ln]  # type: ignore[arg-type]
    return next((ln for ln in lines if ln.lstrip("│ ").startswith(f"{index} ")), "")


async def test_the_gpu_table_shows_what_changed_while_another_tab_was_shown(run_path: Path) -> None:
    """The samples change (the cleanup frees every GPU) while the Cleanup tab is shown: back on the
    Dashboard, the GPU table's lines on screen are the latest sample's, not the ones drawn before."""
    clock = FakeClock()
    app = replay_app(run_path, clock)
    async with app.run_test(size=BIG) as pilot:
        clock.now += 3.0
        await pilot_until(pilot, lambda: "90.2/95.6 GiB" in gpu_line(app, 0), "GPU 0 held on screen")
        await pilot.press("c")
        await pilot_until(pilot, lambda: app.active_view == "cleanup", "the Cleanup tab")
        await pilot.press("e")  # to the end: the last sample has every GPU back at idle
        await pilot_until(pilot, lambda: app.session.state.gpus[0].mem_used_mib < 1024, "the last sample folded")
        await pilot.press("d")
        await pilot_until(pilot, lambda: app.active_view == "dashboard", "the Dashboard")
        await pilot_until(pilot, lambda: "0.6/95.6 GiB" in gpu_line(app, 0), "GPU 0 idle on screen", timeout=3.0)
        for i in range(8):
            assert "90.2/95.6" not in gpu_line(app, i), gpu_line(app, i)


async def test_the_consent_table_at_80x24_keeps_whose_process_and_when_it_started() -> None:
    """At 80x24 the consent modal's rows show the user and the start time beside the pid (which process of
    whose is about to be signalled); the command column narrows instead."""
    from textual.widgets import DataTable

    from kimitui.core.events import StepPreview
    from kimitui.core.replay import state_at
    from kimitui.core.runfile import RunReader
    from kimitui.core.session import Session
    from kimitui.resources import bundled_sample_run
    from kimitui.tui import fmt
    from kimitui.tui.app import KimituiApp
    from kimitui.tui.screens.cleanup_consent import ConsentScreen

    reader = RunReader(bundled_sample_run())
    at = next(i for i in range(len(reader)) if isinstance(e := reader.decoded(i), StepPreview) and e.step == "graceful")
    preview = reader.decoded(at)
    assert isinstance(preview, StepPreview)
    state = state_at(reader, at + 1)
    app = KimituiApp(Session())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = ConsentScreen(preview, "ana", "step 1 of 3", state)
        app.push_screen(screen)
        await pilot_until(pilot, lambda: app.screen is screen and screen.query_one("#consent-targets").row_count > 0,
                       "the modal's rows")
        table = screen.query_one("#consent-targets", DataTable)
        table.focus()
        for n, ref in enumerate(preview.targets):
            table.move_cursor(row=n)
            # the row under the cursor is on screen (the table scrolls to it)
            await pilot_until(pilot, lambda ref=ref: f" {ref.pid} " in screen_text(app), f"{ref.pid}'s row")
            text = screen_text(app)
            header = next(ln for ln in text.splitlines() if " PID " in ln)
            assert "User" in header and "Start" in header, header
            line = next((ln for ln in text.splitlines() if f" {ref.pid} " in ln and "action:" not in ln), "")
            started = fmt.started(state.started_at(ref.start_time), state.clock)
            assert started != fmt.DASH
            assert f" {started} " in line and f" {ref.user} " in line, (ref, line)
            assert fmt.mib(ref.mem_mib) in line, line
            assert max(len(ln) for ln in text.splitlines()) <= 80


def scroller(app: object, view: str) -> object:
    from kimitui.tui.app import KimituiApp

    assert isinstance(app, KimituiApp)
    return app.query_one("#proc-table" if view == "dashboard" else f"#{view}-view")


async def test_every_scrollable_tab_scrolls_from_the_keys_and_the_analysis_shows_its_last_line() -> None:
    """Pressed right after a view's key (the tab bar has focus), PgDn/PgUp and the arrows scroll the view
    shown; at 120x40 the Analysis tab's last line (the post-restart verdict) is reached by PgDn."""
    from kimitui.resources import bundled_sample_run

    app = replay_app(bundled_sample_run())
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e")
        scrolled = []
        for key, view in (("u", "micro"), ("a", "analysis"), ("b", "bench"), ("c", "cleanup")):
            await pilot.press(key)
            await pilot_until(pilot, lambda v=view: app.active_view == v and scroller(app, v).max_scroll_y >= 0,
                           f"the {view} tab")
            await pilot.pause()
            widget = scroller(app, view)
            if widget.max_scroll_y == 0:
                continue
            scrolled.append(view)
            await pilot.press("pagedown")
            await pilot_until(pilot, lambda w=widget: w.scroll_y > 0, f"{view} paged down")
            if view == "analysis":
                while widget.scroll_y < widget.max_scroll_y:
                    await pilot.press("pagedown")
                    await pilot.pause()
                await pilot_until(pilot, lambda: "After the restart: " in screen_text(app), "the post-restart line")
            await pilot.press("pageup")
            await pilot_until(pilot, lambda w=widget: w.scroll_y == 0, f"{view} paged up")
            await pilot.press("down")
            await pilot_until(pilot, lambda w=widget: w.scroll_y == 1, f"{view} a line down")
            await pilot.press("up")
            await pilot_until(pilot, lambda w=widget: w.scroll_y == 0, f"{view} a line up")
        assert {"micro", "analysis", "bench"} <= set(scrolled), scrolled
        await pilot.press("d")  # the Dashboard's arrows move the process table's cursor (it scrolls with it)
        await pilot_until(pilot, lambda: app.active_view == "dashboard", "the Dashboard")
        procs = scroller(app, "dashboard")
        await pilot.press("down")
        await pilot_until(pilot, lambda: procs.cursor_row == 1, "the process cursor a row down")


async def test_all_reduce_sizes_and_counts_are_whole_in_the_micro_tab(tmp_path: Path) -> None:
    """A 1 GiB all-reduce's size, element count and M read whole on screen (a number is never cut)."""
    from kimitui.core.events import AllReduceRow, PhaseEnd, PhaseStart
    from kimitui.core.runfile import write_run
    from kimitui.tui.views.result_tables import AllReduceTable

    size, count = 1 << 30, 1 << 29
    t = 1_700_000_000.0
    rows = [AllReduceRow(t=t + 1, size_bytes=1 << 20, count=1 << 19, ranks=8, time_us=27.8, algbw_gbps=37.7,
                         busbw_gbps=66.0, tokens=64, mode=mode) for mode in ("eager", "graph")]
    rows += [AllReduceRow(t=t + 2, size_bytes=size, count=count, ranks=8, time_us=47790.0, algbw_gbps=22.5,
                          busbw_gbps=39.3, tokens=65536, mode=mode) for mode in ("eager", "graph")]
    path = write_run(tmp_path / "micro.jsonl", [PhaseStart(t=t, phase="micro", title="micro"), *rows,
                                                PhaseEnd(t=t + 3, phase="micro")], host="h")
    app = replay_app(path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e", "u")
        await pilot_until(pilot, lambda: len(app.query_one("#micro-nccl", AllReduceTable).row_keys) == 2,
                       "the all-reduce rows")
        table = app.query_one("#micro-nccl", AllReduceTable)
        app.query_one("#micro-view").scroll_to_widget(table, animate=False, top=True)

        def gib_line() -> str:
            return next((ln for ln in screen_text(app).splitlines() if " 47790.0 " in ln), "")

        await pilot_until(pilot, lambda: bool(gib_line()), "the 1 GiB row on screen")
        line = gib_line()
        assert f" {size:,} " in line and f" {count:,} " in line and " 65536 " in line, line
