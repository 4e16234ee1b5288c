"""``kimitui replay RUN_A --compare RUN_B`` (issue 22 item 2) in screenshots: the bundled pair, A replayed to
the end of its sweep (the Benchmarks tab: B's tok/s curve over A's) and of its analysis (the Analysis tab:
B's budget bar under each of A's), at 120x40. Accept a meant change with ``--snapshot-update`` (look at
the SVGs under tests/__snapshots__/ first)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.resources import find_run
from kimitui.tui.app import KimituiApp
from kimitui.tui.views.campaign_view import AnalysisView
from kimitui.tui.views.compare_overlay import load_compare
from kimitui.tui.views.macro_view import BenchView
from kimitui.tui.views.result_tables import MacroTable
from tests.waiting import pilot_until

PAIR = ("campaign-demo-8x-rtx-pro-6000-allreduce-1x", "campaign-demo-8x-rtx-pro-6000-allreduce-2x")
POLL_S = 0.05


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


def compare_replay() -> tuple[KimituiApp, Player, RunReader]:
    reader = RunReader(find_run(PAIR[0]))
    session = Session()
    player = Player(reader, session, clock=lambda: 0.0)
    app = KimituiApp(session, player=player, run_path=reader.path)
    app.compare_run = load_compare(find_run(PAIR[1]))  # type: ignore[attr-defined]
    return app, player, reader


def phase_end(reader: RunReader, phase: str) -> int:
    key = f'"phase":"{phase}"'.encode()
    return next(i for i in reader.indices_of("phase_end") if key in reader.raw(i).replace(b" ", b"")) + 1


def drawn(app: KimituiApp, view: str) -> bool:
    if view == "bench":
        found = app.query(BenchView)
        bench = found.first() if found else None
        return (bench is not None and len(bench.plotted_series.get("throughput", [])) == 2
                and bool(bench.query_one(MacroTable).row_keys) and bench.drawn_at_their_width())
    found = app.query(AnalysisView)
    return bool(found) and "(kimitui replay --compare)" in str(found.first().query_one("#analysis-bars",
                                                                                       Static).render())


@pytest.mark.parametrize("view", ["bench", "analysis"])
def test_the_compared_run_over_the_replayed_one(snap_compare, view: str) -> None:  # type: ignore[no-untyped-def]
    """The compared run (B) drawn over the replayed one (A) on the Benchmarks and Analysis tabs is the stored snapshot.
    """
    app, player, reader = compare_replay()

    async def position(pilot: Pilot[None]) -> None:
        player.paused = True
        player.seek_index(phase_end(reader, "macro" if view == "bench" else "analysis"))
        app.action_show_view(view)
        await pilot_until(pilot, lambda: drawn(app, view), f"the {view} view drawn", each=app.redraw)
        await pilot.pause(POLL_S)

    assert snap_compare(app, terminal_size=(120, 40), run_before=position)


def test_the_overlay_is_run_bs_fold() -> None:
    """The overlay is what run B's own fold says: its levels, its budget's plateau, its name."""
    b = load_compare(find_run(PAIR[1]))
    assert [c for c, _ in b.tok_s] == [1, 8, 32, 128] and b.budget is not None
    assert b.budget.plateau_m == 128 and b.label == f"B: {PAIR[1]}.jsonl.gz"


def test_compare_with_summary_is_one_line(tmp_path: Path) -> None:
    """--compare with --summary, or with a run that is not there, is one line and exit 2."""
    done = subprocess.run([sys.executable, "-m", "kimitui", "replay", "--summary", PAIR[0], "--compare", PAIR[1]],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "--compare" in done.stderr
    done = subprocess.run([sys.executable, "-m", "kimitui", "replay", PAIR[0], "--compare", str(tmp_path / "no")],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stderr.startswith("kimitui: ") and len(done.stderr.splitlines()) == 1
