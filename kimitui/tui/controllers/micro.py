"""Running the micro benchmarks from the dashboard (live only): ``K`` starts them on the watched host,
``x`` on the Micro tab cancels (every rank ends, the GPUs are freed, the telemetry shows it).

The run is a worker in the app's loop; ``publish`` is ``session.publish``, so everything it does is an
event, recorded and drawn like any other. A refusal (the GPUs hold memory) shows its holders on the tab
and offers to run anyway, in a modal that says what that means (``screens/micro_override.py``).
"""

from __future__ import annotations

import asyncio

from kimitui.core.events import HostSample
from kimitui.tui.controllers.base import Controller
from kimitui.tui.controllers.port import AppPort

NEEDS_LIVE = "the micro benchmarks need a live host (kimitui demo, kimitui connect HOST)"


class MicroController(Controller):
    """The app's micro benchmarks: at most one run at a time."""

    BUSY = "a micro run is running"

    def __init__(self, app: AppPort) -> None:
        super().__init__(app)
        self.cancel_event: asyncio.Event | None = None
        self.task_running = False
        self.defaults: dict[str, object] = {}
        """MicroConfig fields set on every run started here (the demo's pace, a test's small sizes)."""

    @property
    def running(self) -> bool:
        return self.task_running

    def start(self, force: bool = False) -> None:
        """``K`` / palette: run on the watched host (``force``: beside the memory holders, once asked)."""
        live = self.app.live
        if live is None:
            self.app.notify(NEEDS_LIVE, title="micro", severity="warning", timeout=6)
            return
        if self.running:
            self.app.notify("a micro run is in progress: x on the Micro tab cancels it", title="micro", timeout=5)
            return
        from kimitui.bench.micro.runner import MicroConfig
        from kimitui.phases.micro import micro_phase
        from kimitui.tui.screens.micro_override import OverrideScreen

        state = self.app.session.state
        sample = HostSample(state.sample_t, host=state.host, gpus=list(state.gpus.values()), procs=list(state.procs)) \
            if state.gpus else None
        cfg = MicroConfig(force=force)
        if live.simulated:
            cfg.modelled, cfg.sim_dir, cfg.pace_s = "rtx-pro-6000", live.sim_dir, 0.05
        for key, value in self.defaults.items():
            setattr(cfg, key, value)
        cancel = self.cancel_event = asyncio.Event()
        self.task_running = True
        self.app.action_show_view("micro")

        async def run() -> None:
            try:  # the campaign's micro phase: its start, the runner, its end
                res = await micro_phase(self.app.session.publish, live.host, live.label, cfg, sample, cancel)
                if res.refused or any(p.status == "refused" for p in res.parts.values()):
                    detail = next(iter(res.parts.values())).detail if res.parts else "the GPUs hold memory"
                    self.app.push_screen(OverrideScreen(detail, res.refused), callback=self._override)
            except Exception as exc:  # a run that cannot start is a notification, never a crash
                self.app.notify(f"micro run failed: {exc}", title="micro", severity="error", timeout=10)
            finally:
                self.task_running = False

        self.app.run_worker(run(), group="micro", name="micro run", exit_on_error=False)

    def _override(self, run_anyway: bool | None) -> None:
        if run_anyway:
            self.start(force=True)

    def cancel(self) -> None:
        """Every rank is stopped, the GPUs are freed."""
        if self.cancel_event is not None and self.running:
            self.cancel_event.set()
            self.app.notify("cancelling: every rank is stopped", title="micro", timeout=4)
