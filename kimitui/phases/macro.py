"""Phase 1, macro: the serving sweep as a phase."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kimitui.core.events import MacroProgress, PhaseEnd, PhaseStart, SweepStatus
from kimitui.core.events.macro import LevelAxis
from kimitui.phases.base import Publish, now

if TYPE_CHECKING:
    from kimitui.bench.macro import LevelProgress, MacroConfig, SweepPlan, SweepResult

PROGRESS_EVERY_S = 0.25
"""While a level runs, its progress is published at most this often (a level's start and end at once)."""


class SweepProgress:
    """A sweep's progress as ``MacroProgress`` events: its start, each level's start and end, at most
    every ``PROGRESS_EVERY_S`` while a level runs, and its end (status, error)."""

    def __init__(self, publish: Publish, levels: list[float], axis: LevelAxis = "concurrency") -> None:
        self.publish = publish
        self.levels = levels
        self.axis: LevelAxis = axis
        self.latest: LevelProgress | None = None
        self.announced = False
        """Its start has been published."""
        self.started = time.monotonic()
        self._last: tuple[float, tuple[object, ...] | None] | None = None

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def finished_levels(self) -> int:
        p = self.latest
        return 0 if p is None else p.level_index + (1 if p.stage == "done" else 0)

    def start(self) -> None:
        """The sweep's start, published once (the dashboard publishes it when M starts the sweep, before
        the macro phase is called)."""
        if self.announced:
            return
        self.announced = True
        self.publish(MacroProgress(now(), status="starting", levels=list(self.levels), axis=self.axis))

    def update(self, progress: LevelProgress, status: SweepStatus = "running") -> None:
        self.latest = progress
        where = (progress.level_index, progress.stage)
        last = self._last
        if last is None or last[1] != where or time.monotonic() - last[0] >= PROGRESS_EVERY_S:
            self.emit(status)

    def emit(self, status: SweepStatus, error: str = "") -> None:
        p = self.latest
        self._last = (time.monotonic(), (p.level_index, p.stage) if p is not None else None)
        self.publish(MacroProgress.of(now(), status, self.levels, round(self.elapsed_s, 3), p, error, self.axis))


async def macro_phase(publish: Publish, cfg: MacroConfig, cancel: asyncio.Event,
                      on_progress: Callable[[LevelProgress], None] | None = None,
                      progress: SweepProgress | None = None,
                      on_start: Callable[[SweepPlan], None] | None = None) -> SweepResult:
    """The macro phase, the one code path that starts and ends it (``run_sweep`` publishes no phase): its
    progress's start (once, whoever created ``progress``), the sweep prepared (the configuration checked,
    the model discovered) inside the phase, ``PhaseStart``, the levels, ``PhaseEnd``, the progress's end.

    A sweep that cannot start (the server does not answer, a bad configuration) still has a macro phase
    in the record, ended not ok with why; the error is raised again for the caller to say. A sweep whose
    every level failed ends its phase not ok, with the first error (``sweep_failure``, the fold's
    judgement). ``on_start`` is called with the prepared sweep once its phase has started."""
    from kimitui.bench.macro import prepare_sweep, run_plan, sweep_note
    from kimitui.core.sweep_state import sweep_failure

    progress = progress or SweepProgress(publish, cfg.levels, cfg.axis)
    progress.start()
    started = now()
    unprepared = f"serving sweep at {cfg.url}"  # the phase's title until the sweep is known
    plan: SweepPlan | None = None
    error: Exception | None = None
    try:
        plan = await prepare_sweep(cfg)
    except asyncio.CancelledError:
        publish(PhaseStart(started, phase="macro", title=unprepared))
        publish(PhaseEnd(now(), phase="macro", ok=False, note="interrupted before it started"))
        progress.emit("cancelled")
        raise
    except Exception as exc:
        error = exc
    publish(PhaseStart(started, phase="macro", title=plan.title if plan is not None else unprepared))

    def level(p: LevelProgress) -> None:
        progress.update(p, "cancelling" if cancel.is_set() else "running")
        if on_progress is not None:
            on_progress(p)

    try:
        if error is not None:
            raise error
        assert plan is not None
        if on_start is not None:
            on_start(plan)
        result = await run_plan(plan, publish, progress=level, cancel=cancel)
    except asyncio.CancelledError:
        so_far = plan.result if plan is not None else None
        note = sweep_note(so_far) if so_far is not None else "interrupted"
        publish(PhaseEnd(now(), phase="macro", ok=False, note=note))
        progress.emit("cancelled")
        raise
    except Exception as exc:
        why = str(exc) if not isinstance(exc, (OSError, RuntimeError)) or str(exc) else type(exc).__name__
        started_ok = plan is not None and exc is not error
        publish(PhaseEnd(now(), phase="macro", ok=False,
                         note=f"failed: {why}" if started_ok else f"could not start: {why}"))
        progress.emit("failed", why)
        raise
    failure = sweep_failure(lv.result for lv in result.levels)
    publish(PhaseEnd(now(), phase="macro", ok=failure is None and not result.cancelled,
                     note=failure or sweep_note(result)))
    if failure is not None:
        progress.emit("failed", failure)
    else:
        progress.emit("cancelled" if result.cancelled else "done")
    return result
