"""Pilot tests of the replay's controls: a step back, jumps to a typed time, +-10 s, loop, the position bar."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from kimitui.core.events import Event
from kimitui.core.state import fold_all
from kimitui.core.timecode import parse_jump
from kimitui.tui.app import KimituiApp
from kimitui.tui.screens.help_screen import HelpScreen
from kimitui.tui.screens.jump_dialog import JumpDialog
from tests.support import BIG, comparable, replay_app, status_text
from tests.tui_runs import write_test_run
from tests.waiting import pilot_until


@pytest.fixture(scope="module")
def run_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_run(tmp_path_factory.mktemp("controls") / "campaign.jsonl")


def events_of(app: KimituiApp) -> list[Event]:
    assert app.player is not None
    return list(app.player.reader.events())


async def test_step_back_returns_to_the_exact_state(run_path: Path) -> None:
    """Stepping back returns to exactly the state the replay had at that position, which is the fold of the events
    before it, back to the empty state at the start."""
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("space")
        player = app.player
        events = events_of(app)
        start = player.position
        seen = {start: copy.deepcopy(comparable(app.session.state))}  # a copy: the fold goes on in place
        for _ in range(12):
            await pilot.press("full_stop")
            seen[player.position] = copy.deepcopy(comparable(app.session.state))
        assert player.position == start + 12
        for back in range(1, 13):
            await pilot.press("comma")
            assert player.position == start + 12 - back
            assert comparable(app.session.state) == seen[player.position], player.position
            assert comparable(app.session.state) == comparable(fold_all(events[: player.position]))
            assert app.session.state.events_folded == player.position
        while player.position:
            await pilot.press("comma")
        await pilot.press("comma")  # at the start: nothing to undo, it says so
        assert player.position == 0 and player.paused
        assert comparable(app.session.state) == comparable(fold_all([]))


async def test_jump_lands_on_the_event_at_that_time(run_path: Path) -> None:
    """A jump (a time, an offset, kept within the run) lands on the event at that time, the clock reads the time jumped
    to, and the state is the fold of the events before it."""
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("space")
        player, reader = app.player, app.player.reader
        events = events_of(app)
        t0 = reader.start_time

        async def jump(text: str) -> None:
            await pilot.press("g")
            await pilot_until(pilot, lambda: isinstance(app.screen, JumpDialog), "the jump dialog")
            for ch in text:
                await pilot.press(ch if ch.isalnum() else {":": "colon", "+": "plus", "-": "minus", "@": "at"}[ch])
            await pilot.press("enter")

        await jump("00:20")
        assert not isinstance(app.screen, JumpDialog)
        assert player.position == reader.index_at(t0 + 20)
        assert reader.times[player.position - 1] <= t0 + 20 < reader.times[player.position]
        assert comparable(app.session.state) == comparable(fold_all(events[: player.position]))
        assert player.run_time == t0 + 20, "the clock reads the time jumped to"
        await jump("+5s")
        assert player.position == reader.index_at(t0 + 25) and player.run_time == t0 + 25
        here = player.run_time
        await jump("-5m")  # past the start: kept within the run
        assert player.position == reader.index_at(t0) and player.run_time <= here
        await jump("9:99")
        assert isinstance(app.screen, JumpDialog), "a time it cannot read keeps the dialog open"
        assert "59" in str(app.screen.query_one("#jump-error").render())
        await pilot.press("escape")
        assert not isinstance(app.screen, JumpDialog) and player.position == reader.index_at(t0)


async def test_left_and_right_move_ten_seconds(run_path: Path) -> None:
    """Left and right move the replay ten seconds of run time, within the run, to the state the events before it fold
    to."""
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("space")
        player, reader = app.player, app.player.reader
        events = events_of(app)
        t = player.run_time
        await pilot.press("right")
        assert player.position == reader.index_at(t + 10)
        await pilot.press("right")
        assert player.position == reader.index_at(t + 20)
        t = player.run_time
        await pilot.press("left")
        assert player.position == reader.index_at(t - 10)
        assert comparable(app.session.state) == comparable(fold_all(events[: player.position]))
        await pilot.press("left", "left", "left")
        assert player.position == 0


async def test_loop_restarts_at_the_end(run_path: Path) -> None:
    """With loop on, the replay starts again at its end, from the empty fold; off, it does not."""
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        player = app.player
        await pilot.press("l")
        assert player.loop and "LOOP" in status_text(app)
        await pilot.press("e")
        assert player.finished is True or player.position < len(player.reader)
        await pilot_until(pilot, lambda: player.position < len(player.reader), "the replay to start again")
        events = events_of(app)
        assert player.elapsed == 0.0 and not player.paused
        assert comparable(app.session.state) == comparable(fold_all(events[: player.position]))
        await pilot.press("l")
        assert not player.loop and "LOOP" not in status_text(app)


async def test_position_bar_with_phase_marks_and_the_help(run_path: Path) -> None:
    """The header's position bar shows where the replay is and the phases to come, and the help names the replay's
    keys."""
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("space")
        text = status_text(app)
        assert "●" in text and "┼" in text, text  # where it is, and phases still to come
        await pilot.press("e")
        text = status_text(app)
        assert "╋" in text and "●" in text and "─" not in text.split("●")[0].split("  ")[-1], text
        await pilot.press("question_mark")
        await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        help_text = str(app.screen.query_one("#help-text").render())
        for key in (". / ,", "left/right", "g ", "l "):
            assert key in help_text, key


def test_jump_texts() -> None:
    """The jump dialog's texts: a time into the run, an offset, a time of day or a date, kept within the run; anything
    else is refused saying why."""
    start, end = 1_000_000.0, 1_000_000.0 + 2 * 3600
    assert parse_jump("01:30", start, end, start) == start + 90
    assert parse_jump("1:00:05", start, end, start) == start + 3605
    assert parse_jump("+30s", start, end, start + 100) == start + 130
    assert parse_jump("-5m", start, end, start + 600) == start + 300
    assert parse_jump("+1h30m", start, end, start) == start + 5400
    assert parse_jump("+9h", start, end, start) == end
    for bad, why in (("", "type where"), ("3:00:00", "outside the run"), ("soon", "not a time"),
                     ("+1m1m", "unit once"), ("@25:00", "time of day")):
        with pytest.raises(ValueError, match=why):
            parse_jump(bad, start, end, start)
    import time

    day = time.localtime(start)
    wall = time.mktime((day.tm_year, day.tm_mon, day.tm_mday, day.tm_hour + 1, 0, 0, 0, 0, -1))
    assert parse_jump(time.strftime("@%H:%M", time.localtime(wall)), start, end, start) == wall
    assert parse_jump(time.strftime("%Y-%m-%d %H:%M", time.localtime(wall)), start, end, start) == wall
