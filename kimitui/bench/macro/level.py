"""One concurrency level: its workers and clients, warm-up, measured requests, records and summary.

Closed loop (the default): ``c`` workers, each sending its next request as soon as its previous one
ends, until the level's count or duration is reached. Open loop (a request rate, a ramp-up, a trace): a
dispatcher releases each request at its scheduled time (``arrivals``) and up to ``c`` of them run at
once (vLLM's ``--max-concurrency``); a request that finds no free worker waits for one.

The measured requests' bodies are built before the level starts (``PREBUILD_MAX`` of them), so that
while requests stream, the only per-request work besides the HTTP client's is keeping each outcome; the
records and the summary are built when the level ends (``records``, ``metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice
from time import perf_counter
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import httpx

from kimitui.bench.macro import records as rec
from kimitui.bench.macro.arrivals import Arrival, schedule
from kimitui.bench.macro.client_health import LoopLagProbe
from kimitui.bench.macro.config import MacroConfig
from kimitui.bench.macro.http_stream import LeanClient
from kimitui.bench.macro.lengths import LengthModel
from kimitui.bench.macro.metrics import LevelContext, summarize
from kimitui.bench.macro.prompts import Planned, Prompt, PromptSource
from kimitui.bench.macro.request import Gauge, RequestOutcome, stream_request
from kimitui.bench.macro.transport import POOL_SHARD, headers, shard_sizes, ssl_context
from kimitui.core.events.macro import level_words
from kimitui.core.level_result import LevelResult
from kimitui.core.server_metrics import prefix_cache_warning

if TYPE_CHECKING:
    from kimitui.bench.macro.aiohttp_stream import AiohttpStream

PROGRESS_INTERVAL_S = 0.1
PREBUILD_MAX = 4096
"""Measured requests built before a level starts; more are built as they are sent."""


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
    rate: float | None = None
    """The level's request rate where the sweep's levels are rates (``MacroConfig.rate_levels``)."""

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
class LevelRun:
    """A finished level: its records (origin: the first dispatch, ``origin_wall`` in unix seconds) and
    its summary."""

    records: list[rec.RequestRecord]
    metrics: dict[str, Any]
    origin_wall: float


class _HttpxStream:
    """The httpx client with the lean client's ``stream`` signature."""

    __slots__ = ("client", "url")

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url = client, url

    async def stream(self, body: bytes, est_prompt_tokens: int, chat: bool, t0: float, total_timeout_s: float,
                     gauge: Gauge | None = None, keep_text: bool = False) -> RequestOutcome:
        return await stream_request(self.client, self.url, body, est_prompt_tokens, chat, t0, total_timeout_s,
                                    gauge, keep_text)


Streamer: TypeAlias = "LeanClient | _HttpxStream | AiohttpStream"
"""Each with the same ``stream``."""
Item = tuple[Planned, float | None]
"""A request to send and when it was due (None: closed loop)."""


@dataclass(slots=True)
class _Plan:
    source: PromptSource
    ready: deque[Planned]
    """Closed loop: requests built ahead, sent in order."""
    ahead: list[tuple[Arrival, Planned]] = field(default_factory=list)
    """Open loop: the first arrivals with their requests built ahead..."""
    arrivals: Iterator[Arrival] = field(default_factory=lambda: iter(()))
    """...and the arrivals after them."""


class Level:
    """One concurrency level: ``c`` workers, each with its own client holding one connection."""

    def __init__(self, cfg: MacroConfig, model: str, c: int, idx: int, levels: int,
                 progress: Callable[[LevelProgress], None] | None, cancel: asyncio.Event,
                 client: str = "lean", lengths: LengthModel | None = None, method: str = "estimated",
                 dataset: list[Prompt] | None = None, trace: list[Arrival] | None = None) -> None:
        self.cfg, self.model, self.c, self.idx, self.levels = cfg, model, c, idx, levels
        self.rate = cfg.request_rate if cfg.rate_levels else None
        """This level's rate where the sweep's levels are rates (None: its levels are concurrencies)."""
        self.client = client
        self.lengths, self.method, self.dataset, self.trace = lengths, method, dataset, trace
        self.progress_cb = progress
        self.cancel = cancel
        self.url = cfg.base_url + cfg.endpoint_path
        self.chat = cfg.endpoint == "chat"
        if trace is not None:
            self.total: int | None = (len(trace) if cfg.duration_s is None
                                      else sum(1 for a in trace if a.offset < cfg.duration_s))
        else:
            self.total = None if cfg.duration_s is not None else cfg.level_requests(c)
        self.sent: list[rec.Sent] = []
        self.in_flight = self.done = self.failed = self.tokens = 0
        self.gauge = Gauge()
        self.first_dispatch: float | None = None
        self.deadline: float | None = None
        self.stage: Literal["warmup", "run", "done"] = "warmup"
        self.probe = LoopLagProbe()
        self.on_stage: Callable[[str], Awaitable[None]] | None = None
        """Awaited when the measured requests start ("run") and when they have all ended ("done")."""

    # -- progress ---------------------------------------------------------------------------------------
    def snapshot(self) -> LevelProgress:
        elapsed = perf_counter() - (self.first_dispatch or perf_counter())
        return LevelProgress(self.idx, self.levels, self.c, self.stage, self.done, self.total, self.failed,
                             self.tokens, self.in_flight, elapsed, self.cfg.duration_s, self.rate)

    def _report(self) -> None:
        if self.progress_cb is not None:
            self.progress_cb(self.snapshot())

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            self._report()

    # -- running ----------------------------------------------------------------------------------------
    def _source(self, purpose: str) -> PromptSource:
        return PromptSource(self.cfg, self.model, self.lengths, stream=self.idx * 2 + (purpose == "run"),
                            dataset=self.dataset)

    async def run(self) -> LevelRun | None:
        """Warm up, measure, summarize; None when the sweep was cancelled first."""
        cfg = self.cfg
        timeout = httpx.Timeout(connect=cfg.timeouts.connect_s, read=cfg.timeouts.read_s,
                                write=cfg.timeouts.read_s, pool=None)
        ticker = asyncio.create_task(self._ticker()) if self.progress_cb else None
        stopper = asyncio.create_task(self.cancel.wait())
        ssl = ssl_context()
        try:
            async with contextlib.AsyncExitStack() as stack:
                clients: list[Streamer]
                if self.client == "aiohttp":
                    from kimitui.bench.macro.aiohttp_stream import AiohttpStream

                    clients = []
                    for n in shard_sizes(self.c, POOL_SHARD):
                        session = AiohttpStream(self.url, n, headers(cfg), cfg.timeouts.connect_s,
                                                cfg.timeouts.read_s, ssl)
                        stack.push_async_callback(session.close)
                        clients.append(session)
                elif self.client == "httpx":
                    clients = [_HttpxStream(await stack.enter_async_context(httpx.AsyncClient(
                        limits=httpx.Limits(max_connections=n, max_keepalive_connections=n), timeout=timeout,
                        headers=headers(cfg), verify=ssl)), self.url)
                        for n in shard_sizes(self.c, POOL_SHARD)]
                else:
                    clients = [LeanClient(self.url, headers=headers(cfg), connect_s=cfg.timeouts.connect_s,
                                          read_s=cfg.timeouts.read_s, ssl_context=ssl)
                               for _ in range(self.c)]
                    for lean in clients:
                        stack.callback(lean.close)
                if cfg.warmup:
                    ok = await self._until_cancel(self._warmup(clients, self._source("warmup")), stopper)
                    if not ok:
                        return None
                self.stage = "run"
                self._report()
                if self.on_stage is not None:
                    await self.on_stage("run")
                plan = self._plan(self._source("run"))
                self.probe.start()
                try:
                    ok = await self._until_cancel(self._measure(clients, plan), stopper)
                finally:
                    self.probe.stop()
                if not ok:
                    return None
                if self.on_stage is not None:
                    await self.on_stage("done")
        finally:
            stopper.cancel()
            if ticker is not None:
                ticker.cancel()
        self.stage = "done"
        self._report()
        return self._summarize()

    def _summarize(self) -> LevelRun:
        cfg = self.cfg
        origin = self.first_dispatch if self.first_dispatch is not None else perf_counter()
        records = rec.build(self.sent, origin)
        ctx = LevelContext(concurrency=self.c, request_rate=cfg.request_rate, slo=cfg.slo,
                           percentiles=cfg.percentiles, concurrency_reached=self.gauge.peak,
                           input_len_method=self.method, input_len_stddev=cfg.input_len_stddev,
                           max_tokens_stddev=cfg.max_tokens_stddev, arrival=cfg.arrival_label,
                           client=self.probe.figures())
        origin_wall = time.time() - (perf_counter() - origin)
        return LevelRun(records, summarize(records, ctx), origin_wall)

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
                planned = source.take()
                out = await client.stream(planned.body, planned.est_input, self.chat, perf_counter(),
                                          self.cfg.timeouts.total_s)
                source.observe(planned, out.prompt_tokens, out.prompt_from_usage)

        await gather_all([one_worker(clients[j % len(clients)]) for j in range(min(self.c, self.cfg.warmup))])

    def _plan(self, source: PromptSource) -> _Plan:
        """The measured requests, built before the level starts (up to ``PREBUILD_MAX``; the rest, in
        duration mode or beyond that, as they are sent), with their arrival times in open loop."""
        cfg = self.cfg
        if not cfg.open_loop:
            n = min(self.total, PREBUILD_MAX) if self.total is not None else max(self.c * 4, 64)
            return _Plan(source, deque(source.take() for _ in range(n)))
        count = None if self.trace is not None else self.total
        arrivals = schedule(cfg, count, cfg.seed + self.idx, self.trace)
        ahead = [(a, source.take(a.input_len, a.output_len)) for a in islice(arrivals, PREBUILD_MAX)]
        return _Plan(source, deque(), ahead, arrivals)

    async def _measure(self, clients: list[Streamer], plan: _Plan) -> None:
        workers = len(clients)
        source = plan.source
        if not self.cfg.open_loop:
            issued = 0
            total = self.total
            ready = plan.ready

            turns = self.cfg.turns

            async def next_item(last: tuple[Planned, RequestOutcome] | None = None) -> Item | None:
                nonlocal issued
                if total is not None:
                    if issued >= total:
                        return None
                elif self.deadline is not None and perf_counter() >= self.deadline:
                    return None
                issued += 1
                if last is not None and last[0].turn < turns and last[1].success and last[1].text is not None:
                    return source.next_turn(last[0], "".join(last[1].text)), None  # the conversation goes on
                return (ready.popleft() if ready else source.take()), None

            await gather_all([self._worker(clients[j % workers], next_item, source) for j in range(self.c)])
            return
        queue: asyncio.Queue[Item | None] = asyncio.Queue()
        dispatcher = asyncio.create_task(self._dispatch(queue, plan))
        try:
            await gather_all([self._worker(clients[j % workers], queue.get, source) for j in range(self.c)])
        finally:
            dispatcher.cancel()

    async def _dispatch(self, queue: asyncio.Queue[Item | None], plan: _Plan) -> None:
        """Puts each request in the queue at its due time."""
        start = perf_counter()
        if self.cfg.duration_s is not None:
            self.deadline = start + self.cfg.duration_s
        source = plan.source
        later = ((a, source.take(a.input_len, a.output_len)) for a in plan.arrivals)
        for a, planned in chain(plan.ahead, later):
            due = start + a.offset
            delay = due - perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            queue.put_nowait((planned, due))
        for _ in range(self.c):
            queue.put_nowait(None)

    async def _worker(self, client: Streamer, next_item: Callable[..., Any], source: PromptSource) -> None:
        cfg = self.cfg
        chat = self.chat
        total_s = cfg.timeouts.total_s
        sent = self.sent
        talk = cfg.turns > 1  # a slot holds a conversation: each turn is sent after the answer to the last
        last: tuple[Planned, RequestOutcome] | None = None
        while True:
            idle_since = perf_counter()
            item = await (next_item(last) if talk else next_item())
            if item is None:
                return
            planned, due = item
            t0 = perf_counter()
            if self.first_dispatch is None:
                self.first_dispatch = t0
                if cfg.duration_s is not None and self.deadline is None:
                    self.deadline = t0 + cfg.duration_s
            self.in_flight += 1
            try:
                out = await client.stream(planned.body, planned.est_input, chat, t0, total_s, self.gauge, talk)
            finally:
                self.in_flight -= 1
            sent.append(rec.Sent(out, planned.target_input, planned.max_tokens, due,
                                 None if due is None else max(due, idle_since), planned.turn))
            last = (planned, out)
            source.observe(planned, out.prompt_tokens, out.prompt_from_usage)
            self.done += 1
            if out.success:
                self.tokens += out.output_tokens
            else:
                self.failed += 1

    def warnings(self, r: LevelResult) -> list[str]:
        """What the log says of the level when it ends (the figures it may not be read without)."""
        out = []
        c = self.c
        where = level_words(c, self.rate)
        missing, completed = r.count("usage_missing") or 0, r.completed or 0
        if missing:
            out.append(f"{where}: {missing} of {completed} responses had no usage "
                       "chunk; their output tokens were counted from content chunks (a lower bound)")
        if r.failed:
            reasons = "; ".join(f"{n} x {why}" for why, n in r.failures[:3])
            out.append(f"{where}: {r.failed} of {r.num_prompts} requests failed ({reasons})")
        if self.rate is None and (r.num_prompts or 0) >= c and self.gauge.peak < c:
            out.append(f"{where}: only {self.gauge.peak} responses were streaming at once")
        target, mean = r.figure("requested_input_len"), r.figure("mean_input_tokens")
        if (self.lengths is not None and self.lengths.cal.exact and completed and target is not None
                and mean is not None and self.cfg.input_len_stddev == 0 and self.cfg.turns == 1
                and abs(mean - target) > 1.0):
            out.append(f"{where}: prompts averaged {mean:.1f} input tokens for {target:.0f} asked")
        out += [f"{where}: {w}" for w in r.client_warnings]
        if (cached := prefix_cache_warning(r)) is not None:
            out.append(f"{where}: {cached}")
        return out


async def gather_all(coros: list[Any]) -> None:
    """Run all; if one raises, cancel the rest and re-raise (no orphan tasks)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
