"""Connection faults with a real sshd: a dropped connection mid-stream, a peer that stops answering
(keepalive), a server that is down (backoff), a server that never speaks SSH (connect timeout)."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from kimitui.hosts.base import HostError
from kimitui.hosts.ssh import SshHost
from tests.sshd import SshServer, free_port, sshd_server


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


LOOP = "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.05)\n"


async def test_drop_mid_stream_raises_promptly_then_reconnects(host: SshHost, server: SshServer) -> None:
    states: list[str] = []
    host.on_state(lambda s, d: states.append(s))
    lines = 0
    with pytest.raises(HostError, match=f"connection to {host.name} lost") as err:
        async for _ in host.stream(["python3", "-u", "-c", LOOP]):
            lines += 1
            if lines == 3:
                server.drop_connections()
                t_drop = time.monotonic()
    assert time.monotonic() - t_drop < 2.0
    assert "\n" not in str(err.value)
    assert states == ["connecting", "connected", "lost"]
    assert (await host.run(["echo", "back"])).stdout == "back\n"
    assert states[3:] == ["reconnecting", "connected"]
    assert host.connects == 2


async def test_run_on_a_dropped_connection_raises(host: SshHost, server: SshServer) -> None:
    agen = host.stream(["sh", "-c", "echo up; exec sleep 60"])
    assert await agen.__anext__() == "up"
    server.drop_connections()
    with pytest.raises(HostError, match="lost"):
        await agen.__anext__()
    assert (await host.run(["echo", "x"])).stdout == "x\n"


async def test_silent_peer_is_noticed_by_keepalive(server: SshServer) -> None:
    async with make_host(server, keepalive_interval=0.5) as h:
        states: list[tuple[str, str]] = []
        h.on_state(lambda s, d: states.append((s, d)))
        agen = h.stream(["sh", "-c", "echo up; exec sleep 60"])
        assert await agen.__anext__() == "up"
        server.freeze_connections()  # TCP stays open, the server stops answering
        t0 = time.monotonic()
        try:
            with pytest.raises(HostError, match="lost"):
                await agen.__anext__()
            took = time.monotonic() - t0
        finally:
            server.drop_connections()  # SIGKILL also ends stopped processes
        assert took < 0.5 * 2 + 1.0, f"dead peer noticed after {took:.2f}s"
        assert states[-1][0] == "lost" and "keepalive" in states[-1][1]
        assert (await h.run(["echo", "fresh"])).stdout == "fresh\n"


async def test_backoff_between_failed_attempts() -> None:
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    port = free_port()  # nothing listens there
    h = SshHost(f"root@127.0.0.1:{port}", known_hosts="/dev/null", attempts_per_call=4, sleep=fake_sleep)
    states: list[str] = []
    h.on_state(lambda s, d: states.append(s))
    with pytest.raises(HostError, match=f"cannot connect to root@127.0.0.1:{port}") as err:
        await h.run(["true"])
    assert "\n" not in str(err.value)
    assert slept == [0.5, 1.0, 2.0]
    assert states == ["connecting", "reconnecting", "reconnecting", "reconnecting", "failed"]
    with pytest.raises(HostError):
        await h.run(["true"])  # the next call goes on backing off, capped at 5 s
    assert slept == [0.5, 1.0, 2.0, 5.0, 5.0, 5.0, 5.0]
    assert h.backoff_log == slept


async def test_connect_timeout_when_the_server_never_speaks() -> None:
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(4)  # the kernel completes the handshake; nobody ever sends a banner
        port = mute.getsockname()[1]
        h = SshHost(f"127.0.0.1:{port}", known_hosts="/dev/null", connect_timeout=0.5, attempts_per_call=1)
        t0 = time.monotonic()
        with pytest.raises(HostError, match="cannot connect"):
            await h.run(["true"])
        assert time.monotonic() - t0 < 3
