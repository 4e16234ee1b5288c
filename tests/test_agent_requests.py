"""Every request type of the agent, run by the oldest (3.8) and the newest python on this machine, through
the same link and host API the cleanup and telemetry use (a LocalHost: the agent is a real child process
on that interpreter). Also: what the agent refuses to signal, asked directly."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.hosts.base import HostError, OutcomeUnknown, ProcId, RequestFailed
from kimitui.hosts.local import LocalHost
from kimitui.hostside.procfs import read_stat, start_time_of
from tests.agent_helpers import Children, children, make_sim_dir, pid_gone  # noqa: F401
from tests.agent_helpers import host as host  # a fixture: a local agent under each python
from tests.pythons import agent_pythons, label, require
from tests.waiting import DEADLINE_S, until, wait_until

PYTHONS = agent_pythons()




def version_of(python: str) -> str:
    return subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


# --- hello, probe, sample --------------------------------------------------------------------------------

async def test_hello_names_the_python_and_the_ancestry(host: LocalHost) -> None:
    """The agent's hello names its python, its own pid and start time and its ancestry (the processes it must never
    signal), starting with its parent."""
    hello = await host.link.connect()
    assert hello.python == version_of(host.python)
    assert hello.pid != os.getpid() and start_time_of(hello.pid) == hello.start_time
    assert hello.ancestors[0].pid == os.getpid()  # its parent: this test process
    assert hello.ancestors[0].start_time == start_time_of(os.getpid())
    assert (await host.request("ping"))["agent_pid"] == hello.pid


async def test_probe_sample_and_stop(host: LocalHost, tmp_path: Path, children: Children) -> None:  # noqa: F811
    """The agent probes the driver (no driver is said so), streams samples in order once asked, and none after the
    stop's reply."""
    sim = make_sim_dir(tmp_path / "sim")
    holder = children.holder(sim, "cuda", "1", 2048.0)
    assert await host.request("probe", {"sim_dir": str(sim)}) == {"source": "sim", "driver": "sim-580", "gpus": 2}
    with pytest.raises(RequestFailed, match="no NVIDIA driver on this host") as err:
        await host.request("probe", {"no_nvml": True, "nvidia_smi": "/nonexistent"})
    assert err.value.kind == "nodriver"
    queue = host.link.subscribe()
    info = await host.request("sample", {"sim_dir": str(sim), "interval": 0.1, "scan_interval": 0.1})
    assert info["gpus"] == 2
    first = json.loads(await asyncio.wait_for(queue.get(), DEADLINE_S))
    assert list(first)[:2] == ["t", "type"] and first["type"] == "sample"
    second = json.loads(await asyncio.wait_for(queue.get(), DEADLINE_S))
    assert second["seq"] == first["seq"] + 1 and second["t"] > first["t"]  # the next one, taken after it
    procs = {p["pid"]: p for p in second["procs"]}
    assert procs[holder.pid]["kind"] == "cuda" and procs[holder.pid]["gpu_mem_mib"] == {"1": 2048.0}
    assert (await host.request("sample_stop")) == {"stopped": True}
    while not queue.empty():
        queue.get_nowait()
    # no sample after the stop's reply: the channel is in order, so one would come before the next reply
    assert (await host.request("sample_stop")) == {"stopped": False}
    assert queue.empty()


# --- processes ---------------------------------------------------------------------------------------------

async def test_scan_lists_every_process_and_who_scans(host: LocalHost, sleeper: subprocess.Popen[bytes]) -> None:
    """The scan lists every process with what tells it apart (parent, start time, command, state, user) and names the
    scanner and its ancestry."""
    scan = await host.scan_processes()
    hello = await host.link.connect()
    procs = {p["pid"]: p for p in scan["procs"]}
    assert scan["self_pid"] == hello.pid and scan["ancestors"][0] == os.getpid()
    me = procs[sleeper.pid]
    assert (me["ppid"], me["start"], me["cmdline"]) == (os.getpid(), start_time_of(sleeper.pid), "sleep 60")
    assert me["state"] in ("S", "R") and me["uid"] == os.getuid() and me["user"] == scan["user"]
    assert set(procs) >= {1, os.getpid(), hello.pid}


async def test_stat_reports_live_zombie_and_gone(host: LocalHost) -> None:
    """stat reports a live process with its start time and state, a zombie as a zombie, and a reaped one as gone."""
    proc = subprocess.Popen(["sleep", "60"])
    start = start_time_of(proc.pid)
    assert await host.stat([proc.pid, 999_999_999]) == {proc.pid: (start, read_stat(proc.pid).state)}
    proc.kill()
    wait_until(lambda: (read_stat(proc.pid) or read_stat(1)).state == "Z", "the child to exit (a zombie until reaped)")
    assert await host.stat([proc.pid]) == {proc.pid: (start, "Z")}  # not reaped yet: a zombie
    proc.wait()
    assert await host.stat([proc.pid]) == {}


async def test_signal_is_guarded_by_start_time(host: LocalHost, sleeper: subprocess.Popen[bytes]) -> None:
    """A signal reaches a process only if its start time is the one the caller saw: another start time (a reused pid)
    is a mismatch and nothing is sent; a process gone is reported gone."""
    pid, start = sleeper.pid, start_time_of(sleeper.pid)
    assert start is not None
    res = await host.signal(ProcId(pid, start + 1), signal.SIGTERM)
    assert res.outcome == "mismatch" and f"start time {start}" in res.detail
    assert sleeper.poll() is None
    assert (await host.signal(ProcId(pid, start), signal.SIGTERM)).outcome == "sent"
    assert sleeper.wait(5) == -signal.SIGTERM
    assert (await host.signal(ProcId(pid, start), signal.SIGTERM)).outcome == "gone"


async def test_the_agent_refuses_pid_1_kernel_threads_itself_and_its_ancestry(host: LocalHost) -> None:
    """The agent refuses to signal PID 1, kernel threads, itself and its ancestry (the caller's session) even with the
    right start time, and says why."""
    hello = await host.link.connect()
    kthread = next(int(n) for n in os.listdir("/proc") if n.isdigit() and (st := read_stat(int(n))) is not None
                   and st.ppid == 2)
    cases = {1: "PID 1", 2: "kernel thread", kthread: "kernel thread", hello.pid: "the agent itself",
             os.getpid(): "ancestor of the agent", hello.ancestors[-1].pid: "ancestor of the agent", 0: "not a "
             "process id", -5: "not a process id"}
    for pid, why in cases.items():
        start = start_time_of(pid) if pid > 0 else 0
        # the right start time, so only the agent's own rule can stop it (sig 0 would be harmless anyway)
        res = await host.request("signal", {"pid": pid, "start_time": start or 0, "sig": int(signal.SIGTERM)})
        assert res["outcome"] == "refused" and why in res["detail"], (pid, res)
    assert start_time_of(hello.pid) == hello.start_time  # still running: it did not signal itself


async def test_read_file(host: LocalHost, tmp_path: Path) -> None:
    """read_file returns a file's bytes whatever its name, raises FileNotFoundError for a missing one, refuses a
    directory and a file over the limit."""
    f = tmp_path / "odd name; $(id) 'q'.bin"
    data = bytes(range(256)) * 3 + b"no newline"
    f.write_bytes(data)
    assert await host.read_file(str(f)) == data
    assert await host.read_file(f"/proc/{os.getpid()}/cmdline") == Path(f"/proc/{os.getpid()}/cmdline").read_bytes()
    with pytest.raises(FileNotFoundError):
        await host.read_file(str(tmp_path / "absent"))
    with pytest.raises(HostError, match="not a regular file: a directory"):
        await host.read_file(str(tmp_path))
    with pytest.raises(RequestFailed) as err:
        await host.request("read_file", {"path": str(f), "max_bytes": 10})
    assert err.value.kind == "too_large"


# --- commands --------------------------------------------------------------------------------------------

async def test_run_output_status_stdin_env_and_literal_arguments(host: LocalHost, tmp_path: Path) -> None:
    """run gives a command's output, status (a signal as its negative), stdin and env, and passes every argument
    literally: nothing is read by a shell."""
    res = await host.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.rc, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert (await host.run(["sh", "-c", "kill -KILL $$"])).rc == -signal.SIGKILL
    assert (await host.run(["cat"], stdin=b"hello\x00world\n")).stdout == "hello\x00world\n"
    assert (await host.run(["wc", "-c"], stdin=b"x" * 300_000)).stdout.strip() == "300000"
    assert (await host.run(["cat"])).stdout == ""  # no stdin: EOF at once
    assert (await host.run(["sh", "-c", "echo $KIMITUI_X"], env={"KIMITUI_X": "y z"})).stdout == "y z\n"
    canary = tmp_path / "pwned"
    args = [f"x; touch {canary}", f"$(touch {canary})", "a'b", 'q"q', "*", "", "two\nlines", "$HOME"]
    res = await host.run([host.python, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *args])
    assert json.loads(res.stdout) == args and not canary.exists()
    with pytest.raises(HostError, match="box: command not found: no-such-command-kimitui"):
        await host.run(["no-such-command-kimitui"])


async def test_run_timeout_kills_the_command_and_its_group(host: LocalHost, tmp_path: Path) -> None:
    """A command past its timeout is ended with its whole group, said in one line, and the host is still usable."""
    pidfile = tmp_path / "child.pid"
    # the command would run an hour: only the timeout ends it (the error says so, in one line)
    with pytest.raises(HostError, match=r"sh timed out after 0\.5s") as err:
        await host.run(["sh", "-c", f"sleep 3600 & echo $! > {pidfile}; wait"], timeout=0.5)
    assert "\n" not in str(err.value)
    child = int(pidfile.read_text())
    wait_until(lambda: pid_gone(child), "the command's child to end with it")
    assert (await host.run(["echo", "still usable"])).stdout == "still usable\n"


@pytest.mark.parametrize("python", PYTHONS, ids=[label(p) for p in PYTHONS])
async def test_spawn_is_detached_and_outlives_the_agent(python: str, tmp_path: Path) -> None:
    """A spawned service runs in a session of its own and outlives the agent that started it."""
    log = tmp_path / "svc.log"
    host = LocalHost("box", python=require(python))
    proc = await host.spawn(["sh", "-c", "echo started; exec sleep 60"], log=str(log))
    try:
        assert start_time_of(proc.pid) == proc.start_time
        st = read_stat(proc.pid)
        assert st is not None and st.session == proc.pid  # a session of its own
        await host.close()  # the agent exits; a service it started does not
        wait_until(lambda: "started" in log.read_text(), "the service to start")
        assert start_time_of(proc.pid) == proc.start_time
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    wait_until(lambda: pid_gone(proc.pid), "the service to end")


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def test_http_get_from_the_host(host: LocalHost) -> None:
    """http_get gives the status from the host's side, None when nothing answers, and refuses anything but http(s)."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert await host.http_get(f"http://127.0.0.1:{port}/health") == 200
        assert await host.http_get(f"http://127.0.0.1:{port}/other") == 503
    finally:
        server.shutdown()
        server.server_close()
    assert await host.http_get(f"http://127.0.0.1:{port}/health", timeout=1.0) is None
    with pytest.raises(RequestFailed, match="not an http"):
        await host.request("http_get", {"url": "file:///etc/passwd"})


async def test_bad_requests_get_a_one_line_error_and_the_agent_goes_on(host: LocalHost) -> None:
    """A bad request gets a one-line error (a shell string is never accepted as argv), a line that is not JSON is
    logged, and the same agent goes on answering."""
    with pytest.raises(RequestFailed, match="unknown op 'rm_rf'") as err:
        await host.request("rm_rf")
    assert err.value.kind == "bad_request"
    with pytest.raises(RequestFailed, match="bad request") as err:
        await host.request("signal", {"pid": "x"})
    assert err.value.kind == "bad_request"
    with pytest.raises(RequestFailed, match="argv must be"):
        await host.request("run", {"argv": "rm -rf /"})  # a shell string is never accepted
    queue = host.link.subscribe()
    up = host.link._up
    assert up is not None
    up.channel.write(b"{not json\n")
    await up.channel.drain()
    warning = json.loads(await asyncio.wait_for(queue.get(), DEADLINE_S))
    assert warning["type"] == "log" and "bad request line" in warning["message"]
    assert (await host.request("ping"))["agent_pid"] == up.hello.pid  # same agent, still answering


async def test_requests_in_flight_when_the_agent_dies_each_fail_as_unknown(host: LocalHost) -> None:
    """Requests in flight when the agent dies each fail as unknown in one line, never as done or not done; the next
    request starts another agent."""
    hello = await host.link.connect()
    os.kill(hello.pid, signal.SIGSTOP)  # it reads nothing more: every request below stays in flight
    calls = {op: asyncio.ensure_future(host.request(op, fields)) for op, fields in (
        ("stat", {"pids": [1]}), ("scan", {}), ("signal", {"pid": os.getpid(), "start_time": 1, "sig": 0}))}
    # in flight: each request is registered and written in one step (nothing awaited between the two)
    await until(lambda: len(host.link._pending) == 3, "the three requests sent", interval=0)
    assert not any(c.done() for c in calls.values())
    os.kill(hello.pid, signal.SIGKILL)
    for op, call in calls.items():
        with pytest.raises(OutcomeUnknown) as err:
            await call
        msg = str(err.value)
        assert f"the {op} request" in msg and "in flight" in msg and "outcome is unknown" in msg, msg
        assert "\n" not in msg
    assert (await host.request("ping"))["agent_pid"] != hello.pid  # the next request starts another agent
