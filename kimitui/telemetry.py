"""Live telemetry: agent lines -> events, and the source that keeps one agent running on a host.

``TelemetrySource(host).events()`` starts the agent (kimitui/hosts/agent.py, sent over the channel and
run by the host's own python3), turns each line into a HostSample / LogLine, and keeps it alive: when the
stream ends, the host errors or lines stop coming, it reports ``lost``, waits (backoff) and restarts it,
and reports ``connected`` with the gap (seconds without samples) once samples flow again. A host without a
driver or without python3 ends in ``failed`` with one clear line, without a retry loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kimitui.core.events import (
    ConnectionState,
    Event,
    EventDecodeError,
    HostSample,
    LogLine,
    from_dict,
)
from kimitui.hosts.agent import agent_command, agent_payload
from kimitui.hosts.base import Host, HostError

Clock = Callable[[], float]
MIN_PYTHON = (3, 7)


@dataclass(frozen=True, slots=True)
class AgentHello:
    t: float
    agent_pid: int | None
    source: str
    driver: str | None
    python: str
    gpus: int


@dataclass(frozen=True, slots=True)
class AgentFatal:
    t: float
    message: str


AgentMessage = HostSample | LogLine | AgentHello | AgentFatal


# --- one line -> one message --------------------------------------------------------------------------

_NUM = (int, float)
_KINDS = ("cuda", "handle", "unknown")


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise EventDecodeError(what)


def _opt_num(d: dict[str, Any], key: str) -> bool:
    v = d.get(key)
    return v is None or (isinstance(v, _NUM) and not isinstance(v, bool))


def check_sample(data: dict[str, Any]) -> None:
    """Raise EventDecodeError unless ``data`` has the HostSample shape with sane types."""
    _check(isinstance(data.get("t"), _NUM), "t is not a number")
    _check(isinstance(data.get("seq"), int), "seq is not an integer")
    gpus, procs = data.get("gpus"), data.get("procs")
    _check(isinstance(gpus, list) and isinstance(procs, list), "gpus/procs are not lists")
    for g in gpus:
        _check(isinstance(g, dict) and isinstance(g.get("index"), int), "gpu without an integer index")
        for key in ("mem_used_mib", "mem_total_mib", "mem_reserved_mib", "util_pct", "temp_c", "power_w",
                    "sm_clock_mhz"):
            _check(_opt_num(g, key), f"gpu {g['index']}: {key} is not a number")
    for p in procs:
        _check(isinstance(p, dict) and isinstance(p.get("pid"), int), "process without an integer pid")
        mem = p.get("gpu_mem_mib", {})
        _check(isinstance(mem, dict) and all(isinstance(v, _NUM) for v in mem.values()),
               f"pid {p['pid']}: gpu_mem_mib is not a map of numbers")
        _check(all(str(k).isdigit() for k in mem), f"pid {p['pid']}: gpu_mem_mib key is not a GPU index")
        _check(p.get("kind", "unknown") in _KINDS, f"pid {p['pid']}: unknown kind {p.get('kind')!r}")


def parse_agent_line(line: str, host: str = "", clock: Clock = time.time) -> AgentMessage:
    """One agent line -> a sample, a log line, the hello or the fatal message. Never raises: a malformed
    or partial line becomes a one-line warning."""
    try:
        data = json.loads(line)
        _check(isinstance(data, dict), "not a JSON object")
        kind = data.get("type")
        if kind == "sample":
            check_sample(data)
            event = from_dict(data)
            assert isinstance(event, HostSample)
            if host:
                event.host = host
            return event
        if kind == "log":
            event = from_dict(data)
            assert isinstance(event, LogLine)
            event.message = _one_line(event.message)
            return event
        if kind == "hello":
            return AgentHello(float(data.get("t") or clock()), data.get("agent_pid"), str(data.get("source")),
                              data.get("driver"), str(data.get("python", "")), int(data.get("gpus") or 0))
        if kind == "fatal":
            return AgentFatal(float(data.get("t") or clock()), _one_line(str(data.get("message", "fatal"))))
        raise EventDecodeError(f"unexpected type {kind!r}")
    except json.JSONDecodeError as exc:
        reason = f"not JSON ({exc.msg} at column {exc.colno})"
    except (EventDecodeError, TypeError, ValueError, AssertionError) as exc:
        reason = str(exc) or type(exc).__name__
    snippet = line if len(line) <= 80 else line[:77] + "..."
    where = f"{host}: " if host else ""
    return LogLine(clock(), "warning", "telemetry", _one_line(f"{where}bad agent line, {reason}: {snippet!r}"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- the source ---------------------------------------------------------------------------------------

class TelemetrySource:
    """An EventSource of one host's telemetry: ConnectionState, HostSample and LogLine events."""

    def __init__(self, host: Host, interval: float = 0.5, sim_dir: str | None = None,
                 dev_prefix: str | None = None, clock: Clock = time.time,
                 backoff: Sequence[float] = (0.5, 1, 2, 5, 10), *, stall_s: float | None = None,
                 first_line_s: float = 30.0, scan_interval: float | None = None,
                 agent_args: Sequence[str] = ()) -> None:
        self.host = host
        self.interval = max(0.1, interval)
        self.sim_dir, self.dev_prefix = sim_dir, dev_prefix
        self.clock = clock
        self.backoff = tuple(backoff) or (1.0,)
        self.stall_s = stall_s if stall_s is not None else max(5.0, 10 * self.interval)
        """Lines stop for this long while the stream stays open: treated as a lost connection."""
        self.first_line_s = first_line_s
        self.scan_interval = scan_interval
        self.agent_args = tuple(agent_args)
        self.hello: AgentHello | None = None
        self.last_sample_at: float | None = None
        self.samples = 0
        self._stop: asyncio.Event | None = None
        self._offset: float | None = None
        """This side's clock minus the agent's, as estimated from sample arrivals."""

    def argv(self) -> list[str]:
        return agent_command(host_python(self.host), self.interval, self.sim_dir, self.dev_prefix,
                             scan_interval=self.scan_interval, extra=self.agent_args)

    def _to_local_clock(self, sample: HostSample) -> None:
        """Put a sample on this side's clock, so it orders correctly against local events (cleanup steps,
        benchmark points) in the run: the host's clock may be skewed. The offset is the smallest
        (arrival - sample time) seen, i.e. the skew plus the fastest delivery; it only ever shrinks."""
        offset = self.last_sample_at - sample.t if self.last_sample_at is not None else 0.0
        if self._offset is None or offset < self._offset:
            self._offset = offset
        sample.t += self._offset
        if sample.boot_time is not None:
            sample.boot_time += self._offset  # the host's boot on the same clock as the sample

    def stop(self) -> None:
        """End events() at the next line or backoff wait (cancelling the consumer task ends it at once)."""
        if self._stop is not None:
            self._stop.set()

    def _state(self, state: str, detail: str = "", gap_s: float | None = None) -> ConnectionState:
        return ConnectionState(self.clock(), host=self.host.name, state=state,  # type: ignore[arg-type]
                               detail=detail, gap_s=gap_s)

    async def events(self) -> AsyncIterator[Event]:
        self._stop = asyncio.Event()
        retry = 0
        yield self._state("connecting")
        while not self._stop.is_set():
            outcome: list[str] = []
            got_sample = False
            run = self._one_run(outcome)
            async with contextlib.aclosing(run):  # closing events() closes the stream: the agent ends
                async for event in run:
                    if isinstance(event, HostSample) and not got_sample:
                        got_sample, retry = True, 0
                        gap = None if self.last_sample_at is None else self.clock() - self.last_sample_at
                        yield self._state("connected", f"agent pid {event.agent_pid}, {event.source}", gap)
                    if isinstance(event, HostSample):
                        self.last_sample_at = self.clock()
                        self.samples += 1
                        self._to_local_clock(event)
                    yield event
            kind, detail = outcome or ["lost", "stopped"]
            if kind == "failed":
                yield self._state("failed", detail)
                return
            if self._stop.is_set():
                break
            if kind == "no-output" and (reason := await python_problem(self.host)) is not None:
                yield self._state("failed", reason)
                return
            delay = self.backoff[min(retry, len(self.backoff) - 1)]
            retry += 1
            if got_sample or self.last_sample_at is not None:
                yield self._state("lost", detail)
            yield self._state("reconnecting", f"{detail}; attempt {retry} in {delay:g}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
        yield self._state("closed", "stopped")

    async def _one_run(self, outcome: list[str]) -> AsyncIterator[Event]:
        """Run the agent once; yield its events; leave (kind, detail) in ``outcome``."""
        assert self._stop is not None
        stream = self.host.stream(self.argv(), stdin=agent_payload())
        lines = 0
        try:
            while not self._stop.is_set():
                timeout = self.stall_s if lines else self.first_line_s
                try:
                    line = await asyncio.wait_for(anext(stream), timeout)
                except StopAsyncIteration:
                    outcome[:] = ["lost" if lines else "no-output",
                                  "agent exited" if lines else "agent exited without output"]
                    return
                except TimeoutError:
                    outcome[:] = ["lost", f"no data for {timeout:g}s"]
                    return
                except HostError as exc:
                    outcome[:] = ["lost" if lines else "no-output", _one_line(str(exc))]
                    return
                except Exception as exc:  # a transport error of some other kind: still never a crash
                    outcome[:] = ["lost" if lines else "no-output", _one_line(f"{type(exc).__name__}: {exc}")]
                    return
                lines += 1
                if not line.strip():
                    continue
                msg = parse_agent_line(line, self.host.name, self.clock)
                if isinstance(msg, AgentFatal):
                    outcome[:] = ["failed", msg.message]
                    return
                if isinstance(msg, AgentHello):
                    self.hello = msg
                    yield LogLine(self.clock(), "info", "telemetry",
                                  f"{self.host.name}: agent pid {msg.agent_pid}, {msg.source}, driver "
                                  f"{msg.driver}, {msg.gpus} GPUs, python {msg.python}")
                    continue
                yield msg
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()


# --- probes -------------------------------------------------------------------------------------------

def host_python(host: Host) -> str:
    """The python the agent runs under: the host's own ``python`` attribute (LocalHost: this one), else
    ``python3`` from the host's PATH."""
    return getattr(host, "python", None) or "python3"


def _python_missing(host: Host, detail: str) -> str:
    return (f"{host.name}: no {host_python(host)} on the host (the agent needs python3 >= "
            f"{'.'.join(map(str, MIN_PYTHON))}): {_one_line(detail)}")


async def python_problem(host: Host, timeout: float = 20.0) -> str | None:
    """None when the host's python3 can run the agent, else the one-line reason."""
    code = "import sys; print('%d.%d' % sys.version_info[:2])"
    try:
        res = await host.run([host_python(host), "-c", code], timeout=timeout)
    except HostError as exc:
        return _python_missing(host, str(exc)) if "not found" in str(exc) else None
    if res.rc == 127 or "not found" in res.stderr.lower() or "no such file" in res.stderr.lower():
        return _python_missing(host, res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "exit 127")
    try:
        version = tuple(int(x) for x in res.stdout.strip().split("."))
    except ValueError:
        return None  # python ran but said something odd: not a reason to give up on the host
    if version < MIN_PYTHON:
        return _python_missing(host, f"found python {res.stdout.strip()}")
    return None


async def probe_host(host: Host, *, sim_dir: str | None = None, agent_args: Sequence[str] = (),
                     timeout: float = 60.0) -> str | None:
    """Does the host have an NVIDIA driver (or the given simulated one)? None = yes, else the one-line
    reason (no driver, no python3, agent failure), fit to show as is."""
    argv = agent_command(host_python(host), sim_dir=sim_dir, extra=("--probe", *agent_args))
    try:
        res = await host.run(argv, stdin=agent_payload(), timeout=timeout)
    except HostError as exc:
        return (await python_problem(host)) or _one_line(str(exc))
    for line in res.stdout.splitlines():
        msg = parse_agent_line(line, host.name) if line.strip() else None
        if isinstance(msg, AgentHello):
            return None if msg.gpus else f"{host.name}: no NVIDIA GPU found (driver {msg.driver})"
        if isinstance(msg, AgentFatal):
            return f"{host.name}: {msg.message}"
    problem = await python_problem(host)
    if problem is not None:
        return problem
    last = (res.stderr.strip().splitlines() or [f"exit status {res.rc}"])[-1]
    return f"{host.name}: the agent failed to start: {_one_line(last)}"


__all__ = [
    "AgentFatal",
    "AgentHello",
    "TelemetrySource",
    "agent_command",
    "agent_payload",
    "check_sample",
    "parse_agent_line",
    "probe_host",
    "python_problem",
]
