"""One cleanup from the dashboard: the campaign's transition phase (or its restart phase, key R) as a worker of
the app, each step's consent asked in ``ConsentScreen``.

The executor publishes into the app's session (every preview, consent, signal and result is recorded and
folded, so the Cleanup tab follows it) and reads processes from a ``SampleFeed`` subscribed to the same
session. ``cancel`` (key x) declines the current consent and every later one: the step in hand finishes,
verify takes one look, and the cancellation is in the run file. Imported when a cleanup starts (the engine
is not needed for the first frame).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kimitui.cleanup.audit import AuditLog
from kimitui.cleanup.consent import ConsentDecision, current_operator
from kimitui.cleanup.executor import CleanupReport
from kimitui.cleanup.plan import STEPS, Deadlines
from kimitui.cleanup.sample_feed import SampleFeed
from kimitui.cleanup.setup import build_target
from kimitui.core.events import LogLine, StepPreview, StepResult
from kimitui.live.context import LiveContext
from kimitui.phases.restart import restart_phase
from kimitui.phases.transition import cleanup_phase
from kimitui.tui.controllers.port import AppPort
from kimitui.tui.screens.cleanup_consent import ConsentScreen
from kimitui.tui.screens.cleanup_dialog import CleanupRequest

CANCEL_NOTE = "cancelled by the operator (x): this step and the rest declined"


class CleanupRun:
    """One escalation (or restart) started from the dashboard: its consent modals and its worker."""

    def __init__(self, app: AppPort, live: LiveContext, request: CleanupRequest,
                 deadlines: Deadlines, operator: str | None = None,
                 audit_factory: Callable[[], AuditLog] = AuditLog) -> None:
        self.app = app
        self.session = app.session
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
        """The campaign's transition phase with this run's consent (the modals)."""
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
