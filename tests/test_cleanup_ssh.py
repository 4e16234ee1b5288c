"""The same cleanup over real SSH on loopback: samples, process scans, pidfile reads and guarded signals
are all requests to the one agent over one SshHost channel to a real sshd; the SSH session and sshd itself
are never signalled, even when they look like GPU holders and are ticked; a connection that drops with a
signal in flight makes its outcome unknown (never resent): the step looks again after the reconnect;
hostile service names reach the remote tools as literal arguments."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kimitui.cleanup import ConsentDecision, PidService, auto_consent
from kimitui.core.events import SignalOutcome, SignalSent, StepPreview
from kimitui.hosts.base import ProcId, SignalResult
from kimitui.hosts.ssh import SshHost
from tests.cleanup_support import SimDir, alive, make_sim, start_time
from tests.sshd import SshServer, start_sshd, until
from tests.test_cleanup import SHORT_VERIFY, Rig, results
from tests.test_cleanup_services import exercise_hostile


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    server = start_sshd(tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimDir]:
    s = make_sim(tmp_path / "sim", gpus=2)
    yield s
    s.teardown()


def ssh_host(server: SshServer) -> SshHost:
    return SshHost(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)])


async def test_cleanup_over_ssh_protects_the_session(sim: SimDir, sshd: SshServer, tmp_path: Path) -> None:
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
        # the session's processes and sshd: protected, refused when ticked, never signalled
        session = {p.pid for p in await host.session_pids()}
        assert sshd.pid in session and session <= set(ex.safety.protected)
        assert all(s.outcome == "refused" for s in rig.of(SignalSent) if s.pid in session | {sshd.pid})
        assert any(s.pid == sshd.pid and s.outcome == "refused" for s in rig.of(SignalSent))
        assert alive(sshd.pid) and sshd.proc.poll() is None
        assert not report.clean and {h.pid for h in report.verification.holders_left} == {sshd.pid}
        (sim.path / "holders" / f"{sshd.pid}.json").unlink()
    finally:
        await rig.close()
        await host.close()


async def test_hostile_service_names_do_nothing_over_ssh(sshd: SshServer, tmp_path: Path) -> None:
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

    async def signal(self, proc: ProcId, sig: int) -> SignalResult:
        if sig != signal.SIGTERM or self.dropped:
            return await super().signal(proc, sig)
        self.dropped = True
        self.server.freeze_connections()
        in_flight = asyncio.ensure_future(super().signal(proc, sig))
        await until(lambda: self.server.unread_bytes() > 0, 5, "the SIGTERM request to reach the frozen server")
        self.server.drop_connections()
        return await in_flight


async def test_a_drop_with_a_signal_in_flight_is_unknown_then_looked_at_again(sim: SimDir, sshd: SshServer,
                                                                            tmp_path: Path) -> None:
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
