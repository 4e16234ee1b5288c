"""The same cleanup over real SSH on loopback: samples, process scans, pidfile reads and guarded signals
are all requests to the one agent over one SshHost channel to a real sshd; the SSH session and sshd itself
are never signalled, even when they look like GPU holders and are ticked; a connection that drops with a
signal in flight makes its outcome unknown (never resent): the step looks again after the reconnect;
hostile service names reach the remote tools as literal arguments."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from kimitui.cleanup import ConsentDecision, PidService, auto_consent
from kimitui.core.describe import describe
from kimitui.core.events import SignalLate, SignalOutcome, SignalSent, StepPreview, StepResult
from kimitui.hosts.base import ProcId, SignalResult
from kimitui.hosts.ssh import SshHost
from tests.cleanup_rig import SHORT_VERIFY, Rig, results
from tests.cleanup_support import SimDir, alive, start_time
from tests.sshd import SshServer, free_port, start_sshd
from tests.support import exercise_hostile
from tests.waiting import until


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    server = start_sshd(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def ssh_host(server: SshServer) -> SshHost:
    return SshHost(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)])


async def test_cleanup_over_ssh_protects_the_session(sim: SimDir, sshd: SshServer, tmp_path: Path) -> None:
    """Over real SSH the escalation ends the service and its stuck worker while the SSH server and the session the
    cleanup runs through are never signalled, even ticked and shown holding GPU memory, and the monitor left
    unticked lives on."""
    host = ssh_host(sshd)
    main = sim.start_service(n=2, ignore=1)
    workers = sorted(sim.holder_pids())
    monitor = sim.start_ready("monitor")
    rig = Rig(sim, host, tmp_path)  # type: ignore[arg-type]
    await rig.start()
    try:
        # make the listening sshd look like it holds GPU memory: it must still never be signalled
        (sim.path / "holders" / f"{sshd.pid}.json").write_text(json.dumps(
            {"pid": sshd.pid, "start_time": start_time(sshd.pid), "mem_mib": {"1": 1000}}))
        await rig.settled({*workers, monitor, sshd.pid})

        async def tick_all(preview: StepPreview) -> ConsentDecision:
            return ConsentDecision(True, [r.pid for r in preview.targets + preview.spared
                                          if r.pid != monitor], "tester")

        ex = rig.executor(tick_all, PidService(pidfile=str(sim.pidfile)), deadlines=SHORT_VERIFY)
        ex.target.deadlines.graceful_s = 1.0
        report = await ex.run()
        res = results(rig)
        assert res["graceful"].status == "done" and "1 of 3" in res["graceful"].reason
        assert res["process"].status == "done", res["process"].reason
        assert not any(alive(p) for p in [main, *workers]) and alive(monitor)
        stuck = next(o.pid for o in rig.of(SignalOutcome) if o.step == "graceful" and o.outcome == "survived")
        assert [(s.signal, s.outcome) for s in rig.signals(stuck)] == [("SIGTERM", "sent"), ("SIGKILL", "sent")]
        # the agent's ancestors (the login's shell and sshd processes) and sshd: protected, refused when ticked,
        # never signalled
        ancestors = {p.pid for p in await host.ancestor_pids()}
        assert sshd.pid in ancestors and ancestors <= set(ex.safety.protected)
        assert all(s.outcome == "refused" for s in rig.of(SignalSent) if s.pid in ancestors | {sshd.pid})
        assert any(s.pid == sshd.pid and s.outcome == "refused" for s in rig.of(SignalSent))
        assert alive(sshd.pid) and sshd.proc.poll() is None
        assert not report.clean and {h.pid for h in report.verification.holders_left} == {sshd.pid}
        (sim.path / "holders" / f"{sshd.pid}.json").unlink()
    finally:
        await rig.close()
        await host.close()


async def test_hostile_service_names_do_nothing_over_ssh(sshd: SshServer, tmp_path: Path) -> None:
    """Over SSH, hostile service names run nothing on the host: each reaches its tool as one literal argument."""
    host = ssh_host(sshd)
    marker = tmp_path / "pwned"
    try:
        said = await exercise_hostile(host, marker, names=4)
        assert not marker.exists()
        assert any("systemd" in s for s in said) and len(said) >= 4 * 9
    finally:
        await host.close()


class DropDuringFirstTerm(SshHost):
    """A real SSH host whose connection is cut while the first SIGTERM request is on its way: the sshd
    processes are stopped before it is written and killed after, so it never reaches the agent."""

    def __init__(self, server: SshServer) -> None:
        super().__init__(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)])
        self.server = server
        self.dropped = False

    async def signal(self, proc: ProcId, sig: int, companions: Sequence[ProcId] = ()) -> SignalResult:
        if sig != signal.SIGTERM or self.dropped:
            return await super().signal(proc, sig, companions)
        self.dropped = True
        self.server.freeze_connections()
        in_flight = asyncio.ensure_future(super().signal(proc, sig, companions))
        await until(lambda: self.server.unread_bytes() > 0, "the SIGTERM request to reach the frozen server")
        self.server.drop_connections()
        return await in_flight


async def test_a_drop_with_a_signal_in_flight_is_unknown_then_looked_at_again(sim: SimDir, sshd: SshServer,
                                                                            tmp_path: Path) -> None:
    """A SIGTERM in flight when the connection drops is recorded as unknown and never sent again; after the reconnect
    the process is looked at again, and only then, found alive past the grace, is it sent SIGKILL."""
    host = DropDuringFirstTerm(sshd)
    holder = sim.start_holder(0, 20_000)
    rig = Rig(sim, host, tmp_path)  # type: ignore[arg-type]
    await rig.start()
    try:
        await rig.settled({holder})
        ex = rig.executor(auto_consent(["others", "device"], "tester"))  # no service: the holder is an other
        ex.target.deadlines.term_grace_s = 0.5
        report = await ex.run()
        sent = [(s.signal, s.outcome) for s in rig.signals(holder)]
        assert sent == [("SIGTERM", "unknown"), ("SIGKILL", "sent")], sent  # the SIGTERM was not resent
        unknown = rig.signals(holder)[0]
        assert "in flight" in unknown.detail and "outcome is unknown" in unknown.detail
        outs = [(o.signal, o.outcome) for o in rig.of(SignalOutcome) if o.pid == holder]
        assert outs == [("SIGTERM", "survived"), ("SIGKILL", "exited")]  # seen, after the reconnect
        res = results(rig)["others"]
        assert res.status == "done" and "outcome unknown" in res.reason and "looked again" in res.reason
        assert report.clean and not alive(holder) and host.link.connects == 2
    finally:
        await rig.close()


def resume(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


class DropAndStayDown(SshHost):
    """The connection is cut with the first SIGTERM in flight (it never reaches the agent) and the host stays
    out of reach (its address refuses connections: a port nothing listens on) until ``back()``."""

    def __init__(self, server: SshServer) -> None:
        super().__init__(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)],
                         connect_timeout=2.0)
        self.server = server
        self.backoff = (0.05,)
        self.dropped = False
        self.reachable = self.target

    async def signal(self, proc: ProcId, sig: int, companions: Sequence[ProcId] = ()) -> SignalResult:
        if sig != signal.SIGTERM or self.dropped:
            return await super().signal(proc, sig, companions)
        self.dropped = True
        self.server.freeze_connections()
        in_flight = asyncio.ensure_future(super().signal(proc, sig, companions))
        await until(lambda: self.server.unread_bytes() > 0, "the SIGTERM request to reach the frozen server")
        self.target = dataclasses.replace(self.reachable, port=free_port())  # down: every reconnect is refused
        self.server.drop_connections()
        return await in_flight

    def back(self) -> None:
        self.target = self.reachable


async def test_no_sigkill_is_sent_blind_and_what_the_host_shows_after_the_cleanup_is_reported(
        sim: SimDir, sshd: SshServer, tmp_path: Path) -> None:
    """While the host cannot be reached no SIGKILL is sent blind after an unknown SIGTERM: the step fails saying the
    outcome is unknown, and what the host shows once it is back (the process alive) is reported as late news,
    nothing more sent."""
    host = DropAndStayDown(sshd)
    holder = sim.start_holder(0, 20_000)
    rig = Rig(sim, host, tmp_path)  # type: ignore[arg-type]
    await rig.start()
    try:
        await rig.settled({holder})
        # no service named: the holder is one of the others. The host is back only once the step has
        # reported (a causal trigger, not a timer)
        rig.session.subscribe(lambda ev: host.back() if isinstance(ev, StepResult) and ev.step == "others" else None)
        ex = rig.executor(auto_consent(["others"], "tester"))
        ex.target.deadlines.term_grace_s = 0.3
        ex.target.deadlines.reconnect_s = 30.0
        await ex.run(("others",))
        assert [(s.signal, s.outcome) for s in rig.signals(holder)] == [("SIGTERM", "unknown")]  # no SIGKILL
        outs = [(o.signal, o.outcome) for o in rig.of(SignalOutcome) if o.pid == holder]
        assert outs == [("SIGTERM", "unknown")]
        res = results(rig)["others"]
        assert res.status == "failed" and "outcome unknown" in res.reason
        assert alive(holder)  # the SIGTERM never reached it, and nothing else was tried
        late = [e for e in rig.of(SignalLate) if e.pid == holder]
        assert [(e.how, e.outcome, e.after_end) for e in late] == [("look", "alive", True)]
        line = describe(late[0])
        assert line is not None and "after the cleanup ended" in line and "nothing more was sent" in line
    finally:
        host.back()
        await rig.close()


class SlowTermReply(SshHost):
    """The first SIGTERM's reply does not come within the signal deadline (the server frozen, the connection
    kept): the request is given up as unknown, then the server resumes and the agent's reply comes late."""

    def __init__(self, server: SshServer) -> None:
        super().__init__(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)],
                         keepalive_interval=30)
        self.server = server
        self.slowed = False

    async def signal(self, proc: ProcId, sig: int, companions: Sequence[ProcId] = ()) -> SignalResult:
        if sig != signal.SIGTERM or self.slowed:
            return await super().signal(proc, sig, companions)
        self.slowed = True
        frozen = self.server.freeze_connections()
        self.signal_timeout_s = 0.3
        try:
            return await super().signal(proc, sig, companions)
        finally:
            self.signal_timeout_s = type(self).signal_timeout_s
            resume(frozen)  # the request was written: the agent now reads it, signals, and replies late


async def test_a_reply_that_comes_after_the_signal_was_given_up_is_reported_as_delivered_late(
        sim: SimDir, sshd: SshServer, tmp_path: Path) -> None:
    """A signal reply that comes after its wait gave up is recorded and said as DELIVERED LATE (in the run too, so a
    replay says it), and the step goes on from what the host then shows."""
    host = SlowTermReply(sshd)
    holder = sim.start_holder(0, 20_000)
    rig = Rig(sim, host, tmp_path)  # type: ignore[arg-type]
    await rig.start()
    try:
        await rig.settled({holder})
        ex = rig.executor(auto_consent(["others"], "tester"))  # no service named: the holder is one of the others
        await ex.run(("others",))
        assert [(s.signal, s.outcome) for s in rig.signals(holder)] == [("SIGTERM", "unknown")]
        assert "no answer to the signal request" in rig.signals(holder)[0].detail
        late = [e for e in rig.of(SignalLate) if e.pid == holder]
        assert [(e.how, e.outcome, e.signal) for e in late] == [("reply", "sent", "SIGTERM")]
        assert late[0].after_s >= 0.3 and not late[0].after_end
        assert "DELIVERED LATE" in (describe(late[0]) or "")
        outs = [(o.signal, o.outcome) for o in rig.of(SignalOutcome) if o.pid == holder]
        assert outs == [("SIGTERM", "exited")] and not alive(holder)
        # recorded in the run: a replay says the same
        assert '"type":"signal_late"' in rig.run_path.read_text()
    finally:
        await rig.close()


def test_late_news_is_worded_as_late_and_says_when() -> None:
    """Late news is worded as late, and says whether it came after the cleanup ended."""
    def late(**kw: object) -> str:
        line = describe(SignalLate(t=1.0, step="process", pid=7, start_time=3, signal="SIGTERM", after_s=16.5, **kw))
        assert line is not None
        return line

    assert late(how="reply", outcome="sent", after_end=True) == (
        "process: SIGTERM -> pid 7: DELIVERED LATE: the agent's reply came 16.50s after the request, after the "
        "cleanup ended")
    assert "not delivered (gone)" in late(how="reply", outcome="gone", detail="")
    assert "after its wait had given up" in late(how="reply", outcome="sent")
    assert "delivered late, or it exited on its own" in late(how="look", outcome="exited", after_end=True)
