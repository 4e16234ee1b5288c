"""The concurrency sweep: prepare the prompts' lengths, then warm up, run, measure and publish each level;
cancel keeps finished levels.

``run_sweep`` (``prepare_sweep`` then ``run_plan``) first sends one short request to find the optional
fields the server refuses (``fields``): a ``RequestFieldsDropped`` warning names them, and the run (its
config's ``omit_fields``, each level's ``request_fields_dropped``) goes without them. It publishes a
``LogLine`` saying how the input lengths are obtained, then for each finished level (the moment it ends)
its ``MacroRequests`` records and its ``MacroPoint`` summary, and ``LogLine`` warnings (usage missing,
failures, a concurrency not reached, a client that may have distorted the figures, a warm prefix cache).
With ``reset_prefix_cache`` it asks the server to drop its prefix cache before each level
(``prefix_cache``; each level's ``prefix_cache_reset`` says whether it did). It publishes no
phase: the macro phase (its start, its end and whether it failed) is
``kimitui.phases.macro.macro_phase``'s, the one that Textual's worker, the headless CLI and the
campaign call. It reports progress through ``progress`` at about 10 Hz; it returns the whole sweep.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from kimitui.bench.macro import records as rec
from kimitui.bench.macro import verdict as vd
from kimitui.bench.macro.arrivals import Arrival, load_trace
from kimitui.bench.macro.config import MacroConfig
from kimitui.bench.macro.fields import check_fields_or_cancel
from kimitui.bench.macro.http_stream import lean_unsupported
from kimitui.bench.macro.lengths import (
    Calibration,
    CountError,
    LengthModel,
    TokenizeCounter,
    UsageCounter,
    calibrate,
)
from kimitui.bench.macro.level import Level, LevelProgress, LevelRun
from kimitui.bench.macro.prefix_cache import PrefixCacheReset
from kimitui.bench.macro.prompts import Prompt, PromptSource, load_jsonl
from kimitui.bench.macro.request import stream_request
from kimitui.bench.macro.search import PROBE_WAVES, RATE_RESOLUTION, RateSearch, SloSearch
from kimitui.bench.macro.server_scrape import ServerScraper
from kimitui.bench.macro.transport import headers, ssl_context
from kimitui.core.describe import single_stream_line
from kimitui.core.error_words import exc_words
from kimitui.core.events import Event, LogLine, MacroPoint, MacroVerdict, RequestFieldsDropped
from kimitui.core.figures import SingleStream, single_stream_of
from kimitui.core.level_result import LevelResult

PHASE = "macro"
SOURCE = "macro"

__all__ = ["LevelProgress", "LevelResult", "MacroError", "SweepPlan", "SweepResult", "discover_model", "prepare_sweep",
           "run_plan", "run_sweep", "sweep_note"]


class MacroError(Exception):
    """The sweep cannot start (the server does not answer ``/v1/models``, ...): one line for the operator."""


@dataclass(slots=True)
class SweepLevel:
    """A level the sweep ran: its record (vLLM's keys, as ``--output`` writes it) and its requests."""

    concurrency: int
    metrics: dict[str, Any]
    records: list[rec.RequestRecord] = field(default_factory=list, repr=False)
    rate: float | None = None
    """Its request rate where the sweep's levels are rates."""

    @property
    def key(self) -> float:
        """Its place on the sweep's axis: its rate, else its concurrency."""
        return self.rate if self.rate is not None else self.concurrency

    @property
    def result(self) -> LevelResult:
        return LevelResult.from_json(self.concurrency, self.metrics)


@dataclass(slots=True)
class SweepResult:
    config: MacroConfig
    model: str
    levels: list[SweepLevel] = field(default_factory=list)
    cancelled: bool = False
    lengths: Calibration | None = None
    """How the synthetic prompts got their lengths (None: dataset prompts)."""
    fields_dropped: tuple[str, ...] = ()
    """Request fields the server refused, left out of the whole run (``fields.check_fields``)."""
    fields_dropped_reason: str = ""
    verdict: MacroVerdict | None = None
    """The sweep's verdict (``verdict``), once it has ended with at least one level."""

    @property
    def single_stream(self) -> SingleStream:
        """The headline: output tok/s at concurrency 1 (``figures.single_stream_of``: none for a level
        where every request failed)."""
        return single_stream_of(lv.result for lv in self.levels)

    @property
    def single_stream_tok_s(self) -> float | None:
        return self.single_stream.tok_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": "openai-chat" if self.config.endpoint == "chat" else "openai",
            "model_id": self.model,
            "config": self.config.to_dict(),
            "input_lengths": self.lengths.describe() if self.lengths is not None else "dataset prompts",
            "single_stream_tok_s": self.single_stream_tok_s,
            "request_fields_dropped": list(self.fields_dropped),
            "request_fields_dropped_reason": self.fields_dropped_reason or None,
            "cancelled": self.cancelled,
            "levels": [{"concurrency": lv.concurrency, **lv.metrics} for lv in self.levels],
            "level_axis": self.config.axis,
            "verdict": verdict_dict(self.verdict),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


async def discover_model(cfg: MacroConfig) -> str:
    """The first model ``GET /v1/models`` lists. An engine whose list fails (transformers 5.17 pinned to a
    folder answers 500 when the Hugging Face cache folder is missing) is named with the way round it."""
    url = cfg.base_url + "/v1/models"
    hint = " (name the model instead: --model, or [macro] model in a campaign file)"
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(cfg.timeouts.connect_s, read=cfg.timeouts.read_s),
                                     headers=headers(cfg)) as client:
            resp = await client.get(url)
            if resp.status_code != 200:
                raise MacroError(f"GET {url}: HTTP {resp.status_code}{hint}")
            data = resp.json().get("data") or []
            if not data or not isinstance(data[0], dict) or "id" not in data[0]:
                raise MacroError(f"GET {url}: no model listed{hint}")
            return str(data[0]["id"])
    except httpx.HTTPError as exc:
        raise MacroError(f"GET {url}: {type(exc).__name__}: {exc_words(exc)}") from None
    except (ValueError, AttributeError):
        raise MacroError(f"GET {url}: not an OpenAI model list{hint}") from None


async def prepare_lengths(cfg: MacroConfig, model: str) -> tuple[Calibration, list[str]]:
    """Calibrate the synthetic prompts' lengths against the server (``lengths``): through ``/tokenize``
    if it answers, else through the usage of one-token requests; if neither works, estimated lengths.
    Returns the calibration and what the operator should be told."""
    chat = cfg.endpoint == "chat"
    notes: list[str] = []
    timeout = httpx.Timeout(cfg.timeouts.connect_s, read=cfg.timeouts.read_s)
    async with httpx.AsyncClient(timeout=timeout, headers=headers(cfg), verify=ssl_context(),
                                 limits=httpx.Limits(max_connections=16)) as client:
        try:
            return await calibrate(TokenizeCounter(client, cfg.base_url, model, chat), cfg.input_len,
                                   cfg.seed), notes
        except CountError as exc:
            notes.append(f"no usable /tokenize ({exc}): calibrating from usage.prompt_tokens")
        url = cfg.base_url + cfg.endpoint_path
        builder = PromptSource(cfg, model, None, stream=-1)

        async def send(body: bytes) -> tuple[int | None, str | None]:
            out = await stream_request(client, url, body, 0, chat, time.perf_counter(), cfg.timeouts.total_s)
            return (out.prompt_tokens if out.prompt_from_usage else None), out.error

        try:
            return await calibrate(UsageCounter(send, lambda text: builder.body(text, None, 1)), cfg.input_len,
                                   cfg.seed), notes
        except CountError as exc:
            notes.append(f"the server did not count the calibration prompts ({exc})")
            return Calibration("estimated", note=str(exc)), notes


def _now() -> float:
    return time.time()


@dataclass(slots=True)
class SweepPlan:
    """A sweep ready to run: its configuration checked, its dataset and trace read, its model known, its
    client chosen (``prepare_sweep``)."""

    config: MacroConfig
    model: str
    client: str
    fallback: str | None = None
    """Why the lean client cannot be used (httpx is used instead)."""
    dataset: list[Prompt] | None = None
    trace: list[Arrival] | None = None
    search: SloSearch | None = None
    """``--search``: the levels are the search's probes, chosen as they end (``search.SloSearch``)."""
    result: SweepResult | None = None
    """What has run so far (``run_plan`` fills it as levels end, also when it is cancelled)."""

    @property
    def levels(self) -> list[float]:
        """The levels in order: concurrencies, or rates (``MacroConfig.levels``)."""
        return self.config.levels

    @property
    def title(self) -> str:
        """The sweep in one line (the macro phase's title)."""
        config = self.config
        mode = (f"{config.duration_s:g}s per level" if config.duration_s is not None
                else f"trace of {len(self.trace)} requests per level" if self.trace is not None
                else config.requests_label)
        arrival = "" if not config.open_loop else f", {config.arrival_label}"
        slos = vd.slo_text(vd.slo_dict(config.slo))
        if self.search is not None and config.rate_levels:
            return (f"SLO search {self.model} at {config.base_url}: the highest request rate from "
                    f"{self.search.lowest:g} to {self.search.highest:g} req/s meeting {slos} at p99 (to "
                    f"{RATE_RESOLUTION:.0%}), each probe {mode}{arrival}, {self.client} client")
        if self.search is not None:
            return (f"SLO search {self.model} at {config.base_url}: the highest concurrency from "
                    f"{self.search.lowest} to {self.search.highest} meeting {slos} "
                    f"at p99, each probe at least {PROBE_WAVES} requests per slot ({mode}), {self.client} client")
        if config.rate_levels:
            return (f"serving sweep {self.model} at {config.base_url}: request rates "
                    f"{','.join(f'{r:g}' for r in self.levels)} req/s, {mode}{arrival}, {self.client} client")
        return (f"serving sweep {self.model} at {config.base_url}: concurrency "
                f"{','.join(f'{c:g}' for c in self.levels)}, {mode}{arrival}, {self.client} client")


async def prepare_sweep(config: MacroConfig) -> SweepPlan:
    """Check the configuration, read the dataset and trace, discover the model when none is given.

    Raises ``ConfigError`` for a configuration that cannot run and ``MacroError`` when the model must be
    discovered and cannot be."""
    config.validate()
    dataset: list[Prompt] | None = load_jsonl(config.dataset) if config.dataset else None
    trace: list[Arrival] | None = load_trace(config.trace) if config.trace else None
    model = config.model or await discover_model(config)
    client = config.client
    fallback = lean_unsupported(config.base_url) if client == "lean" else None
    if fallback is not None:
        client = "httpx"
    search: SloSearch | None = None
    if config.search:
        search = (RateSearch(min(config.rate_levels), max(config.rate_levels)) if config.rate_levels
                  else SloSearch(min(config.concurrency), max(config.concurrency)))
    return SweepPlan(config, model, client, fallback, dataset, trace, search)


def sweep_note(result: SweepResult) -> str:
    """How a sweep ended, in one line: its levels (or where it was cancelled) and its headline."""
    levels = len(result.config.levels)
    if result.config.search:  # a search's probes are chosen as it goes: it says how many it ran
        ran = len(result.levels)
        note = f"{'cancelled after ' if result.cancelled else ''}{ran} probe{'s' if ran != 1 else ''}"
    else:
        note = (f"cancelled after {len(result.levels)} of {levels} levels" if result.cancelled
                else f"{levels} levels")
    if result.single_stream.state != "not run":
        note += "; " + single_stream_line(result.single_stream)
    return note


async def run_plan(plan: SweepPlan, publish: Callable[[Event], None],
                   progress: Callable[[LevelProgress], None] | None = None,
                   cancel: asyncio.Event | None = None) -> SweepResult:
    """Run a prepared sweep's levels in order (see the module docstring); no phase of its own."""
    model, client = plan.model, plan.client
    cancel = cancel or asyncio.Event()
    if plan.fallback is not None:
        publish(LogLine(t=_now(), level="warning", source=SOURCE,
                        message=f"lean HTTP client not usable ({plan.fallback}): using httpx"))
    found = await check_fields_or_cancel(plan.config, model, cancel)
    if found.dropped:
        plan.config = dataclasses.replace(plan.config, omit_fields=plan.config.omit_fields + found.dropped)
        publish(RequestFieldsDropped(t=_now(), fields=list(found.dropped), reason=found.reason,
                                     url=plan.config.base_url + plan.config.endpoint_path))
    config = plan.config
    result = plan.result = SweepResult(config=config, model=model, fields_dropped=found.dropped,
                                       fields_dropped_reason=found.reason)
    levels = plan.levels
    scraper: ServerScraper | None = None
    try:
        if cancel.is_set():  # cancelled during the field check
            return result
        lengths: LengthModel | None = None
        method = "dataset"
        if plan.dataset is None:
            cal, notes = await prepare_lengths(config, model)
            result.lengths = cal
            lengths, method = LengthModel(cal), cal.method
            for note in notes:
                publish(LogLine(t=_now(), level="info", source=SOURCE, message=note))
            publish(LogLine(t=_now(), level="info" if cal.exact else "warning", source=SOURCE,
                            message=cal.describe()))
        if config.scrape_s:
            scraper = ServerScraper(config.server_metrics_url, publish, config.scrape_s, headers(config),
                                    config.timeouts.connect_s)
            await scraper.start()
        resetter = (PrefixCacheReset(config.base_url, publish, headers(config), config.timeouts.read_s)
                    if config.reset_prefix_cache else None)
        search = plan.search
        for idx in itertools.count():
            key = levels[idx] if search is None and idx < len(levels) else search.next() if search else None
            if key is None or cancel.is_set():
                break
            reset = await resetter.reset() if resetter is not None else None
            if config.rate_levels:  # the level's rate, under the one cap
                c = max(config.concurrency)
                level_config = dataclasses.replace(config, request_rate=key, requests_per_stream=None,
                                                   requests=config.rate_level_requests(key))
            else:
                c = int(key)
                level_config = config if search is None else dataclasses.replace(
                    config, requests=search.probe_requests(c, config.level_requests(c)), requests_per_stream=None)
            level = Level(level_config, model, c, idx, len(levels) if search is None else search.planned, progress,
                          cancel, client, lengths, method, plan.dataset, plan.trace)
            if scraper is not None and scraper.active:
                scraper.level(c, idx, lambda lv=level: lv.done - lv.failed)
                level.on_stage = scraper.mark
            run = await level.run()
            if run is None:
                break
            if scraper is not None:
                run.metrics.update(scraper.level_figures(run.metrics))
            if found.dropped:
                run.metrics["request_fields_dropped"] = list(found.dropped)
            if reset is not None:
                run.metrics["prefix_cache_reset"] = reset
            if config.prefix_len:
                run.metrics["shared_prefix_len"], run.metrics["num_prefixes"] = config.prefix_len, config.num_prefixes
            _publish_level(publish, level, run)
            result.levels.append(SweepLevel(c, run.metrics, run.records, level.rate))
            if search is not None:
                search.record(key, vd.level_meets(run.records, vd.slo_dict(config.slo)))
    finally:
        result.cancelled = cancel.is_set() or (len(result.levels) < len(levels) if search is None
                                               else search.next() is not None)
        if scraper is not None:
            await scraper.close()
    if result.levels:
        result.verdict = sweep_verdict_event(result, search)
        publish(result.verdict)
    return result


def sweep_verdict_event(result: SweepResult, search: SloSearch | None = None) -> MacroVerdict:
    """The verdict of the sweep's finished levels, as the event that records it; a search's answer is the
    highest probe that met the SLOs below the lowest that missed them (``SloSearch.answer``)."""
    figures = [vd.LevelFigures(lv.key, lv.result.output_throughput or 0.0, lv.records) for lv in result.levels]
    v = vd.sweep_verdict(figures, vd.slo_dict(result.config.slo))
    return MacroVerdict(t=_now(), slo=v.slo, meets=v.meets,
                        slo_concurrency=search.answer if search is not None else v.slo_concurrency,
                        knee_concurrency=v.knee_concurrency, knee_tok_s=v.knee_tok_s, peak_tok_s=v.peak_tok_s,
                        knee_growth=v.knee_growth, searched=search.order if search is not None else [],
                        axis=result.config.axis)


def verdict_dict(ev: MacroVerdict | None) -> dict[str, Any] | None:
    """The verdict in ``--output``: the SLOs (``goodput_slo_ms``, vLLM's key), the levels that meet them at
    p99 and the highest, the knee and the peak output tok/s."""
    if ev is None:
        return None
    if ev.axis == "rate":
        return {"goodput_slo_ms": ev.slo, "slo_met_at_p99_request_rates": ev.meets,
                "max_rate_meeting_slo": ev.slo_concurrency, **({"search_probes": ev.searched} if ev.searched else {}),
                "knee_request_rate": ev.knee_concurrency, "knee_output_throughput": ev.knee_tok_s,
                "peak_output_throughput": ev.peak_tok_s, "knee_growth_per_doubling": ev.knee_growth}
    return {"goodput_slo_ms": ev.slo, "slo_met_at_p99": ev.meets, "max_concurrency_meeting_slo": ev.slo_concurrency,
            **({"search_probes": ev.searched} if ev.searched else {}),
            "knee_concurrency": ev.knee_concurrency, "knee_output_throughput": ev.knee_tok_s,
            "peak_output_throughput": ev.peak_tok_s, "knee_growth_per_doubling": ev.knee_growth}


async def run_sweep(config: MacroConfig, publish: Callable[[Event], None],
                    progress: Callable[[LevelProgress], None] | None = None,
                    cancel: asyncio.Event | None = None) -> SweepResult:
    """Prepare and run every level of ``config.concurrency`` in order; see the module docstring. It
    publishes no phase: ``kimitui.phases.macro.macro_phase`` is the macro phase.

    Raises ``ConfigError`` for a configuration that cannot run and ``MacroError`` when the model must be
    discovered and cannot be. Request failures never raise: they are counted in each level's metrics.
    """
    return await run_plan(await prepare_sweep(config), publish, progress, cancel)


def _publish_level(publish: Callable[[Event], None], level: Level, run: LevelRun) -> None:
    t = _now()
    for ev in rec.events(run.records, t=t, concurrency=level.c, level_index=level.idx, origin=run.origin_wall,
                         rate=level.rate):
        publish(ev)
    publish(MacroPoint(t=t, concurrency=level.c, metrics=run.metrics, rate=level.rate))
    for line in level.warnings(LevelResult.from_json(level.c, run.metrics)):
        publish(LogLine(t=_now(), level="warning", source=SOURCE, message=line))
