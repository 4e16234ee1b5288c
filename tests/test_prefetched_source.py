"""A source started before its consumer (the dashboard reads its host's first sample while Textual imports):
it reads ahead into a queue, hands the events over in order, says the source's failure where it is consumed,
and stops reading when closed, consumed or not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kimitui.core.events import Event, LogLine
from kimitui.core.session import Prefetched, Session
from tests.waiting import until


class Counted:
    """Yields ``n`` log lines at once, then waits (or fails); records what it did."""

    def __init__(self, n: int, fail: bool = False) -> None:
        self.n, self.fail = n, fail
        self.yielded = 0
        self.ended = False

    async def events(self) -> AsyncIterator[Event]:
        try:
            for i in range(self.n):
                self.yielded += 1
                yield LogLine(float(i), "info", "test", f"line {i}")
            if self.fail:
                raise ConnectionError("the agent went away")
            await asyncio.Event().wait()
        finally:
            self.ended = True


async def test_it_reads_ahead_before_anyone_consumes_and_hands_over_in_order() -> None:
    source = Counted(3)
    prefetched = Prefetched(source)
    await until(lambda: source.yielded == 3, "the source read with no consumer")
    got: list[str] = []
    async for event in prefetched.events():
        assert isinstance(event, LogLine)
        got.append(event.message)
        if len(got) == 3:
            break
    assert got == ["line 0", "line 1", "line 2"]
    await until(lambda: source.ended, "the source closed once its consumer stopped")


async def test_a_failing_source_fails_where_it_is_consumed_after_its_events() -> None:
    session = Session()
    prefetched = Prefetched(Counted(2, fail=True))
    with pytest.raises(ConnectionError, match="the agent went away"):
        await session.pump(prefetched)
    assert session.state.events_folded == 2


async def test_closed_unconsumed_it_stops_reading() -> None:
    source = Counted(1)
    prefetched = Prefetched(source)
    await until(lambda: source.yielded == 1, "the first event read")
    prefetched.close()
    await until(lambda: source.ended, "the source's reading cancelled")


async def test_what_was_read_is_taken_at_once_and_the_rest_and_its_end_come_after() -> None:
    """``take_ready``: the events read so far (the dashboard publishes them before its first frame); the
    consumer then gets the rest, and a failure read with them is still raised where it is consumed."""
    source = Counted(3, fail=True)
    prefetched = Prefetched(source)
    await until(lambda: source.ended, "the source read to its failure")
    assert [e.message for e in prefetched.take_ready()] == ["line 0", "line 1", "line 2"]  # type: ignore[attr-defined]
    assert prefetched.take_ready() == []
    session = Session()
    with pytest.raises(ConnectionError, match="the agent went away"):
        await session.pump(prefetched)
    assert session.state.events_folded == 0

    more = Counted(2)
    waiting = Prefetched(more)
    await until(lambda: more.yielded == 2, "two read")
    assert len(waiting.take_ready()) == 2
    waiting.close()
