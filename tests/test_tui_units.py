"""One memory unit a screen, said in its headers (issue 20 item 8): GiB on the Dashboard (GPU table,
process table, memory history), MiB on the Cleanup tab, the consent modal and the Micro tab, as in the
report. Read from the screen of the bundled run's replay."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kimitui.core.events import MicroEnd, MicroPlan, PhaseEnd, PhaseStart, ProcRef, StepPreview
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader, write_run
from kimitui.core.session import Session
from kimitui.resources import bundled_sample_run
from kimitui.tui.app import KimituiApp
from kimitui.tui.screens.cleanup_consent import ConsentScreen
from kimitui.tui.views.cleanup_view import StepTable
from kimitui.tui.views.micro_view import MicroView
from kimitui.tui.widgets.proc_table import ProcTable
from tests.screen_text import screen_text
from tests.support import replay_app
from tests.waiting import pilot_until


def gemm_worker_pid() -> int:
    """Phase 2's GEMM worker in the bundled run: 2,860 MiB on GPU 0 (below 10 GiB, where MiB and GiB met)."""
    reader = RunReader(bundled_sample_run())
    found = (re.search(rb'"pid":(\d+),[^{}]*"gpu_mem_mib":\{"0":2860\.0\}[^{}]*worker\.py--shapes',
                       reader.raw(i).replace(b" ", b"")) for i in reader.indices_of("sample"))
    return int(next(m for m in found if m is not None).group(1))


BENCH_PID = gemm_worker_pid()


def paused_at(position: int) -> tuple[KimituiApp, Player, RunReader]:
    reader = RunReader(bundled_sample_run())
    session = Session()
    player = Player(reader, session, clock=lambda: 0.0)
    player.paused = True
    player.seek_index(position)
    return KimituiApp(session, player=player), player, reader


def first_sample_with(pid: int) -> int:
    reader = RunReader(bundled_sample_run())
    key = f'"pid":{pid},'.encode()
    return next(i for i in reader.indices_of("sample") if key in reader.raw(i).replace(b" ", b"")) + 1


def boxed(screen: str, first: str, last: str) -> list[str]:
    """The screen's lines from the one holding ``first`` up to (not including) the one holding ``last``."""
    lines = screen.splitlines()
    start = next(i for i, line in enumerate(lines) if first in line)
    end = next(i for i, line in enumerate(lines) if i > start and last in line)
    return lines[start:end]


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_the_dashboard_shows_gpu_memory_in_gib_only(size: tuple[int, int]) -> None:
    app, _, _ = paused_at(first_sample_with(BENCH_PID))
    async with app.run_test(size=size) as pilot:
        app.redraw()
        procs = app.query_one(ProcTable)
        await pilot_until(pilot, lambda: any(k.startswith(f"{BENCH_PID}:") for k in procs.row_keys), "the worker's row")
        await pilot_until(pilot, lambda: f" {BENCH_PID} " in screen_text(app), "the worker's row on screen")
        # the GPU table, the memory history beside it (at 120 columns), the processes
        tables = boxed(screen_text(app), "Memory used/total", "Events")
        assert not any("MiB" in line for line in tables), "\n".join(tables)
        assert any("GPU GiB" in line for line in tables), "\n".join(tables)
        worker = next(line for line in tables if f" {BENCH_PID} " in line)
        assert " 2.79 " in worker, worker  # 2,860 MiB
        if size[0] >= 120:
            assert tables[0].rstrip(" │").endswith("GiB"), tables[0]  # the memory history's header
            gpu0 = next(line for line in tables if "2.8/95.6 GiB" in line)
            assert gpu0.rstrip(" │").endswith("2.8"), gpu0  # its figure, in the same unit


async def test_the_cleanup_tab_and_the_consent_modal_show_mib_only() -> None:
    reader = RunReader(bundled_sample_run())
    end = next(i for i in reader.indices_of("phase_end") if b'"cleanup"' in reader.raw(i)) + 1
    app, _, _ = paused_at(end)
    async with app.run_test(size=(120, 40)) as pilot:
        app.action_show_view("cleanup")
        app.redraw()
        await pilot_until(pilot, lambda: bool(app.query(StepTable)) and bool(app.query_one(StepTable).row_keys),
                       "the step table")
        await pilot_until(pilot, lambda: "verification: CLEAN" in screen_text(app), "the verification")
        screen = screen_text(app)
        assert "GiB" not in screen, screen
        assert "GPU memory since the plan (MiB)" in screen and "clean below 64 MiB" in screen
        assert "GPU 0: 0 MiB (baseline 0 MiB) ok" in screen

        preview = next(e for e in reader.events() if isinstance(e, StepPreview) and e.step == "graceful")
        await app.push_screen(ConsentScreen(preview, "ana", "step 1 of 3", app.session.state))
        await pilot_until(pilot, lambda: "GPU MiB" in screen_text(app), "the consent tables")
        modal = screen_text(app)
        assert "GiB" not in modal, modal
        assert any("92,411" in line for line in modal.splitlines()), modal  # a worker's 90.2 GiB, in MiB


async def test_the_micro_tab_shows_a_refusals_holders_in_mib(tmp_path: Path) -> None:
    t = 1_750_000_000.0
    holder = ProcRef(pid=5081, start_time=1, user="root", gpus=[0], mem_mib=92_411.0, cmdline="python3 serve.py")
    events = [PhaseStart(t, phase="micro", title="micro"),
              MicroPlan(t, run_id="r1", host="h", model="m", tp=2, parts=["gemm"], gpus=[0, 1]),
              MicroEnd(t + 1, run_id="r1", part="all", status="refused", holders=[holder],
                       detail="GPUs 0-1: 92,411 MiB in use each (free is within 64 MiB of idle)"),
              PhaseEnd(t + 1, phase="micro", ok=False, note="refused")]
    app = replay_app(write_run(tmp_path / "refused.jsonl", events, host="h"))  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("e", "u")
        await pilot_until(pilot, lambda: bool(app.query(MicroView)), "the Micro tab")
        await pilot_until(pilot, lambda: "pid 5081" in screen_text(app), "the holder")
        screen = screen_text(app)
        line = next(line for line in screen.splitlines() if "pid 5081" in line)
        assert "92,411 MiB" in line and "GiB" not in screen, screen
