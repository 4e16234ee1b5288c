"""Agent lines -> events, and TelemetrySource: reconnect, gap, fatal, stall, no python3, probe_host."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kimitui.core.events import ConnectionState, Event, GpuSample, HostSample, LogLine, ProcSample
from kimitui.hosts.base import CommandResult, Host, HostError, ProcId, SignalResult
from kimitui.hosts.local import LocalHost
from kimitui.telemetry import AgentFatal, AgentHello, TelemetrySource, parse_agent_line, probe_host
from tests.test_agent_helpers import (
    Children,
    children,  # noqa: F401 (fixture)
    make_sim_dir,
    pid_gone,
    wait_until,
)

SAMPLE = {"t": 100.0, "type": "sample", "host": "gpu-box", "seq": 7,
          "gpus": [{"index": 0, "uuid": "GPU-a", "name": "NVIDIA H200", "mem_used_mib": 8157.0,
                    "mem_total_mib": 143771.0, "mem_reserved_mib": 616.0, "util_pct": 0.0, "temp_c": 33.0,
                    "power_w": 115.7, "sm_clock_mhz": 1980.0, "error": None}],
          "procs": [{"pid": 557, "start_time": 2637, "user": "root", "gpu_mem_mib": {"0": 8148.0},
                     "kind": "cuda", "unit": None, "container": "3f40", "cmdline": "python3 -c x", "state": "S",
                     "ppid": 554, "gpus": [0], "visible": True, "flags": []}],
          "agent_pid": 900, "source": "nvml"}


def line(**changes: Any) -> str:
    return json.dumps({**SAMPLE, **changes})


# --- parse_agent_line -----------------------------------------------------------------------------------

def test_sample_line_becomes_a_typed_host_sample() -> None:
    ev = parse_agent_line(line(), host="h200", clock=lambda: 1.0)
    assert isinstance(ev, HostSample)
    assert (ev.t, ev.seq, ev.host, ev.agent_pid, ev.source) == (100.0, 7, "h200", 900, "nvml")
    assert isinstance(ev.gpus[0], GpuSample) and ev.gpus[0].mem_used_mib == 8157.0
    p = ev.procs[0]
    assert isinstance(p, ProcSample) and p.gpu_mem_mib == {0: 8148.0} and p.kind == "cuda"
    assert ev.to_dict()["procs"][0]["gpu_mem_mib"] == {"0": 8148.0}  # round trip to the agent's shape


def test_hello_fatal_and_agent_log_lines() -> None:
    hello = parse_agent_line('{"t":1,"type":"hello","agent_pid":5,"source":"sim","driver":"sim-580",'
                             '"python":"3.11.7","gpus":8}')
    assert hello == AgentHello(1.0, 5, "sim", "sim-580", "3.11.7", 8)
    fatal = parse_agent_line('{"t":2,"type":"fatal","message":"no NVIDIA driver on this host (x)"}')
    assert fatal == AgentFatal(2.0, "no NVIDIA driver on this host (x)")
    log = parse_agent_line('{"t":3,"type":"log","level":"error","source":"agent","message":"a\\nb"}')
    assert isinstance(log, LogLine) and (log.level, log.message) == ("error", "a b")


BAD_LINES = {
    "not json": "Traceback (most recent call last):",
    "partial": line()[:57],
    "seq type": line(seq="7"),
    "gpus type": line(gpus={"0": {}}),
    "gpu index": line(gpus=[{"uuid": "x"}]),
    "mem type": line(gpus=[{**SAMPLE["gpus"][0], "mem_used_mib": "8157 MiB"}]),
    "proc mem key": line(procs=[{**SAMPLE["procs"][0], "gpu_mem_mib": {"zero": 1.0}}]),
    "proc kind": line(procs=[{**SAMPLE["procs"][0], "kind": "weird"}]),
    "unknown type": '{"t":1,"type":"gossip"}',
    "array": "[1, 2]",
}


def test_malformed_or_partial_lines_become_one_line_warnings() -> None:
    for what, text in BAD_LINES.items():
        ev = parse_agent_line(text, host="h200", clock=lambda: 5.0)
        assert isinstance(ev, LogLine), what
        assert (ev.t, ev.level, ev.source) == (5.0, "warning", "telemetry"), what
        assert ev.message.startswith("h200: bad agent line") and "\n" not in ev.message, what
        assert len(ev.message) < 200, what


# --- TelemetrySource with a scripted host ---------------------------------------------------------------

class ScriptedHost(Host):
    """stream() plays one script per call: a list of lines, ending in an exception, "HANG" or the end."""

    def __init__(self, scripts: list[list[Any]], run_result: CommandResult | Exception | None = None) -> None:
        self.name = "scripted"
        self.scripts = scripts
        self.calls = 0
        self.closed = 0
        self.run_result = run_result or CommandResult(0, "3.11\n", "")

    async def run(self, argv: list[str], *, timeout: float | None = 30.0,
                  stdin: bytes | None = None) -> CommandResult:
        if isinstance(self.run_result, Exception):
            raise self.run_result
        return self.run_result

    async def stream(self, argv: list[str], *, stdin: bytes | None = None) -> AsyncIterator[str]:
        script = self.scripts[min(self.calls, len(self.scripts) - 1)]
        self.calls += 1
        try:
            for item in script:
                if isinstance(item, Exception):
                    raise item
                if item == "HANG":
                    await asyncio.Event().wait()
                yield item
        finally:
            self.closed += 1

    async def read_file(self, path: str) -> bytes:
        raise FileNotFoundError(path)

    async def signal(self, proc: ProcId, sig: int) -> SignalResult:
        return SignalResult("error")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


async def collect(source: TelemetrySource, until: Any, limit: int = 200, timeout: float = 10.0) -> list[Event]:
    """Events until ``until(event)`` is true (inclusive) or the source ends."""
    out: list[Event] = []

    async def run() -> None:
        gen = source.events()
        async with contextlib.aclosing(gen):
            async for ev in gen:
                out.append(ev)
                if until(ev) or len(out) >= limit:
                    return

    await asyncio.wait_for(run(), timeout)
    return out


def states(events: list[Event]) -> list[str]:
    return [e.state for e in events if isinstance(e, ConnectionState)]


HELLO = '{"t":1,"type":"hello","agent_pid":900,"source":"nvml","driver":"580","python":"3.12","gpus":1}'


async def test_bad_line_is_logged_and_samples_continue_then_reconnect_records_the_gap() -> None:
    host = ScriptedHost([[HELLO, line(seq=1), "{garbage", line(seq=2)],  # then the stream ends
                         [HELLO, line(seq=1)]])
    src = TelemetrySource(host, clock=FakeClock(), backoff=(0.01,))
    events = await collect(src, lambda e: isinstance(e, ConnectionState) and e.gap_s is not None)
    assert states(events) == ["connecting", "connected", "lost", "reconnecting", "connected"]
    samples = [e for e in events if isinstance(e, HostSample)]
    assert [s.seq for s in samples] == [1, 2] and all(s.host == "scripted" for s in samples)
    warnings = [e for e in events if isinstance(e, LogLine) and e.level == "warning"]
    assert len(warnings) == 1 and "bad agent line" in warnings[0].message
    lost = next(e for e in events if isinstance(e, ConnectionState) and e.state == "lost")
    assert lost.detail == "agent exited"
    first, resumed = [e for e in events if isinstance(e, ConnectionState) and e.state == "connected"]
    assert first.gap_s is None and resumed.gap_s is not None and resumed.gap_s > 0
    assert host.calls == 2


async def test_host_error_mid_stream_is_lost_with_its_detail() -> None:
    host = ScriptedHost([[HELLO, line(seq=1), HostError("gpu-box: connection lost")], [HELLO, line(seq=1)]])
    events = await collect(TelemetrySource(host, backoff=(0.01,)),
                           lambda e: isinstance(e, ConnectionState) and e.gap_s is not None)
    lost = next(e for e in events if isinstance(e, ConnectionState) and e.state == "lost")
    assert lost.detail == "gpu-box: connection lost"
    assert host.calls == 2 and host.closed == 2  # both streams closed: the second when events() closed


async def test_fatal_no_driver_fails_once_without_retry() -> None:
    host = ScriptedHost([['{"t":1,"type":"fatal","message":"no NVIDIA driver on this host (NVML: x)"}']])
    events = await collect(TelemetrySource(host, backoff=(0.01,)), lambda e: False)
    assert states(events) == ["connecting", "failed"]
    assert events[-1].detail == "no NVIDIA driver on this host (NVML: x)"  # type: ignore[attr-defined]
    assert host.calls == 1


async def test_host_without_python3_fails_with_one_clear_line() -> None:
    missing = HostError("scripted: command not found: python3")
    host = ScriptedHost([[missing]], run_result=missing)
    events = await collect(TelemetrySource(host, backoff=(0.01,)), lambda e: False)
    assert states(events) == ["connecting", "failed"]
    detail = events[-1].detail  # type: ignore[attr-defined]
    assert detail.startswith("scripted: no python3 on the host") and "\n" not in detail
    over_ssh = ScriptedHost([[]], run_result=CommandResult(127, "", "bash: python3: command not found\n"))
    events = await collect(TelemetrySource(over_ssh, backoff=(0.01,)), lambda e: False)
    assert states(events)[-1] == "failed" and "python3: command not found" in events[-1].detail  # type: ignore


async def test_stalled_stream_is_closed_and_retried() -> None:
    host = ScriptedHost([[HELLO, line(seq=1), "HANG"], [HELLO, line(seq=1)]])
    src = TelemetrySource(host, backoff=(0.01,), stall_s=0.2)
    events = await collect(src, lambda e: isinstance(e, ConnectionState) and e.gap_s is not None)
    lost = next(e for e in events if isinstance(e, ConnectionState) and e.state == "lost")
    assert lost.detail == "no data for 0.2s"
    assert host.closed >= 1  # the hung stream was closed, not leaked


async def test_stop_ends_the_backoff_wait() -> None:
    host = ScriptedHost([[HELLO, line(seq=1)]])
    src = TelemetrySource(host, backoff=(30.0,))
    seen: list[Event] = []

    async def consume() -> None:
        async for ev in src.events():
            seen.append(ev)
            if isinstance(ev, ConnectionState) and ev.state == "reconnecting":
                src.stop()

    await asyncio.wait_for(consume(), 5.0)  # not 30 s: the wait is on the stop event
    assert states(seen)[-1] == "closed"


# --- with the real agent --------------------------------------------------------------------------------

class DroppingHost(LocalHost):
    """A local host whose first stream drops after ``after`` lines, as an SSH channel does."""

    def __init__(self, after: int) -> None:
        super().__init__("dropping")
        self.after, self.calls = after, 0

    async def stream(self, argv: list[str], *, stdin: bytes | None = None) -> AsyncIterator[str]:
        self.calls += 1
        inner = super().stream(argv, stdin=stdin)
        async with contextlib.aclosing(inner):
            n = 0
            async for text in inner:
                yield text
                n += 1
                if self.calls == 1 and n >= self.after:
                    raise HostError("dropping: connection reset by peer")


async def test_real_agent_drop_reconnect_and_gap(tmp_path: Path, children: Children) -> None:  # noqa: F811
    sim = make_sim_dir(tmp_path / "sim")
    holder = children.holder(sim, "cuda", "1", 4096.0)
    src = TelemetrySource(DroppingHost(after=3), interval=0.1, sim_dir=str(sim), backoff=(0.05,))
    events = await collect(src, lambda e: isinstance(e, HostSample) and e.seq >= 2 and src.samples > 3)
    assert states(events) == ["connecting", "connected", "lost", "reconnecting", "connected"]
    lost = next(e for e in events if isinstance(e, ConnectionState) and e.state == "lost")
    assert lost.detail == "dropping: connection reset by peer"
    resumed = [e for e in events if isinstance(e, ConnectionState) and e.state == "connected"][1]
    assert resumed.gap_s is not None and 0.05 <= resumed.gap_s < 5
    samples = [e for e in events if isinstance(e, HostSample)]
    first_agent, second_agent = samples[0].agent_pid, samples[-1].agent_pid
    assert first_agent != second_agent
    assert wait_until(lambda: pid_gone(first_agent), 5)  # the dropped agent saw its stdin close
    last = samples[-1]
    assert last.gpus[1].mem_used_mib == 4096.0 and last.procs[0].pid == holder.pid
    assert last.procs[0].kind == "cuda" and last.host == "dropping"
    assert wait_until(lambda: pid_gone(second_agent), 5)  # closing events() ends the agent too


async def test_real_agent_killed_is_lost_and_restarted(tmp_path: Path) -> None:
    sim = make_sim_dir(tmp_path / "sim")
    src = TelemetrySource(LocalHost(), interval=0.1, sim_dir=str(sim), backoff=(0.05,))
    killed: list[int] = []

    def until(ev: Event) -> bool:
        if isinstance(ev, HostSample) and not killed:
            killed.append(ev.agent_pid or 0)
            os.kill(ev.agent_pid or 0, signal.SIGKILL)
        return isinstance(ev, ConnectionState) and ev.gap_s is not None

    events = await collect(src, until)
    assert "lost" in states(events)
    lost = next(e for e in events if isinstance(e, ConnectionState) and e.state == "lost")
    assert lost.detail == "agent exited"
    assert states(events)[-1] == "connected" and pid_gone(killed[0])


async def test_real_host_without_the_python_fails(tmp_path: Path) -> None:
    host = LocalHost(python=str(tmp_path / "no-python3"))
    events = await collect(TelemetrySource(host, backoff=(0.01,)), lambda e: False)
    assert states(events) == ["connecting", "failed"]
    assert "no-python3 on the host" in events[-1].detail  # type: ignore[attr-defined]


async def test_probe_host(tmp_path: Path) -> None:
    sim = make_sim_dir(tmp_path / "sim")
    assert await probe_host(LocalHost(), sim_dir=str(sim)) is None
    reason = await probe_host(LocalHost("box"), agent_args=("--no-nvml", "--nvidia-smi", "/nonexistent"))
    assert reason == "box: no NVIDIA driver on this host (NVML: disabled, nvidia-smi: not found)"
    reason = await probe_host(LocalHost("box", python=str(tmp_path / "python3")))
    assert reason is not None and reason.startswith("box: no ") and "on the host" in reason
    assert sys.executable  # the agent ran under this interpreter above


def test_samples_are_put_on_the_local_clock_despite_host_skew() -> None:
    """A host whose clock runs 100 s behind: its samples land on this side's timeline, in order."""
    from kimitui.hosts.local import LocalHost

    now = [1000.0]
    source = TelemetrySource(LocalHost(), clock=lambda: now[0])
    placed = []
    for k, latency in enumerate((0.030, 0.004, 0.050, 0.004)):
        agent_t = 900.0 + 0.5 * k  # 100 s behind
        now[0] = agent_t + 100.0 + latency
        source.last_sample_at = now[0]
        sample = HostSample(t=agent_t, host="h", seq=k)
        source._to_local_clock(sample)
        placed.append(sample.t)
    assert placed == sorted(placed)
    assert all(abs(t - (900.0 + 0.5 * k + 100.004)) < 0.03 for k, t in enumerate(placed))
