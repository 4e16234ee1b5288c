"""The server's own accounting during a sweep: its Prometheus ``/metrics`` read every ``scrape_s`` by one
small task (one keep-alive connection), each read published as a ``ServerSample`` (running, waiting,
KV-cache use), and a fresh read at each level's measured start and end, whose histogram deltas give the
server's mean TTFT, ITL, e2e and queue time of the level (``level_figures``) beside the client's: the
difference is the network and client overhead, measured; and where the server counts its prefix cache
(vLLM's ``vllm:prefix_cache_queries_total`` / ``..._hits_total``), the share of the level's prompt tokens
it found cached (``prefix_cache_hit_rate``): a warm cache lowers TTFT.

A server without metrics (404, as ``transformers serve``) or of an engine we do not know is said once and
the sweep goes on without them; a read that fails later is said once too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Literal

import httpx

from kimitui.core.error_words import exc_words
from kimitui.core.events import Event, LogLine, ServerSample
from kimitui.core.server_metrics import (
    MetricsError,
    ServerSnapshot,
    level_means_ms,
    parse_snapshot,
    prefix_hit_rate,
)

SOURCE = "macro"
TIMEOUT_S = 2.0
CATCH_UP_S = 2.0
READ_AGAIN_S = 0.05
CLIENT_KEYS = {"ttft": "mean_ttft_ms", "itl": "mean_itl_ms", "e2e": "mean_e2el_ms"}
"""Our per-level keys of the latencies the server also measures (the queue time has no client side)."""


class ServerScraper:
    def __init__(self, url: str, publish: Callable[[Event], None], interval_s: float = 0.2,
                 headers: dict[str, str] | None = None, connect_s: float = TIMEOUT_S) -> None:
        self.url, self.publish, self.interval_s = url, publish, interval_s
        self.timeout = httpx.Timeout(TIMEOUT_S, connect=min(connect_s, TIMEOUT_S))
        self.headers = headers or {}
        self.engine: str | None = None
        self.concurrency = self.level_index = 0
        self._client: httpx.AsyncClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._marks: dict[str, ServerSnapshot | None] = {}
        self._completed: Callable[[], int] = lambda: 0

    @property
    def active(self) -> bool:
        return self.engine is not None

    async def start(self) -> None:
        """Read the metrics once: the engine is known and the polling starts, or it is said why not."""
        self._client = httpx.AsyncClient(timeout=self.timeout, headers=self.headers,
                                         limits=httpx.Limits(max_connections=1))
        try:
            snap = await self._read()
        except MetricsError as exc:
            self._say("warning", f"no server metrics ({exc}): the sweep goes on with the client's figures only")
            await self.close()
            return
        self.engine = snap.engine
        self._say("info", f"server metrics: {snap.engine} at {self.url}, read every "
                          f"{self.interval_s * 1000:.0f} ms")
        self._task = asyncio.create_task(self._poll())

    def level(self, concurrency: int, level_index: int, completed: Callable[[], int] = lambda: 0) -> None:
        """The level the next samples are read during; ``completed``: how many of its measured requests
        the client saw succeed so far."""
        self.concurrency, self.level_index = concurrency, level_index
        self._completed = completed
        self._marks.clear()

    async def mark(self, stage: str) -> None:
        """A fresh read at a level boundary ("run": its measured start, "done": its end). At the end, an
        engine may observe a request into its histograms just after its last chunk went out: the end is
        read again (every READ_AGAIN_S, for up to CATCH_UP_S) until the server counts as many finished
        requests as the client saw complete."""
        if not self.active:
            self._marks[stage] = None
            return
        snap = await self._sample()
        before = self._marks.get("run")
        if stage == "done" and before is not None:
            deadline = time.monotonic() + CATCH_UP_S
            while (snap is not None and time.monotonic() < deadline
                   and (level_means_ms(before, snap)[1] or 0) < self._completed()
                   and "e2e" in snap.histograms):
                await asyncio.sleep(READ_AGAIN_S)
                snap = await self._sample()
        self._marks[stage] = snap

    def level_figures(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """The server's means of the level between its two marks, the client's overhead over each, and the
        prefix cache's tokens looked up and found (``prefix_cache_queries`` / ``_hits``) with their ratio
        (``prefix_cache_hit_rate``, absent when nothing was looked up or the server has no such counters)."""
        before, after = self._marks.get("run"), self._marks.get("done")
        if before is None or after is None:
            return {}
        means, finished = level_means_ms(before, after)
        out: dict[str, Any] = {"server_engine": after.engine, "server_requests": finished}
        prefix = prefix_hit_rate(before, after)
        if prefix is not None:
            out["prefix_cache_queries"], out["prefix_cache_hits"], rate = prefix
            if rate is not None:
                out["prefix_cache_hit_rate"] = rate
        for key, mean in means.items():
            out[f"server_mean_{key}_ms"] = mean
            client = metrics.get(CLIENT_KEYS.get(key, ""))
            if isinstance(client, int | float):
                out[f"overhead_{key}_ms"] = client - mean
        return out

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._sample()

    async def _sample(self) -> ServerSnapshot | None:
        """Read and publish one sample; a failed read is said once (until a read works again)."""
        try:
            snap = await self._read()
        except MetricsError as exc:
            if not self._failing:
                self._failing = True
                self._say("warning", f"server metrics not read ({exc}); trying again every "
                                     f"{self.interval_s * 1000:.0f} ms")
            return None
        self._failing = False
        self.publish(ServerSample(t=time.time(), engine=snap.engine, concurrency=self.concurrency,
                                  level_index=self.level_index, running=snap.running, waiting=snap.waiting,
                                  kv_cache=snap.kv_cache, preemptions=snap.preemptions))
        return snap

    async def _read(self) -> ServerSnapshot:
        assert self._client is not None
        try:
            resp = await self._client.get(self.url)
        except httpx.HTTPError as exc:
            raise MetricsError(f"GET {self.url}: {type(exc).__name__}: {exc_words(exc)}") from None
        if resp.status_code != 200:
            raise MetricsError(f"GET {self.url}: HTTP {resp.status_code}")
        return parse_snapshot(resp.text)

    def _say(self, level: Literal["info", "warning"], message: str) -> None:
        self.publish(LogLine(t=time.time(), level=level, source=SOURCE, message=message))
