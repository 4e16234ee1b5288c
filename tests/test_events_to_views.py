"""One route from events to views (issue #9, item 4): sweep progress is a recorded event, so a replay
shows the live panel; one describe(event) for the log, the CLI and the report; one clock mapping (the
telemetry source), the sample feed reading recorded times; the step status from the fold."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

from kimitui.cleanup.sample_feed import SampleFeed, ViewTimeout
from kimitui.commands.cleanup import printer
from kimitui.core.describe import describe
from kimitui.core.events import CleanupPlan, HostSample, MacroProgress, StepResult
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader, RunWriter
from kimitui.core.session import Session
from kimitui.core.state import fold_all
from kimitui.hosts.local import LocalHost
from kimitui.hosts.sim.openai_server import SimOpenAIServer
from kimitui.hosts.telemetry import TelemetrySource
from kimitui.live.context import LiveContext
from kimitui.resources import bundled_runs
from kimitui.tui.app import KimituiApp
from kimitui.tui.views.macro_progress import FractionBar
from kimitui.tui.views.macro_view import BenchView
from tests.support import BIG, FAST_SERVER, FakeClock, open_dialog, text_of
from tests.waiting import DEADLINE_S, pilot_until

POLL_S = 0.05


def panel(app: KimituiApp) -> dict[str, object]:
    """What the sweep panel and the tab show: its two lines, its bars, the table and the plot."""
    view = app.screen_stack[0].query_one(BenchView)
    bars = {bar.id: (bar.progress, bar.total) for bar in view.query(FractionBar)}
    rows = view.query_one("#macro-table")
    return {"single": text_of(app, "#single-stream"), "status": text_of(app, "#sweep-status"), "bars": bars,
            "rows": [[rows.cell_text(k, c) for c in ("concurrency", "output_throughput", "requests")]  # type: ignore[attr-defined]
                     for k in rows.row_keys],  # type: ignore[attr-defined]
            "plot": view.plotted.get("throughput"),
            "tab": str(app.screen_stack[0].query_one("#views").get_tab("bench").label)}  # type: ignore[attr-defined]


def ended(app: KimituiApp) -> bool:
    """The panel shows the ended 3-level sweep: its status, both bars full, the 3 rows, the plot, the plain tab."""
    shown = panel(app)
    return (str(shown["status"]).startswith("done") and len(shown["rows"]) == 3  # type: ignore[arg-type]
            and shown["bars"] == {"level-progress": (1.0, 1.0), "overall-progress": (3.0, 3.0)}
            and bool(shown["plot"]) and shown["tab"] == "Benchmarks")


async def test_a_replayed_sweep_shows_the_panel_the_live_run_showed(tmp_path: Path) -> None:
    path = tmp_path / "sweep.jsonl"
    async with SimOpenAIServer(batching=FAST_SERVER) as srv:
        live = LiveContext(LocalHost(name="sim"), "sim", api_url=srv.url, simulated=True)
        session = Session(RunWriter(path, host="sim"))
        app = KimituiApp(session, host_label="sim", live=live)
        async with app.run_test(size=BIG) as pilot:
            await open_dialog(app, pilot, concurrency="1,2,4", **{"max-tokens": "16"})
            await pilot.click("#start")
            await pilot_until(pilot, lambda: app.macro.run is not None and not app.macro.run.active, "the sweep")
            await pilot_until(pilot, lambda: ended(app), "the ended sweep on the panel")
            shown_live = panel(app)
        session.close()
    progress = [e for e in RunReader(path).events() if isinstance(e, MacroProgress)]
    assert progress[0].status == "starting" and progress[-1].status == "done"
    assert {p.stage for p in progress} >= {"warmup", "run", "done"}
    # throttled (test_macro_phase.py: at most one every PROGRESS_EVERY_S while a level runs)

    replayed = Session()
    replay = KimituiApp(replayed, player=Player(RunReader(path), replayed, clock=FakeClock()))
    async with replay.run_test(size=BIG) as pilot:
        await pilot.press("e", "b")
        await pilot_until(pilot, lambda: bool(replay.query(BenchView)), "the Benchmarks tab")
        await pilot_until(pilot, lambda: ended(replay), "the replayed panel")
        shown_replayed = panel(replay)
    # the panel is the same, less the control a replay does not have
    live_hint = "   M runs another"
    assert shown_live["status"].endswith(live_hint) and live_hint.strip() not in shown_replayed["status"]
    assert shown_replayed == {**shown_live, "status": shown_live["status"].removesuffix(live_hint)}
    assert shown_live["bars"] == {"level-progress": (1.0, 1.0), "overall-progress": (3.0, 3.0)}


def test_describe_is_what_the_log_and_the_cli_say() -> None:
    run = next(p for p in bundled_runs() if p.name.startswith("real-cleanup"))
    session = Session()
    out = io.StringIO()
    session.subscribe(printer(False, out, session))
    for ev in RunReader(run).events():
        session.publish(ev)
    logged = [entry.message for entry in session.state.log if entry.source in ("phase", "cleanup", "signal", "verify")]
    printed = [line.split("] ", 1)[1] for line in out.getvalue().splitlines() if line.startswith("[")]
    assert printed and printed == logged[-len(printed):]
    graceful = session.state.cleanup.steps["graceful"]  # type: ignore[union-attr]
    assert any(line.startswith(f"graceful: done in {graceful.elapsed_s:.2f}s") for line in printed)


def test_describe_uses_the_folded_duration_only_for_the_folded_event() -> None:
    t = 100.0
    from kimitui.core.events import Consent

    result = StepResult(t + 3.0, step="graceful", status="done", elapsed_s=9.0)
    state = fold_all([CleanupPlan(t, steps=["graceful", "verify"]), Consent(t + 1.0, step="graceful", accepted=True),
                      result])
    assert describe(result, state) == "graceful: done in 2.00s"
    assert describe(StepResult(t, step="graceful", elapsed_s=9.0), state) == "graceful: done in 9.00s"
    assert state.cleanup.steps["verify"].status == "running"  # type: ignore[union-attr]


async def test_the_sample_feed_judges_freshness_by_the_recorded_time() -> None:
    feed = SampleFeed()
    asked = time.monotonic()
    feed.push(HostSample(time.time() - 5.0, host="h", seq=1))  # taken 5 s ago, arriving now
    try:
        await feed.latest(after=asked - 1.0, timeout=0.2)
    except ViewTimeout:
        pass
    else:
        raise AssertionError("a sample taken before the moment asked for was taken as fresh")
    waiter = asyncio.ensure_future(feed.latest(after=asked, timeout=DEADLINE_S))
    await asyncio.sleep(POLL_S)
    fresh = HostSample(time.time(), host="h", seq=2)
    feed.push(fresh)
    assert await waiter is fresh


def test_the_host_boot_time_moves_with_the_sample_clock() -> None:
    now = [1000.0]
    source = TelemetrySource(LocalHost(), clock=lambda: now[0])
    now[0] = 900.0 + 100.0
    source.last_sample_at = now[0]
    sample = HostSample(t=900.0, host="h", seq=1, boot_time=100.0, clock_ticks=100)
    placed = source._to_local_clock(sample)
    assert placed.t == 1000.0 and placed.boot_time == 200.0
    assert sample.t == 900.0, "the event the agent sent stays as it was (an event is a value)"


def test_an_agent_sample_carries_the_boot_time_through_to_the_fold() -> None:
    """What the agent must send (kimitui/hostside/sampler.py, not filled yet): ``boot_time`` and ``clock_ticks``
    in its sample object; the parser keeps them, the fold turns start ticks into times."""
    from kimitui.hosts.telemetry import parse_agent_line

    line = ('{"t": 5000.0, "type": "sample", "host": "h", "seq": 1, "gpus": [], "procs": [], '
            '"boot_time": 1000.0, "clock_ticks": 100}')
    sample = parse_agent_line(line)
    assert isinstance(sample, HostSample) and (sample.boot_time, sample.clock_ticks) == (1000.0, 100)
    assert fold_all([sample]).started_at(250_000) == 3500.0
