"""SshHost against a real OpenSSH server on loopback (tests/sshd.py): commands, streams, files, signals,
host keys, ~/.ssh/config aliases, ProxyJump and the SSH agent."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kimitui.hosts.base import HostError, ProcId
from kimitui.hosts.ssh import SshHost
from tests.sshd import SshServer, alive, require_sshd, sshd_server, start_time, until


@pytest.fixture(scope="module")
def server() -> Iterator[SshServer]:
    with sshd_server() as s:
        yield s


@pytest.fixture
async def host(server: SshServer) -> AsyncIterator[SshHost]:
    h = SshHost(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)],
                config_paths=[], close_grace=0.3)
    try:
        yield h
    finally:
        await h.close()


def accepted_logins(server: SshServer) -> int:
    return server.log().count("Accepted publickey")


def test_sshd_is_installed() -> None:
    require_sshd()  # fails (never skips) with the install hint when OpenSSH is missing


async def test_run_output_and_exit_status(host: SshHost) -> None:
    res = await host.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.rc, res.stdout, res.stderr) == (3, "out\n", "err\n")  # the pid marker line is not shown
    ok = await host.run(["echo", "hello"])
    assert ok.ok and ok.stdout == "hello\n"
    killed = await host.run(["sh", "-c", "kill -KILL $$"])
    assert killed.rc == -signal.SIGKILL
    with pytest.raises(HostError, match="command not found: no-such-command-kimitui"):
        await host.run(["no-such-command-kimitui", "x"])


async def test_shell_metacharacters_arrive_literally(host: SshHost, tmp_path: Path) -> None:
    canary = tmp_path / f"pwned-{uuid.uuid4().hex}"
    args = [f"x; touch {canary}", f"$(touch {canary})", f"`touch {canary}`", "a'b", 'q"q', "back\\slash",
            "*", "", "two\nlines", "--flag", "$HOME", f"| touch {canary}", "&& id"]
    res = await host.run(["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *args])
    import json

    assert json.loads(res.stdout) == args
    assert not canary.exists()


async def test_stdin_and_eof_reach_the_remote(host: SshHost) -> None:
    res = await host.run(["cat"], stdin=b"hello\x00world\n")  # cat ends only on EOF
    assert res.stdout == "hello\x00world\n"
    res = await host.run(["wc", "-c"], stdin=b"x" * 300_000)
    assert res.stdout.strip() == "300000"
    assert (await host.run(["cat"])).stdout == ""  # no stdin: EOF at once, no hang


async def test_stream_lines_arrive_incrementally(host: SshHost, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    code = ("import os, sys, time\n"
            "print('first', flush=True)\n"
            f"while not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
            "print('second', flush=True)\n")
    got: list[str] = []
    async for line in host.stream(["python3", "-c", code]):
        got.append(line)
        if line == "first":
            assert not gate.exists()
            gate.touch()  # the remote prints 'second' only after we saw 'first'
    assert got == ["first", "second"]


async def test_closing_stream_sends_eof_and_the_remote_exits(host: SshHost, tmp_path: Path) -> None:
    done = tmp_path / "saw-eof"
    code = ("import os, sys\n"
            "print(os.getpid(), flush=True)\n"
            "sys.stdin.read()\n"
            f"open({str(done)!r}, 'w').write('eof')\n")
    agen = host.stream(["python3", "-c", code], stdin=b"some input\n")
    pid = int(await agen.__anext__())
    assert alive(pid)
    await agen.aclose()
    await until(lambda: not alive(pid), 5, "remote process to exit after EOF")
    assert done.read_text() == "eof"  # it ended because its stdin closed, not by a kill


async def test_closing_stream_kills_a_command_that_ignores_stdin(host: SshHost) -> None:
    agen = host.stream(["sh", "-c", "echo $$; exec sleep 60"])
    pid = int(await agen.__anext__())
    t0 = time.monotonic()
    await agen.aclose()
    await until(lambda: not alive(pid), 5, "sleep to be killed")
    assert time.monotonic() - t0 < 3


async def test_run_timeout_kills_the_remote_command(host: SshHost, server: SshServer) -> None:
    token = f"kimitui-timeout-{uuid.uuid4().hex}"
    code = f"import time\nprint('started', flush=True)\ntime.sleep(60)  # {token}"
    t0 = time.monotonic()
    with pytest.raises(HostError, match=r"timed out after 1\.0s") as err:
        await host.run(["python3", "-c", code], timeout=1.0)
    assert "\n" not in str(err.value)
    assert time.monotonic() - t0 < 5
    await until(lambda: not server.find_sessions(token), 5, "timed-out command to be killed")
    assert (await host.run(["echo", "still usable"])).stdout == "still usable\n"
    # and while it runs, the same token is visible: the search above is not vacuous
    agen = host.stream(["python3", "-c", code])
    assert await agen.__anext__() == "started"
    assert server.find_sessions(token)
    await agen.aclose()
    await until(lambda: not server.find_sessions(token), 5, "stream command to be killed")


async def test_read_file(host: SshHost, tmp_path: Path) -> None:
    f = tmp_path / "odd name; $(id) 'q'.bin"
    data = bytes(range(256)) * 3 + b"no newline"
    f.write_bytes(data)
    assert await host.read_file(str(f)) == data
    assert (await host.read_file("/proc/self/stat")).startswith(b"")
    with pytest.raises(FileNotFoundError):
        await host.read_file(str(tmp_path / "absent"))


async def test_signal_checks_start_time(host: SshHost) -> None:
    agen = host.stream(["sh", "-c", "echo $$; exec sleep 60"])
    try:
        pid = int(await agen.__anext__())
        start = start_time(pid)
        res = await host.signal(ProcId(pid, start + 1), signal.SIGTERM)
        assert res.outcome == "mismatch"
        assert alive(pid)
        res = await host.signal(ProcId(pid, start), signal.SIGTERM)
        assert res.outcome == "sent"
        await until(lambda: not alive(pid), 5, "signalled process to exit")
        assert (await host.signal(ProcId(pid, start), signal.SIGTERM)).outcome == "gone"
    finally:
        await agen.aclose()


async def test_no_python3_is_one_clear_line(server: SshServer) -> None:
    async with SshHost(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)],
                       config_paths=[], python="python3-not-installed") as h:
        with pytest.raises(HostError, match="no python3 on host") as err:
            await h.signal(ProcId(1, 1), signal.SIGTERM)
        assert "\n" not in str(err.value)


async def test_session_pids_are_this_connections_sshd(host: SshHost, server: SshServer) -> None:
    procs = await host.session_pids()
    assert procs[0].comm == "sshd"
    assert server.pid in [p.pid for p in procs]  # the listening sshd is protected too
    for p in procs:
        assert start_time(p.pid) == p.start_time
    assert procs[0].pid in server.connection_pids()


async def test_concurrent_calls_share_one_connection(host: SshHost, server: SshServer) -> None:
    before = accepted_logins(server)
    results = await asyncio.gather(*(host.run(["echo", str(i)]) for i in range(12)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
    assert host.connects == 1
    assert accepted_logins(server) == before + 1


async def test_unknown_host_key_is_refused_with_its_fingerprint(server: SshServer, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    fp = subprocess.run(["ssh-keygen", "-lf", str(server.host_key.with_suffix(".pub"))], capture_output=True,
                        text=True, check=True).stdout.split()[1]
    assert fp.startswith("SHA256:")
    h = SshHost(server.target, known_hosts=str(empty), client_keys=[str(server.client_key)])
    states: list[tuple[str, str]] = []
    h.on_state(lambda s, d: states.append((s, d)))
    with pytest.raises(HostError) as err:
        await h.run(["true"])
    msg = str(err.value)
    assert fp in msg and "--accept-new-host-key" in msg and "\n" not in msg
    assert states[-1][0] == "failed" and h.backoff_log == []  # no retry on a key problem
    assert empty.read_text() == ""


async def test_accept_new_host_key_appends_it(server: SshServer, tmp_path: Path) -> None:
    kh = tmp_path / "sub" / "known_hosts"  # neither the file nor its folder exists yet
    async with SshHost(server.target, known_hosts=str(kh), accept_new_host_key=True,
                       client_keys=[str(server.client_key)]) as h:
        assert (await h.run(["echo", "ok"])).stdout == "ok\n"
    algo, blob = server.host_key_line().split()[:2]
    assert kh.read_text() == f"[127.0.0.1]:{server.port} {algo} {blob}\n"
    async with SshHost(server.target, known_hosts=str(kh), client_keys=[str(server.client_key)]) as h:
        assert (await h.run(["echo", "again"])).stdout == "again\n"
    assert kh.read_text().count("\n") == 1


async def test_changed_host_key_is_refused_even_with_accept_new(server: SshServer, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{server.port} {other.with_suffix('.pub').read_text()}")
    before = kh.read_text()
    h = SshHost(server.target, known_hosts=str(kh), accept_new_host_key=True,
                client_keys=[str(server.client_key)])
    with pytest.raises(HostError, match="HOST KEY CHANGED") as err:
        await h.run(["true"])
    assert "SHA256:" in str(err.value)
    assert kh.read_text() == before


async def test_ssh_config_alias(server: SshServer) -> None:
    # No key, user, port or known_hosts given: all of them come from the config's "gpubox" entry.
    for target in (server.alias, f"ssh://{server.alias}"):
        async with SshHost(target, config_paths=[str(server.ssh_config)]) as h:
            res = await h.run(["sh", "-c", 'echo "$(id -un) $SSH_CONNECTION"'])
            user, *conn = res.stdout.split()
            assert user == server.user and conn[-1] == str(server.port)
            assert h.name == server.alias


async def test_proxyjump_from_config(server: SshServer) -> None:
    before = accepted_logins(server)
    async with SshHost(server.jump_alias, config_paths=[str(server.ssh_config)]) as h:
        assert (await h.run(["echo", "through the jump host"])).stdout == "through the jump host\n"
    assert accepted_logins(server) == before + 2  # the jump connection and the one tunnelled through it


async def test_ssh_agent_is_used(server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert shutil.which("ssh-agent"), "ssh-agent missing: run scripts/ci_sshd_deps.sh"
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        await until(sock.exists, 5, "ssh-agent socket")
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", str(server.client_key)], env=env, check=True,
                       stderr=subprocess.DEVNULL)
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh keys: only the agent can authenticate
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        async with SshHost(server.target, known_hosts=str(server.known_hosts), config_paths=[]) as h:
            assert (await h.run(["echo", "agent"])).stdout == "agent\n"
        monkeypatch.delenv("SSH_AUTH_SOCK")
        h = SshHost(server.target, known_hosts=str(server.known_hosts), config_paths=[])
        with pytest.raises(HostError, match="authentication refused"):
            await h.run(["true"])
    finally:
        agent.terminate()
        agent.wait(5)
