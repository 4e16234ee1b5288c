"""``kimitui campaign FILE`` in the dashboard: the campaign machine as a worker of the app, a consent left at
"ask" answered in the same modal as the F action's, and the operator's keys: P pause / go on (before the
next phase), S skip the next phase, A abort (``cancel``: the phase in hand stops, the restart is offered).

While the campaign runs, F, M, K and R say so instead of starting a second orchestration on the host.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kimitui.core.campaign_state import PHASE_TITLES
from kimitui.tui.controllers.base import Controller
from kimitui.tui.controllers.port import AppPort

if TYPE_CHECKING:
    from kimitui.campaign.machine import Campaign
    from kimitui.cleanup.consent import ConsentDecision
    from kimitui.core.events import StepPreview
    from kimitui.tui.screens.cleanup_consent import ConsentScreen

RUNNING = "a campaign is running: P pauses it before the next phase, S skips the next phase, A aborts it"
VIEWS_BY_PHASE = {"macro": "bench", "cleanup": "cleanup", "micro": "micro", "analysis": "analysis",
                  "restart": "cleanup", "check": "analysis"}
"""The tab each phase is followed on."""


class CampaignController(Controller):
    """The campaign this dashboard runs (none unless ``load`` gave it one), started when the app mounts."""

    BUSY = "a campaign is running"

    def __init__(self, app: AppPort) -> None:
        super().__init__(app)
        self.machine: Campaign | None = None
        self.modal: ConsentScreen | None = None
        self.started = False

    def load(self, machine: Campaign) -> None:
        """The campaign to run (``kimitui campaign FILE``, before the app runs): its "ask" consents come here."""
        self.machine = machine
        machine.set_ask(self.ask)

    @property
    def loaded(self) -> bool:
        """This dashboard runs a campaign (its keys and its strip apply)."""
        return self.machine is not None

    @property
    def running(self) -> bool:
        return self.started and self.machine is not None and not self.machine.finished

    def start(self) -> None:
        if self.started or self.machine is None:
            return
        self.started = True
        self.app.run_worker(self._run(self.machine), group="campaign", name="campaign", exit_on_error=False)

    async def _run(self, machine: Campaign) -> None:
        from kimitui.cleanup.sample_feed import ViewTimeout

        try:
            await machine.first_sample()
        except ViewTimeout as exc:
            self.app.notify(f"no telemetry: the campaign did not start ({exc})", title="campaign", severity="error",
                            timeout=15)
            return
        follow = self.app.session.subscribe(self._follow)
        try:
            end = await machine.run()
        finally:
            follow()
        severity = "information" if end.status == "done" else "error"
        self.app.notify(f"campaign {end.status}: {end.note}", title="campaign", severity=severity, timeout=15)

    def _follow(self, event: object) -> None:
        """Show the tab of each phase as it starts (the operator can switch away; the next phase brings it back)."""
        from kimitui.core.events import CampaignControl, PhaseStart

        if isinstance(event, PhaseStart) and event.phase in VIEWS_BY_PHASE and self.app.is_running:
            self.app.action_show_view(VIEWS_BY_PHASE[event.phase])
        if isinstance(event, CampaignControl) and event.action == "pause" and event.note and self.app.is_running:
            self.app.notify(f"the campaign holds: {event.note}", title="campaign", severity="warning", timeout=30)

    async def ask(self, preview: StepPreview) -> ConsentDecision:
        from kimitui.cleanup.consent import ConsentDecision
        from kimitui.tui.screens.cleanup_consent import ConsentScreen

        machine = self.machine
        assert machine is not None, "a consent asked before load()"
        fut: asyncio.Future[ConsentDecision] = asyncio.get_running_loop().create_future()

        def done(decision: ConsentDecision | None) -> None:
            if not fut.done():
                fut.set_result(decision or ConsentDecision(False, None, machine.operator, "dismissed"))

        phase = machine.current or ""
        self.modal = ConsentScreen(preview, machine.operator, PHASE_TITLES.get(phase, phase),
                                   self.app.session.state)
        self.app.push_screen(self.modal, callback=done)
        try:
            return await fut
        finally:
            self.modal = None

    # -- the keys

    def toggle_pause(self) -> None:
        if not self.running or self.machine is None:
            self.app.notify("no campaign running", title="campaign", timeout=3)
            return
        paused = self.machine.toggle_pause()
        self.app.notify("paused: the campaign waits before the next phase (P goes on)" if paused else "going on",
                        title="campaign", timeout=4)

    def skip_next(self) -> None:
        if not self.running or self.machine is None:
            self.app.notify("no campaign running", title="campaign", timeout=3)
            return
        name = self.machine.skip_next()
        self.app.notify(f"{PHASE_TITLES.get(name, name)} will be skipped" if name else "no phase left to skip",
                        title="campaign", timeout=4)

    def cancel(self) -> None:
        """``A``: abort (the phase in hand stops the graceful way, then the restart is offered)."""
        if not self.running or self.machine is None:
            self.app.notify("no campaign running", title="campaign", timeout=3)
            return
        self.machine.abort("the operator pressed A")
        modal = self.modal
        if modal is not None and modal.is_attached:
            if self.app.screen is not modal:
                modal.pop_until_active()
            modal.dismiss(modal.decision(False, "campaign aborted"))
        self.app.notify("aborting: the phase in hand stops, then the service's restart is offered (none when it "
                        "was never stopped and is running)", title="campaign", severity="warning", timeout=6)
