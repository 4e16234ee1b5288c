"""The fleet over SSH (``kimitui fleet HOST...``): our agent on every host, each on a connection of its own, all
at once, reconnecting as the dashboard does (``TelemetrySource``). A round reads nothing: it says what each
host's stream last said, so a host that is down or slow never holds the others back.

A host's row: ``connecting`` until its first sample, ``up`` while its samples come, ``stale`` once none came for
``STALE_INTERVALS`` intervals while its connection holds, ``down`` while it does not answer (the connection lost
and being retried, its last figures kept; back ``up`` with its next sample) or once its stream failed for good
(an unknown host, a refused key, no driver), with the reason. Holders and the
service come from the agent's process list: a process holding memory on a GPU, or a CUDA context there, holds it;
one in a systemd service unit or a container is the host's service's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from kimitui.core.events import ConnectionState, Event, FleetGpu, FleetHost, HostSample, ProcSample
from kimitui.core.events.fleet import FleetSource
from kimitui.core.gpu_words import busy_link_words
from kimitui.core.printable import printable

STALE_INTERVALS = 4.0


class Stream(Protocol):
    def events(self) -> AsyncIterator[Event]: ...

    def stop(self) -> None: ...


def _serves(p: ProcSample) -> str:
    """The service a process belongs to ("" for none): its systemd service unit, else its container."""
    if p.unit and p.unit.endswith(".service"):
        return p.unit
    return p.container or ""


def host_of_sample(name: str, sample: HostSample) -> FleetHost:
    """One agent sample as a fleet row."""
    gpus = []
    services: Counter[str] = Counter()
    for g in sample.gpus:
        on = [p for p in sample.procs if p.gpu_mem_mib.get(g.index) or (p.kind == "cuda" and g.index in p.gpus)]
        served = [p for p in on if _serves(p)]
        services.update(_serves(p) for p in served)
        gpus.append(FleetGpu(index=g.index, name=g.name, uuid=g.uuid, mem_used_mib=g.mem_used_mib,
                             mem_total_mib=g.mem_total_mib, util_pct=g.util_pct, temp_c=g.temp_c, power_w=g.power_w,
                             sm_clock_mhz=g.sm_clock_mhz, holders=len(on), service_holders=len(served),
                             throttle=list(g.throttle or []), link=busy_link_words(g.util_pct, g.pcie), xid=g.xid,
                             error=printable(g.error or "")))
    return FleetHost(name=name, state="up", gpus=gpus,
                     service=services.most_common(1)[0][0] if services else "")


@dataclass(slots=True)
class _Watched:
    name: str
    stream: Stream
    task: asyncio.Task[None] | None = None
    host: FleetHost | None = None
    seen: float | None = None
    state: str = "connecting"
    detail: str = ""


class SshFleetReader:
    """Every host's agent stream, started at once and kept going; ``read`` says where each stands."""

    source: FleetSource = "ssh"

    def __init__(self, streams: dict[str, Stream], interval: float, where: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval, self.clock = interval, clock
        self.where = where or f"{len(streams)} hosts over SSH"
        self.watched = [_Watched(name, s) for name, s in streams.items()]

    def start(self) -> None:
        for w in self.watched:
            if w.task is None:
                w.task = asyncio.ensure_future(self._follow(w))

    async def _follow(self, w: _Watched) -> None:
        try:
            async with contextlib.aclosing(w.stream.events()) as events:
                async for ev in events:
                    if isinstance(ev, HostSample):
                        w.host, w.seen, w.state, w.detail = host_of_sample(w.name, ev), self.clock(), "up", ""
                    elif isinstance(ev, ConnectionState):
                        if ev.state == "failed":
                            w.state, w.detail = "down", printable(ev.detail)[:200]
                        elif ev.state in ("lost", "reconnecting"):
                            # not answering: a row that says so (its last figures kept) while it is retried
                            w.state, w.detail = "retrying", printable(f"{ev.state}: {ev.detail}")[:200]
            if w.state != "down":
                w.state, w.detail = "down", w.detail or "its agent stream ended"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a stream must never take the fleet down: its host is a row that says why
            w.state, w.detail = "down", printable(f"{type(exc).__name__}: {exc}")[:200]

    def row(self, w: _Watched) -> FleetHost:
        age = None if w.seen is None else self.clock() - w.seen
        base = w.host or FleetHost(w.name)
        if w.state in ("down", "retrying"):
            return FleetHost(w.name, state="down", detail=w.detail, gpus=base.gpus, service=base.service,
                             age_s=None if age is None else round(age, 3))
        if w.host is None:
            return FleetHost(w.name, state="connecting", detail=w.detail)
        if age is not None and age > STALE_INTERVALS * self.interval:
            return FleetHost(w.name, state="stale", detail=w.detail or f"no sample for {age:.0f} s", gpus=base.gpus,
                             service=base.service, age_s=round(age, 3))
        return FleetHost(w.name, state="up", gpus=base.gpus, service=base.service, age_s=round(age or 0.0, 3))

    async def read(self, deadline_s: float) -> list[FleetHost]:
        self.start()
        return [self.row(w) for w in self.watched]

    async def close(self) -> None:
        for w in self.watched:
            w.stream.stop()
        tasks = [w.task for w in self.watched if w.task is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
