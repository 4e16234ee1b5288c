"""The session bus: sources publish events, sinks (recorder, fold, printers) receive them.

A source is anything that yields events (the host agent, the cleanup executor, a benchmark worker, a
replayed run). ``Session`` stamps nothing and reorders nothing: events reach every sink in the order
they were published, and the recorder writes each one before any other sink sees it, so a crash loses
at most the event in hand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol

from kimitui.core.events import Event
from kimitui.core.runfile import RunWriter
from kimitui.core.state import SessionState, fold

Sink = Callable[[Event], None]


class EventSource(Protocol):
    """Anything that produces events for a session."""

    def events(self) -> AsyncIterator[Event]: ...


class Recorder(Protocol):
    """Where a session's events are written as they are published: a run file (``RunWriter``) or a
    chunked, rotated recording (``kimitui.core.runchunks.SegmentedWriter``)."""

    path: Path

    def append(self, event: Event) -> None: ...

    def close(self) -> None: ...


class Session:
    """One profiling session: a bus with a recorder, the folded state, and any other sinks."""

    def __init__(self, recorder: Recorder | None = None) -> None:
        self.recorder = recorder
        self.state = SessionState()
        self._sinks: list[Sink] = []
        self.version = 0
        """Bumped on every event: a view redraws when it changed since its last frame."""

    def subscribe(self, sink: Sink) -> Callable[[], None]:
        self._sinks.append(sink)
        return lambda: self._sinks.remove(sink)

    def publish(self, event: Event) -> None:
        if self.recorder is not None:
            self.recorder.append(event)
        fold(self.state, event)
        self.version += 1
        for sink in list(self._sinks):
            sink(event)

    async def pump(self, source: EventSource) -> None:
        """Publish every event of a source until it ends (or the task is cancelled)."""
        async for event in source.events():
            self.publish(event)

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetched:
    """A source started before its consumer: from construction on, its events are read into a queue (in the
    running loop), and ``events()`` yields them in order, then the rest as they come. The dashboard starts
    its host's telemetry this way before importing Textual, so the first sample is in hand when the first
    frame is drawn. ``on_event`` sees each event as it is read (the dashboard's first look). ``close()``
    stops the reading (also when nothing ever consumed it)."""

    def __init__(self, source: EventSource, on_event: Sink | None = None) -> None:
        self.source = source
        self.on_event = on_event
        self._queue: asyncio.Queue[Event | _Failed | None] = asyncio.Queue()
        self._end: list[_Failed | None] = []
        """The source's end (or failure) met by ``take_ready``: what ``events()`` meets first."""
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async for event in self.source.events():
                self._queue.put_nowait(event)
                if self.on_event is not None:
                    self.on_event(event)
        except Exception as exc:  # said where it is consumed, as the source itself would have raised it
            self._queue.put_nowait(_Failed(exc))
        finally:
            self._queue.put_nowait(None)

    def take_ready(self) -> list[Event]:
        """The events read so far that nobody consumed, taken now (the dashboard publishes them before its first
        frame, which then shows the first sample rather than an empty table filled a frame later); the source's
        end or failure, if read, stays for ``events()``."""
        taken: list[Event] = []
        while not self._end and not self._queue.empty():
            item = self._queue.get_nowait()
            if item is None or isinstance(item, _Failed):
                self._end.append(item)
            else:
                taken.append(item)
        return taken

    async def events(self) -> AsyncIterator[Event]:
        try:
            while (item := (self._end.pop() if self._end else await self._queue.get())) is not None:
                if isinstance(item, _Failed):
                    raise item.error
                yield item
        finally:
            self.close()

    def close(self) -> None:
        self._task.cancel()


def default_runs_dir() -> Path:
    """Where live sessions are recorded: $XDG_DATA_HOME/kimitui/runs (~/.local/share/kimitui/runs)."""
    import os

    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kimitui" / "runs"


def new_run_path(host: str, runs_dir: Path | None = None, now: float | None = None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in host) or "host"
    base = runs_dir or default_runs_dir()
    path = base / f"{stamp}-{safe}.jsonl"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-{safe}-{n}.jsonl"
    return path


def recorded_session(host: str, meta: dict[str, Any] | None = None, path: Path | None = None) -> Session:
    """A session whose every event is recorded to a new run file."""
    return Session(RunWriter(path or new_run_path(host), host=host, meta=meta))


class QueueSource:
    """A source fed from another thread or callback; ``put`` then ``close``."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()

    def put(self, event: Event) -> None:
        self._queue.put_nowait(event)

    def close(self) -> None:
        self._queue.put_nowait(None)

    async def events(self) -> AsyncIterator[Event]:
        while (event := await self._queue.get()) is not None:
            yield event
