"""Screenshot tests (pytest-textual-snapshot): the consent modal at 80x24, and the four views at fixed
replay positions of the bundled run, at 120x40 and 80x24, so a layout change is seen, not guessed.

A changed layout fails here with an HTML report of the difference; when the change is meant, accept it
with ``pytest tests/test_snapshots.py --snapshot-update`` and look at the new SVGs under
``tests/__snapshots__/`` before committing them. Times are shown in UTC here (the views use local time).

Each picture is drawn twice: on kimitui's drawing path (the snapshot tests proper) and on Textual's own
(``KIMITUI_PLAIN_DRAW=1``, kimitui/tui/draw_mode.py), which is held to the very same stored SVG: the plain
path is a way out of a drawing bug, not another look. Accept a change with the first; the second then
compares against what was accepted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from pytest_textual_snapshot import normalize_svg
from textual._doc import take_svg_screenshot
from textual.pilot import Pilot
from textual.widgets import Static

from kimitui.core.events import StepPreview
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.resources import bundled_sample_run
from kimitui.tui.app import KimituiApp
from kimitui.tui.screens.cleanup_consent import ConsentScreen
from kimitui.tui.views.campaign_view import AnalysisView
from kimitui.tui.views.cleanup_view import StepTable
from kimitui.tui.views.macro_view import BenchView
from kimitui.tui.views.result_tables import MacroTable
from kimitui.tui.widgets.event_log import EventLog
from kimitui.tui.widgets.gpu_table import GpuTable

SIZES = {"120x40": (120, 40), "80x24": (80, 24)}
SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_snapshots"
POLL_S = 0.05
WAIT_S = 10.0


def drawn(app: KimituiApp, view: str) -> bool:
    """The view holds what its replay position has (its tables filled, its plots drawn)."""
    if view == "bench":
        found = app.query(BenchView)
        view = found.first() if found else None
        return (view is not None and len(view.plotted) == 3 and bool(view.query_one(MacroTable).row_keys)
                and view.drawn_at_their_width())
    if view == "cleanup":
        tables = app.query(StepTable)
        return bool(tables) and bool(tables.first().row_keys)
    if view == "analysis":
        found = app.query(AnalysisView)
        return bool(found) and "◀" in str(found.first().query_one("#analysis-bars", Static).render())
    return bool(app.query_one(GpuTable).row_keys) and bool(app.query_one(EventLog).shown)


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


RunBefore = Callable[[Pilot[None]], Awaitable[None]]


def paused_replay(plain_draw: bool = False) -> tuple[KimituiApp, Player, RunReader]:
    reader = RunReader(bundled_sample_run())
    session = Session()
    player = Player(reader, session, clock=lambda: 0.0)
    return KimituiApp(session, player=player, plain_draw=plain_draw), player, reader


def consent_modal(plain_draw: bool = False) -> tuple[KimituiApp, RunBefore]:
    """The replay paused at the graceful step's preview, its consent modal open."""
    app, player, reader = paused_replay(plain_draw)
    preview = next(e for e in reader.events() if isinstance(e, StepPreview) and e.step == "graceful")

    async def open_modal(pilot: Pilot[None]) -> None:
        player.paused = True
        player.seek_index(reader.index_at(preview.t))
        app.redraw()
        await pilot.app.push_screen(ConsentScreen(preview, "ana", "step 1 of 3", app.session.state))
        await pilot.pause(0.2)

    return app, open_modal


def test_consent_modal_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The graceful step of the bundled run: the API server and its 8 workers to signal; the rows scroll, the buttons
    and keys stay on screen, each row shows pid, memory, the command's distinguishing part and why."""
    app, open_modal = consent_modal()
    assert snap_compare(app, terminal_size=SIZES["80x24"], run_before=open_modal)


def phase_end(reader: RunReader, phase: str) -> int:
    """Just past the end of the run's first ``phase``."""
    key = f'"phase":"{phase}"'.encode()
    return next(i for i in reader.indices_of("phase_end") if key in reader.raw(i).replace(b" ", b"")) + 1


POSITIONS = {
    # view: where in the bundled run it is shown
    "dashboard": lambda reader: (next(i for i in reader.indices_of("phase_start")
                                      if b'"cleanup"' in reader.raw(i)) + phase_end(reader, "cleanup")) // 2,
    "bench": lambda reader: phase_end(reader, "macro"),
    "cleanup": lambda reader: phase_end(reader, "cleanup"),
    "analysis": lambda reader: phase_end(reader, "analysis"),
}


def view_at_its_position(view: str, plain_draw: bool = False) -> tuple[KimituiApp, RunBefore]:
    """The replay paused at ``POSITIONS[view]``, that view shown and drawn."""
    app, player, reader = paused_replay(plain_draw)

    async def position(pilot: Pilot[None]) -> None:
        player.paused = True
        player.seek_index(POSITIONS[view](reader))
        app.action_show_view(view)
        app.redraw()
        deadline = time.monotonic() + WAIT_S
        while not drawn(app, view):  # a tab is mounted on first show, its plots drawn after
            assert time.monotonic() < deadline, f"the {view} view was not drawn in {WAIT_S} s"
            await pilot.pause(POLL_S)
            app.redraw()
        await pilot.pause(POLL_S)

    return app, position


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("view", list(POSITIONS))
def test_view_at_a_fixed_replay_position(snap_compare, view: str, size: str) -> None:  # type: ignore[no-untyped-def]
    """The dashboard in the middle of the cleanup, the Benchmarks tab after the sweep, the Cleanup tab after
    the cleanup, the Analysis tab after Phase 3: at 120x40 and at 80x24."""
    app, position = view_at_its_position(view)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=position)


# -- Textual's own drawing path (KIMITUI_PLAIN_DRAW=1): the same pictures


def same_as_stored(snapshot: str, app: KimituiApp, size: tuple[int, int], run_before: RunBefore,
                   tmp_path: Path) -> None:
    """The app's screenshot (taken as snap_compare takes it) is the stored snapshot ``snapshot`` (its file
    name, without .svg); if not, the picture drawn is left in ``tmp_path`` to look at beside it."""
    assert app.plain_draw
    svg = take_svg_screenshot(app=app, terminal_size=size, run_before=run_before)
    stored = SNAPSHOTS / f"{snapshot}.svg"
    if normalize_svg(svg) != normalize_svg(stored.read_text()):
        drawn = tmp_path / f"{snapshot}.svg"
        drawn.write_text(svg)
        raise AssertionError(f"Textual's own drawing path drew {drawn}, not {stored}")


def test_consent_modal_80x24_on_textuals_drawing_path(tmp_path: Path) -> None:
    app, open_modal = consent_modal(plain_draw=True)
    same_as_stored("test_consent_modal_80x24", app, SIZES["80x24"], open_modal, tmp_path)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("view", list(POSITIONS))
def test_view_at_a_fixed_replay_position_on_textuals_drawing_path(view: str, size: str, tmp_path: Path) -> None:
    app, position = view_at_its_position(view, plain_draw=True)
    same_as_stored(f"test_view_at_a_fixed_replay_position[{view}-{size}]", app, SIZES[size], position, tmp_path)
