"""Every fault is a failure with its reason, counted, and never a crash (a real HTTP server injects them)."""

from __future__ import annotations

import asyncio
import json
import socket
import tracemalloc
from collections import Counter

import pytest

from kimitui.bench.macro import MacroConfig, Timeouts, run_sweep
from kimitui.bench.macro.request import RequestOutcome
from kimitui.core.events import Event, LogLine, MacroPoint
from tests.faulty_server import Behavior, FaultyServer
from tests.support import one_request

N = 6
SSE_CAP = 1 << 20
"""The client's cap on one SSE line (kimitui.bench.macro.sse.MAX_LINE), as its error message says."""


@pytest.fixture(params=["lean", "httpx", "aiohttp"])
def client(request: pytest.FixtureRequest) -> str:
    """The HTTP client of the streamed requests: every fault is checked with each (aiohttp: the one measured
    beside the others, benchmarks/loadgen.py)."""
    return str(request.param)


async def _sweep(url: str, timeouts: Timeouts | None = None, **kw: object) -> tuple[dict, list[Event]]:
    events: list[Event] = []
    cfg = MacroConfig(url=url, model="m", concurrency=[3], requests=N, max_tokens=8, warmup=0,
                      timeouts=timeouts or Timeouts(connect_s=2, read_s=2, total_s=5), **kw)  # type: ignore[arg-type]
    result = await run_sweep(cfg, events.append)
    assert len(result.levels) == 1
    level = result.levels[0]
    # every request has its record, failed ones with their reason (and the chunks that came before it)
    assert len(level.records) == N
    assert Counter(r.error for r in level.records if r.error) == Counter(level.metrics["failures"])
    assert all(r.output_tokens == 0 and len(r.chunk_ms) <= 8 for r in level.records if r.error)
    return level.metrics, events


@pytest.mark.parametrize(("behavior", "reason"), [
    (Behavior(mode="status", status=500, body='{"error": "engine dead"}'), 'HTTP 500: {"error": "engine dead"}'),
    (Behavior(mode="status", status=400, body='{"message": "max_tokens too large"}'), "HTTP 400: {\"message\""),
    (Behavior(mode="status", status=404, body="no such route"), "HTTP 404: no such route"),
    (Behavior(mode="malformed", fail_after=2), "malformed SSE: {this is not json"),
    (Behavior(mode="truncate", fail_after=3), "stream closed early (before [DONE])"),
    (Behavior(mode="truncate_eof", fail_after=3), "stream closed early (before [DONE])"),
    (Behavior(mode="truncate", fail_after=0), "stream closed early (before [DONE])"),
    (Behavior(mode="error_event", fail_after=1), "server error in stream: injected mid-stream error"),
    (Behavior(mode="long_line", fail_after=1, long_line_bytes=3 << 20), "SSE line over 1 MiB"),
])
async def test_fault_is_a_counted_failure_with_reason(behavior: Behavior, reason: str, client: str) -> None:
    async with FaultyServer(behavior) as srv:
        m, events = await _sweep(srv.url, client=client)
    assert m["completed"] == 0 and m["failed"] == N
    assert sum(m["failures"].values()) == N
    assert any(r.startswith(reason) for r in m["failures"]), m["failures"]
    assert m["output_throughput"] == 0.0
    warnings = [e for e in events if isinstance(e, LogLine) and e.level == "warning"]
    assert any(f"{N} of {N} requests failed" in w.message for w in warnings)


async def test_server_down_is_connect_error(client: str) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m, _ = await _sweep(f"http://127.0.0.1:{port}", client=client)
    assert m["failed"] == N and m["completed"] == 0
    assert list(m["failures"]) == [next(iter(m["failures"]))]
    assert next(iter(m["failures"])).startswith("connect error")


async def test_read_timeout_between_chunks(client: str) -> None:
    async with FaultyServer(Behavior(mode="stall", fail_after=2)) as srv:
        m, _ = await _sweep(srv.url, Timeouts(connect_s=2, read_s=0.2, total_s=5), client=client)
    assert m["failures"] == {"timeout: read (no data between chunks)": N}


async def test_total_timeout(client: str) -> None:
    # every gap (50 ms) is shorter than the read timeout, the whole response (2 s) longer than the total
    async with FaultyServer(Behavior(interval_s=0.05, n_tokens=40)) as srv:
        m, _ = await _sweep(srv.url, Timeouts(connect_s=2, read_s=1.0, total_s=0.3), client=client)
    assert m["failures"] == {"timeout: total 0.3s exceeded": N}
    assert m["duration"] < 2.0


async def test_mixed_success_and_failure_keep_their_counts(client: str) -> None:
    async with FaultyServer(Behavior(n_tokens=4)) as srv:
        events: list[Event] = []
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[2, 2], requests=4, max_tokens=4, warmup=0,
                          client=client)

        def publish(ev: Event) -> None:
            events.append(ev)
            if isinstance(ev, MacroPoint):  # the second level meets a broken server
                srv.behavior = Behavior(mode="status", status=503, body="overloaded")

        result = await run_sweep(cfg, publish)
    first, second = (lv.metrics for lv in result.levels)
    assert first["completed"] == 4 and first["failed"] == 0 and first["total_output_tokens"] == 16
    assert second["completed"] == 0 and second["failures"] == {"HTTP 503: overloaded": 4}


async def test_a_line_over_the_cap_fails_its_request_in_bounded_memory_while_another_completes(client: str) -> None:
    """A server sends a 100 MB SSE line (in 64 KiB pieces, as fast as the client takes them) while another
    request is in flight: the bad request fails at the 1 MiB cap and its stream is closed (the server never
    gets to send the rest), the client's memory stays within a few times the cap, the other completes."""
    body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 20, "stream": True}).encode()
    gate = asyncio.Event()
    line = 100 * 1024 * 1024
    async with FaultyServer(Behavior(mode="long_line", fail_after=1, long_line_bytes=line)) as bad, \
            FaultyServer(Behavior(n_tokens=20, interval_s=0.001, gate=gate)) as good:

        async def bad_request() -> RequestOutcome:
            try:  # (on a client that buffers the line whole, the total timeout ends it)
                return await one_request(client, bad.url + "/v1/completions", body, total_s=60)
            finally:
                gate.set()  # the other request ends only after this one

        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            bad_out, good_out = await asyncio.gather(
                bad_request(), one_request(client, good.url + "/v1/completions", body, total_s=120))
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
    assert bad_out.error == "SSE line over 1 MiB" and not bad_out.success
    assert bad.stats.long_line_sent < line
    assert good_out.success and good_out.output_tokens == 20 and good_out.chunks == 20
    print(f"{client}: peak {peak:,} bytes, server sent {bad.stats.long_line_sent:,}")
    assert peak < 10 * SSE_CAP, f"peak {peak:,} bytes"
