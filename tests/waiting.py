"""The one way a test waits for something: poll a condition until it holds, or fail naming what never came.

- ``wait_until(pred, what)``: from plain (synchronous) code;
- ``until(pred, what)``: from a coroutine (the event loop runs between polls);
- ``pilot_until(pilot, pred, what)``: from a Textual pilot test (the app runs between polls, and a widget
  not mounted yet reads as "not yet").

Each returns what PRED returned (truthy), so a wait can hand over what it found. The deadline only stops a
broken program from hanging the suite: a correct one meets the condition long before it, however loaded the
machine. Nothing may assert on how long a wait took (speed is measured in benchmarks/, not here); a timeout
raises AssertionError naming WHAT.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from textual.pilot import Pilot

T = TypeVar("T")

DEADLINE_S = 90.0
"""How long a wait lasts before it fails: generous, as only a broken program reaches it (a loaded 2-core CI
machine running the suite under xdist is slow, not broken)."""
POLL_S = 0.01
"""Interval between checks of a condition."""


def _timed_out(what: str, timeout: float) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def wait_until(pred: Callable[[], T], what: str, timeout: float = DEADLINE_S, interval: float = POLL_S) -> T:
    """Poll PRED until it returns something truthy, and return that; AssertionError after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while not (got := pred()):
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout)
        time.sleep(interval)
    return got


async def until(pred: Callable[[], T | Awaitable[T]], what: str, timeout: float = DEADLINE_S,
                interval: float = POLL_S) -> T:
    """``wait_until`` for a coroutine: the event loop runs between the polls. PRED may be a coroutine
    function (a poll that asks over the network), awaited each time."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout)
        await asyncio.sleep(interval)


async def pilot_until(pilot: Pilot[Any], pred: Callable[[], T], what: str, timeout: float = DEADLINE_S,
                      each: Callable[[], object] | None = None) -> T:
    """``until`` for a Textual pilot test: the app processes its messages between the polls
    (``pilot.pause()``); a condition on a widget that is not mounted yet (views mount when first shown)
    reads as not yet. EACH, if given, runs before every poll (to sample what the screen goes through)."""
    from textual.css.query import NoMatches

    deadline = time.monotonic() + timeout
    while True:
        if each is not None:
            each()
        try:
            got = pred()
        except NoMatches:
            got = None  # type: ignore[assignment]
        if got:
            return got
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout)
        await pilot.pause()


class Output:
    """What a child process has written to a pipe (or pty), read as it comes: ``until(text)`` waits for TEXT
    to appear, on the one deadline; a timeout, or the stream ending first, fails with what was written."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = b""

    def _read(self) -> None:
        import os
        import select

        ready, _, _ = select.select([self.fd], [], [], 0.05)
        if ready:
            chunk = os.read(self.fd, 65536)
            assert chunk, f"the output ended; it wrote:\n{self.text()}"
            self.data += chunk

    def until(self, text: bytes, start: int = 0, timeout: float = DEADLINE_S) -> int:
        """Read until TEXT is in the output at or after START; returns the index just past it."""

        def seen() -> bool:
            if text not in self.data[start:]:
                self._read()
            return text in self.data[start:]

        try:
            wait_until(seen, f"{text!r} on the output", timeout, interval=0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it wrote:\n{self.text()}") from None
        return self.data.index(text, start) + len(text)

    def text(self) -> str:
        return self.data.decode(errors="replace")
