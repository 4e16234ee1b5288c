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
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kimitui.core.events import ConnectionState
from kimitui.hosts.base import HostError, HostFatal, OutcomeUnknown, ProcId
from kimitui.hosts.ssh import SshHost
from kimitui.hosts.telemetry import TelemetrySource
from tests.sshd import SshServer, free_port, sshd_server, start_time, until


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
        await until(counted.exists, 10, "the counter to start")
        target = ProcId(proc.pid, start_time(proc.pid))
        states: list[str] = []
        host.on_state(lambda s, d: states.append(s))
        assert (await host.signal(target, signal.SIGUSR1)).outcome == "sent"
        await until(lambda: counted.read_text().count("usr1") == 1, 5, "the first signal")
        server.freeze_connections()  # the request below is written but cannot get through
        in_flight = asyncio.ensure_future(host.signal(target, signal.SIGUSR1))
        await until(lambda: server.unread_bytes() > 0, 5, "the request to reach the frozen server")
        assert not in_flight.done()
        server.drop_connections()
        t0 = time.monotonic()
        with pytest.raises(OutcomeUnknown, match=r"signal request .* in flight") as err:
            await in_flight
        assert time.monotonic() - t0 < 2.0 and "outcome is unknown" in str(err.value)
        assert states[-1] == "lost"
        # the next request reconnects (a new agent); the lost one was not sent again
        assert (await host.request("ping"))["agent_pid"]
        assert host.link.connects == 2 and states[-2:] == ["reconnecting", "connected"]
        # a resent request would have gone out on the new channel before anything else, and the agent answers
        # signal requests in order; a pending SIGUSR1 is handled before a SIGUSR2 (lower numbers first)
        assert (await host.signal(target, signal.SIGUSR2)).outcome == "sent"
        await until(lambda: "usr2" in counted.read_text(), 5, "the marker signal")
        assert counted.read_text().count("usr1") == 1
    finally:
        proc.kill()
        proc.wait()


async def test_silent_peer_is_noticed_by_keepalive(server: SshServer) -> None:
    async with make_host(server, keepalive_interval=0.5) as h:
        assert (await h.run(["echo", "up"])).stdout == "up\n"
        server.freeze_connections()  # TCP stays open, the server stops answering
        t0 = time.monotonic()
        try:
            with pytest.raises(OutcomeUnknown, match="keepalive"):
                await h.run(["sleep", "30"])
            took = time.monotonic() - t0
        finally:
            server.drop_connections()  # SIGKILL also ends stopped processes
        # lost after two unanswered intervals (keepalive_count_max 1): never sooner than one, and well before
        # the 30 s command could end, with room for a busy machine's late timers
        assert 0.5 <= took < 0.5 * 10, f"dead peer noticed after {took:.2f}s"
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
    reconnecting = 0
    t0 = time.monotonic()

    async def requests() -> int:
        failed = 0
        while time.monotonic() - t0 < 1.5:
            with contextlib.suppress(HostError):
                await host.stat([1])
            failed += 1
        return failed

    pester = asyncio.ensure_future(requests())
    try:
        async for ev in source.events():
            if isinstance(ev, ConnectionState) and ev.state == "reconnecting":
                reconnecting += 1
            if time.monotonic() - t0 > 1.5:
                break
        failed_requests = await pester
    finally:
        source.stop()
        await host.close()
        dead.close()
    # every attempt, whoever asked, is one connection to the host and waits its turn in the one backoff
    assert dead.accepted == host.link.attempts
    assert host.link.backoff_log[:3] == [0.05, 0.1, 0.2] and set(host.link.backoff_log[3:]) <= {0.2}
    assert len(host.link.backoff_log) == host.link.attempts - 1
    assert host.link.attempts <= 1.5 / 0.2 + 4  # not one per caller: telemetry and requests share them
    assert reconnecting >= 3 and failed_requests >= 3


async def test_connect_timeout_when_the_server_never_speaks() -> None:
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(4)  # the kernel completes the handshake; nobody ever sends a banner
        port = mute.getsockname()[1]
        h = SshHost(f"127.0.0.1:{port}", known_hosts="/dev/null", connect_timeout=0.5)
        t0 = time.monotonic()
        with pytest.raises(HostError, match="cannot connect"):
            await h.run(["true"])
        assert time.monotonic() - t0 < 3


async def test_a_name_that_does_not_resolve_fails_at_once_without_retry() -> None:
    h = SshHost("gpu-box.does-not-exist.invalid", known_hosts="/dev/null")
    t0 = time.monotonic()
    with pytest.raises(HostFatal, match=r"cannot resolve gpu-box\.does-not-exist\.invalid") as err:
        await h.run(["true"])
    assert "\n" not in str(err.value) and time.monotonic() - t0 < 2.0
    events = [ev async for ev in TelemetrySource(h).events()]
    assert [e.state for e in events if isinstance(e, ConnectionState)] == ["connecting", "failed"]
    assert h.link.attempts == 1 and h.link.backoff_log == []
