"""The campaign in the fold: where it is (each phase's status), the operator's controls, resumes, the
drain, the decode-step budget and the probe. ``fold_campaign`` is called by ``kimitui.core.state.fold``
for the campaign's events and for every PhaseStart / PhaseEnd.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kimitui.core.events import (
    CUT_OFF,
    CampaignControl,
    CampaignEnd,
    CampaignPlan,
    CampaignResume,
    DecodeBudget,
    DrainProgress,
    Event,
    PhaseEnd,
    PhaseStart,
    ProbeResult,
    ServedModel,
)

PhaseStatus = str
"""pending, running, done, failed, skipped, cut off."""

PHASE_TITLES = {"macro": "Phase 1 macro", "cleanup": "transition", "micro": "Phase 2 micro",
                "analysis": "Phase 3 analysis", "restart": "restart", "check": "post-restart check"}


@dataclass(slots=True)
class CampaignPhase:
    name: str
    status: PhaseStatus = "pending"
    start: float | None = None
    end: float | None = None
    note: str = ""
    runs: int = 0
    """How many times it started (a resumed phase runs again)."""


@dataclass(slots=True)
class CampaignState:
    plan: CampaignPlan
    phases: dict[str, CampaignPhase] = field(default_factory=dict)
    paused: bool = False
    pause_before: str = ""
    pause_note: str = ""
    """Why the campaign holds, when kimitui paused it (a failed precondition) rather than the operator."""
    skips: list[str] = field(default_factory=list)
    """Phases the operator chose to skip (not started yet, or passed over)."""
    aborting: bool = False
    controls: list[CampaignControl] = field(default_factory=list)
    resumes: list[CampaignResume] = field(default_factory=list)
    end: CampaignEnd | None = None

    def shown_status(self, name: str) -> PhaseStatus:
        """The phase's status as the strip and the report show it: a phase still pending that the operator
        chose to skip (a resume put it back to pending, the skip stands) is skipped."""
        phase = self.phases[name]
        return "skipped" if phase.status == "pending" and name in self.skips else phase.status

    @property
    def current(self) -> CampaignPhase | None:
        """The phase running now."""
        return next((p for p in self.phases.values() if p.status == "running"), None)

    @property
    def next_phase(self) -> CampaignPhase | None:
        """The first phase still to run: not started (or cut off by a stop, to run again), nor skipped."""
        return next((p for p in self.phases.values()
                     if p.status in ("pending", "cut off") and p.name not in self.skips
                     and (p.status == "pending" or any(p.name in r.todo for r in self.resumes))), None)

    @property
    def active(self) -> bool:
        return self.end is None

    @property
    def finished(self) -> int:
        return sum(1 for p in self.phases.values() if p.status in ("done", "failed", "skipped"))


@dataclass(slots=True)
class CampaignRecords:
    """What the session state holds of campaigns: the latest campaign and its results."""

    campaign: CampaignState | None = None
    drain: DrainProgress | None = None
    budget: DecodeBudget | None = None
    probe: ProbeResult | None = None
    served: ServedModel | None = None
    """The model the campaign measures (the latest said)."""


def fold_campaign(fold: CampaignRecords, ev: Event) -> None:
    c = fold.campaign
    if isinstance(ev, CampaignPlan):
        fold.campaign = CampaignState(ev, {p: CampaignPhase(p) for p in ev.phases})
        fold.drain = fold.budget = fold.probe = fold.served = None
    elif isinstance(ev, ServedModel):
        fold.served = ev
    elif isinstance(ev, DrainProgress):
        fold.drain = ev
    elif isinstance(ev, DecodeBudget):
        fold.budget = ev
    elif isinstance(ev, ProbeResult):
        fold.probe = ev
    elif c is None:
        return
    elif isinstance(ev, PhaseStart):
        phase = c.phases.get(ev.phase)
        if phase is not None and c.active:
            phase.status, phase.start, phase.end, phase.note = "running", ev.t, None, ""
            phase.runs += 1
            if c.pause_before == ev.phase:
                c.pause_before = ""
    elif isinstance(ev, PhaseEnd):
        phase = c.phases.get(ev.phase)
        if phase is not None and phase.status == "running":
            cut = ev.note.startswith(CUT_OFF)
            phase.status = "cut off" if cut else "done" if ev.ok else "failed"
            phase.end, phase.note = ev.t, ev.note
    elif isinstance(ev, CampaignControl):
        c.controls.append(ev)
        if ev.action == "pause":
            c.paused, c.pause_before, c.pause_note = True, ev.phase, ev.note
        elif ev.action == "resume":
            c.paused, c.pause_before, c.pause_note = False, "", ""
        elif ev.action == "skip":
            if ev.phase not in c.skips:
                c.skips.append(ev.phase)
            phase = c.phases.get(ev.phase)
            if phase is not None and phase.status in ("pending", "cut off"):
                phase.status, phase.note = "skipped", ev.note or "skipped by the operator"
        elif ev.action == "abort":
            c.aborting = True
    elif isinstance(ev, CampaignResume):
        c.resumes.append(ev)
        c.paused, c.pause_before, c.aborting = False, "", False
        for name in ev.todo:
            phase = c.phases.get(name)
            if phase is not None and phase.status != "cut off":
                phase.status = "pending"
    elif isinstance(ev, CampaignEnd):
        c.end = ev
        c.paused = False
