"""Running a macro sweep from the dashboard: the dialog, the worker, progress, cancel.

The sweep runs as a Textual worker in the app's own event loop (``run_sweep`` is a coroutine):
``publish`` is ``session.publish``, so each finished level is a ``MacroPoint`` event that is folded,
recorded and drawn like any other (a cancelled sweep keeps its finished levels), and the live redraw
cap applies. Progress is an event too: the load generator's ``LevelProgress`` (about 10 a second) is
published as a ``MacroProgress`` when a level starts or ends and at most every
``kimitui.phases.macro.PROGRESS_EVERY_S`` between (the campaign's macro phase: one code path), and the
sweep's start and end (with its status or error) are ``MacroProgress`` events. The sweep panel and the
tab's label are drawn from the fold alone, so a replay of the run file shows the same panel. The UI
shares the loop with the load generator: redraws are capped at 8 Hz and small, but for figures to
publish, the headless ``kimitui bench macro`` has the loop to itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kimitui.core.describe import single_stream_line
from kimitui.core.events import Event, SweepStatus
from kimitui.tui.controllers.base import Controller
from kimitui.tui.controllers.port import AppPort

if TYPE_CHECKING:
    # kimitui.bench.macro imports httpx: loaded when a sweep starts, not with the app (first frame)
    from kimitui.bench.macro import LevelProgress, MacroConfig, SweepResult
    from kimitui.phases.macro import SweepProgress

RunStatus = SweepStatus
"""A sweep started from the dashboard is where its events say a sweep is (one vocabulary, core.events)."""
NEEDS_LIVE = "benchmarks need a live host (kimitui demo, kimitui connect HOST)"
EXIT_GRACE_S = 3.0
"""On app exit, how long the worker waits for the cancelled sweep to publish its end."""


@dataclass(slots=True)
class MacroRun:
    """One sweep started from the dashboard."""

    config: MacroConfig
    status: RunStatus = "running"
    progress: LevelProgress | None = None
    result: SweepResult | None = None
    error: str | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    recorder: SweepProgress | None = None
    """Publishes the sweep's progress as MacroProgress events (the campaign's macro phase does the same)."""

    @property
    def levels(self) -> list[float]:
        return self.config.levels

    @property
    def active(self) -> bool:
        return self.status in ("running", "cancelling")

    @property
    def elapsed_s(self) -> float:
        return (self.ended or time.monotonic()) - self.started


class MacroController(Controller):
    """The app's macro sweep: at most one at a time. It draws nothing: it publishes."""

    BUSY = "a sweep is running"

    def __init__(self, app: AppPort) -> None:
        super().__init__(app)
        self.run: MacroRun | None = None

    @property
    def running(self) -> bool:
        return self.run is not None and self.run.active

    # -- actions --------------------------------------------------------------------------------------

    def start(self) -> None:
        """``M`` / palette: the sweep dialog (live only); its confirm starts the sweep."""
        from kimitui.tui.screens.macro_dialog import MacroDialog

        live = self.app.live
        if live is None:
            self.app.notify(NEEDS_LIVE, title="macro sweep", severity="warning", timeout=6)
            return
        if self.running:
            self.app.notify("a sweep is running: x on the Benchmarks tab cancels it", title="macro sweep",
                            timeout=5)
            return
        previous = self.run.config if self.run is not None else None
        pace = {p.concurrency: tok for p in self.app.session.state.macro_points
                if (tok := p.result.output_throughput) is not None}
        self.app.push_screen(MacroDialog(url=live.api_url or "", previous=previous, pace=pace),
                             callback=self._confirmed)

    def _confirmed(self, config: MacroConfig | None) -> None:
        """The dialog's result (None: it was cancelled): start the sweep."""
        if config is None or self.running:
            return
        from kimitui.bench.macro import ConfigError

        try:
            config.validate()
        except ConfigError as exc:
            self.app.notify(str(exc), title="macro sweep", severity="error")
            return
        from kimitui.phases.macro import SweepProgress

        run = MacroRun(config)
        run.recorder = SweepProgress(self._publish, run.levels, config.axis)
        run.recorder.start()
        self.run = run
        self.app.action_show_view("bench")
        self.app.run_worker(self._work(run), group="macro", name="macro sweep", exclusive=True,
                            exit_on_error=False)

    def cancel(self) -> None:
        """Ask the running sweep to stop: the level in progress is dropped, finished levels stay."""
        run = self.run
        if run is None or not run.active:
            self.app.notify("no sweep is running", title="macro sweep", timeout=3)
            return
        if run.status == "running":
            run.status = "cancelling"
            run.cancel.set()
            self.app.notify("cancelling the sweep: finished levels are kept", title="macro sweep", timeout=4)
            if run.recorder is not None:
                run.recorder.emit("cancelling")

    def close(self) -> None:
        """The app is going away: stop the sweep the graceful way (no notice: nothing is left to show it)."""
        run = self.run
        if run is not None and run.active:
            run.cancel.set()

    # -- the worker -----------------------------------------------------------------------------------

    async def _work(self, run: MacroRun) -> None:
        from kimitui.bench.macro import ConfigError, MacroError
        from kimitui.phases.macro import macro_phase

        def seen(p: LevelProgress) -> None:
            run.progress = p

        sweep = asyncio.ensure_future(macro_phase(self._publish, run.config, run.cancel, on_progress=seen,
                                                  progress=run.recorder))
        try:
            result = await asyncio.shield(sweep)
        except asyncio.CancelledError:
            # The worker is cancelled (the app is exiting): stop the sweep the graceful way, so that it
            # publishes its end while the session is still open, then let the cancellation through.
            run.cancel.set()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(sweep, EXIT_GRACE_S)
            run.status, run.ended = "cancelled", time.monotonic()
            raise
        except (ConfigError, MacroError) as exc:
            self._finish(run, "failed", error=str(exc))
        except Exception as exc:  # request failures are counted, never raised: this is a bug, shown
            self._finish(run, "failed", error=f"{type(exc).__name__}: {exc}")
        else:
            self._finish(run, "cancelled" if result.cancelled else "done", result=result)

    def _finish(self, run: MacroRun, status: RunStatus, result: SweepResult | None = None,
                error: str | None = None) -> None:
        """The sweep's end as the app says it (its MacroProgress end is the campaign phase's)."""
        run.status, run.result, run.error, run.ended = status, result, error, time.monotonic()
        if status == "failed":
            self.app.notify(f"the sweep failed: {error}", title="macro sweep", severity="error", timeout=10)
        elif result is not None:
            single = result.single_stream
            head = f"; {single_stream_line(single)}" if single.state != "not run" else ""
            what = (f"cancelled after {len(result.levels)} of {len(run.levels)} levels" if status == "cancelled"
                    else f"{len(result.levels)} levels in {run.elapsed_s:.1f} s")
            self.app.notify(what + head, title="macro sweep", timeout=8)

    def _publish(self, event: Event) -> None:
        try:
            self.app.session.publish(event)
        except ValueError:  # the run file was closed under an exiting app: nothing left to draw either
            pass

