"""``KIMITUI_PLAIN_DRAW=1``: the dashboard on Textual's own drawing path (kimitui/tui/draw_mode.py), the way out
of a drawing bug and the way to try a Textual upgrade. The switch is read once, when the app is made; the
replayed dashboard draws and takes keys on either path (a Pilot run of each); on a real terminal the plain
path draws the dashboard without importing the modules of kimitui's path. tests/test_snapshots.py holds the
plain path to the same pictures."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.drivers.linux_driver import LinuxDriver
from textual.pilot import Pilot
from textual.screen import Screen

from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.resources import bundled_sample_run
from kimitui.tui.app import PLAIN_DRAW_ENV, KimituiApp
from kimitui.tui.views.macro_view import BenchView
from kimitui.tui.widgets.gpu_table import GpuTable
from kimitui.tui.widgets.proc_table import ProcTable
from kimitui.tui.widgets.status_bar import StatusBar
from tests.screen_emulator import Terminal
from tests.screen_text import screen_text
from tests.terminal import on_a_terminal

ROOT = Path(__file__).resolve().parent.parent
FAST_MODULES = ("kimitui.tui.band_compositor", "kimitui.tui.screen_diff", "kimitui.tui.quiet_driver")
"""kimitui's drawing path, on Textual's and Rich's internals: not imported on the plain path."""
GPU_NAME = "RTX PRO 6000"
GPU_ROW = re.compile(r"│ +[0-7]  RTX PRO 6000 ")
"""A row of the GPU table (the bundled run has 8 GPUs)."""
LEAVE_ALTERNATE_SCREEN = "\x1b[?1049l"


def test_the_switch_is_read_from_the_environment_once_and_the_constructor_overrides_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kimitui.tui.band_compositor import BandScreen
    from kimitui.tui.quiet_driver import QuietLinuxDriver

    assert PLAIN_DRAW_ENV == "KIMITUI_PLAIN_DRAW"
    monkeypatch.setenv(PLAIN_DRAW_ENV, "1")
    plain = KimituiApp(Session())
    monkeypatch.setenv(PLAIN_DRAW_ENV, "0")
    assert plain.plain_draw  # read when it was made
    assert plain.driver_class is LinuxDriver
    assert type(plain.get_default_screen()) is Screen
    assert not KimituiApp(Session()).plain_draw
    monkeypatch.delenv(PLAIN_DRAW_ENV)
    fast = KimituiApp(Session())
    assert not fast.plain_draw
    assert fast.driver_class is QuietLinuxDriver
    assert type(fast.get_default_screen()) is BandScreen
    assert KimituiApp(Session(), plain_draw=True).plain_draw
    monkeypatch.setenv(PLAIN_DRAW_ENV, "1")
    assert not KimituiApp(Session(), plain_draw=False).plain_draw


async def wait_for(pilot: Pilot[None], app: KimituiApp, cond: Callable[[], object], what: str,
                   timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)
        app.redraw()


@pytest.mark.parametrize("plain", [False, True], ids=["kimitui-path", "textual-path"])
async def test_the_replayed_dashboard_on_either_drawing_path(plain: bool) -> None:
    """The bundled run halfway through, on a 120x40 screen: the header, the 8 GPU rows, the processes, the
    events and the footer on screen; a tab shown and the dashboard again."""
    reader = RunReader(bundled_sample_run())
    session = Session()
    player = Player(reader, session, clock=lambda: 0.0)
    app = KimituiApp(session, player=player, plain_draw=plain)
    async with app.run_test(size=(120, 40)) as pilot:
        assert (type(app.screen) is Screen) == plain
        player.paused = True
        player.seek_index(len(reader) // 2)
        app.redraw()
        gpus, procs = app.query_one(GpuTable), app.query_one(ProcTable)
        await wait_for(pilot, app, lambda: len(gpus.row_keys) == 8 and procs.row_keys, "the GPU and process rows")
        # Textual's Footer fills its keys a refresh after it mounts: on a loaded machine (the suite beside two CPU
        # hogs) the rows above came first and the footer line was still blank
        await wait_for(pilot, app, lambda: "q Quit" in screen_text(app).splitlines()[-1], "the footer's keys")
        await pilot.pause()
        text = screen_text(app)
        lines = text.splitlines()
        assert len(lines) == 40, text
        assert "kimitui" in lines[0] and "REPLAY" in lines[0], text
        assert "─ GPUs " in text and "─ Processes (" in text and "─ Events " in text, text
        assert sum(bool(GPU_ROW.search(line)) for line in lines) == 8, text
        assert "q Quit" in lines[-1], text
        # bare lines (no border, no padding) through Textual's styles cache on its path only
        assert (gpus._styles_cache_used, app.query_one(StatusBar)._styles_cache_used) == (plain, plain)
        await pilot.press("b")  # the Benchmarks tab: mounted on first show, drawn on either path
        await wait_for(pilot, app, lambda: bool(app.query(BenchView)) and app.active_view == "bench",
                       "the Benchmarks tab")
        await pilot.press("d")
        await wait_for(pilot, app, lambda: app.active_view == "dashboard", "the Dashboard again")
        await pilot.pause()
        assert sum(bool(GPU_ROW.search(line)) for line in screen_text(app).splitlines()) == 8


REPLAY_AND_SAY_WHAT_WAS_IMPORTED = f"""
import sys
from kimitui.commands.main import main

status = main(["replay"])
print("imported:", [m for m in {FAST_MODULES!r} if m in sys.modules], file=sys.stderr, flush=True)
sys.exit(status)
"""


def test_kimitui_replay_draws_the_dashboard_on_a_terminal_with_plain_draw(tmp_path: Path) -> None:
    """``KIMITUI_PLAIN_DRAW=1 kimitui replay`` on a 120x40 pty: the dashboard drawn (the header, the 8 GPUs,
    the processes, the events, the footer), q quits with status 0, and none of kimitui's drawing path was
    imported."""
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), **{PLAIN_DRAW_ENV: "1"})

    def ready(out: bytes) -> bool:
        # the header as drawn at the terminal's width (a frame drawn before the first resize has no brand)
        return b" kimitui " in out and b"Events" in out and out.count(GPU_NAME.encode()) >= 8 and b"Quit" in out

    rc, out = on_a_terminal([sys.executable, "-c", REPLAY_AND_SAY_WHAT_WAS_IMPORTED], cwd=ROOT, env=env,
                            ready=ready, keys=b"q")
    assert rc == 0, out[-2000:]
    assert "imported: []" in out, out[-2000:]
    assert LEAVE_ALTERNATE_SCREEN in out, out[-2000:]
    terminal = Terminal(120, 40)
    terminal.feed(out[:out.rindex(LEAVE_ALTERNATE_SCREEN)])  # the last frame, before the terminal is given back
    lines = terminal.text().splitlines()
    assert "kimitui" in lines[0] and "REPLAY" in lines[0], "\n".join(lines)
    assert sum(bool(GPU_ROW.search(line)) for line in lines) == 8, "\n".join(lines)
    assert any("─ GPUs " in line for line in lines) and any("─ Events " in line for line in lines), "\n".join(lines)
    assert any("─ Processes (" in line for line in lines), "\n".join(lines)
    assert any("q Quit" in line for line in lines), "\n".join(lines)
