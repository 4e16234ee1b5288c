"""Small terminals keep what matters (issue #8, item 5): at 80x24 the consent modal shows, for every row,
pid, memory, the command's distinguishing part and why, with its buttons and keys on screen (the rows
scroll, the controls stay); the F dialog's buttons are on screen; the Benchmarks tab keeps its plots."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from kimitui.core.events import MacroPoint, StepPreview
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.resources import bundled_sample_run
from kimitui.tui import fmt
from kimitui.tui.app import KimituiApp
from kimitui.tui.screens.cleanup_consent import ConsentScreen, table_heights, what_lines, what_width
from kimitui.tui.screens.cleanup_dialog import CleanupSetupScreen
from kimitui.tui.views.macro_view import BenchView
from kimitui.tui.widgets.proc_table import ProcTable
from tests.screen_text import screen_text
from tests.support import replay_app
from tests.waiting import pilot_until

SMALL = (80, 24)


def bundled_preview(step: str) -> StepPreview:
    return next(e for e in RunReader(bundled_sample_run()).events()
                if isinstance(e, StepPreview) and e.step == step)


def controls_on_screen(text: str) -> None:
    assert "Decline (esc)" in text and "Confirm (enter)" in text, text
    assert "enter confirm" in text and "esc decline" in text, text


async def test_consent_modal_at_80x24_shows_every_row_and_keeps_its_controls() -> None:
    preview = bundled_preview("graceful")  # the API server and its 8 workers: more rows than fit
    rows = [*preview.targets, *preview.spared]
    assert len(rows) >= 9  # more than the modal's 80x24 shows at once
    app = KimituiApp(Session())
    async with app.run_test(size=SMALL) as pilot:
        screen = ConsentScreen(preview, "ana", "step 1 of 3")
        app.push_screen(screen)
        await pilot_until(pilot, lambda: screen.is_attached and app.screen is screen, "the modal")
        await pilot.pause()
        seen: set[int] = set()
        for table_id, refs in (("#consent-targets", preview.targets), ("#consent-spared", preview.spared)):
            table = screen.query_one(table_id, DataTable)
            table.focus()
            for n, ref in enumerate(refs):
                table.move_cursor(row=n)
                await pilot.pause()
                text = screen_text(app)
                controls_on_screen(text)
                line = next((ln for ln in text.splitlines() if f" {ref.pid} " in ln and "action:" not in ln), None)
                assert line is not None, (ref.pid, text)
                assert fmt.mib(ref.mem_mib) in line
                gist, *why = what_lines(ref, what_width(SMALL[0], compact=True))
                assert gist in line, (gist, line)
                assert why and all(w in text for w in why), (why, text)  # why, wrapped to the column
                seen.add(ref.pid)
        assert seen == {r.pid for r in rows}
        # the buttons sit inside the screen, the rows scroll instead
        assert screen.query_one("#consent-confirm").region.bottom <= SMALL[1]
        assert screen.query_one("#consent-targets", DataTable).max_scroll_y > 0


def test_table_heights_share_what_is_left() -> None:
    assert table_heights(20, (7, 5)) == (7, 5)
    first, second = table_heights(10, (19, 5))
    assert first + second <= 10 and first >= 4 and second >= 4
    assert table_heights(10, (19, 0)) == (10, 0)


async def test_restart_modal_speaks_of_the_restart_not_a_cleanup() -> None:
    app = KimituiApp(Session())
    async with app.run_test(size=SMALL) as pilot:
        preview = StepPreview(0.0, step="restart", action="already running: sim vllm has live processes, so a "
                              "start would fail; decline, or free the GPUs first. Confirming tries anyway: start "
                              "the simulated vllm service, then poll http://127.0.0.1:1/health until it answers 200")
        screen = ConsentScreen(preview, "ana")
        app.push_screen(screen)
        await pilot_until(pilot, lambda: app.screen is screen, "the modal")
        await pilot.pause()
        text = screen_text(app)
        assert "ALREADY RUNNING" in text.splitlines()[next(i for i, ln in enumerate(text.splitlines())
                                                          if "Confirm restart" in ln)]
        assert "Would signal" not in text and "cancel the whole cleanup" not in text and "cleanup" not in text
        assert "SimHost" not in text
        controls_on_screen(text)


async def test_free_gpus_dialog_buttons_fit_80x24() -> None:
    app = KimituiApp(Session())
    async with app.run_test(size=SMALL) as pilot:
        app.push_screen(CleanupSetupScreen("sim (8 simulated GPUs)", "sim:vllm", list(range(8))))
        await pilot_until(pilot, lambda: isinstance(app.screen, CleanupSetupScreen), "the dialog")
        await pilot.pause()
        text = screen_text(app)
        assert "Preview first step (enter)" in text and "Cancel (esc)" in text
        assert app.screen.query_one("#setup-start").region.bottom <= SMALL[1]


async def test_benchmarks_tab_keeps_its_plots_at_80x24() -> None:
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("e", "b")
        await pilot_until(pilot, lambda: bool(app.query(BenchView)), "the Benchmarks tab")
        view = app.query_one(BenchView)
        await pilot_until(pilot, lambda: bool(view.plotted.get("throughput", (None, []))[1]), "the plot")
        await pilot.pause()
        server_row = view.query_one("#server-plots")
        for plot in view.plots.values():
            below = server_row in plot.ancestors
            if below and not server_row.display:
                continue  # a run that read no server metrics: the row takes no room
            assert plot.display and plot.size.height >= 8 and plot.size.width >= 20
            if below:  # the server's own plots follow, a scroll away (the tab scrolls)
                assert view.max_scroll_y > 0
            else:
                assert plot.region.bottom <= SMALL[1]
        assert "concurrency" in screen_text(app)


async def test_the_process_table_gives_a_narrow_terminal_to_the_command() -> None:
    # at 80 columns the Unit and User columns left the command 9 characters ("kimitui.h"): they go first
    for size, shown, gone in ((SMALL, ("PID", "GPUs", "GPU GiB", "Kind", "Command"), ("User", "Unit")),
                              ((120, 40), ("PID", "User", "GPUs", "GPU GiB", "Kind", "Unit", "Command"), ())):
        app = replay_app(bundled_sample_run())
        async with app.run_test(size=size) as pilot:
            await pilot.press("n")  # the first phase: the service's processes are up
            await pilot_until(pilot, lambda app=app: app.query_one(ProcTable).row_count > 0, "the processes")  # type: ignore[misc]
            await pilot.pause()
            table = app.query_one(ProcTable)
            header = next(ln for ln in screen_text(app).splitlines() if " PID " in ln)
            assert all(f" {h} " in header or header.rstrip("│ ").endswith(h) for h in shown), (size, header)
            assert not any(f" {h} " in header for h in gone), (size, header)
            key = table.row_keys[0]
            gist = fmt.command_gist(table.cell_text(key, "command"))
            line = next(ln for ln in screen_text(app).splitlines() if ln.lstrip("│ ").startswith(key.split(":")[0]))
            assert gist[:35] in line, (size, line)


@pytest.mark.parametrize("size", [(60, 24), (80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_benchmarks_tab_says_its_summary_and_titles_whole_at_any_width(size: tuple[int, int]) -> None:
    """Issue 33: nothing of the sweep's summary or a plot's title is cut with '…'. A narrow panel breaks the
    summary between its parts and leaves out what the status line says (the points), then what the box beside
    it says (the single stream's figure); a narrow plot
    box takes its title's short form (``TTFT p50 ms``)."""
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=size) as pilot:
        await pilot.press("e", "b")
        await pilot_until(pilot, lambda: bool(app.query(BenchView)), "the Benchmarks tab")
        view = app.query_one(BenchView)
        await pilot_until(pilot, lambda: bool(view.plotted.get("throughput", (None, []))[1]), "the plot")
        summary = view.query_one("#single-stream")
        await pilot_until(pilot, lambda: "peak" in str(summary.render()), "the summary")
        await pilot.pause()
        text = screen_text(app)
        summary_lines = [ln for ln in text.splitlines() if "peak" in ln or "points" in ln]
        points = [e for e in RunReader(bundled_sample_run()).events() if isinstance(e, MacroPoint)]
        peak = max(points, key=lambda p: p.metrics["output_throughput"])
        single = next(p for p in points if p.concurrency == 1).metrics["output_throughput"]
        peak_words = f"peak {peak.metrics['output_throughput']:.0f} tok/s at c={peak.concurrency}"
        assert any(peak_words in ln for ln in summary_lines), text
        assert not any("…" in ln for ln in summary_lines), text
        assert (f"single stream {single:.1f} tok/s" in text) == (size[0] >= 80), text
        assert ("points 4" in text) == (size[0] >= 120), text
        titles = [view.query_one(f"#{key}-box").border_title for key in ("throughput", "ttft", "tpot")]
        for title, box in zip(titles, ("throughput", "ttft", "tpot"), strict=True):
            assert len(str(title)) <= view.query_one(f"#{box}-box").size.width - 4, titles
        short = size[0] < 80
        assert titles[1:] == (["TTFT p50 ms", "TPOT p50 ms"] if short else ["TTFT ms (median)", "TPOT ms (median)"])
        for title in titles:
            assert f" {title} " in text, text


async def test_the_sweep_dialogs_hints_are_whole_at_80x24() -> None:
    """Each field's hint is what tells its form (``2,4,8``, ``ttft:200``): at 80 columns none is cut."""
    from textual.widgets import Static

    from kimitui.tui.screens.macro_dialog import MacroDialog

    app = KimituiApp(Session())
    async with app.run_test(size=SMALL) as pilot:
        app.push_screen(MacroDialog("http://127.0.0.1:8000"))
        await pilot_until(pilot, lambda: isinstance(app.screen, MacroDialog) and app.screen.ready, "the dialog")
        await pilot.pause()
        hints = list(app.screen.query(".hint").results(Static))
        assert len(hints) == 12
        text = screen_text(app)
        for hint in hints:
            words = str(hint.render())
            assert hint.content_region.width >= len(words) and words in text, (words, hint.content_region.width)
