"""The GPU transition: its plan, each step's preview, consent, signals and result, the verification."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from kimitui.core.events.base import Event
from kimitui.core.events.host import ProcRef


@dataclass(frozen=True, slots=True)
class CleanupPlan(Event):
    type: ClassVar[str] = "cleanup_plan"
    host: str = ""
    service: str = ""
    manager: str = ""
    gpus: list[int] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    clean_threshold_mib: float = 0.0


@dataclass(frozen=True, slots=True)
class StepPreview(Event):
    type: ClassVar[str] = "step_preview"
    step: str = ""
    action: str = ""
    targets: list[ProcRef] = field(default_factory=list)
    spared: list[ProcRef] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Consent(Event):
    type: ClassVar[str] = "consent"
    step: str = ""
    accepted: bool = False
    operator: str = ""
    pids: list[int] = field(default_factory=list)
    note: str = ""


@dataclass(frozen=True, slots=True)
class SignalSent(Event):
    type: ClassVar[str] = "signal"
    step: str = ""
    pid: int = 0
    start_time: int | None = None
    signal: str = ""
    outcome: Literal["sent", "gone", "mismatch", "refused", "error", "unknown"] = "sent"
    """unknown: the channel dropped with the request in flight (it was not resent)."""
    detail: str = ""
    cmdline: str = ""


@dataclass(frozen=True, slots=True)
class SignalOutcome(Event):
    type: ClassVar[str] = "signal_outcome"
    step: str = ""
    pid: int = 0
    start_time: int | None = None
    signal: str = ""
    outcome: Literal["exited", "survived", "stuck", "unknown"] = "exited"
    """unknown: the host could not be asked again (the channel dropped and did not come back in time)."""
    elapsed_s: float = 0.0
    state: str | None = None


@dataclass(frozen=True, slots=True)
class SignalLate(Event):
    """What became of a signal whose outcome was unknown, learnt only after the wait had given up on it:
    the agent's reply that came late (``how`` "reply": its outcome, e.g. sent), or what the host showed
    once it was back (``how`` "look": exited or alive, the same identity)."""

    type: ClassVar[str] = "signal_late"
    step: str = ""
    pid: int = 0
    start_time: int | None = None
    signal: str = ""
    how: Literal["reply", "look"] = "reply"
    outcome: str = ""
    """reply: the agent's outcome (sent, gone, mismatch, error); look: exited or alive."""
    detail: str = ""
    after_s: float = 0.0
    """Seconds from the signal's request to this news."""
    after_end: bool = False
    """The cleanup had ended (every step reported) when this was learnt."""


@dataclass(frozen=True, slots=True)
class HostCommand(Event):
    """A command a step ran on the host to change its state and the one that restores it (the reset's
    persistence mode, the DCGM unit), with what came of it."""

    type: ClassVar[str] = "host_command"
    step: str = ""
    argv: list[str] = field(default_factory=list)
    purpose: str = ""
    ok: bool = True
    detail: str = ""
    """Why it failed (rc and the first of its output, or the host's error); '' when it worked."""


@dataclass(frozen=True, slots=True)
class StepResult(Event):
    type: ClassVar[str] = "step_result"
    step: str = ""
    status: Literal["done", "skipped", "declined", "failed"] = "done"
    reason: str = ""
    elapsed_s: float = 0.0


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    index: int
    used_mib: float | None
    baseline_mib: float
    clean: bool
    holders: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Verification(Event):
    type: ClassVar[str] = "verification"
    clean: bool = False
    gpus: list[GpuVerdict] = field(default_factory=list)
    holders_left: list[ProcRef] = field(default_factory=list)
    elapsed_s: float = 0.0
    detail: str = ""


EVENTS: tuple[type[Event], ...] = (CleanupPlan, StepPreview, Consent, SignalSent, SignalOutcome, SignalLate,
                                   HostCommand, StepResult, Verification)
"""The events this module declares (the registry reads them)."""
