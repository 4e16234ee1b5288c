"""The cleanup's test rig: the real agent streaming samples of a simulated driver's folder into a SampleFeed,
a recorded session and an audit log, and the deadlines the cleanup tests run under. The ``sim`` and ``rig``
fixtures (tests/conftest.py) make one per test."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kimitui.cleanup import AuditLog, CleanupExecutor, CleanupTarget, Deadlines, PidService, SampleFeed
from kimitui.core.events import HostSample, SignalSent, StepResult
from kimitui.core.runfile import RunWriter
from kimitui.core.session import Session
from kimitui.hosts.local import LocalHost
from kimitui.hosts.telemetry import TelemetrySource
from tests.cleanup_support import SimDir
from tests.waiting import DEADLINE_S, until

FAST = Deadlines(graceful_s=1.0, term_grace_s=0.5, kill_s=2.0, verify_s=3.0, sample_s=10.0, poll_s=0.01)
SHORT_VERIFY = Deadlines(graceful_s=0.5, term_grace_s=0.3, kill_s=0.5, verify_s=0.5, sample_s=10.0, poll_s=0.01)
"""For tests whose GPUs must end NOT clean: the verify deadline is what they wait for."""


async def sample_where(feed: SampleFeed, pred: Callable[[HostSample], bool], what: str) -> HostSample:
    """The first sample, the latest one on, that satisfies PRED: each poll of tests/waiting.py's ``until`` waits
    for the feed's next sample."""
    after: float | None = None

    async def next_one() -> HostSample | None:
        nonlocal after
        s = await feed.latest(after=after, timeout=DEADLINE_S)
        after = time.monotonic()
        return s if pred(s) else None

    return await until(next_one, what)


class Rig:
    """The agent streaming samples of the sim dir into a SampleFeed, a recorded session, an audit log."""

    def __init__(self, sim: SimDir, host: LocalHost, tmp: Path) -> None:
        self.sim, self.host = sim, host
        self.source = TelemetrySource(host, interval=0.1, sim_dir=str(sim.path), dev_prefix=sim.dev_prefix,
                                      scan_interval=0.1)
        self.feed = SampleFeed()
        self.run_path = tmp / "run.jsonl"
        self.session = Session(RunWriter(self.run_path, host=host.name))
        self.audit_path = tmp / "audit.log"
        self.audit = AuditLog(self.audit_path)
        self.events: list[object] = []
        self.session.subscribe(self.events.append)

    async def start(self) -> None:
        self.feed.follow(self.source.events(), publish=self.session.publish)
        await self.feed.latest(timeout=DEADLINE_S)

    async def settled(self, pids: set[int]) -> HostSample:
        """A sample in which the agent sees every one of these pids."""
        return await sample_where(self.feed, lambda s: pids <= {p.pid for p in s.procs}, f"the agent to see {pids}")

    def executor(self, consent: object, service: PidService | None = None, deadlines: Deadlines = FAST,
                 **kw: object) -> CleanupExecutor:
        target = CleanupTarget(host="test", service=service, deadlines=deadlines, operator="tester", **kw)  # type: ignore[arg-type]
        return CleanupExecutor(self.host, target, self.feed, consent, publish=self.session.publish,  # type: ignore[arg-type]
                               audit=self.audit)

    async def close(self) -> None:
        self.source.stop()
        await self.feed.stop()
        self.session.close()
        self.audit.close()
        await self.host.close()

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def signals(self, pid: int) -> list[SignalSent]:
        return [e for e in self.of(SignalSent) if e.pid == pid]


def results(r: Rig) -> dict[str, StepResult]:
    return {e.step: e for e in r.of(StepResult)}
