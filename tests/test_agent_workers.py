"""Benchmark workers through the agent (Host.start_worker), under the oldest (3.8) and newest python: Python
source sent over the channel, args and env, JSON lines streamed back, the stderr tail of a failure, cancel
(SIGTERM to the group, SIGKILL after the grace), and the agent ending its workers when its caller goes."""

from __future__ import annotations

import os
import sys
import time

import pytest

from kimitui.hosts.base import HostError
from kimitui.hosts.link import WorkerLost
from kimitui.hosts.local import LocalHost
from kimitui.hostside.procfs import read_stat
from tests.agent_helpers import host as host  # a fixture: a local agent under each python
from tests.agent_helpers import pid_gone, wait_until
from tests.pythons import agent_pythons, label, require

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
    w = await host.start_worker(STREAMER, ["7168x1024", "2112x7168"], {"KIMITUI_SHAPE_SET": "decode"})
    assert w.pid and w.python == host.python and w.returncode is None
    got = [line async for line in w.lines()]
    assert got[:3] == [{"shape": "7168x1024", "us": 0.0}, {"shape": "2112x7168", "us": 10.0},
                       {"text": "a plain line"}]
    assert got[3] == {"env": "decode", "pgid": w.pid, "pid": w.pid, "main": "__main__"}  # its own group
    assert w.returncode == 0 and w.stderr_tail == "" and not w.cancelled
    assert await w.wait() == 0


async def test_a_failing_worker_returns_its_stderr_tail(host: LocalHost) -> None:
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
signal.signal(signal.SIGTERM, signal.SIG_IGN if sys.argv[1] == "ignore" else signal.SIG_DFL)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                          "signal.SIG_IGN); time.sleep(120)"])
print(json.dumps({"child": child.pid}), flush=True)
while True:
    signal.pause()  # until the signal that ends it (an ignored SIGTERM does not return here)
"""


async def test_cancel_terms_then_kills_the_whole_group(host: LocalHost) -> None:
    polite = await host.start_worker(STUBBORN, ["term"])
    lines = polite.lines()
    child = (await anext(lines))["child"]
    t0 = time.monotonic()
    assert await polite.cancel(grace=5.0) == -15  # ended by SIGTERM, before the grace ran out
    assert time.monotonic() - t0 < 5.0 and polite.cancelled  # no SIGKILL came after the grace
    assert wait_until(lambda: pid_gone(child), 5), "its child (same group, ignores SIGTERM) was left"
    assert [x async for x in lines] == []

    stubborn = await host.start_worker(STUBBORN, ["ignore"])
    child = (await anext(stubborn.lines()))["child"]
    t0 = time.monotonic()
    assert await stubborn.cancel(grace=0.5) == -9
    assert 0.4 < time.monotonic() - t0 < 5.0
    assert wait_until(lambda: pid_gone(child), 5)


async def test_worker_errors_are_one_line(host: LocalHost) -> None:
    with pytest.raises(HostError, match="worker python not found: /nonexistent/python3") as err:
        await host.start_worker(b"print(1)\n", python="/nonexistent/python3")
    assert "\n" not in str(err.value)
    w = await host.start_worker(b"print(1)\n", python=sys.executable)  # another python than the agent's
    assert [x async for x in w.lines()] == [1] and w.python == sys.executable


@pytest.mark.parametrize("python", PYTHONS, ids=[label(p) for p in PYTHONS])
async def test_the_agent_ends_its_workers_when_its_caller_goes(python: str) -> None:
    host = LocalHost("box", python=require(python))
    w = await host.start_worker(STUBBORN, ["ignore"])
    child = (await anext(w.lines()))["child"]
    hello = await host.link.connect()
    t0 = time.monotonic()
    await host.close()  # stdin closes: the agent SIGTERMs, then SIGKILLs, its workers' groups, then exits
    assert wait_until(lambda: pid_gone(w.pid or 0) and pid_gone(child) and pid_gone(hello.pid), 10)
    assert time.monotonic() - t0 < 10
    with pytest.raises(WorkerLost, match="outcome is unknown"):
        await w.wait()


async def test_a_dropped_channel_makes_the_worker_lost(host: LocalHost) -> None:
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
    assert wait_until(lambda: pid_gone(w.pid or 0) and pid_gone(child), 5)
    # the next request starts a new agent
    assert (await host.request("ping"))["agent_pid"] != hello.pid
