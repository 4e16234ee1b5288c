"""The dashboard's cleanup: the setup dialog, then the escalation as a Textual worker.

``free_gpus(app)`` opens the setup dialog (live mode only); its confirm starts ``CleanupRunner.run`` as
the one worker of group ``cleanup``. The executor publishes into the app's session (every preview,
consent, signal and result is recorded and folded, so the Cleanup tab follows it), reads processes from a
``SampleFeed`` subscribed to the same session, and asks each step's consent through ``ConsentScreen``.
``cancel_cleanup(app)`` (key x) declines the current consent and every later one: the step in hand
finishes, verify takes one look, and the cancellation is in the run file.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from kimitui.cleanup.audit import AuditLog
from kimitui.cleanup.consent import ConsentDecision, current_operator
from kimitui.cleanup.executor import CleanupReport
from kimitui.cleanup.plan import STEPS, Deadlines
from kimitui.cleanup.sample_feed import SampleFeed
from kimitui.cleanup.services import ServiceManager, service_missing
from kimitui.cleanup.setup import UsageError, build_target, default_deadlines, parse_service
from kimitui.core.events import LogLine, StepPreview, StepResult
from kimitui.core.session import Session
from kimitui.live.context import LiveContext
from kimitui.phases.restart import restart_phase
from kimitui.phases.transition import cleanup_phase
from kimitui.tui.screens.cleanup_consent import ConsentScreen
from kimitui.tui.screens.cleanup_dialog import DEFAULT_THRESHOLD_MIB, CleanupRequest, CleanupSetupScreen

if TYPE_CHECKING:
    from kimitui.tui.app import KimituiApp

WORKER_GROUP = "cleanup"
NEEDS_LIVE = "cleanup needs a live host: this is a replay (run kimitui demo, or kimitui connect HOST)"
CANCEL_NOTE = "cancelled by the operator (x): this step and the rest declined"

_runners: weakref.WeakKeyDictionary[KimituiApp, CleanupRunner] = weakref.WeakKeyDictionary()


def deadlines_for(live: LiveContext) -> Deadlines:
    """The deadlines of a cleanup from the dashboard (as ``kimitui cleanup`` picks them)."""
    return default_deadlines(live.simulated)


class CleanupRunner:
    """One escalation started from the dashboard."""

    def __init__(self, app: KimituiApp, session: Session, live: LiveContext, request: CleanupRequest,
                 deadlines: Deadlines, operator: str | None = None,
                 audit_factory: Callable[[], AuditLog] = AuditLog) -> None:
        self.app = app
        self.session = session
        self.live = live
        self.request = request
        self.operator = operator or current_operator()
        self.target = build_target(live.host.name, request.service, request.gpus, request.threshold_mib,
                                   deadlines, request.allow_other_users, self.operator)
        self.target.nvidia_smi = live.nvidia_smi
        if request.service is not None and live.api_url:  # the drain step reads the server's requests there
            self.target.metrics_url = f"{live.api_url.rstrip('/')}/metrics"
        self.audit_factory = audit_factory
        self.cancelled = False
        self.finished = False
        self.modal: ConsentScreen | None = None
        self.asked = 0
        self.report: CleanupReport | None = None
        self.note = ""

    @property
    def title(self) -> str:
        svc = self.request.service
        return f"{svc.label if svc else 'no service (none)'} on {self.live.host.name} (from the dashboard)"

    # -- consent

    async def consent(self, preview: StepPreview) -> ConsentDecision:
        if self.cancelled:
            return ConsentDecision(False, None, self.operator, CANCEL_NOTE)
        self.asked += 1
        fut: asyncio.Future[ConsentDecision] = asyncio.get_running_loop().create_future()

        def done(decision: ConsentDecision | None) -> None:
            if not fut.done():
                fut.set_result(decision or ConsentDecision(False, None, self.operator, "dismissed"))

        steps = [s for s in ("graceful", "process", "others", "device") if s in STEPS]
        position = f"step {steps.index(preview.step) + 1} of {len(steps)}" if preview.step in steps else ""
        self.modal = ConsentScreen(preview, self.operator, position, self.session.state)
        self.app.push_screen(self.modal, callback=done)
        try:
            return await fut
        finally:
            self.modal = None

    def cancel(self) -> None:
        """Decline the consent in hand and every later one; verify then takes one look."""
        if self.cancelled or self.finished:
            return
        self.cancelled = True
        self.target.deadlines.verify_s = 0.0
        self.session.publish(LogLine(time.time(), level="warning", source="cleanup",
                                     message="cleanup cancelled by the operator (x): the remaining steps are "
                                             "declined, verify takes one look"))
        modal = self.modal
        if modal is not None and modal.is_attached:
            if self.app.screen is not modal:
                modal.pop_until_active()
            modal.dismiss(modal.decision(False, CANCEL_NOTE))

    # -- the worker

    async def run(self) -> CleanupReport | None:
        """The campaign's transition phase with this runner's consent (the modals)."""
        feed = SampleFeed()
        unsubscribe = self.session.subscribe(feed.push)
        audit = self.audit_factory()
        clean = False

        def cancelled() -> str:
            return "cancelled by the operator" if self.cancelled else ""

        try:
            out = await cleanup_phase(self.live.host, self.target, feed, self.consent, self.session.publish,
                                      self.title, audit=audit, note_prefix=cancelled)
            self.report, clean, self.note = out.report, out.clean, out.note
        except asyncio.CancelledError:
            self.note = "not clean; interrupted (the dashboard closed)"
            raise
        finally:
            self.finished = True
            unsubscribe()
            audit.close()
        self.app.notify(f"GPUs {'CLEAN' if clean else 'NOT clean'}: {self.note}", title="cleanup",
                        severity="information" if clean else "error", timeout=10)
        return self.report

    async def restart(self) -> StepResult | None:
        """Step f on its own (the campaign's restart phase): preview (service, start command, health URL) in a
        consent modal, start, poll the health endpoint. Its events join the latest cleanup in the panel (or a
        plan of its own)."""
        audit = self.audit_factory()
        feed = SampleFeed()  # the preview says what still holds GPU memory (a cleanup cut short)
        unsubscribe = self.session.subscribe(feed.push)
        try:
            result, self.note = await restart_phase(
                self.live.host, self.target, self.consent, self.session.publish,
                f"restart {self.request.service.label if self.request.service else 'no service'} on "
                f"{self.live.host.name}", audit=audit, plan_first=self.session.state.cleanup is None,
                gpus=sorted(self.session.state.gpus), view=feed)
        except asyncio.CancelledError:
            self.note = "interrupted (the dashboard closed)"
            raise
        finally:
            self.finished = True
            unsubscribe()
            audit.close()
        ok = result is not None and result.status == "done"
        self.app.notify(f"restart {self.note}", title="restart", severity="information" if ok else "error",
                        timeout=10)
        return result


# -- the app's actions (key F, key x, the palette)

def current(app: KimituiApp) -> CleanupRunner | None:
    """The dashboard's latest cleanup (running or finished), if any."""
    return _runners.get(app)


def running(app: KimituiApp) -> bool:
    runner = _runners.get(app)
    return runner is not None and not runner.finished


def free_gpus(app: KimituiApp) -> None:
    """Open the setup dialog; its confirm starts the escalation."""
    live = app.live
    if live is None:
        app.notify(NEEDS_LIVE, title="cleanup", severity="warning", timeout=6)
        return
    if running(app):
        app.notify("a cleanup is already running (x cancels it)", title="cleanup", severity="warning")
        app.action_show_view("cleanup")
        return
    if isinstance(app.screen, CleanupSetupScreen):
        return

    def start(request: CleanupRequest | None) -> None:
        if request is None or live is None or running(app):
            return
        runner = CleanupRunner(app, app.session, live, request, deadlines_for(live))
        _runners[app] = runner
        app.action_show_view("cleanup")
        app.run_worker(runner.run(), group=WORKER_GROUP, name="cleanup", exclusive=True, exit_on_error=False)

    async def lookup(service: ServiceManager) -> str | None:
        return await service_missing(live.host, service)

    app.push_screen(CleanupSetupScreen(live.label, live.default_service, sorted(app.session.state.gpus),
                                       lookup=lookup), callback=start)


def cancel_cleanup(app: KimituiApp) -> None:
    runner = _runners.get(app)
    if runner is None or runner.finished:
        app.notify("no cleanup running", title="cleanup", timeout=3)
        return
    if runner.cancelled:
        app.notify("cancelling: the step in hand finishes, then verify", title="cleanup", timeout=4)
        return
    runner.cancel()
    app.notify("cleanup cancelled: the step in hand finishes, the rest is declined", title="cleanup",
               severity="warning", timeout=6)


def restart_service(app: KimituiApp) -> None:
    """Restart the service (key R): the service of the dashboard's latest cleanup, else the host's default;
    its preview and consent come up in a modal, the health wait shows in the cleanup panel."""
    live = app.live
    if live is None:
        app.notify(NEEDS_LIVE.replace("cleanup", "restart", 1), title="restart", severity="warning", timeout=6)
        return
    if running(app):
        app.notify("a cleanup or restart is running (x cancels it)", title="restart", severity="warning")
        return
    last = _runners.get(app)
    spec = last.request.service_spec if last is not None and last.request.service is not None else \
        (live.default_service or "")
    if not spec:
        app.notify("no service known to restart: free the GPUs (F) with a service first", title="restart",
                   severity="warning", timeout=6)
        return
    try:
        service = parse_service(spec)
    except UsageError as exc:
        app.notify(str(exc), title="restart", severity="error", timeout=6)
        return
    if service is None:
        app.notify("no service to restart (none was chosen): free the GPUs (F) with a service first",
                   title="restart", severity="warning", timeout=6)
        return
    request = CleanupRequest(spec, service, None, DEFAULT_THRESHOLD_MIB, False)
    runner = CleanupRunner(app, app.session, live, request, deadlines_for(live))
    _runners[app] = runner
    app.action_show_view("cleanup")
    app.run_worker(runner.restart(), group=WORKER_GROUP, name="restart", exclusive=True, exit_on_error=False)
