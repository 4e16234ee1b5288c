"""What a cleanup step may see and do: the executor's side of the escalation, as a small interface.

The steps (steps.py, drain.py) take a ``StepContext``, never the executor itself. They read the target, the
scope, the clock and what happened so far through read-only properties and queries, and they change the
cleanup's state only through methods (an action taken, a stop command issued, a verification recorded): the
executor keeps its bookkeeping (the report, the stuck processes, the times consent and signals were given)
to itself. ``CleanupExecutor`` implements it.
"""

from __future__ import annotations

import signal as signal_mod
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from kimitui.cleanup.hostprocs import ProcScan
from kimitui.cleanup.plan import CleanupTarget
from kimitui.cleanup.safety import Candidate
from kimitui.cleanup.services import ServiceProcs
from kimitui.cleanup.waits import Clock
from kimitui.core.events import (
    Event,
    HostSample,
    ProcRef,
    ProcSample,
    SignalOutcome,
    SignalSent,
    StepResult,
    Verification,
)
from kimitui.hosts.base import Host

Key = tuple[int, int | None]
"""A process's identity: (pid, start time)."""


def key(c: Candidate) -> Key:
    return (c.pid, c.start_time)


@dataclass(slots=True)
class Confirmed:
    """What the operator confirmed for one step: only these (pid, start time) may be signalled."""

    step: str
    procs: dict[Key, Candidate] = field(default_factory=dict)


@runtime_checkable
class StepContext(Protocol):
    """The cleanup as one step sees it."""

    # --- what the cleanup is about (read-only) ------------------------------------------------------

    @property
    def host(self) -> Host: ...

    @property
    def target(self) -> CleanupTarget: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def scope(self) -> list[int]:
        """The GPUs the cleanup frees (fixed when the plan is published)."""
        ...

    @property
    def service_now(self) -> ServiceProcs | None:
        """What the service's manager said last (its processes, or why there are none)."""
        ...

    @property
    def acted_at(self) -> float | None:
        """When (clock.monotonic) the cleanup last changed something: later samples are taken after it."""
        ...

    @property
    def verification(self) -> Verification | None:
        """The last verification recorded, None before the verify step."""
        ...

    # --- events -------------------------------------------------------------------------------------

    def now(self) -> float: ...

    def emit(self, event: Event) -> None:
        """Publish and audit one event."""
        ...

    def result(self, step: str, status: str, reason: str, started: float) -> StepResult:
        """Emit the step's result, its duration counted from ``started`` (clock.monotonic)."""
        ...

    def signals(self, step: str) -> list[SignalSent]:
        """The signals this step sent (or refused) so far."""
        ...

    def outcomes(self, step: str) -> list[SignalOutcome]:
        """What became of this step's signals so far."""
        ...

    # --- what is there ------------------------------------------------------------------------------

    async def sample(self, after: float | None = None) -> HostSample:
        """The latest sample; one taken after the cleanup's last action (or after ``after``)."""
        ...

    async def scan(self) -> ProcScan: ...

    @property
    def last_scan(self) -> ProcScan | None:
        """The latest process scan (every step scans before it builds its preview)."""
        ...

    def from_scan(self, scan: ProcScan, pid: int, sample: HostSample | None, unit: str | None = None) -> Candidate:
        """A process of the scan as a candidate (enriched from the sample when it lists it)."""
        ...

    async def service_left(self, scan: ProcScan, sample: HostSample | None) -> list[tuple[Candidate, str]]:
        """What is left of the service's processes identified when the cleanup began (and the children they
        forked since), each with why it belongs."""
        ...

    def service_reused(self, scan: ProcScan, sample: HostSample | None) -> list[tuple[Candidate, str]]:
        """Pids of the service's identified processes now another process's, and pids its manager names
        now that it did not when the cleanup began: shown as left alone, never targeted."""
        ...

    @property
    def main(self) -> Key | None:
        """The service's main process as identified when the cleanup began (None: none)."""
        ...

    def is_member(self, c: Candidate) -> bool:
        """One of the service's processes as identified (same pid and start time)."""
        ...

    def consented(self, step: str) -> bool:
        """The operator consented to this step earlier in this cleanup (in a dry run: it was previewed)."""
        ...

    def declined(self, step: str, started: float) -> StepResult:
        """Emit the step's result for a declined consent (a dry run says so)."""
        ...

    def protect_agent(self, scan: ProcScan, sample: HostSample) -> None:
        """Protect the telemetry agent and its ancestors from every signal."""
        ...

    def not_live(self, scan: ProcScan, p: ProcSample) -> str | None:
        """Why a process the sample lists is no longer there to signal, or None when it is."""
        ...

    def from_sample(self, p: ProcSample) -> Candidate: ...

    def ref(self, c: Candidate, reason: str) -> ProcRef: ...

    def refusal(self, c: Candidate) -> str | None:
        """Why ``c`` may never be signalled (protected), or None."""
        ...

    def stuck_state(self, c: Candidate) -> str | None:
        """The /proc state ``c`` was stuck in after a SIGKILL (it is not signalled again), or None."""
        ...

    # --- acting -------------------------------------------------------------------------------------

    def acted(self) -> None:
        """Something was changed on the host now: samples taken before no longer count."""
        ...

    def note_stop_issued(self) -> None:
        """A stop command was issued (a service manager's, not a signal): the time to clean counts from now."""
        ...

    def record_verification(self, v: Verification) -> None:
        """The verification's verdict, on the report (with the times from consent and signal to clean)."""
        ...

    async def ask(self, step: str, action: str, targets: list[tuple[Candidate, str]],
                  spared: list[tuple[Candidate, str]]) -> Confirmed | None:
        """Publish the preview, ask the operator, publish the consent. None when declined."""
        ...

    async def signal(self, confirmed: Confirmed, c: Candidate, sig: signal_mod.Signals) -> str:
        """Send only to a confirmed, still-allowed process whose (pid, start time) still match; its outcome."""
        ...

    async def wait_gone(self, step: str, cands: list[Candidate], signame: str, timeout: float,
                        final: bool) -> list[Candidate]:
        """Poll until each has exited or the deadline; returns those left."""
        ...

    async def terminate(self, confirmed: Confirmed) -> list[Candidate]:
        """SIGTERM, poll for the grace period, SIGKILL the survivors, poll; returns the stuck."""
        ...
