"""Running a macro sweep from the dashboard: the dialog, the worker, progress, cancel.

The sweep runs as a Textual worker in the app's own event loop (``run_sweep`` is a coroutine):
``publish`` is ``session.publish``, so each finished level is a ``MacroPoint`` event that is folded,
recorded and drawn like any other (a cancelled sweep keeps its finished levels), and the live redraw
cap applies. Progress is an event too: the load generator's ``LevelProgress`` (about 10 a second) is
published as a ``MacroProgress`` when a level starts or ends and at most every ``PROGRESS_EVERY_S``
between, and the sweep's start and end (with its status or error) are ``MacroProgress`` events. The
sweep panel and the tab's label are drawn from the fold alone, so a replay of the run file shows the
same panel. The UI shares the loop with the load generator: redraws are capped at 8 Hz and small, but
for figures to publish, the headless ``kimitui bench macro`` has the loop to itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from kimitui.core.events import Event, MacroPoint, MacroProgress
from kimitui.core.state import SessionState, Sweep, level_failed

if TYPE_CHECKING:
    # kimitui.bench.macro imports httpx: loaded when a sweep starts, not with the app (first frame)
    from kimitui.bench.macro import LevelProgress, MacroConfig, SweepResult
    from kimitui.tui.app import KimituiApp

RunStatus = Literal["running", "cancelling", "done", "cancelled", "failed"]
NEEDS_LIVE = "benchmarks need a live host (kimitui demo, kimitui connect HOST)"
TAB_LABEL = "Benchmarks"
EXIT_GRACE_S = 3.0
"""On app exit, how long the worker waits for the cancelled sweep to publish its end."""
PROGRESS_EVERY_S = 0.25
"""While a level runs, its progress is published at most this often (a level's start and end at once)."""


@dataclass(slots=True)
class MacroRun:
    """One sweep started from the dashboard."""

    config: MacroConfig
    status: RunStatus = "running"
    progress: LevelProgress | None = None
    result: SweepResult | None = None
    error: str | None = None
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    """Events of this sweep are stamped at or after this (time.time), earlier sweeps' points before it."""
    ended: float | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)

    def points(self, state: SessionState) -> list[MacroPoint]:
        """This sweep's points (the state keeps earlier sweeps' points at other concurrencies)."""
        return [p for p in state.macro_points if p.t >= self.started_wall]

    @property
    def levels(self) -> list[int]:
        return list(self.config.concurrency)

    @property
    def active(self) -> bool:
        return self.status in ("running", "cancelling")

    @property
    def elapsed_s(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    @property
    def finished_levels(self) -> int:
        if self.result is not None:
            return len(self.result.levels)
        p = self.progress
        if p is None:
            return 0
        return p.level_index + (1 if p.stage == "done" else 0)


class MacroController:
    """The app's macro sweep: at most one at a time. It draws nothing: it publishes."""

    def __init__(self, app: KimituiApp) -> None:
        self.app = app
        self.run: MacroRun | None = None
        self._last_progress: tuple[float, tuple[object, ...]] | None = None
        """When progress was last published (time.monotonic) and its level and stage."""

    @property
    def running(self) -> bool:
        return self.run is not None and self.run.active

    # -- actions --------------------------------------------------------------------------------------

    def open_dialog(self) -> None:
        """``M`` / palette: the sweep dialog (live only)."""
        from kimitui.tui.bench_dialog import MacroDialog

        live = self.app.live
        if live is None:
            self.app.notify(NEEDS_LIVE, title="macro sweep", severity="warning", timeout=6)
            return
        if self.running:
            self.app.notify("a sweep is running: x on the Benchmarks tab cancels it", title="macro sweep",
                            timeout=5)
            return
        previous = self.run.config if self.run is not None else None
        self.app.push_screen(MacroDialog(url=live.api_url or "", previous=previous), callback=self.start)

    def start(self, config: MacroConfig | None) -> None:
        """Start a sweep (the dialog's result; None: the dialog was cancelled)."""
        if config is None or self.running:
            return
        from kimitui.bench.macro import ConfigError

        try:
            config.validate()
        except ConfigError as exc:
            self.app.notify(str(exc), title="macro sweep", severity="error")
            return
        run = MacroRun(config)
        self.run = run
        self._last_progress = None
        self._publish(MacroProgress(time.time(), status="starting", levels=run.levels))
        self.app.action_show_view("bench")
        self.app.run_worker(self._work(run), group="macro", name="macro sweep", exclusive=True,
                            exit_on_error=False)

    def cancel(self) -> bool:
        """Ask the running sweep to stop: the level in progress is dropped, finished levels stay."""
        run = self.run
        if run is None or not run.active:
            self.app.notify("no sweep is running", title="macro sweep", timeout=3)
            return False
        if run.status == "running":
            run.status = "cancelling"
            run.cancel.set()
            self.app.notify("cancelling the sweep: finished levels are kept", title="macro sweep", timeout=4)
            self._publish_progress(run, "cancelling")
        return True

    # -- the worker -----------------------------------------------------------------------------------

    async def _work(self, run: MacroRun) -> None:
        from kimitui.bench.macro import ConfigError, MacroError, run_sweep

        sweep = asyncio.ensure_future(run_sweep(run.config, self._publish, self._on_progress, run.cancel))
        try:
            result = await asyncio.shield(sweep)
        except asyncio.CancelledError:
            # The worker is cancelled (the app is exiting): stop the sweep the graceful way, so that it
            # publishes its end while the session is still open, then let the cancellation through.
            run.cancel.set()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(sweep, EXIT_GRACE_S)
            run.status, run.ended = "cancelled", time.monotonic()
            self._publish_progress(run, "cancelled")
            raise
        except (ConfigError, MacroError) as exc:
            self._finish(run, "failed", error=str(exc))
        except Exception as exc:  # request failures are counted, never raised: this is a bug, shown
            self._finish(run, "failed", error=f"{type(exc).__name__}: {exc}")
        else:
            self._finish(run, "cancelled" if result.cancelled else "done", result=result)

    def _finish(self, run: MacroRun, status: RunStatus, result: SweepResult | None = None,
                error: str | None = None) -> None:
        run.status, run.result, run.error, run.ended = status, result, error, time.monotonic()
        self._publish_progress(run, status, error or "")
        if status == "failed":
            self.app.notify(f"the sweep failed: {error}", title="macro sweep", severity="error", timeout=10)
        elif result is not None:
            single = result.single_stream_tok_s
            head = f"; single stream {single:.1f} tok/s" if single is not None else ""
            what = (f"cancelled after {len(result.levels)} of {len(run.levels)} levels" if status == "cancelled"
                    else f"{len(result.levels)} levels in {run.elapsed_s:.1f} s")
            self.app.notify(what + head, title="macro sweep", timeout=8)

    def _publish(self, event: Event) -> None:
        try:
            self.app.session.publish(event)
        except ValueError:  # the run file was closed under an exiting app: nothing left to draw either
            pass

    def _on_progress(self, progress: LevelProgress) -> None:
        run = self.run
        if run is None:
            return
        run.progress = progress
        now = time.monotonic()
        where = (progress.level_index, progress.stage)
        last = self._last_progress
        if last is None or last[1] != where or now - last[0] >= PROGRESS_EVERY_S:
            self._publish_progress(run, run.status)

    def _publish_progress(self, run: MacroRun, status: str, error: str = "") -> None:
        """The run as a MacroProgress event (recorded and folded: the panel draws it)."""
        p = run.progress
        self._last_progress = (time.monotonic(), (p.level_index, p.stage) if p is not None else None)
        fields: dict[str, object] = {}
        if p is not None:
            fields = {"level_index": p.level_index, "concurrency": p.concurrency, "stage": p.stage, "done": p.done,
                      "total": p.total, "failed": p.failed, "in_flight": p.in_flight,
                      "level_fraction": round(p.level_fraction, 4)}
        if status == "done":
            fields.update(level_index=len(run.levels) - 1, stage="done", level_fraction=1.0, in_flight=0)
        self._publish(MacroProgress(time.time(), status=status, levels=run.levels,  # type: ignore[arg-type]
                                    elapsed_s=round(run.elapsed_s, 3), error=error, **fields))  # type: ignore[arg-type]


def headline(points: list[MacroPoint]) -> float | None:
    """Output tok/s at concurrency 1, if that level is among ``points``."""
    for p in points:
        if p.concurrency == 1:
            value = p.metrics.get("output_throughput")
            return float(value) if isinstance(value, int | float) else None
    return None


def sweep_headline(sweep: Sweep | None) -> float | None:
    """The sweep's single-stream output tok/s (None when c=1 did not run, or every request of it failed)."""
    if sweep is None:
        return None
    point = sweep.points.get(1)
    return None if point is None or level_failed(point) else headline([point])


def tab_label(sweep: Sweep | None) -> str:
    """The Benchmarks tab's label: plain, or the sweep's level and the headline while it runs."""
    if sweep is None or not sweep.active:
        return TAB_LABEL
    p = sweep.progress
    levels = len(sweep.levels)
    level = f"{p.level_index + 1}/{levels}" if p is not None and p.stage else f"0/{levels}"
    single = sweep_headline(sweep)
    head = f" · 1 stream {single:.1f} tok/s" if single is not None else ""
    return f"{TAB_LABEL} ▶ {level}{head}"
