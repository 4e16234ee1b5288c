"""Agent lines -> events, and TelemetrySource: reconnect, gap, no driver, stall, no python, probe_host."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from kimitui.core.events import ConnectionState, Event, GpuSample, HostSample, LogLine, ProcSample
from kimitui.hosts.base import Channel, Host, HostError
from kimitui.hosts.local import LocalHost
from kimitui.hosts.telemetry import TelemetrySource, parse_agent_line, probe_host
from kimitui.hostside.wire import line_tag
from tests.agent_helpers import (
    Children,
    children,  # noqa: F401 (fixture)
    make_sim_dir,
    pid_gone,
)
from tests.waiting import DEADLINE_S, wait_until

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


def test_agent_log_lines() -> None:
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
    "hello here": '{"t":1,"type":"hello","agent_pid":5}',
    "array": "[1, 2]",
}


def test_malformed_or_partial_lines_become_one_line_warnings() -> None:
    for what, text in BAD_LINES.items():
        ev = parse_agent_line(text, host="h200", clock=lambda: 5.0)
        assert isinstance(ev, LogLine), what
        assert (ev.t, ev.level, ev.source) == (5.0, "warning", "telemetry"), what
        assert ev.message.startswith("h200: bad agent line") and "\n" not in ev.message, what
        assert len(ev.message) < 200, what


# --- TelemetrySource with a scripted agent ------------------------------------------------------------

HELLO = json.dumps({"t": 1, "type": "hello", "agent_pid": 900, "start_time": 5, "protocol": 2, "python": "3.12.3",
                    "executable": "/usr/bin/python3", "host": "gpu-box", "user": "root", "uid": 0, "ancestors": []})
NODRIVER = "NODRIVER"
HANG = "HANG"


class ScriptedChannel:
    """Speaks the agent's protocol from a script: hello, a reply to each request, then the script's lines
    for the sample stream; an exception item raises it (a transport failure), HANG stops answering, and
    the end of the script is the end of the channel. NODRIVER answers the sample request as a host
    without a driver does."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.out: asyncio.Queue[Any] = asyncio.Queue()
        self.out.put_nowait(HELLO)
        self.requests: list[dict[str, Any]] = []
        self.closed = False
        self.tag = b"{"

    def write(self, data: bytes) -> None:
        if data[:1].isdigit():  # the bootstrap's payload (length and token, then the source), not a request
            header = data.split(b"\n", 1)[0].split()
            if len(header) > 1:
                self.tag = line_tag(header[1].decode())  # what each line of the agent starts with
            return
        for raw in data.splitlines():
            req = json.loads(raw)
            self.requests.append(req)
            reply: dict[str, Any] = {"t": 2, "type": "reply", "id": req["id"], "ok": True, "result": {}}
            if req["op"] == "sample":
                if self.script == [NODRIVER]:
                    reply.update(ok=False, error="no NVIDIA driver on this host (NVML: x)", kind="nodriver")
                else:
                    reply["result"] = {"source": "nvml", "driver": "580", "gpus": 1}
                    self.out.put_nowait(json.dumps(reply))
                    for item in self.script:
                        self.out.put_nowait(item)
                    self.out.put_nowait(EOFError())
                    continue
            self.out.put_nowait(json.dumps(reply))

    async def drain(self) -> None:
        if self.closed:
            raise HostError("scripted: closed")

    async def readline(self) -> bytes:
        item = await self.out.get()
        if isinstance(item, EOFError):
            return b""
        if isinstance(item, Exception):
            raise item
        if item == HANG:
            await asyncio.Event().wait()
        raw = item.encode()
        return (self.tag + raw[1:] if raw.startswith(b"{") else raw) + b"\n"

    async def wait_exit(self, timeout: float) -> int | None:
        return 0

    def stderr_tail(self) -> str:
        return ""

    def end_reason(self) -> str:
        return "agent exited"

    async def close(self) -> None:
        self.closed = True


class ScriptedHost(Host):
    """Each channel opened plays the next script (the last one repeats)."""

    def __init__(self, scripts: list[list[Any]], backoff: tuple[float, ...] = (0.01,)) -> None:
        self.name = "scripted"
        self.scripts = scripts
        self.backoff = backoff
        self.channels: list[ScriptedChannel] = []

    async def open_channel(self, argv: list[str]) -> ScriptedChannel:  # type: ignore[override]
        self.channels.append(ScriptedChannel(self.scripts[min(len(self.channels), len(self.scripts) - 1)]))
        return self.channels[-1]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


async def collect(source: TelemetrySource, until: Any, limit: int = 200, timeout: float = DEADLINE_S) -> list[Event]:
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


async def test_bad_line_is_logged_and_samples_continue_then_reconnect_records_the_gap() -> None:
    host = ScriptedHost([[line(seq=1), "{garbage", line(seq=2)],  # then the channel ends
                         [line(seq=1)]])
    src = TelemetrySource(host, clock=FakeClock())
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
    assert len(host.channels) == 2
    sample_req = next(r for r in host.channels[0].requests if r["op"] == "sample")
    assert sample_req["interval"] == 0.5 and "id" in sample_req


async def test_transport_error_mid_stream_is_lost_with_its_detail() -> None:
    host = ScriptedHost([[line(seq=1), HostError("connection to gpu-box lost: reset")], [line(seq=1), HANG]])
    events = await collect(TelemetrySource(host), lambda e: isinstance(e, ConnectionState) and e.gap_s is not None)
    lost = next(e for e in events if isinstance(e, ConnectionState) and e.state == "lost")
    assert lost.detail == "connection to gpu-box lost: reset"
    assert len(host.channels) == 2 and host.channels[0].closed is False  # it ended by itself
    await host.close()
    assert host.channels[1].closed


async def test_no_driver_fails_once_without_retry() -> None:
    host = ScriptedHost([[NODRIVER]])
    events = await collect(TelemetrySource(host), lambda e: False)
    assert states(events) == ["connecting", "failed"]
    assert events[-1].detail == "scripted: no NVIDIA driver on this host (NVML: x)"  # type: ignore[attr-defined]
    assert len(host.channels) == 1


async def test_stalled_stream_restarts_the_agent() -> None:
    host = ScriptedHost([[line(seq=1), HANG], [line(seq=1)]])
    src = TelemetrySource(host, stall_s=0.2)
    events = await collect(src, lambda e: isinstance(e, ConnectionState) and e.gap_s is not None)
    lost = next(e for e in events if isinstance(e, ConnectionState) and e.state == "lost")
    assert lost.detail == "no data for 0.2s"
    assert host.channels[0].closed  # the hung channel was closed, not leaked
    assert len(host.channels) == 2


async def test_stop_ends_the_backoff_wait() -> None:
    host = ScriptedHost([[]], backoff=(3600.0,))  # every agent ends at once: a quick death, so backoff applies
    src = TelemetrySource(host)
    seen: list[Event] = []

    async def consume() -> None:
        async for ev in src.events():
            seen.append(ev)
            if isinstance(ev, ConnectionState) and ev.state == "reconnecting":
                src.stop()

    await asyncio.wait_for(consume(), DEADLINE_S)  # not an hour: the wait is cut by the stop event
    assert states(seen)[-1] == "closed"
    assert "in 3600s" in next(e.detail for e in seen if isinstance(e, ConnectionState) and e.state == "reconnecting")


# --- with the real agent --------------------------------------------------------------------------------

class DroppingHost(LocalHost):
    """A local host whose first channel fails after ``after`` lines, as an SSH channel does when the
    connection resets (the agent itself is left to notice its stdin closing)."""

    def __init__(self, after: int) -> None:
        super().__init__("dropping")
        self.after, self.opened = after, 0

    async def open_channel(self, argv: list[str]) -> Channel:
        ch = await super().open_channel(argv)
        self.opened += 1
        if self.opened > 1:
            return ch
        after, inner_readline = self.after, ch.readline
        count = [0]

        async def readline() -> bytes:
            if count[0] >= after:
                await ch.close()
                raise HostError("dropping: connection reset by peer")
            count[0] += 1
            return await inner_readline()

        ch.readline = readline  # type: ignore[method-assign]
        return ch


async def test_real_agent_drop_reconnect_and_gap(tmp_path: Path, children: Children) -> None:  # noqa: F811
    sim = make_sim_dir(tmp_path / "sim")
    holder = children.holder(sim, "cuda", "1", 4096.0)
    host = DroppingHost(after=4)  # hello, the sample reply, then 2 samples
    src = TelemetrySource(host, interval=0.1, sim_dir=str(sim))
    try:
        events = await collect(src, lambda e: isinstance(e, HostSample) and e.seq >= 2 and src.samples > 3)
        assert states(events) == ["connecting", "connected", "lost", "reconnecting", "connected"]
        lost = next(e for e in events if isinstance(e, ConnectionState) and e.state == "lost")
        assert lost.detail == "dropping: connection reset by peer"
        resumed = [e for e in events if isinstance(e, ConnectionState) and e.state == "connected"][1]
        assert resumed.gap_s is not None and resumed.gap_s > 0  # the time without samples, recorded
        samples = [e for e in events if isinstance(e, HostSample)]
        first_agent, second_agent = samples[0].agent_pid, samples[-1].agent_pid
        assert first_agent != second_agent
        wait_until(lambda: pid_gone(first_agent), "the dropped agent to end (its stdin closed)")
        last = samples[-1]
        assert last.gpus[1].mem_used_mib == 4096.0 and last.procs[0].pid == holder.pid
        assert last.procs[0].kind == "cuda" and last.host == "dropping"
        assert not pid_gone(second_agent)  # the agent outlives the stream: it serves the host's other requests
    finally:
        await host.close()
    wait_until(lambda: pid_gone(second_agent), "the agent to end when the host closes")


async def test_real_agent_killed_is_lost_and_restarted(tmp_path: Path) -> None:
    sim = make_sim_dir(tmp_path / "sim")
    host = LocalHost()
    src = TelemetrySource(host, interval=0.1, sim_dir=str(sim))
    killed: list[int] = []

    def until(ev: Event) -> bool:
        if isinstance(ev, HostSample) and not killed:
            killed.append(ev.agent_pid or 0)
            os.kill(ev.agent_pid or 0, signal.SIGKILL)
        return isinstance(ev, ConnectionState) and ev.gap_s is not None

    try:
        events = await collect(src, until)
    finally:
        await host.close()
    assert "lost" in states(events)
    lost = next(e for e in events if isinstance(e, ConnectionState) and e.state == "lost")
    assert lost.detail == "agent exited (status -9)"
    assert states(events)[-1] == "connected" and pid_gone(killed[0])


async def test_real_host_without_the_python_fails_once(tmp_path: Path) -> None:
    host = LocalHost("box", python=str(tmp_path / "no-python3"))
    events = await collect(TelemetrySource(host), lambda e: False)
    assert states(events) == ["connecting", "failed"]
    detail = events[-1].detail  # type: ignore[attr-defined]
    assert detail.startswith(f"box: no {tmp_path}/no-python3 on the host") and "python >= 3.8" in detail
    assert "\n" not in detail and host.link.attempts == 1


async def test_probe_host(tmp_path: Path) -> None:
    sim = make_sim_dir(tmp_path / "sim")
    async with LocalHost() as host:
        assert await probe_host(host, sim_dir=str(sim)) is None
    async with LocalHost("box") as host:
        reason = await probe_host(host, source_options={"no_nvml": True, "nvidia_smi": "/nonexistent"})
    assert reason == "box: no NVIDIA driver on this host (NVML: disabled, nvidia-smi: not found)"
    async with LocalHost("box", python=str(tmp_path / "python3")) as host:
        reason = await probe_host(host)
    assert reason is not None and reason.startswith("box: no ") and "on the host" in reason


def test_samples_are_put_on_the_local_clock_despite_host_skew() -> None:
    """A host whose clock runs 100 s behind: its samples land on this side's timeline, in order."""
    now = [1000.0]
    source = TelemetrySource(LocalHost(), clock=lambda: now[0])
    placed = []
    for k, latency in enumerate((0.030, 0.004, 0.050, 0.004)):
        agent_t = 900.0 + 0.5 * k  # 100 s behind
        now[0] = agent_t + 100.0 + latency
        source.last_sample_at = now[0]
        sample = HostSample(t=agent_t, host="h", seq=k)
        placed.append(source._to_local_clock(sample).t)
    assert placed == sorted(placed)
    assert all(abs(t - (900.0 + 0.5 * k + 100.004)) < 0.03 for k, t in enumerate(placed))
