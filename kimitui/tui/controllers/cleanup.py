"""The dashboard's cleanup (live only): ``F`` opens the setup dialog, whose confirm starts the escalation;
``R`` restarts the service; ``x`` on the Cleanup tab cancels. One cleanup or restart at a time, as the one
worker of group ``cleanup``; each is a ``CleanupRun`` (``cleanup_run.py``, imported when one starts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimitui.tui.controllers.base import Controller
from kimitui.tui.controllers.port import AppPort

if TYPE_CHECKING:
    from kimitui.cleanup.plan import Deadlines
    from kimitui.cleanup.services import ServiceManager
    from kimitui.live.context import LiveContext
    from kimitui.tui.controllers.cleanup_run import CleanupRun
    from kimitui.tui.screens.cleanup_dialog import CleanupRequest

WORKER_GROUP = "cleanup"
NEEDS_LIVE = "cleanup needs a live host: this is a replay (run kimitui demo, or kimitui connect HOST)"


def deadlines_for(live: LiveContext) -> Deadlines:
    """The deadlines of a cleanup from the dashboard (as ``kimitui cleanup`` picks them)."""
    from kimitui.cleanup.setup import default_deadlines

    return default_deadlines(live.simulated)


class CleanupController(Controller):
    """The app's cleanup and restart: at most one at a time."""

    BUSY = "a cleanup step is running"

    def __init__(self, app: AppPort) -> None:
        super().__init__(app)
        self.current: CleanupRun | None = None
        """The latest cleanup or restart (running or finished): R restarts its service."""

    @property
    def running(self) -> bool:
        return self.current is not None and not self.current.finished

    def start(self) -> None:
        """``F`` / palette: the setup dialog; its confirm starts the escalation."""
        from kimitui.cleanup.services import service_missing
        from kimitui.tui.screens.cleanup_dialog import CleanupSetupScreen

        live = self.app.live
        if live is None:
            self.app.notify(NEEDS_LIVE, title="cleanup", severity="warning", timeout=6)
            return
        if self.running:
            self.app.notify("a cleanup is already running (x cancels it)", title="cleanup", severity="warning")
            self.app.action_show_view("cleanup")
            return
        if isinstance(self.app.screen, CleanupSetupScreen):
            return

        async def lookup(service: ServiceManager) -> str | None:
            return await service_missing(live.host, service)

        self.app.push_screen(CleanupSetupScreen(live.label, live.default_service, sorted(self.app.session.state.gpus),
                                                lookup=lookup), callback=self._confirmed)

    def _confirmed(self, request: CleanupRequest | None) -> None:
        live = self.app.live
        if request is None or live is None or self.running:
            return
        self._begin(self._run_for(live, request), "cleanup")

    def restart(self) -> None:
        """``R``: restart the service of the dashboard's latest cleanup, else the host's default; its preview
        and consent come up in a modal, the health wait shows in the cleanup panel."""
        from kimitui.cleanup.setup import UsageError, parse_service
        from kimitui.tui.screens.cleanup_dialog import DEFAULT_THRESHOLD_MIB, CleanupRequest

        live = self.app.live
        if live is None:
            self.app.notify(NEEDS_LIVE.replace("cleanup", "restart", 1), title="restart", severity="warning",
                            timeout=6)
            return
        if self.running:
            self.app.notify("a cleanup or restart is running (x cancels it)", title="restart", severity="warning")
            return
        last = self.current
        spec = last.request.service_spec if last is not None and last.request.service is not None else \
            (live.default_service or "")
        if not spec:
            self.app.notify("no service known to restart: free the GPUs (F) with a service first", title="restart",
                            severity="warning", timeout=6)
            return
        try:
            service = parse_service(spec)
        except UsageError as exc:
            self.app.notify(str(exc), title="restart", severity="error", timeout=6)
            return
        if service is None:
            self.app.notify("no service to restart (none was chosen): free the GPUs (F) with a service first",
                            title="restart", severity="warning", timeout=6)
            return
        request = CleanupRequest(spec, service, None, DEFAULT_THRESHOLD_MIB, False)
        self._begin(self._run_for(live, request), "restart")

    def _run_for(self, live: LiveContext, request: CleanupRequest) -> CleanupRun:
        from kimitui.tui.controllers.cleanup_run import CleanupRun

        return CleanupRun(self.app, live, request, deadlines_for(live))

    def _begin(self, run: CleanupRun, what: str) -> None:
        self.current = run
        self.app.action_show_view("cleanup")
        work = run.run() if what == "cleanup" else run.restart()
        self.app.run_worker(work, group=WORKER_GROUP, name=what, exclusive=True, exit_on_error=False)

    def cancel(self) -> None:
        """``x``: decline the consent in hand and every later one; the step in hand finishes, then verify."""
        run = self.current
        if run is None or run.finished:
            self.app.notify("no cleanup running", title="cleanup", timeout=3)
            return
        if run.cancelled:
            self.app.notify("cancelling: the step in hand finishes, then verify", title="cleanup", timeout=4)
            return
        run.cancel()
        self.app.notify("cleanup cancelled: the step in hand finishes, the rest is declined", title="cleanup",
                        severity="warning", timeout=6)
