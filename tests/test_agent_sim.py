"""The agent end to end: run by a real python through the bootstrap, against a simulated driver whose
memory is held by real child processes that really map (or only open) the device files; by hand (its
--sample flags) and through the host's link."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from kimitui.hosts.launch import agent_command, agent_payload
from kimitui.hosts.local import LocalHost
from tests.agent_helpers import (
    Children,
    children,  # noqa: F401 (fixture)
    make_sim_dir,
    next_matching,
    pid_gone,
    procs_by_pid,
    start_time,
)
from tests.fake_nvml import CAPTURED_FIELDS
from tests.support import FIXTURES
from tests.waiting import DEADLINE_S, wait_until

is_sample = lambda d: d["type"] == "sample"  # noqa: E731


async def test_sim_agent_memory_classes_and_release(tmp_path: Path, children: Children) -> None:  # noqa: F811
    sim = make_sim_dir(tmp_path / "sim")
    holder = children.holder(sim, "cuda", "0", 1234.5)
    opener = children.holder(sim, "handle", "0,1")
    stray = children.holder(sim, "stray", "1")
    host = LocalHost()
    queue = host.link.subscribe()
    lines = queue_lines(queue)
    try:
        info = await host.request("sample", {"sim_dir": str(sim), "interval": 0.1})
        assert info == {"source": "sim", "driver": "sim-580", "gpus": 2}
        hello = await host.link.connect()
        sample = await next_matching(lines, is_sample)
        assert list(sample)[:2] == ["t", "type"]
        g0, g1 = sample["gpus"]
        assert (g0["mem_used_mib"], g0["mem_reserved_mib"], g0["mem_total_mib"]) == (1234.5, 616.0, 97887.0)
        assert (g1["mem_used_mib"], g1["mem_reserved_mib"]) == (0.0, 616.0)  # idle: 0 used, as nvidia-smi
        procs = procs_by_pid(sample)
        h = procs[holder.pid]
        assert h["kind"] == "cuda" and h["gpus"] == [0] and h["gpu_mem_mib"] == {"0": 1234.5}
        assert h["start_time"] == start_time(holder.pid) and h["visible"] and h["flags"] == []
        assert h["state"] in ("S", "R") and h["cmdline"].endswith(f"{sim} cuda 0 1234.5")  # NULs -> spaces
        o = procs[opener.pid]
        assert o["kind"] == "handle" and o["gpus"] == [0, 1] and o["gpu_mem_mib"] == {} and o["flags"] == []
        s = procs[stray.pid]
        assert s["kind"] == "cuda" and s["flags"] == ["no-nvml-memory"]
        agent_pid = sample["agent_pid"]
        assert agent_pid == hello.pid and agent_pid not in procs
        assert isinstance(procs[holder.pid]["user"], str)

        holder.kill()
        holder.wait()
        gone = time.time()
        # the first sample the agent started after the holder was gone shows its memory freed at once
        freed = await next_matching(lines, lambda d: is_sample(d) and d["t"] > gone)
        assert freed["gpus"][0]["mem_used_mib"] == 0.0
        assert holder.pid not in procs_by_pid(freed)  # its holder file is still there: stale, ignored
        assert (sim / "holders" / f"{holder.pid}.json").exists()
    finally:
        await host.close()
    wait_until(lambda: pid_gone(agent_pid), "the agent to end when the host closed")


async def queue_lines(queue: asyncio.Queue[str]) -> AsyncIterator[str]:
    while True:
        yield await queue.get()


def test_agent_exits_at_once_when_stdin_closes(tmp_path: Path) -> None:
    sim = make_sim_dir(tmp_path / "sim")
    # a sample an hour: only a stdin that ends the agent at once lets it exit before the wait's deadline
    proc = subprocess.Popen(agent_command(sys.executable, ("--sample", "--interval", "3600", "--sim-dir", str(sim))),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(agent_payload())
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["type"] == "hello"
    first = [json.loads(proc.stdout.readline()) for _ in range(2)]  # the sample's reply and the first sample
    assert sorted(d["type"] for d in first) == ["reply", "sample"]
    proc.stdin.close()
    assert proc.wait(timeout=DEADLINE_S) == 0


def test_agent_keeps_a_deadline_schedule(tmp_path: Path) -> None:
    sim = make_sim_dir(tmp_path / "sim")
    argv = agent_command(sys.executable, ("--sample", "--interval", "0.1", "--sim-dir", str(sim), "--count", "6"))
    res = subprocess.run(argv, input=agent_payload(), capture_output=True, timeout=DEADLINE_S, check=True)
    ts = [json.loads(line)["t"] for line in res.stdout.splitlines() if b'"sample"' in line]
    assert len(ts) == 6
    for k, t in enumerate(ts):
        assert t - ts[0] >= k * 0.1 - 0.01  # never early: the k-th tick comes k intervals after the first
    assert ts == sorted(ts)


def test_agent_without_driver_says_why_and_still_answers() -> None:
    argv = agent_command(sys.executable, ("--sample", "--no-nvml", "--nvidia-smi", "/nonexistent/nvidia-smi"))
    res = subprocess.run(argv, input=agent_payload() + b'{"id": 7, "op": "ping"}\n', capture_output=True,
                         timeout=DEADLINE_S)
    assert res.returncode == 0
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [d["type"] for d in lines] == ["hello", "reply", "reply"]
    assert (lines[1]["ok"], lines[1]["kind"]) == (False, "nodriver")
    assert lines[1]["error"] == "no NVIDIA driver on this host (NVML: disabled, nvidia-smi: not found)"
    assert lines[2] == {**lines[2], "id": 7, "ok": True}  # no driver: the requests are still answered


FAKE_SMI = """#!{python}
import sys
args = " ".join(sys.argv[1:])
name = "query-gpu-nounits.csv" if "--query-gpu" in args else "query-apps-nounits.csv"
if "--query-gpu" in args:  # the capture answers the fields it was made with; any other is refused, as one
    asked = sys.argv[1].split("=", 1)[1].split(",")  # the capture's nvidia-smi did not know is
    other = [f for f in asked if f not in {captured!r}]
    if other:
        sys.stdout.write('Field "%s" is not a valid field to query.\\n\\n' % other[0])
        sys.exit(2)
sys.stdout.write(open("{fixtures}/" + name).read())
"""


def test_agent_nvidia_smi_fallback_on_the_real_csv(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(python=sys.executable, fixtures=FIXTURES, captured=CAPTURED_FIELDS))
    smi.chmod(0o755)
    empty_proc = tmp_path / "proc"
    empty_proc.mkdir()  # pid 557 of the capture is not visible here, as from a container
    argv = agent_command(sys.executable, ("--sample", "--proc-root", str(empty_proc), "--no-nvml", "--nvidia-smi",
                                          str(smi), "--count", "2"))
    res = subprocess.run(argv, input=agent_payload(), capture_output=True, timeout=20, check=True)
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert lines[0]["type"] == "hello" and lines[1]["type"] == "reply"
    assert lines[1]["result"] == {"source": "nvidia-smi", "driver": "580.159.04", "gpus": 2}
    sample = lines[-1]
    assert sample["source"] == "nvidia-smi" and sample["seq"] == 2
    g0 = sample["gpus"][0]
    assert g0["uuid"] == "GPU-08163954-12d0-d1cc-c80c-d7eb06938ec1"
    assert (g0["mem_used_mib"], g0["mem_total_mib"], g0["mem_reserved_mib"]) == (8157, 143771, 616)
    assert (g0["power_w"], g0["sm_clock_mhz"], g0["temp_c"], g0["util_pct"]) == (115.72, 1980, 33, 0)
    assert sample["gpus"][1]["mem_used_mib"] == 4343
    (p,) = sample["procs"]
    assert p["pid"] == 557 and p["gpu_mem_mib"] == {"0": 8148.0, "1": 4334.0}
    assert (p["visible"], p["kind"], p["flags"]) == (False, "unknown", ["pid-not-visible"])
