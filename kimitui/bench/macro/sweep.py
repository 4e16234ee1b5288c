"""The concurrency sweep: warm up, run, measure and publish each level; cancel keeps finished levels.

``run_sweep`` is what a Textual worker (or the headless CLI) calls. It publishes ``PhaseStart``, one
``MacroPoint`` per finished level (the moment the level ends), ``LogLine`` warnings (usage missing,
failures, a concurrency not reached) and ``PhaseEnd``; it reports progress through ``progress`` at
about 10 Hz; it returns the whole sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from time import perf_counter
from typing import Any, Literal

import httpx

from kimitui.bench.macro.config import MacroConfig
from kimitui.bench.macro.http_stream import LeanClient, lean_unsupported
from kimitui.bench.macro.metrics import level_metrics
from kimitui.bench.macro.prompts import PromptSource
from kimitui.bench.macro.request import Gauge, RequestOutcome, stream_request
from kimitui.core.events import Event, LogLine, MacroPoint, PhaseEnd, PhaseStart

PHASE = "macro"
SOURCE = "macro"
PROGRESS_INTERVAL_S = 0.1
POOL_SHARD = 1
"""Connections per httpx client: one client per worker (see ``shard_sizes``)."""


class MacroError(Exception):
    """The sweep cannot start (the server does not answer ``/v1/models``, ...): one line for the operator."""


@dataclass(slots=True)
class LevelProgress:
    level_index: int
    """0-based index of the level in ``levels``."""
    levels: int
    concurrency: int
    stage: Literal["warmup", "run", "done"]
    done: int
    """Measured requests finished (successful or failed) in this level."""
    total: int | None
    """Requests in this level; None in duration mode (see ``elapsed_s`` / ``duration_s``)."""
    failed: int
    output_tokens: int
    """Output tokens of the requests finished so far."""
    in_flight: int
    elapsed_s: float
    duration_s: float | None

    @property
    def level_fraction(self) -> float:
        if self.stage == "done":
            return 1.0
        if self.stage == "warmup":
            return 0.0
        if self.total:
            return min(1.0, self.done / self.total)
        if self.duration_s:
            return min(1.0, self.elapsed_s / self.duration_s)
        return 0.0

    @property
    def overall_fraction(self) -> float:
        return (self.level_index + self.level_fraction) / max(1, self.levels)


@dataclass(slots=True)
class LevelResult:
    concurrency: int
    metrics: dict[str, Any]


@dataclass(slots=True)
class SweepResult:
    config: MacroConfig
    model: str
    levels: list[LevelResult] = field(default_factory=list)
    cancelled: bool = False

    @property
    def single_stream_tok_s(self) -> float | None:
        """The headline: output tok/s at concurrency 1 (None when that level did not run)."""
        for level in self.levels:
            if level.concurrency == 1:
                return level.metrics.get("output_throughput")
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": "openai-chat" if self.config.endpoint == "chat" else "openai",
            "model_id": self.model,
            "config": self.config.to_dict(),
            "single_stream_tok_s": self.single_stream_tok_s,
            "cancelled": self.cancelled,
            "levels": [{"concurrency": lv.concurrency, **lv.metrics} for lv in self.levels],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


async def discover_model(cfg: MacroConfig) -> str:
    """The first model ``GET /v1/models`` lists."""
    url = cfg.base_url + "/v1/models"
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(cfg.timeouts.connect_s, read=cfg.timeouts.read_s),
                                     headers=_headers(cfg)) as client:
            resp = await client.get(url)
            if resp.status_code != 200:
                raise MacroError(f"GET {url}: HTTP {resp.status_code}")
            data = resp.json().get("data") or []
            if not data or not isinstance(data[0], dict) or "id" not in data[0]:
                raise MacroError(f"GET {url}: no model listed")
            return str(data[0]["id"])
    except httpx.HTTPError as exc:
        raise MacroError(f"GET {url}: {type(exc).__name__}: {exc}") from None
    except (ValueError, AttributeError):
        raise MacroError(f"GET {url}: not an OpenAI model list") from None


def _headers(cfg: MacroConfig) -> dict[str, str]:
    headers = dict(cfg.headers)
    if cfg.api_key:
        headers["authorization"] = f"Bearer {cfg.api_key}"
    return headers


_SSL: list[ssl.SSLContext] = []


def _ssl_context() -> ssl.SSLContext:
    """One verifying context for every client (building one costs tens of milliseconds)."""
    if not _SSL:
        _SSL.append(ssl.create_default_context())
    return _SSL[0]


def _now() -> float:
    return time.time()


async def run_sweep(config: MacroConfig, publish: Callable[[Event], None],
                    progress: Callable[[LevelProgress], None] | None = None,
                    cancel: asyncio.Event | None = None) -> SweepResult:
    """Run every level of ``config.concurrency`` in order; see the module docstring.

    Raises ``ConfigError`` for a configuration that cannot run and ``MacroError`` when the model must be
    discovered and cannot be. Request failures never raise: they are counted in each level's metrics.
    """
    config.validate()
    model = config.model or await discover_model(config)
    cancel = cancel or asyncio.Event()
    result = SweepResult(config=config, model=model)
    client = config.client
    fallback = lean_unsupported(config.base_url) if client == "lean" else None
    if fallback is not None:
        client = "httpx"
    levels = list(config.concurrency)
    mode = (f"{config.duration_s:g}s per level" if config.duration_s is not None
            else config.requests_label)
    rate = f", {config.request_rate:g} req/s Poisson" if config.request_rate else ""
    publish(PhaseStart(t=_now(), phase=PHASE,
                       title=f"serving sweep {model} at {config.base_url}: concurrency "
                             f"{','.join(map(str, levels))}, {mode}{rate}, {client} client"))
    if fallback is not None:
        publish(LogLine(t=_now(), level="warning", source=SOURCE,
                        message=f"lean HTTP client not usable ({fallback}): using httpx"))
    try:
        for idx, c in enumerate(levels):
            if cancel.is_set():
                break
            level = _Level(config, model, c, idx, len(levels), progress, cancel, client)
            metrics = await level.run()
            if metrics is None:
                break
            result.levels.append(LevelResult(c, metrics))
            publish(MacroPoint(t=_now(), concurrency=c, metrics=metrics))
            for line in level.warnings(metrics):
                publish(LogLine(t=_now(), level="warning", source=SOURCE, message=line))
    finally:
        result.cancelled = cancel.is_set() or len(result.levels) < len(levels)
        note = (f"cancelled after {len(result.levels)} of {len(levels)} levels" if result.cancelled
                else f"{len(levels)} levels")
        single = result.single_stream_tok_s
        if single is not None:
            note += f"; single stream {single:.1f} tok/s"
        publish(PhaseEnd(t=_now(), phase=PHASE, ok=not result.cancelled, note=note))
    return result


def shard_sizes(c: int, shard: int) -> list[int]:
    """Pool sizes of the clients of a level: ``c`` connections in all, at most ``shard`` a client, and
    worker ``j`` uses client ``j % len(sizes)`` (so each client has exactly as many workers as
    connections). httpcore's pool scans every connection (and checks each for expiry) for every queued
    request on each request and each release: quadratic in the pool size. Measured on 2 cores, 4 tokens
    a chunk: one pool of 64 reached 16 streams at once and 19k tok/s; pools of 1 reached 64 and 27k tok/s
    (256: 256 streams, 40k tok/s)."""
    k = -(-c // shard)
    return [c // k + (1 if i < c % k else 0) for i in range(k)]


class _HttpxStream:
    """The httpx client with the lean client's ``stream`` signature."""

    __slots__ = ("client", "url")

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url = client, url

    async def stream(self, body: bytes, est_prompt_tokens: int, chat: bool, t0: float, total_timeout_s: float,
                     gauge: Gauge | None = None) -> RequestOutcome:
        return await stream_request(self.client, self.url, body, est_prompt_tokens, chat, t0, total_timeout_s,
                                    gauge)


Streamer = LeanClient | _HttpxStream


class _Level:
    """One concurrency level: ``c`` workers, each with its own client holding one connection."""

    def __init__(self, cfg: MacroConfig, model: str, c: int, idx: int, levels: int,
                 progress: Callable[[LevelProgress], None] | None, cancel: asyncio.Event,
                 client: str = "lean") -> None:
        self.cfg, self.model, self.c, self.idx, self.levels = cfg, model, c, idx, levels
        self.client = client
        self.progress_cb = progress
        self.cancel = cancel
        self.url = cfg.base_url + cfg.endpoint_path
        self.chat = cfg.endpoint == "chat"
        self.total = None if cfg.duration_s is not None else cfg.level_requests(c)
        self.outcomes: list[RequestOutcome] = []
        self.in_flight = self.done = self.failed = self.tokens = 0
        self.gauge = Gauge()
        self.first_dispatch: float | None = None
        self.deadline: float | None = None
        self.stage: Literal["warmup", "run", "done"] = "warmup"
        self.started = perf_counter()
        self.ssl = _ssl_context()

    # -- progress ---------------------------------------------------------------------------------------
    def snapshot(self) -> LevelProgress:
        elapsed = perf_counter() - (self.first_dispatch or perf_counter())
        return LevelProgress(self.idx, self.levels, self.c, self.stage, self.done, self.total, self.failed,
                             self.tokens, self.in_flight, elapsed, self.cfg.duration_s)

    def _report(self) -> None:
        if self.progress_cb is not None:
            self.progress_cb(self.snapshot())

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            self._report()

    # -- running ----------------------------------------------------------------------------------------
    async def run(self) -> dict[str, Any] | None:
        cfg = self.cfg
        timeout = httpx.Timeout(connect=cfg.timeouts.connect_s, read=cfg.timeouts.read_s,
                                write=cfg.timeouts.read_s, pool=None)
        ticker = asyncio.create_task(self._ticker()) if self.progress_cb else None
        stopper = asyncio.create_task(self.cancel.wait())
        try:
            async with contextlib.AsyncExitStack() as stack:
                clients: list[Streamer]
                if self.client == "httpx":
                    clients = [_HttpxStream(await stack.enter_async_context(httpx.AsyncClient(
                        limits=httpx.Limits(max_connections=n, max_keepalive_connections=n), timeout=timeout,
                        headers=_headers(cfg), verify=self.ssl)), self.url)
                        for n in shard_sizes(self.c, POOL_SHARD)]
                else:
                    clients = [LeanClient(self.url, headers=_headers(cfg), connect_s=cfg.timeouts.connect_s,
                                          read_s=cfg.timeouts.read_s, ssl_context=self.ssl)
                               for _ in range(self.c)]
                    for lean in clients:
                        stack.callback(lean.close)
                if cfg.warmup:
                    warm = PromptSource(replace(cfg, seed=cfg.seed + 7919), self.model, cfg.warmup)
                    ok = await self._until_cancel(self._warmup(clients, warm), stopper)
                    if not ok:
                        return None
                self.stage = "run"
                self._report()
                count = self.total if self.total is not None else max(self.c * 4, 64)
                source = PromptSource(cfg, self.model, count)
                ok = await self._until_cancel(self._measure(clients, source), stopper)
                if not ok:
                    return None
        finally:
            stopper.cancel()
            if ticker is not None:
                ticker.cancel()
        self.stage = "done"
        self._report()
        end = max((o.end for o in self.outcomes), default=self.first_dispatch or 0.0)
        duration = end - self.first_dispatch if self.first_dispatch is not None else 0.0
        return level_metrics(self.outcomes, duration_s=duration, max_concurrency=self.c,
                             request_rate=cfg.request_rate, slo=cfg.slo, concurrency_reached=self.gauge.peak)

    async def _until_cancel(self, coro: Any, stopper: asyncio.Task[Any]) -> bool:
        """Run ``coro``; False (with the work cancelled) if the sweep is cancelled first."""
        work = asyncio.ensure_future(coro)
        await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            work.result()
            return True
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        return False

    async def _warmup(self, clients: list[Streamer], source: PromptSource) -> None:
        remaining = self.cfg.warmup

        async def one_worker(client: Streamer) -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                body, est = source.take()
                await client.stream(body, est, self.chat, perf_counter(), self.cfg.timeouts.total_s)

        await _gather_all([one_worker(clients[j % len(clients)])
                           for j in range(min(self.c, self.cfg.warmup))])

    async def _measure(self, clients: list[Streamer], source: PromptSource) -> None:
        cfg = self.cfg
        if cfg.request_rate is None:
            issued = 0
            total = self.total

            async def next_item() -> tuple[bytes, int] | None:
                nonlocal issued
                if total is not None:
                    if issued >= total:
                        return None
                elif self.deadline is not None and perf_counter() >= self.deadline:
                    return None
                issued += 1
                return source.take()

            await _gather_all([self._worker(clients[j % len(clients)], next_item) for j in range(self.c)])
            return
        queue: asyncio.Queue[tuple[bytes, int] | None] = asyncio.Queue()
        arrivals = asyncio.create_task(self._poisson(queue, source, cfg.request_rate))
        try:
            await _gather_all([self._worker(clients[j % len(clients)], queue.get) for j in range(self.c)])
        finally:
            arrivals.cancel()

    async def _poisson(self, queue: asyncio.Queue[tuple[bytes, int] | None], source: PromptSource,
                       rate: float) -> None:
        """Arrivals with exponential gaps (seeded); the first arrives at once, as in vLLM."""
        rng = random.Random(self.cfg.seed)
        start = perf_counter()
        if self.cfg.duration_s is not None:
            self.deadline = start + self.cfg.duration_s
        due = start
        sent = 0
        while True:
            if self.total is not None and sent >= self.total:
                break
            if self.deadline is not None and due >= self.deadline:
                break
            delay = due - perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            queue.put_nowait(source.take())
            sent += 1
            due += rng.expovariate(rate)
        for _ in range(self.c):
            queue.put_nowait(None)

    async def _worker(self, client: Streamer, next_item: Callable[[], Any]) -> None:
        cfg = self.cfg
        while True:
            item = await next_item()
            if item is None:
                return
            body, est = item
            t0 = perf_counter()
            if self.first_dispatch is None:
                self.first_dispatch = t0
                if cfg.duration_s is not None and self.deadline is None:
                    self.deadline = t0 + cfg.duration_s
            self.in_flight += 1
            try:
                out = await client.stream(body, est, self.chat, t0, cfg.timeouts.total_s, self.gauge)
            finally:
                self.in_flight -= 1
            self.outcomes.append(out)
            self.done += 1
            if out.success:
                self.tokens += out.output_tokens
            else:
                self.failed += 1

    def warnings(self, m: dict[str, Any]) -> list[str]:
        out = []
        c = self.c
        if m["usage_missing"]:
            out.append(f"concurrency {c}: {m['usage_missing']} of {m['completed']} responses had no usage "
                       "chunk; their output tokens were counted from content chunks (a lower bound)")
        if m["failed"]:
            reasons = "; ".join(f"{n} x {r}" for r, n in list(m["failures"].items())[:3])
            out.append(f"concurrency {c}: {m['failed']} of {m['num_prompts']} requests failed ({reasons})")
        if m["num_prompts"] >= c and self.gauge.peak < c:
            out.append(f"concurrency {c}: only {self.gauge.peak} responses were streaming at once")
        return out


async def _gather_all(coros: list[Any]) -> None:
    """Run all; if one raises, cancel the rest and re-raise (no orphan tasks)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
