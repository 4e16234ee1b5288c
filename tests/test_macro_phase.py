"""The macro phase has one orchestrator (``kimitui.phases.macro.macro_phase``): one start and one end,
one 'starting' progress, a phase that could not start recorded as such, and an honest end: a sweep whose
every level failed ends its phase not ok with the first error, which the fold, the panel and the campaign
strip all read (one judgement, ``kimitui.core.state.sweep_failure``)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from kimitui.bench.macro import MacroConfig, MacroError, Timeouts, run_sweep
from kimitui.core.events import CampaignPlan, Event, MacroPoint, MacroProgress, PhaseEnd, PhaseStart
from kimitui.core.state import fold_all
from kimitui.phases.macro import SweepProgress, macro_phase
from kimitui.tui.views.campaign_view import strip_content
from kimitui.tui.views.macro_progress import sweep_status
from tests.faulty_server import Behavior, FaultyServer

LOADING = '{"error": {"message": "model loading", "type": "ServiceUnavailable"}}'
PLAN = CampaignPlan(0.0, name="t", phases=["macro", "cleanup", "micro"])


def _of(events: list[Event], kind: type[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, kind)]


def _starting(events: list[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, MacroProgress) and e.status == "starting"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_sweep_whose_every_level_fails_ends_its_phase_failed_with_the_first_error() -> None:
    events: list[Event] = [PLAN]
    async with FaultyServer(Behavior(mode="status", status=503, body=LOADING)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1, 2], requests=2, max_tokens=4, warmup=0)
        result = await macro_phase(events.append, cfg, asyncio.Event())
    assert [lv.concurrency for lv in result.levels] == [1, 2] and not result.cancelled
    (start,) = _of(events, PhaseStart)
    assert isinstance(start, PhaseStart) and start.title.startswith("serving sweep m at ")
    (end,) = _of(events, PhaseEnd)
    assert isinstance(end, PhaseEnd) and not end.ok
    assert end.note.startswith("every request failed at 2 levels: ") and "503" in end.note, end.note
    assert "model loading" in end.note
    last = events[-1]
    assert isinstance(last, MacroProgress) and last.status == "failed" and last.error == end.note
    state = fold_all(events)
    span = state.phases[-1]
    assert span.phase == "macro" and span.ok is False and span.note == end.note
    assert state.sweep is not None and state.sweep.status == "failed"
    c = state.campaign
    assert c is not None and c.phases["macro"].status == "failed"
    strip = strip_content(state, live=False).plain
    assert "✗ macro" in strip and "✓ macro" not in strip, strip
    status = sweep_status(state.sweep, live=False).plain
    assert status.startswith("failed: every request failed at 2 levels") and "503" in status, status


def test_an_older_recording_of_a_sweep_that_failed_everywhere_folds_as_a_failed_phase() -> None:
    """Recorded before the phase judged it (its end said ok): the fold's judgement is the same."""
    failed = {"completed": 0, "failed": 2, "num_prompts": 2, "failures": {"HTTP 503: model loading": 2}}
    events: list[Event] = [PLAN, MacroProgress(1.0, status="starting", levels=[1, 2]),
                           PhaseStart(1.1, phase="macro", title="serving sweep m at http://x: concurrency 1,2"),
                           MacroPoint(2.0, concurrency=1, metrics=failed),
                           MacroPoint(3.0, concurrency=2, metrics=failed),
                           PhaseEnd(3.1, phase="macro", ok=True, note="2 levels"),
                           MacroProgress(3.2, status="done", levels=[1, 2], level_index=1, stage="done")]
    state = fold_all(events)
    span = state.phases[-1]
    assert span.ok is False and span.note == "every request failed at 2 levels: HTTP 503: model loading"
    assert state.sweep is not None and state.sweep.status == "failed"
    c = state.campaign
    assert c is not None and c.phases["macro"].status == "failed"
    assert "✗ macro" in strip_content(state, live=False).plain


async def test_one_start_and_one_end_and_a_run_sweep_without_a_phase() -> None:
    async with FaultyServer(Behavior(n_tokens=2)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1, 2], requests=2, max_tokens=2, warmup=0)
        bare: list[Event] = []
        await run_sweep(cfg, bare.append)
        assert not _of(bare, PhaseStart) and not _of(bare, PhaseEnd) and len(_of(bare, MacroPoint)) == 2
        events: list[Event] = []
        progress = SweepProgress(events.append, [1, 2])
        progress.start()  # as the dashboard's M does, before the phase
        await macro_phase(events.append, cfg, asyncio.Event(), progress=progress)
    assert len(_starting(events)) == 1
    assert len(_of(events, PhaseStart)) == 1 and len(_of(events, PhaseEnd)) == 1
    (end,) = _of(events, PhaseEnd)
    assert isinstance(end, PhaseEnd) and end.ok and end.note.startswith("2 levels; single stream ")
    assert fold_all(events).sweep.status == "done"  # type: ignore[union-attr]


async def test_a_sweep_that_cannot_start_is_a_phase_that_could_not_start() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    events: list[Event] = []
    cfg = MacroConfig(url=url, concurrency=[1], requests=1, max_tokens=2, warmup=0,
                      timeouts=Timeouts(connect_s=2, read_s=2, total_s=5))
    with pytest.raises(MacroError) as err:
        await macro_phase(events.append, cfg, asyncio.Event())
    assert len(_starting(events)) == 1
    (start,) = _of(events, PhaseStart)
    assert isinstance(start, PhaseStart) and start.title == f"serving sweep at {url}"
    (end,) = _of(events, PhaseEnd)
    assert isinstance(end, PhaseEnd) and not end.ok and end.note == f"could not start: {err.value}"
    assert "/v1/models" in end.note
    assert isinstance(events[-1], MacroProgress) and events[-1].status == "failed"
    assert fold_all(events).sweep.status == "failed"  # type: ignore[union-attr]


def test_progress_while_a_level_runs_is_published_at_most_every_quarter_second(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Throttled on the sweep's own clock: a level's start and end at once, in between at most one event
    every ``PROGRESS_EVERY_S`` however often the load generator reports (it reports ten times a second)."""
    from kimitui.bench.macro.level import LevelProgress
    from kimitui.phases import macro as macro_module

    clock = [100.0]
    monkeypatch.setattr(macro_module.time, "monotonic", lambda: clock[0])
    events: list[Event] = []
    progress = SweepProgress(events.append, [1, 2])

    def report(level: int, stage: str, done: int) -> None:
        progress.update(LevelProgress(level_index=level, levels=2, concurrency=level + 1, stage=stage,  # type: ignore[arg-type]
                                      done=done, total=10, failed=0, output_tokens=done, in_flight=1,
                                      elapsed_s=0.0, duration_s=None))

    for level in (0, 1):
        report(level, "run", 0)  # a level's start: at once
        for k in range(1, 11):  # ten reports a second for a second: one every 0.3 s published (3 of 10)
            clock[0] += 0.1
            report(level, "run", k)
        report(level, "done", 10)  # its end: at once
    published = [(e.level_index, e.stage, e.done) for e in events if isinstance(e, MacroProgress)]
    assert published == [(lv, stage, k) for lv in (0, 1)
                         for stage, k in [("run", 0), ("run", 3), ("run", 6), ("run", 9), ("done", 10)]]
