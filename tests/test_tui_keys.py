"""Keys users expect (issue 20, item 7): Ctrl-C quits, asking first only while a cleanup step runs; K, R and
x are in the footer when they apply; p goes back a phase while the replay plays; ``kimitui --version``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kimitui import __version__
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.resources import bundled_sample_run
from kimitui.tui.screens.quit_screen import QuitScreen
from tests.screen_text import screen_text
from tests.support import FakeClock, cleanup_app, modal, replay_app, start_cleanup
from tests.waiting import pilot_until

ROOT = Path(__file__).resolve().parent.parent


def footer(app: object) -> str:
    return screen_text(app).splitlines()[-1]  # type: ignore[arg-type]


async def test_ctrl_c_asks_while_a_cleanup_step_runs_and_the_footer_has_the_keys_that_apply(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with cleanup_app(tmp_path, monkeypatch) as lv:
        await pilot_until(lv.pilot, lambda: "K Micro" in footer(lv.app), "K in the footer")
        assert "R Restart" in footer(lv.app) and "x Cancel" not in footer(lv.app), footer(lv.app)
        await start_cleanup(lv)
        screen = await modal(lv, "graceful")
        await pilot_until(lv.pilot, lambda: "x Cancel" in footer(lv.app), "x in the footer while the cleanup runs")
        await lv.pilot.press("ctrl+c")
        await pilot_until(lv.pilot, lambda: isinstance(lv.app.screen, QuitScreen), "the quit question")
        assert "a cleanup step is running: quit anyway?" in screen_text(lv.app)
        await lv.pilot.press("n")
        await pilot_until(lv.pilot, lambda: lv.app.screen is screen, "back at the consent modal")
        assert lv.app.is_running
        await lv.pilot.press("ctrl+c")
        await pilot_until(lv.pilot, lambda: isinstance(lv.app.screen, QuitScreen), "the quit question again")
        await lv.pilot.press("ctrl+c")  # a second Ctrl-C quits
        await pilot_until(lv.pilot, lambda: not lv.app.is_running, "the app gone")


async def test_ctrl_c_quits_at_once_when_nothing_runs() -> None:
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+c")
        await pilot_until(pilot, lambda: not app.is_running, "the app gone")
    assert app.return_code == 0


async def test_the_replay_footer_leaves_out_k_and_says_why_when_pressed() -> None:
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(pilot, lambda: "? Help" in footer(app), "the footer's keys")
        assert "K Micro" not in footer(app) and "R Restart" not in footer(app)
        await pilot.press("K")
        await pilot_until(pilot, lambda: any("live" in n for n in app.notices), "K says it needs a live host")


def test_p_while_playing_goes_on_to_the_phase_before() -> None:
    """Pressed while the replay plays, p goes back a phase each time, not to the start of the phase it just
    landed on (the run has played on from it) nor to the end of the phase before, a moment earlier."""
    clock = FakeClock()
    session = Session()
    player = Player(RunReader(bundled_sample_run()), session, clock=clock)
    player.to_end()
    landed, shown = [], []
    for _ in range(4):
        assert player.prev_phase()
        landed.append(player.position)
        player.advance()
        clock.now += 0.5  # half a second of play between presses
        player.advance()
        phase = session.state.phase
        shown.append(phase.phase if phase is not None else None)
    assert landed == sorted(landed, reverse=True) and len(set(landed)) == 4, landed  # back each time
    assert shown[0] == "check" and shown[-1] == "micro", shown  # (the analysis lasts no time: restart again)


def test_version() -> None:
    out = subprocess.run([sys.executable, "-m", "kimitui", "--version"], capture_output=True, text=True,
                         cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == f"kimitui {__version__}"
