"""What the cleanup sees: the host's latest telemetry sample, the same one the dashboard shows.

``ProcessView`` is the one interface the executor reads processes and GPU memory from. ``SampleFeed``
implements it over any stream of ``HostSample`` events (a TelemetrySource, a session's bus): feed it
with ``push`` or let it ``follow`` a source. ``after`` is a local monotonic time: ``latest(after=t)``
waits for a sample TAKEN after t, so a wait that follows a signal never judges a stale sample. A sample's
``t`` is when it was taken on the recording side's clock: the telemetry source (kimitui.hosts.telemetry) maps the
host's clock there once, for the run file and for this feed alike; the feed only turns that wall time into
local monotonic time (a sample that sat in a busy event loop keeps the time it was taken).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

from kimitui.core.events import Event, HostSample


class ViewTimeout(TimeoutError):
    """No sample newer than asked for came in time (telemetry stalled)."""


class ProcessView(Protocol):
    async def latest(self, after: float | None = None, timeout: float = 5.0) -> HostSample:
        """The newest sample; with ``after`` (time.monotonic()), one that arrived after that moment."""
        ...


class SampleFeed:
    """A ProcessView over pushed samples."""

    def __init__(self) -> None:
        self._sample: HostSample | None = None
        self._taken_local = 0.0
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    @property
    def current(self) -> HostSample | None:
        return self._sample

    def push(self, event: Event) -> None:
        """Take a sample (other events are ignored): usable as a Session sink."""
        if not isinstance(event, HostSample):
            return
        now_wall, now_mono = time.time(), time.monotonic()
        # when it was taken (recorded time), on the local monotonic clock; never later than its arrival
        self._taken_local = min(now_mono, event.t - now_wall + now_mono)
        self._sample = event
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def latest(self, after: float | None = None, timeout: float = 5.0) -> HostSample:
        deadline = time.monotonic() + timeout
        while self._sample is None or (after is not None and self._taken_local <= after):
            left = deadline - time.monotonic()
            if left <= 0:
                detail = f" ({self.error})" if self.error else ""
                raise ViewTimeout(f"no telemetry sample within {timeout:.1f}s{detail}")
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, left)
        return self._sample

    def follow(self, events: AsyncIterator[Any], publish: Any = None) -> asyncio.Task[None]:
        """Consume a source's events in the background (publishing each one too, when given)."""

        async def pump() -> None:
            try:
                async for ev in events:
                    if publish is not None:
                        publish(ev)
                    self.push(ev)
            except Exception as exc:  # the view reports a stalled source through ViewTimeout
                self.error = exc

        self._task = asyncio.get_running_loop().create_task(pump())
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
