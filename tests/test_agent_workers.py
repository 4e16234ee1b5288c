"""Benchmark workers through the agent (Host.start_worker), under the oldest (3.8) and newest python: Python
source sent over the channel, args and env, JSON lines streamed back, the stderr tail of a failure, cancel
(SIGTERM to the group, SIGKILL after the grace), and the agent ending its workers when its caller goes."""

from __future__ import annotations

import os
import sys

import pytest

from kimitui.hosts.base import HostError
from kimitui.hosts.local import LocalHost
from kimitui.hosts.remote_worker import WorkerLost
from kimitui.hostside.procfs import read_stat
from tests.agent_helpers import host as host  # a fixture: a local agent under each python
from tests.agent_helpers import pid_gone
from tests.pythons import agent_pythons, label, require
from tests.waiting import DEADLINE_S, wait_until

PYTHONS = agent_pythons()




STREAMER = b"""\
import dataclasses, json, os, sys, time

@dataclasses.dataclass
class Point:  # a dataclass: the source runs as a real __main__ module
    shape: str
    us: float

for i, shape in enumerate(sys.argv[1:]):
    print(json.dumps(dataclasses.asdict(Point(shape, 10.0 * i))), flush=True)
print("a plain line", flush=True)
print(json.dumps({"env": os.environ.get("KIMITUI_SHAPE_SET"), "pgid": os.getpgid(0), "pid": os.getpid(),
                  "main": __name__}))
"""


async def test_worker_streams_json_lines_with_args_and_env(host: LocalHost) -> None:
    """A worker runs its source as __main__ in a process group of its own, with the args and env it was given, and its
    JSON lines come back in order (a line that is not JSON as text)."""
    w = await host.start_worker(STREAMER, ["7168x1024", "2112x7168"], {"KIMITUI_SHAPE_SET": "decode"})
    assert w.pid and w.python == host.python and w.returncode is None
    got = [line async for line in w.lines()]
    assert got[:3] == [{"shape": "7168x1024", "us": 0.0}, {"shape": "2112x7168", "us": 10.0},
                       {"text": "a plain line"}]
    assert got[3] == {"env": "decode", "pgid": w.pid, "pid": w.pid, "main": "__main__"}  # its own group
    assert w.returncode == 0 and w.stderr_tail == "" and not w.cancelled
    assert await w.wait() == 0


async def test_a_failing_worker_returns_its_stderr_tail(host: LocalHost) -> None:
    """A failing worker's exit status and the tail of its stderr (bounded) come back, the error's last line included."""
    src = ("import sys\nprint('{\"step\": 1}')\n"
           "sys.stderr.write('x' * 20000 + '\\nCUDA error: out of memory\\n')\nsys.exit(3)\n")
    w = await host.start_worker(src)
    assert [line async for line in w.lines()] == [{"step": 1}]
    assert w.returncode == 3
    assert w.stderr_tail.endswith("CUDA error: out of memory\n") and 1000 < len(w.stderr_tail) <= 8192
    crash = await host.start_worker(b"raise RuntimeError('no torch here')\n")
    assert await crash.wait() == 1 and "RuntimeError: no torch here" in crash.stderr_tail


STUBBORN = b"""\
import json, signal, subprocess, sys
def survive(sig, frame):  # "survive": a SIGTERM is noted and outlived
    print(json.dumps({"survived": signal.Signals(sig).name}), flush=True)
signal.signal(signal.SIGTERM, {"ignore": signal.SIG_IGN, "survive": survive}.get(sys.argv[1], signal.SIG_DFL))
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                          "signal.SIG_IGN); time.sleep(120)"])
print(json.dumps({"child": child.pid}), flush=True)
while True:
    signal.pause()  # until the signal that ends it (an ignored SIGTERM does not return here)
"""


async def test_cancel_terms_then_kills_the_whole_group(host: LocalHost) -> None:
    """A cancel is SIGTERM to the worker's whole process group, then SIGKILL to it once the grace has passed:
    a worker that ends on SIGTERM is never killed, one that outlives it is, and so is every process of its
    group (a child that ignores SIGTERM included)."""
    polite = await host.start_worker(STUBBORN, ["term"])
    lines = polite.lines()
    child = (await anext(lines))["child"]
    # ended by SIGTERM (-15): no SIGKILL came after it; the grace is the wait's deadline only (a broken
    # escalation that killed at once would read -9)
    assert await polite.cancel(grace=DEADLINE_S) == -15 and polite.cancelled
    wait_until(lambda: pid_gone(child), "its child (same group, ignores SIGTERM) to end")
    assert [x async for x in lines] == []

    stubborn = await host.start_worker(STUBBORN, ["survive"])
    lines = stubborn.lines()
    child = (await anext(lines))["child"]
    assert await stubborn.cancel(grace=2.0) == -9
    # the order, from the worker's own output: it got SIGTERM first and outlived it; SIGKILL ended it
    assert [x async for x in lines] == [{"survived": "SIGTERM"}]
    wait_until(lambda: pid_gone(child), "its child to end")


async def test_worker_errors_are_one_line(host: LocalHost) -> None:
    """A worker that cannot start is one line naming why; a worker may run under another python than the agent's."""
    with pytest.raises(HostError, match="worker python not found: /nonexistent/python3") as err:
        await host.start_worker(b"print(1)\n", python="/nonexistent/python3")
    assert "\n" not in str(err.value)
    w = await host.start_worker(b"print(1)\n", python=sys.executable)  # another python than the agent's
    assert [x async for x in w.lines()] == [1] and w.python == sys.executable


@pytest.mark.parametrize("python", PYTHONS, ids=[label(p) for p in PYTHONS])
async def test_the_agent_ends_its_workers_when_its_caller_goes(python: str) -> None:
    """When its caller goes (stdin closes), the agent ends every worker's whole group, a child that ignores SIGTERM
    included, then itself; the worker's outcome is unknown to the caller, and said so."""
    host = LocalHost("box", python=require(python))
    w = await host.start_worker(STUBBORN, ["ignore"])
    child = (await anext(w.lines()))["child"]
    hello = await host.link.connect()
    await host.close()  # stdin closes: the agent SIGTERMs, then SIGKILLs, its workers' groups, then exits
    wait_until(lambda: pid_gone(w.pid or 0) and pid_gone(child) and pid_gone(hello.pid),
               "the worker, its child and the agent to end")
    with pytest.raises(WorkerLost, match="outcome is unknown"):
        await w.wait()


async def test_a_dropped_channel_makes_the_worker_lost(host: LocalHost) -> None:
    """A dropped channel makes the worker lost (its outcome unknown), never reported as ended; the next request starts
    a new agent."""
    w = await host.start_worker(STUBBORN, ["term"])
    child = (await anext(w.lines()))["child"]
    hello = await host.link.connect()
    os.kill(hello.pid, 9)  # the agent dies hard: its worker is orphaned, its outcome unknown to us
    with pytest.raises(WorkerLost) as err:
        async for _ in w.lines():
            pass
    assert "connection lost" in str(err.value) and w.returncode is None
    for pid in (w.pid or 0, child):  # not the agent's to end any more: the test does
        st = read_stat(pid)
        if st is not None:
            os.kill(pid, 9)
    wait_until(lambda: pid_gone(w.pid or 0) and pid_gone(child), "the worker and its child killed")
    # the next request starts a new agent
    assert (await host.request("ping"))["agent_pid"] != hello.pid
