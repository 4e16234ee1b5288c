"""Connection faults with a real sshd: a drop with requests in flight (outcome unknown, never resent), a
peer that stops answering (keepalive), a server that is down (one attempt per call, backoff in one
layer), a server that never speaks SSH (connect timeout), a name that does not resolve (final at once)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kimitui.core.events import ConnectionState
from kimitui.hosts.base import HostError, HostFatal, OutcomeUnknown, ProcId
from kimitui.hosts.ssh import SshHost
from kimitui.hosts.telemetry import TelemetrySource
from tests.sshd import SshServer, free_port, sshd_server, start_time
from tests.waiting import DEADLINE_S, until


@pytest.fixture(scope="module")
def server() -> Iterator[SshServer]:
    with sshd_server() as s:
        yield s


def make_host(server: SshServer, **kw: object) -> SshHost:
    return SshHost(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)],
                   config_paths=[], close_grace=0.3, **kw)  # type: ignore[arg-type]


@pytest.fixture
async def host(server: SshServer) -> AsyncIterator[SshHost]:
    h = make_host(server)
    try:
        yield h
    finally:
        await h.close()


COUNTER = """\
import os, signal, sys, time
path = sys.argv[1]
def count(signum, frame):
    with open(path, "a") as fh:
        fh.write("usr1\\n" if signum == signal.SIGUSR1 else "usr2\\n")
signal.signal(signal.SIGUSR1, count)
signal.signal(signal.SIGUSR2, count)
open(path, "w").close()
while True:
    signal.pause()
"""


async def test_a_signal_in_flight_when_the_connection_drops_is_unknown_and_never_resent(
        host: SshHost, server: SshServer, tmp_path: Path) -> None:
    counted = tmp_path / "usr1"
    proc = subprocess.Popen([sys.executable, "-c", COUNTER, str(counted)])
    try:
        await until(counted.exists, "the counter to start")
        target = ProcId(proc.pid, start_time(proc.pid))
        states: list[str] = []
        host.on_state(lambda s, d: states.append(s))
        assert (await host.signal(target, signal.SIGUSR1)).outcome == "sent"
        await until(lambda: counted.read_text().count("usr1") == 1, "the first signal")
        server.freeze_connections()  # the request below is written but cannot get through
        in_flight = asyncio.ensure_future(host.signal(target, signal.SIGUSR1))
        await until(lambda: server.unread_bytes() > 0, "the request to reach the frozen server")
        assert not in_flight.done()
        server.drop_connections()
        with pytest.raises(OutcomeUnknown, match=r"signal request .* in flight") as err:
            await asyncio.wait_for(in_flight, DEADLINE_S)  # the drop ends it; no answer ever comes
        assert "outcome is unknown" in str(err.value)
        assert states[-1] == "lost"
        # the next request reconnects (a new agent); the lost one was not sent again
        assert (await host.request("ping"))["agent_pid"]
        assert host.link.connects == 2 and states[-2:] == ["reconnecting", "connected"]
        # a resent request would have gone out on the new channel before anything else, and the agent answers
        # signal requests in order; a pending SIGUSR1 is handled before a SIGUSR2 (lower numbers first)
        assert (await host.signal(target, signal.SIGUSR2)).outcome == "sent"
        await until(lambda: "usr2" in counted.read_text(), "the marker signal")
        assert counted.read_text().count("usr1") == 1
    finally:
        proc.kill()
        proc.wait()


async def test_silent_peer_is_noticed_by_keepalive(server: SshServer) -> None:
    async with make_host(server, keepalive_interval=0.5) as h:
        assert (await h.run(["echo", "up"])).stdout == "up\n"
        server.freeze_connections()  # TCP stays open, the server stops answering
        try:
            # nothing comes back from a frozen server: only the keepalive ends the wait (the command would
            # run an hour, and the deadline only stops a broken test from hanging)
            with pytest.raises(OutcomeUnknown, match="keepalive"):
                await asyncio.wait_for(h.run(["sleep", "3600"]), DEADLINE_S)
        finally:
            server.drop_connections()  # SIGKILL also ends stopped processes
        assert h.link.state == "lost"
        assert (await h.run(["echo", "fresh"])).stdout == "fresh\n"


async def test_one_attempt_per_call_and_one_backoff() -> None:
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    port = free_port()  # nothing listens there
    h = SshHost(f"root@127.0.0.1:{port}", known_hosts="/dev/null", sleep=fake_sleep)
    states: list[str] = []
    h.on_state(lambda s, d: states.append(s))
    for _ in range(6):
        with pytest.raises(HostError, match=f"cannot connect to root@127.0.0.1:{port}") as err:
            await h.run(["true"])
        assert "\n" not in str(err.value)
    assert h.link.attempts == 6 and slept == [0.5, 1.0, 2.0, 5.0, 5.0]
    assert h.link.backoff_log == slept
    assert states == ["connecting"] + ["reconnecting"] * 5


class DeadHost:
    """A TCP port that accepts and closes every connection at once (a host whose sshd crashes on each
    connection), counting the attempts that reach it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.accepted += 1
                conn.close()

    def close(self) -> None:
        self.sock.close()


async def test_a_dead_host_gets_one_attempt_per_cycle_from_telemetry_and_requests_together() -> None:
    dead = DeadHost()
    host = SshHost(f"root@127.0.0.1:{dead.port}", known_hosts="/dev/null")
    host.backoff = (0.05, 0.1, 0.2)
    source = TelemetrySource(host)
    reconnecting = failed_requests = 0
    enough = asyncio.Event()  # both callers have failed a few times over

    async def requests() -> None:
        nonlocal failed_requests
        while not enough.is_set():
            with contextlib.suppress(HostError):
                await host.stat([1])
            failed_requests += 1

    async def telemetry() -> None:
        nonlocal reconnecting
        async for ev in source.events():
            if isinstance(ev, ConnectionState) and ev.state == "reconnecting":
                reconnecting += 1
            if reconnecting >= 4 and failed_requests >= 3:
                enough.set()
                return

    pester = asyncio.ensure_future(requests())
    try:
        await asyncio.wait_for(telemetry(), DEADLINE_S)
        await pester
    finally:
        pester.cancel()
        source.stop()
        await host.close()
        dead.close()
    # every attempt, whoever asked, is one connection to the host and waits its turn in the one backoff: not
    # one backoff per caller (two callers with a schedule each would log 0.05, 0.05, 0.1, 0.1 ...)
    assert dead.accepted == host.link.attempts
    assert host.link.backoff_log[:3] == [0.05, 0.1, 0.2] and set(host.link.backoff_log[3:]) <= {0.2}
    assert len(host.link.backoff_log) == host.link.attempts - 1


async def test_connect_timeout_when_the_server_never_speaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that accepts and never speaks: the connect gives up after the host's connect timeout (handed
    to asyncssh as given) with a "cannot connect" error, rather than waiting on."""
    import asyncssh

    asked: list[float | None] = []
    connect = asyncssh.connect

    async def recording_connect(*args: object, **kwargs: object) -> object:
        asked.append(kwargs.get("connect_timeout"))  # type: ignore[arg-type]
        return await connect(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncssh, "connect", recording_connect)
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(4)  # the kernel completes the handshake; nobody ever sends a banner
        port = mute.getsockname()[1]
        h = SshHost(f"127.0.0.1:{port}", known_hosts="/dev/null", connect_timeout=0.5)
        with pytest.raises(HostError, match=r"cannot connect .*TimeoutError"):
            await asyncio.wait_for(h.run(["true"]), DEADLINE_S)
    assert asked == [0.5]


async def test_a_name_that_does_not_resolve_fails_at_once_without_retry() -> None:
    h = SshHost("gpu-box.does-not-exist.invalid", known_hosts="/dev/null")
    with pytest.raises(HostFatal, match=r"cannot resolve gpu-box\.does-not-exist\.invalid") as err:
        await h.run(["true"])
    assert "\n" not in str(err.value)  # fatal at once: one attempt, no backoff (below)
    events = [ev async for ev in TelemetrySource(h).events()]
    assert [e.state for e in events if isinstance(e, ConnectionState)] == ["connecting", "failed"]
    assert h.link.attempts == 1 and h.link.backoff_log == []
