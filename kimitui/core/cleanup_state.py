"""A cleanup in the fold: each step's state (preview, consent, the signals it sent each paired with its outcome,
its one duration, its result) and the verdict; ``kimitui.core.state.fold`` keeps them. The Cleanup tab, the
report and the CLI read these."""

from __future__ import annotations

from dataclasses import dataclass, field

from kimitui.core.events import CleanupPlan, Consent, SignalOutcome, SignalSent, StepPreview, StepResult, Verification

FINAL = frozenset({"done", "skipped", "declined", "failed"})
"""A step's statuses once it is over."""


STOP = "stop"
"""The signal name of a graceful step's wait: its outcomes answer the service's stop (a stop command, or the
SIGTERM to a pid service's main process)."""


@dataclass(slots=True)
class SignalRecord:
    """One signal a step sent (or refused to send) and, once the wait after it has seen it, its outcome.
    Paired once, here in the fold; the Cleanup tab, the report and the CLI read this."""

    sent: SignalSent
    outcome: SignalOutcome | None = None
    """None: no outcome yet (the wait is on), or none comes (a signal not sent: gone, refused, ...)."""

    @property
    def awaited(self) -> bool:
        """An outcome is to come: the signal was sent, or may have been (the channel dropped)."""
        return self.sent.outcome in ("sent", "unknown")

    @property
    def waiting(self) -> bool:
        """Sent, and its outcome not seen yet."""
        return self.outcome is None and self.sent.outcome == "sent"

    def answers(self, ev: SignalOutcome) -> bool:
        """The outcome is this signal's: the same process, the same signal (or the graceful wait's stop),
        and this signal has none yet."""
        s = self.sent
        return (self.outcome is None and self.awaited and ev.pid == s.pid
                and (ev.start_time is None or s.start_time is None or ev.start_time == s.start_time)
                and (ev.signal == s.signal or ev.signal == STOP))


@dataclass(slots=True)
class StepState:
    step: str
    status: str = "pending"
    """pending, previewed, confirmed, running, done, skipped, declined, failed."""
    preview: StepPreview | None = None
    consent: Consent | None = None
    signals: list[SignalRecord] = field(default_factory=list)
    """Each signal in the order sent, with its outcome (the first one after it for that process and signal)."""
    outcomes: list[SignalOutcome] = field(default_factory=list)
    """Every outcome, in order: those of the signals, and those of a service's stop (no signal of ours)."""
    started: float | None = None
    """When the step began to act: the operator's answer (None until then, or when it asked nothing)."""
    elapsed_s: float | None = None
    """The step's one duration, shown everywhere (tab, log, report, CLI): from the operator's answer to
    the result when it asked (the time taken to decide is not the step's), else the whole step as its
    result says; verify's is its verification's."""
    reason: str = ""
    result: StepResult | None = None


@dataclass(slots=True)
class CleanupState:
    plan: CleanupPlan
    steps: dict[str, StepState] = field(default_factory=dict)
    verification: Verification | None = None

    @property
    def clean(self) -> bool:
        """The verdict: the last verification found every GPU in scope clean."""
        return self.verification is not None and self.verification.clean

    @property
    def signalled(self) -> list[int]:
        """Every pid a signal reached, in order."""
        out: list[int] = []
        for step in self.steps.values():
            for r in step.signals:
                if r.sent.outcome == "sent" and r.sent.pid not in out:  # once, though SIGTERM then SIGKILL
                    out.append(r.sent.pid)
        return out

    def _to_clean(self, times: list[float]) -> float | None:
        v = self.verification
        before = [t for t in times if v is not None and t <= v.t]
        return round(v.t - max(before), 4) if v is not None and v.clean and before else None

    @property
    def consent_to_clean_s(self) -> float | None:
        """From the last accepted consent to the verification that found the GPUs clean."""
        steps = self.steps.values()
        return self._to_clean([s.consent.t for s in steps if s.consent is not None and s.consent.accepted])

    @property
    def signal_to_clean_s(self) -> float | None:
        """From the last signal delivered (or service stop command, at its consent) to the verification that
        found the GPUs clean."""
        times = [r.sent.t for s in self.steps.values() for r in s.signals if r.sent.outcome == "sent"]
        times += [s.consent.t for s in self.steps.values() if s.consent is not None and s.consent.accepted
                  and any(o.signal == STOP for o in s.outcomes) and not s.signals]
        return self._to_clean(times)
