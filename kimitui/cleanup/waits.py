"""Waiting without fixed sleeps: poll a condition until it holds or a deadline passes, and say how long."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def time(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


@dataclass(slots=True)
class Waited:
    ok: bool
    elapsed_s: float
    polls: int


async def poll_until(check: Callable[[], Awaitable[bool]], timeout: float, interval: float = 0.02,
                     clock: Clock | None = None) -> Waited:
    """Call ``check`` until it returns True or ``timeout`` seconds pass (checked at least once)."""
    clock = clock or SystemClock()
    start = clock.monotonic()
    deadline = start + timeout
    polls = 0
    while True:
        polls += 1
        if await check():
            return Waited(True, clock.monotonic() - start, polls)
        now = clock.monotonic()
        if now >= deadline:
            return Waited(False, now - start, polls)
        await asyncio.sleep(min(interval, max(0.0, deadline - now)))
