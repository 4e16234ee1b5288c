"""What every fleet source is, and the rounds that turn one into events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Protocol

from kimitui.core.events.fleet import FleetHost, FleetSample, FleetSource


class FleetReader(Protocol):
    """A fleet source. ``read`` returns one row per host it knows, in a stable order, within ``deadline_s``
    (a host that did not answer in time is a row that says so, never a stall); it raises only when the source
    itself cannot be read at all (Prometheus down), with a one-line message."""

    source: FleetSource
    where: str

    async def read(self, deadline_s: float) -> list[FleetHost]: ...

    async def close(self) -> None: ...


class SourceDown(RuntimeError):
    """The source itself cannot be read (Prometheus not answering): one line, said on the round's row."""


async def rounds(reader: FleetReader, interval: float = 1.0, count: int | None = None,
                 clock: Callable[[], float] = time.time) -> AsyncIterator[FleetSample]:
    """A ``FleetSample`` every INTERVAL seconds (COUNT of them, or until cancelled). Each round's deadline is the
    interval (at least 0.5 s): a slow host is said to be slow, the rest are on time."""
    seq = 0
    last: list[FleetHost] = []
    deadline = max(0.5, interval)
    next_at = time.monotonic()
    while count is None or seq < count:
        began = time.monotonic()
        error = ""
        try:
            hosts = await reader.read(deadline)
        except SourceDown as exc:
            error = str(exc)
            hosts = [replace(h, state="stale", detail=error) for h in last]
        last = hosts
        took = (time.monotonic() - began) * 1000.0
        yield FleetSample(clock(), source=reader.source, where=reader.where, seq=seq, hosts=hosts,
                          round_ms=round(took, 3), error=error)
        seq += 1
        next_at += interval
        wait = next_at - time.monotonic()
        if wait < 0:  # a round ran over: start the next one now, not several at once to catch up
            next_at = time.monotonic()
            wait = 0.0
        if count is None or seq < count:
            await asyncio.sleep(wait)
