"""What a new operator's walk-through at 120x40, 80x24 and 60x20 found cut, stale or misspelled (issue #33, items 7
and 8), each held here: the cleanup notes and signals whole or wrapped at words, one process ended, the consent
modal's command keeping the worker's name, no campaign keys once the campaign is over, the sweep header while
concurrency 1 runs, a position bar of one width while the replay plays, and the keys and the panes at 60x20 (below
that, a line saying what size is needed)."""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace
from typing import Any

import pytest
from textual.binding import Binding

from kimitui.cleanup import steps
from kimitui.core.events import MacroProgress, PhaseStart, StepPreview
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.core.state import fold_all
from kimitui.resources import bundled_sample_run
from kimitui.tui.app import KimituiApp
from kimitui.tui.keys import BINDINGS
from kimitui.tui.replay_info import ReplayInfo
from kimitui.tui.screens.cleanup_consent import ConsentScreen
from kimitui.tui.views.cleanup_view import CleanupView, StepTable
from kimitui.tui.views.macro_progress import single_stream_content, single_stream_to_come, sweep_status
from kimitui.tui.widgets.event_log import EventLog
from kimitui.tui.widgets.key_footer import fitted, key_width
from kimitui.tui.widgets.position_bar import BAR_MIN
from kimitui.tui.widgets.status_bar import status_content
from tests.screen_text import screen_text
from tests.support import BIG, replay_app
from tests.waiting import pilot_until


def footer_line(app: KimituiApp) -> str:
    return screen_text(app).rstrip("\n").splitlines()[-1]


# -- 8. small terminals ----------------------------------------------------------------------------------------

async def test_at_60x20_the_footer_keeps_help_and_quit_and_the_events_have_rows() -> None:
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.press("e")
        log = app.query_one(EventLog)
        await pilot_until(pilot, lambda: bool(log.shown), "the events")
        await pilot_until(pilot, lambda: "q Quit" in footer_line(app), "the footer's keys at 60 columns")
        footer = footer_line(app)
        assert "? Help" in footer and "q Quit" in footer, footer
        assert len(footer.rstrip()) <= 60 and not footer.rstrip().endswith(("…", "Vi")), footer
        assert log.scrollable_content_region.height >= 2, log.size  # rows for events, not just its border
        text = screen_text(app)
        assert "campaign done" in text, text  # the latest event is on screen


def test_a_short_footer_keeps_free_gpus_after_help_and_quit() -> None:
    # the live dashboard's keys at 60 columns (the room the footer has beside the palette's ^p): F Free GPUs,
    # what the operator came for, stays; the views and Restart go
    live = [(k.key_display or k.key, k.description, k.action) for k in BINDINGS
            if isinstance(k, Binding) and k.show and k.action in
            ("macro_sweep", "show_view('dashboard')", "micro_run", "free_gpus", "restart_service", "help", "quit")]
    keys = [SimpleNamespace(key_display=d, description=desc, action=a) for d, desc, a in live]
    shown = fitted(keys, 60 - 12)  # type: ignore[arg-type]
    assert [k.description for k in shown] == ["Sweep", "Micro", "Free GPUs", "Help", "Quit"], shown
    assert sum(map(key_width, shown)) <= 60 - 12  # type: ignore[arg-type]
    assert [k.description for k in fitted(keys, 200)] == [k.description for k in keys]  # type: ignore[arg-type]


def test_the_sweep_status_leaves_out_its_key_hint_where_it_would_be_cut() -> None:
    # at 80 columns the running line read "... 1 in flight  x canc…" (the footer says x Cancel anyway)
    state = fold_all([MacroProgress(1.0, status="running", levels=list(range(1, 9)), concurrency=1, stage="run",
                                    total=4, in_flight=1)])
    wide = sweep_status(state.sweep, live=True).plain
    assert wide.endswith("x cancels"), wide
    narrow = sweep_status(state.sweep, live=True, width=len(wide) - 1).plain
    assert narrow == wide.removesuffix("  x cancels") and "1 in flight" in narrow, narrow


async def test_below_the_least_size_it_says_so_and_keeps_quit() -> None:
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=(50, 15)) as pilot:
        await pilot_until(pilot, lambda: "terminal too small" in screen_text(app) and "q Quit" in footer_line(app),
                          "the too-small line and the footer")
        text = screen_text(app)
        assert re.search(r"terminal too small \(needs \d+ x \d+", text), text
        assert "? Help" in footer_line(app), text
        await pilot.resize_terminal(120, 40)
        await pilot_until(pilot, lambda: "terminal too small" not in screen_text(app)
                          and "Dashboard" in screen_text(app), "the dashboard back at 120x40")


# -- 7. cut, stale and misspelled --------------------------------------------------------------------------------

def flat(text: str) -> str:
    """The screen's words in order, its lines joined (what a note wrapped at words reads as)."""
    return " ".join(text.split())


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_cleanup_notes_and_signals_are_whole_or_wrapped_at_words(size: tuple[int, int]) -> None:
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=size) as pilot:
        await pilot.press("e", "c")
        await pilot_until(pilot, lambda: bool(app.query(StepTable)) and bool(app.query_one(StepTable).row_keys)
                          and bool(app.query_one(CleanupView).notes), "the Cleanup tab")
        await pilot.pause()
        cleanup = app.session.state.cleanup
        assert cleanup is not None
        screens = [screen_text(app)]
        view = app.query_one(CleanupView)
        while view.scroll_y < view.max_scroll_y:  # the notes below the fold: the view scrolls, 4 lines at a time
            view.scroll_to(y=view.scroll_y + 4, animate=False)
            await pilot.pause()
            screens.append(screen_text(app))
        for screen in screens:
            assert "…" not in screen.split("cleanup ended")[0], screen  # nothing in the table and notes is cut
        text = flat(" ".join(screens))
        for name, step in cleanup.steps.items():
            if step.reason:
                assert flat(step.reason) in text, (name, step.reason, text)
        assert "SIGTERM x1 (7 exited, 2 survived)" in text, text
        assert "SIGTERM x2, SIGKILL x2 (2 survived, 2 exited)" in text, text


class OneKill:
    """What ``_ask_and_terminate`` asks of its step context, for one confirmed process that ends."""

    class target:  # the context's attribute
        deadlines = SimpleNamespace(term_grace_s=2.0)

    async def ask(self, *_: Any) -> Any:
        return SimpleNamespace(procs=[(4242, 100)])

    async def terminate(self, _confirmed: Any) -> list[Any]:
        return []

    def outcomes(self, _step: str) -> list[Any]:
        return []

    def signals(self, _step: str) -> list[Any]:
        return []

    def result(self, step: str, status: str, reason: str, started: float) -> Any:
        return SimpleNamespace(step=step, status=status, reason=reason)


@pytest.mark.parametrize(("noun", "said"), [("processes", "1 process ended"), ("holders", "1 holder ended")])
def test_one_process_ended_is_singular(noun: str, said: str) -> None:
    result = asyncio.run(steps._ask_and_terminate(OneKill(), "process", [], [], noun, 0.0))  # type: ignore[arg-type]
    assert result.status == "done" and result.reason == said, result


async def test_the_consent_modal_keeps_each_workers_name() -> None:
    preview = next(e for e in RunReader(bundled_sample_run()).events()
                   if isinstance(e, StepPreview) and e.step == "graceful")
    titles = sorted(set(re.findall(r"Worker_TP\d+", " ".join(r.cmdline for r in preview.targets))))
    assert len(titles) == 8
    app = KimituiApp(Session())
    async with app.run_test(size=BIG) as pilot:
        screen = ConsentScreen(preview, "ana", "step 1 of 3")
        app.push_screen(screen)
        await pilot_until(pilot, lambda: screen.is_attached and app.screen is screen, "the modal")
        await pilot.pause()
        text = screen_text(app)
        for title in titles:
            assert re.search(rf"{title}\b", text), (title, text)


async def test_no_campaign_keys_once_the_campaign_is_over() -> None:
    app = KimituiApp(Session())
    machine = SimpleNamespace(finished=False, set_ask=lambda _ask: None)
    app.campaign.machine = machine  # type: ignore[assignment]
    app.campaign.started = True  # as if it ran: the app does not start it again
    async with app.run_test(size=BIG) as pilot:
        await pilot_until(pilot, lambda: "P/S/A" in footer_line(app), "the campaign's keys while it runs")
        machine.finished = True
        app.refresh_bindings()
        await pilot_until(pilot, lambda: "P/S/A" not in footer_line(app), "no campaign keys once it is over")
        assert app.check_action("campaign_pause", ()) is False


def test_the_sweep_header_while_concurrency_1_runs() -> None:
    t = 1_750_000_000.0
    running = fold_all([PhaseStart(t, phase="macro", title="sweep"),
                        MacroProgress(t + 1, status="running", levels=[1, 4, 16], concurrency=1, stage="run")])
    sweep = running.sweep
    assert sweep is not None and sweep.active
    head = single_stream_content(sweep.point_list, None, single_stream_to_come(sweep)).plain
    assert "no concurrency 1 level" not in head and "c=1 running" in head, head
    no_c1 = fold_all([PhaseStart(t, phase="macro", title="sweep"),
                      MacroProgress(t + 1, status="running", levels=[4, 16], concurrency=4, stage="run")])
    head = single_stream_content([], None, single_stream_to_come(no_c1.sweep)).plain
    assert "no concurrency 1 level" in head, head


@pytest.mark.parametrize("width", [120, 80])
def test_the_position_bar_keeps_its_place_and_width_while_the_replay_plays(width: int) -> None:
    """Whatever the phase, the state (PAUSED, END) and the event count say, the bar starts at one column and is one
    width: its ● only moves on."""
    reader = RunReader(bundled_sample_run())
    player = Player(reader, Session(), clock=lambda: 0.0)
    seen: set[tuple[int, int]] = set()
    heads: list[int] = []
    for k in range(0, len(reader) + 1, max(len(reader) // 40, 1)):
        player.seek_index(k)
        for paused in (True, False):
            player.paused = paused
            text = status_content(player.session.state, ReplayInfo.of(player), live=False, host=reader.header.host,
                                  width=width).plain
            bar = re.search(r"[━─╋┼●]+", text)
            assert bar is not None and len(bar.group()) >= BAR_MIN, text
            seen.add((bar.start(), len(bar.group())))
            heads.append(bar.start() + bar.group().index("●"))
    assert len(seen) == 1, seen
    assert heads == sorted(heads), heads
