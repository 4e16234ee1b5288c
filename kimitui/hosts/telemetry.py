"""Live telemetry: agent lines -> events, and the source that keeps a host's sample stream flowing.

``TelemetrySource(host).events()`` asks the host's agent (kimitui/hostside/agent/, one per host, shared
with the cleanup's requests) for a sample stream, turns each line into a HostSample / LogLine, and keeps
it flowing: when the channel drops or lines stop coming, it reports ``lost``, reconnects through the
host's link (the one layer that retries and backs off) and reports ``connected`` with the gap (seconds
without samples) once samples flow again. A host without a driver, without a usable python, with a
refused key or a name that does not resolve ends in ``failed`` with one clear line, without a retry loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kimitui.core.error_words import json_words
from kimitui.core.events import (
    ConnectionState,
    Event,
    EventDecodeError,
    HostSample,
    LogLine,
    from_dict,
)
from kimitui.hosts.base import Host, HostError, HostFatal, RequestFailed
from kimitui.hosts.link import Lost

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What the agent said when the sample stream started."""

    agent_pid: int | None
    source: str
    driver: str | None
    python: str
    gpus: int


AgentMessage = HostSample | LogLine


# --- one line -> one message --------------------------------------------------------------------------

REASON_CHARS = 90
"""A bad line's warning names what is wrong in at most this many characters (a field's allowed values can be many)."""


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise EventDecodeError(what)


def parse_agent_line(line: str, host: str = "", clock: Clock = time.time) -> AgentMessage:
    """One agent line of the sample stream -> a sample or a log line. Never raises: a malformed or partial
    line becomes a one-line warning."""
    try:
        data = json.loads(line)
        _check(isinstance(data, dict), "not a JSON object")
        kind = data.get("type")
        if kind == "sample":  # checked once, field by field, as it is built (kimitui.core.typed)
            event = from_dict({**data, "host": host} if host else data)
            assert isinstance(event, HostSample)
            return event
        if kind == "log":
            event = from_dict(data)
            assert isinstance(event, LogLine)
            return dataclasses.replace(event, message=_one_line(event.message))
        raise EventDecodeError(f"unexpected type {kind!r}")
    except json.JSONDecodeError as exc:
        reason = f"not JSON ({json_words(exc)})"
    except (EventDecodeError, TypeError, ValueError, AssertionError) as exc:
        reason = str(exc) or type(exc).__name__
    reason = reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS - 3] + "..."
    snippet = line if len(line) <= 80 else line[:77] + "..."
    where = f"{host}: " if host else ""
    return LogLine(clock(), "warning", "telemetry", _one_line(f"{where}bad agent line, {reason}: {snippet!r}"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- the source ---------------------------------------------------------------------------------------

class TelemetrySource:
    """An EventSource of one host's telemetry: ConnectionState, HostSample and LogLine events."""

    def __init__(self, host: Host, interval: float = 0.5, sim_dir: str | None = None,
                 dev_prefix: str | None = None, clock: Clock = time.time, *, stall_s: float | None = None,
                 scan_interval: float | None = None, source_options: Mapping[str, Any] | None = None) -> None:
        self.host = host
        self.interval = max(0.1, interval)
        self.sim_dir, self.dev_prefix = sim_dir, dev_prefix
        self.clock = clock
        self.stall_s = stall_s if stall_s is not None else max(5.0, 10 * self.interval)
        """Lines stop for this long while the channel stays open: the agent is restarted (a loss)."""
        self.scan_interval = scan_interval
        self.source_options = dict(source_options or {})
        """More of the agent's SOURCE fields: no_nvml, nvidia_smi, proc_root."""
        self.info: StreamInfo | None = None
        self.last_sample_at: float | None = None
        self.samples = 0
        self._stop: asyncio.Event | None = None
        self._offset: float | None = None
        """This side's clock minus the agent's, as estimated from sample arrivals."""

    def request_fields(self) -> dict[str, Any]:
        """The agent's ``sample`` request."""
        fields: dict[str, Any] = {"interval": self.interval, **source_fields(self.sim_dir, self.dev_prefix,
                                                                             self.source_options)}
        if self.scan_interval is not None:
            fields["scan_interval"] = self.scan_interval
        return fields

    def _to_local_clock(self, sample: HostSample) -> HostSample:
        """Put a sample on this side's clock, so it orders correctly against local events (cleanup steps,
        benchmark points) in the run: the host's clock may be skewed. The offset is the smallest
        (arrival - sample time) seen, i.e. the skew plus the fastest delivery; it only ever shrinks."""
        offset = self.last_sample_at - sample.t if self.last_sample_at is not None else 0.0
        if self._offset is None or offset < self._offset:
            self._offset = offset
        # the host's boot on the same clock as the sample
        boot = None if sample.boot_time is None else sample.boot_time + self._offset
        return dataclasses.replace(sample, t=sample.t + self._offset, boot_time=boot)

    def stop(self) -> None:
        """End events() at the next line or reconnect wait (cancelling the consumer task ends it at once)."""
        if self._stop is not None:
            self._stop.set()

    def _state(self, state: str, detail: str = "", gap_s: float | None = None) -> ConnectionState:
        return ConnectionState(self.clock(), host=self.host.name, state=state,  # type: ignore[arg-type]
                               detail=detail, gap_s=gap_s)

    async def _unless_stopped(self, coro: Awaitable[Any]) -> tuple[bool, Any]:
        """(True, result) or (False, None) when stop() came first (the call is then cancelled)."""
        assert self._stop is not None
        task = asyncio.ensure_future(coro)
        stopper = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if task.done():
            return True, task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        return False, None

    async def events(self) -> AsyncIterator[Event]:
        self._stop = asyncio.Event()
        link = self.host.link
        attempt = 0
        live = False  # samples flowed since the last "connected"
        yield self._state("connecting")
        while not self._stop.is_set():
            queue = link.subscribe()
            try:
                try:
                    ok, hello = await self._unless_stopped(link.connect())
                    if not ok:
                        break
                    ok, reply = await self._unless_stopped(link.request("sample", self.request_fields(),
                                                                        timeout=60.0))
                    if not ok:
                        break
                except HostFatal as exc:
                    yield self._state("failed", _one_line(str(exc)))
                    return
                except RequestFailed as exc:  # the agent runs, the driver does not: said once, not retried
                    yield self._state("failed", _one_line(f"{self.host.name}: {exc}"))
                    return
                except HostError as exc:
                    if live:
                        live = False
                        yield self._state("lost", _one_line(str(exc)))
                    attempt += 1
                    yield self._state("reconnecting", f"{_one_line(str(exc))}; attempt {attempt + 1} in "
                                                      f"{link.next_delay():g}s")
                    continue
                self.info = StreamInfo(hello.pid, str(reply.get("source")), reply.get("driver"), hello.python,
                                       int(reply.get("gpus") or 0))
                yield LogLine(self.clock(), "info", "telemetry",
                              f"{self.host.name}: agent pid {hello.pid}, {self.info.source}, driver "
                              f"{self.info.driver}, {self.info.gpus} GPUs, python {hello.python}")
                outcome: list[str] = []
                async for event in self._pump(queue, outcome):
                    if event is None:  # the first sample of this stream
                        attempt, live = 0, True
                        gap = None if self.last_sample_at is None else self.clock() - self.last_sample_at
                        yield self._state("connected", f"agent pid {hello.pid}, {self.info.source}", gap)
                        continue
                    if isinstance(event, HostSample):
                        self.last_sample_at = self.clock()
                        self.samples += 1
                        event = self._to_local_clock(event)
                    yield event
                if self._stop.is_set():
                    break
                detail = outcome[0] if outcome else "stopped"
                if live:
                    live = False
                    yield self._state("lost", detail)
                attempt += 1
                yield self._state("reconnecting", f"{detail}; attempt {attempt + 1} in {link.next_delay():g}s")
            finally:
                link.unsubscribe(queue)
        await self._stop_stream(link)
        yield self._state("closed", "stopped")

    async def _pump(self, queue: asyncio.Queue[Any], outcome: list[str]) -> AsyncIterator[Event | None]:
        """This stream's events (None marks the first sample) until the channel drops, lines stop coming
        (the agent is then restarted) or stop(); the reason is left in ``outcome``."""
        assert self._stop is not None
        got = False
        while not self._stop.is_set():
            ok, item = await self._unless_stopped(_get(queue, self.stall_s))
            if not ok:
                return
            if item is None:
                outcome.append(f"no data for {self.stall_s:g}s")
                await self.host.link.reset(f"no data for {self.stall_s:g}s")
                return
            if isinstance(item, Lost):
                outcome.append(item.reason)
                return
            if not item.strip():
                continue
            msg = parse_agent_line(item, self.host.name, self.clock)
            if isinstance(msg, HostSample) and not got:
                got = True
                yield None
            yield msg

    async def _stop_stream(self, link: Any) -> None:
        """The stream is not wanted any more: the agent stops sampling (it stays, for other requests)."""
        if link.up:
            with contextlib.suppress(HostError, TimeoutError):
                await asyncio.wait_for(link.request("sample_stop", {}, timeout=5.0), 6.0)


async def _get(queue: asyncio.Queue[Any], timeout: float) -> Any:
    """The next item, or None when none came in time."""
    try:
        return await asyncio.wait_for(queue.get(), timeout)
    except TimeoutError:
        return None


def source_fields(sim_dir: str | None = None, dev_prefix: str | None = None,
                  options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    fields: dict[str, Any] = {k: v for k, v in (options or {}).items() if v is not None}
    if sim_dir is not None:
        fields["sim_dir"] = sim_dir
    if dev_prefix is not None:
        fields["dev_prefix"] = dev_prefix
    return fields


# --- probes -------------------------------------------------------------------------------------------

async def probe_host(host: Host, *, sim_dir: str | None = None, dev_prefix: str | None = None,
                     source_options: Mapping[str, Any] | None = None, timeout: float = 60.0) -> str | None:
    """Can the host run the agent, and does it have an NVIDIA driver (or the given simulated one)? None =
    yes, else the one-line reason (no driver, no usable python, refused key, unknown name), fit to show."""
    try:
        await host.link.connect()
        info = await host.link.request("probe", source_fields(sim_dir, dev_prefix, source_options),
                                       timeout=timeout)
    except RequestFailed as exc:
        return _one_line(f"{host.name}: {exc}")
    except HostError as exc:
        return _one_line(str(exc))
    if not info.get("gpus"):
        return f"{host.name}: no NVIDIA GPU found (driver {info.get('driver')})"
    return None


__all__ = [
    "StreamInfo",
    "TelemetrySource",
    "parse_agent_line",
    "probe_host",
    "source_fields",
]
