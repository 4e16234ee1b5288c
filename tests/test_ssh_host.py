"""SshHost against a real OpenSSH server on loopback (tests/sshd.py): one login and one agent for every
operation, commands, files, guarded signals and the agent's refusals, workers, the remote python (too old,
missing, picked with --remote-python), host keys, ~/.ssh/config aliases, ProxyJump and the SSH agent."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kimitui.hosts import bundle
from kimitui.hosts.base import HostError, HostFatal, ProcId
from kimitui.hosts.ssh import SshHost
from tests.agent_helpers import make_sim_dir
from tests.pythons import agent_pythons, label, require, too_old_pythons
from tests.sshd import SshServer, alive, require_sshd, sshd_server, start_time
from tests.support import make_host
from tests.waiting import until


@pytest.fixture(scope="module")
def server() -> Iterator[SshServer]:
    with sshd_server() as s:
        yield s


@pytest.fixture
async def host(server: SshServer) -> AsyncIterator[SshHost]:
    h = make_host(server)
    try:
        yield h
    finally:
        await h.close()


def accepted_logins(server: SshServer) -> int:
    return server.log().count("Accepted publickey")


def test_sshd_is_installed() -> None:
    require_sshd()  # fails (never skips) with the install hint when OpenSSH is missing


async def test_one_login_and_one_agent_for_everything(host: SshHost, server: SshServer, tmp_path: Path) -> None:
    before = accepted_logins(server)
    (tmp_path / "f").write_text("data")
    calls = [host.run(["echo", str(i)]) for i in range(12)]
    calls += [host.read_file(str(tmp_path / "f")), host.stat([1]), host.scan_processes(), host.request("ping")]
    results = await asyncio.gather(*calls)
    assert [r.stdout for r in results[:12]] == [f"{i}\n" for i in range(12)]
    assert results[12] == b"data" and 1 in results[13] and results[15]["agent_pid"] == results[14]["self_pid"]
    assert host.link.connects == 1 and host.link.attempts == 1
    assert accepted_logins(server) == before + 1
    hello = await host.link.connect()
    agents = server.find_sessions("kimitui-agent")
    assert agents == [hello.pid]  # the only process the session runs: the agent


async def test_run_output_status_and_literal_arguments(host: SshHost, tmp_path: Path) -> None:
    res = await host.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.rc, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert (await host.run(["sh", "-c", "kill -KILL $$"])).rc == -signal.SIGKILL
    canary = tmp_path / f"pwned-{uuid.uuid4().hex}"
    args = [f"x; touch {canary}", f"$(touch {canary})", f"`touch {canary}`", "a'b", 'q"q', "back\\slash",
            "*", "", "two\nlines", "--flag", "$HOME", f"| touch {canary}", "&& id"]
    res = await host.run(["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *args])
    assert json.loads(res.stdout) == args and not canary.exists()
    assert (await host.run(["cat"], stdin=b"hello\x00world\n")).stdout == "hello\x00world\n"
    with pytest.raises(HostError, match="command not found: no-such-command-kimitui"):
        await host.run(["no-such-command-kimitui", "x"])


async def test_run_timeout_kills_the_remote_command(host: SshHost, server: SshServer) -> None:
    token = f"kimitui-timeout-{uuid.uuid4().hex}"
    # the command would run an hour: only the timeout ends it (the error says so, in one line)
    with pytest.raises(HostError, match=r"timed out after 1\.0s") as err:
        await host.run(["python3", "-c", f"import time\ntime.sleep(3600)  # {token}"], timeout=1.0)
    assert "\n" not in str(err.value)
    await until(lambda: not server.find_sessions(token), "timed-out command to be killed")
    assert (await host.run(["echo", "still usable"])).stdout == "still usable\n"


async def test_read_file(host: SshHost, tmp_path: Path) -> None:
    f = tmp_path / "odd name; $(id) 'q'.bin"
    data = bytes(range(256)) * 3 + b"no newline"
    f.write_bytes(data)
    assert await host.read_file(str(f)) == data
    with pytest.raises(FileNotFoundError):
        await host.read_file(str(tmp_path / "absent"))


async def test_signal_checks_start_time(host: SshHost) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        start = start_time(proc.pid)
        res = await host.signal(ProcId(proc.pid, start + 1), signal.SIGTERM)
        assert res.outcome == "mismatch" and alive(proc.pid)
        assert (await host.signal(ProcId(proc.pid, start), signal.SIGTERM)).outcome == "sent"
        assert proc.wait(5) == -signal.SIGTERM
        assert (await host.signal(ProcId(proc.pid, start), signal.SIGTERM)).outcome == "gone"
    finally:
        proc.kill()
        proc.wait()


async def test_the_agent_refuses_its_own_session(host: SshHost, server: SshServer) -> None:
    """Asked directly (no cleanup policy in between), the agent refuses PID 1, itself, the sshd processes
    carrying its session and the listening sshd; each is still running afterwards."""
    ancestors = await host.ancestor_pids()
    assert ancestors[0].comm == "sshd" and ancestors[0].pid in server.connection_pids()
    assert server.pid in [p.pid for p in ancestors]
    hello = await host.link.connect()
    targets = [(1, start_time(1)), (hello.pid, hello.start_time)] + [(p.pid, p.start_time) for p in ancestors]
    for pid, start in targets:
        res = await host.request("signal", {"pid": pid, "start_time": start, "sig": int(signal.SIGKILL)})
        assert res["outcome"] == "refused", (pid, res)
    assert all(alive(p.pid) for p in ancestors) and server.proc.poll() is None
    assert (await host.request("ping"))["agent_pid"] == hello.pid


async def test_worker_over_ssh(host: SshHost) -> None:
    src = (b"import json, sys, time\nfor a in sys.argv[1:]:\n    print(json.dumps({'arg': a}), flush=True)\n"
           b"time.sleep(60)\n")
    w = await host.start_worker(src, ["a", "b"])
    lines = w.lines()
    assert [await anext(lines), await anext(lines)] == [{"arg": "a"}, {"arg": "b"}]
    assert await w.cancel(grace=2.0) == -signal.SIGTERM and w.cancelled
    assert not alive(w.pid or 0)


@pytest.mark.parametrize("python", agent_pythons(), ids=[label(p) for p in agent_pythons()])
async def test_remote_python_picks_the_interpreter(server: SshServer, python: str) -> None:
    async with make_host(server, python=require(python)) as h:
        hello = await h.link.connect()
        assert hello.executable == python
        assert (await h.run(["echo", "ok"])).stdout == "ok\n"
        assert (await h.signal(ProcId(1, start_time(1)), signal.SIGTERM)).outcome == "refused"


@pytest.mark.parametrize("python", agent_pythons(), ids=[label(p) for p in agent_pythons()])
async def test_the_host_side_runs_over_ssh_under_each_python(server: SshServer, python: str, tmp_path: Path) -> None:
    """The agent's payload and a worker's (kimitui/hosts/bundle.py) loaded from memory under 3.8 and the
    newest python, on one login: the agent's topology request and the modelled GEMM worker."""
    before = accepted_logins(server)
    sim = make_sim_dir(tmp_path / "sim")
    async with make_host(server, python=require(python)) as h:
        topo = await h.request("topology", {"sim_dir": str(sim)})
        assert topo["source"] == "modelled" and len(topo["gpus"]) == 2
        w = await h.start_worker(bundle.program(bundle.GEMM), [
            "--shapes", json.dumps([{"name": "o_proj", "n": 7168, "k": 1024, "dtype": "int4-g32"}]),
            "--ms", "1", "--backends", "marlin", "--modelled", "rtx-pro-6000"])
        lines = [line async for line in w.lines()]
        assert w.returncode == 0, w.stderr_tail
        assert lines[0]["type"] == "hello" and lines[0]["python"] == (await h.link.connect()).python
        assert [line["rows"] for line in lines if line["type"] == "done"] == [1]
    assert accepted_logins(server) - before == 1


async def test_a_missing_or_old_python_is_one_line_without_retry(server: SshServer) -> None:
    async with make_host(server, python="python3-not-installed") as h:
        with pytest.raises(HostFatal, match="no python3-not-installed on the host") as err:
            await h.run(["true"])
        msg = str(err.value)
        assert "\n" not in msg and "python >= 3.8" in msg and "--remote-python" in msg
        with pytest.raises(HostFatal):
            await h.stat([1])
        assert h.link.attempts == 1  # said once, not retried
    for old in too_old_pythons():
        async with make_host(server, python=old) as h:
            with pytest.raises(HostFatal, match=r"is too old: the kimitui agent needs python >= 3\.8") as err:
                await h.link.connect()
            assert old in str(err.value) and "\n" not in str(err.value)


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
    with pytest.raises(HostError):
        await h.run(["true"])
    assert states[-1][0] == "failed" and h.link.attempts == 1 and h.link.backoff_log == []  # no retry
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
        await until(sock.exists, "ssh-agent socket")
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


async def test_aes_gcm_is_preferred_unless_the_config_names_ciphers(server: SshServer, tmp_path: Path) -> None:
    async with SshHost(server.alias, config_paths=[str(server.ssh_config)]) as h:
        await h.run(["true"])
        assert (await h._connection()).get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
    cfg = tmp_path / "ssh_config"
    cfg.write_text(server.ssh_config.read_text().replace("Host gpubox\n", "Host gpubox\n    Ciphers aes256-ctr\n", 1))
    async with SshHost(server.alias, config_paths=[str(cfg)]) as h:
        await h.run(["true"])
        assert (await h._connection()).get_extra_info("send_cipher") == "aes256-ctr"


async def test_a_login_shell_that_prints_a_banner_is_skipped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text('echo "Welcome to gpu-box (managed by ops)"\necho "{not the agent}"\n')
    with sshd_server(extra_config=f"SetEnv HOME={home}\n") as server:
        async with make_host(server) as h:
            queue = h.link.subscribe()
            assert (await h.run(["echo", "ok"])).stdout == "ok\n"
            warning = json.loads(queue.get_nowait())
    assert warning["type"] == "log" and warning["level"] == "warning"
    assert "Welcome to gpu-box (managed by ops) / {not the agent}" in warning["message"]
