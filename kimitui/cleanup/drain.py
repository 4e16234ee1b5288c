"""The drain step, before the graceful stop: the requests still running and waiting on the server, read
from its Prometheus ``/metrics`` (vLLM's ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``, or
the same gauges of SGLang, TGI and llama.cpp: ``kimitui.core.server_metrics``'s table, the sweep's too),
previewed, and, when the operator consents, waited for (polled, with a deadline) so that a graceful stop
cuts none of them off.

The metrics are read from kimitui's side (as the macro benchmark reaches the server), parsed by
``prometheus_client``'s text parser.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kimitui.cleanup.context import StepContext
from kimitui.core.error_words import exc_words
from kimitui.core.events import DrainProgress, StepResult
from kimitui.core.server_metrics import MetricsError, parse_snapshot

__all__ = ["InFlight", "MetricsError", "drain", "parse_in_flight", "read_in_flight"]
POLL_S = 0.25
"""How often the drain reads the metrics while it waits."""
READ_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class InFlight:
    running: int
    waiting: int

    @property
    def total(self) -> int:
        return self.running + self.waiting


def parse_in_flight(text: str) -> InFlight:
    """The engine's running and waiting gauges summed over their label sets (one per engine / model);
    MetricsError when the page holds no engine's gauges."""
    snap = parse_snapshot(text)
    return InFlight(round(snap.running or 0.0), round(snap.waiting or 0.0))


async def read_in_flight(url: str, timeout: float = READ_TIMEOUT_S) -> InFlight:
    import httpx  # here, not at the top: the dashboard's first frame does not wait for it

    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            resp = await client.get(url)
    except httpx.HTTPError as exc:
        raise MetricsError(f"GET {url}: {type(exc).__name__}: {exc_words(exc)}") from None
    if resp.status_code != 200:
        raise MetricsError(f"GET {url}: HTTP {resp.status_code}")
    return parse_in_flight(resp.text)


async def drain(ex: StepContext) -> StepResult:
    """Preview the requests in flight; on consent, wait for them to finish until the deadline."""
    started = ex.clock.monotonic()
    url = ex.target.metrics_url or ""
    deadline = ex.target.deadlines.drain_s
    try:
        now = await read_in_flight(url)
    except MetricsError as exc:
        ex.emit(DrainProgress(ex.now(), status="unreadable", url=url, deadline_s=deadline, detail=str(exc)))
        return ex.result("drain", "skipped", f"the server's metrics could not be read: {exc}", started)
    ex.emit(DrainProgress(ex.now(), status="read", running=now.running, waiting=now.waiting, url=url,
                          deadline_s=deadline))
    if not now.total:
        return ex.result("drain", "skipped", "no request running or waiting on the server", started)
    action = (f"{now.running} requests running and {now.waiting} waiting on the server ({url}): wait up to "
              f"{deadline:g} s for them to finish before the graceful stop (the server still takes new "
              "requests meanwhile)")
    confirmed = await ex.ask("drain", action, [], [])
    if confirmed is None:
        return ex.result("drain", "declined", f"not waited for: the graceful stop cuts off {now.running} running "
                         f"and {now.waiting} waiting", started)
    wait_start = ex.clock.monotonic()
    last = now
    try:
        while True:
            elapsed = ex.clock.monotonic() - wait_start
            if elapsed >= deadline:
                break
            await asyncio.sleep(min(max(ex.target.deadlines.poll_s, POLL_S), deadline - elapsed))
            try:
                seen = await read_in_flight(url)
            except MetricsError as exc:  # a blip: said once, looked at again at the next poll
                ex.emit(DrainProgress(ex.now(), status="unreadable", url=url, deadline_s=deadline,
                                      elapsed_s=round(ex.clock.monotonic() - wait_start, 3), detail=str(exc)))
                continue
            if seen != last or not seen.total:
                last = seen
                ex.emit(DrainProgress(ex.now(), status="waiting" if seen.total else "drained",
                                      running=seen.running, waiting=seen.waiting, url=url, deadline_s=deadline,
                                      elapsed_s=round(ex.clock.monotonic() - wait_start, 3)))
            if not seen.total:
                return ex.result("drain", "done", f"{now.total} requests finished", started)
    except asyncio.CancelledError:
        ex.emit(DrainProgress(ex.now(), status="stopped", running=last.running, waiting=last.waiting, url=url,
                              deadline_s=deadline, elapsed_s=round(ex.clock.monotonic() - wait_start, 3),
                              detail="interrupted"))
        raise
    ex.emit(DrainProgress(ex.now(), status="deadline", running=last.running, waiting=last.waiting, url=url,
                          deadline_s=deadline, elapsed_s=round(ex.clock.monotonic() - wait_start, 3)))
    return ex.result("drain", "done", f"deadline of {deadline:g} s passed with {last.running} running and "
                     f"{last.waiting} waiting: the graceful stop cuts them off", started)
