"""The serving engines' own accounting, as their Prometheus ``/metrics`` pages name it: one table of names
per engine (vLLM, SGLang, TGI, llama.cpp), the page read into a ``ServerSnapshot`` (gauges summed over
their label sets, histograms as their sum and count), and a level's server-side means from two snapshots.

vLLM (v1 engine) counts its prefix cache in prompt tokens: ``vllm:prefix_cache_queries_total`` (tokens looked
up as each request is scheduled) and ``vllm:prefix_cache_hits_total`` (those found cached), labels
``model_name`` and ``engine``; releases before them exposed ``vllm:gpu_prefix_cache_queries_total`` /
``..._hits_total`` (deprecated since, still served with hidden metrics). The delta of the two over a level
is its hit rate (``prefix_hit_rate``). v0's ``vllm:gpu_prefix_cache_hit_rate`` gauge is a rate since the
server started and cannot be taken per level: it is not read.

Shared by the macro sweep's scraper (``kimitui.bench.macro.server_scrape``) and the cleanup's drain, so
both know the same names. Only lines of the known names are handed to ``prometheus_client``'s parser: a
vLLM page is mostly histogram buckets of metrics we do not read, and the scrape runs beside the load
generator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kimitui.core.level_result import LevelResult


class MetricsError(Exception):
    """The metrics could not be read or hold no engine's gauges (one line)."""


@dataclass(frozen=True, slots=True)
class EngineNames:
    """One engine's metric names; a histogram is in seconds, ``kv_cache`` a fraction of the cache in use."""

    engine: str
    running: str
    waiting: str
    kv_cache: str | None = None
    ttft: str | None = None
    itl: str | None = None
    e2e: str | None = None
    queue: str | None = None
    preemptions: str | None = None
    prefix_cache: tuple[tuple[str, str], ...] = ()
    """(queries, hits) counter names of the prefix cache, the preferred pair first."""

    def histograms(self) -> dict[str, str]:
        """The latency histograms it has, by our key (ttft, itl, e2e, queue)."""
        named = {"ttft": self.ttft, "itl": self.itl, "e2e": self.e2e, "queue": self.queue}
        return {key: name for key, name in named.items() if name is not None}

    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.running, self.waiting, self.kv_cache, self.preemptions,
                                 *self.histograms().values(), *(n for pair in self.prefix_cache for n in pair))
                     if n is not None)


VLLM = EngineNames("vllm", "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                   "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                   "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                   "vllm:num_preemptions_total",
                   (("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
                    ("vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total")))
"""Not the deprecated ``vllm:time_per_output_token_seconds``: ``inter_token_latency`` is the per-token gap."""
SGLANG = EngineNames("sglang", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                     "sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                     "sglang:e2e_request_latency_seconds")
TGI = EngineNames("tgi", "tgi_batch_current_size", "tgi_queue_size", e2e="tgi_request_duration",
                  queue="tgi_request_queue_duration")
LLAMACPP = EngineNames("llama.cpp", "llamacpp:requests_processing", "llamacpp:requests_deferred")
ENGINES: tuple[EngineNames, ...] = (VLLM, SGLANG, TGI, LLAMACPP)


def _sample_names() -> frozenset[str]:
    names: set[str] = set()
    for e in ENGINES:
        names.update(n for n in (e.running, e.waiting, e.kv_cache, e.preemptions) if n is not None)
        names.update(n for pair in e.prefix_cache for n in pair)
        for h in e.histograms().values():
            names.update((h + "_sum", h + "_count"))
    return frozenset(names)


SAMPLE_NAMES = _sample_names()
"""Every sample we read, of every engine: a histogram by its ``_sum`` and ``_count``, never its buckets."""


@dataclass(frozen=True, slots=True)
class ServerSnapshot:
    engine: str
    running: float | None = None
    waiting: float | None = None
    kv_cache: float | None = None
    preemptions: float | None = None
    histograms: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per key (ttft, itl, e2e, queue): (sum in seconds, count) since the server started."""
    prefix_cache: tuple[float, float] | None = None
    """(queries, hits) of the prefix cache since the server started, in tokens (None: no such counters)."""


def _known_lines(text: str) -> str:
    """The sample lines of the names we read only (a cheap filter ahead of the parser: a vLLM page is mostly
    buckets and metrics we do not read); HELP and TYPE lines are left out, so each sample reads as untyped."""
    keep = [line for line in text.splitlines()
            if line[:1] != "#" and line.partition("{")[0].partition(" ")[0] in SAMPLE_NAMES]
    return "\n".join(keep) + "\n"


def read_samples(text: str) -> dict[str, float]:
    """Every sample of the engines' names, summed over its label sets (per engine, model, ...); a histogram
    bucket is not read (only its ``_sum`` and ``_count``). MetricsError when the text is not Prometheus'."""
    from prometheus_client.parser import text_string_to_metric_families  # not on the first frame's path

    found: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(_known_lines(text)):
            for sample in family.samples:
                found[sample.name] = found.get(sample.name, 0.0) + float(sample.value)
    except ValueError as exc:
        raise MetricsError(f"not Prometheus text: {exc}") from None
    return found


def engine_of(found: dict[str, float]) -> EngineNames | None:
    """The first engine whose running or waiting gauge is in the samples."""
    return next((e for e in ENGINES if e.running in found or e.waiting in found), None)


def parse_snapshot(text: str) -> ServerSnapshot:
    """The page as one snapshot; MetricsError when it holds no engine's gauges."""
    found = read_samples(text)
    names = engine_of(found)
    if names is None:
        wanted = ", ".join(e.running for e in ENGINES)
        raise MetricsError(f"none of {wanted} in the metrics (not a serving engine we know)")
    hists = {key: (found[name + "_sum"], found[name + "_count"]) for key, name in names.histograms().items()
             if name + "_sum" in found and name + "_count" in found}
    prefix = next(((found[q], found[h]) for q, h in names.prefix_cache if q in found and h in found), None)
    return ServerSnapshot(names.engine, found.get(names.running), found.get(names.waiting),
                          found.get(names.kv_cache) if names.kv_cache else None,
                          found.get(names.preemptions) if names.preemptions else None, hists, prefix)


def prefix_hit_rate(before: ServerSnapshot, after: ServerSnapshot) -> tuple[int, int, float | None] | None:
    """(queries, hits, hits / queries) of the prefix cache between the two snapshots, in tokens; the rate is
    None when nothing was looked up (caching off). None without the counters, or when they went back (the
    server restarted in between)."""
    if before.prefix_cache is None or after.prefix_cache is None:
        return None
    queries = round(after.prefix_cache[0] - before.prefix_cache[0])
    hits = round(after.prefix_cache[1] - before.prefix_cache[1])
    if queries < 0 or hits < 0:
        return None
    return queries, hits, (hits / queries if queries else None)


def level_means_ms(before: ServerSnapshot, after: ServerSnapshot) -> tuple[dict[str, float], int | None]:
    """The server's mean of each latency over what it observed between the two snapshots, in ms, and how
    many requests it finished meanwhile (the e2e histogram's count; None when it has none)."""
    means: dict[str, float] = {}
    for key, (sum_after, count_after) in after.histograms.items():
        sum_before, count_before = before.histograms.get(key, (0.0, 0.0))
        if count_after > count_before:
            means[key] = (sum_after - sum_before) / (count_after - count_before) * 1000.0
    e2e_after, e2e_before = after.histograms.get("e2e"), before.histograms.get("e2e", (0.0, 0.0))
    finished = round(e2e_after[1] - e2e_before[1]) if e2e_after is not None else None
    return means, finished


PREFIX_CACHE_WARN_ABOVE = 0.10
"""A level whose prompt tokens the server found cached above this share is flagged (``prefix_cache_warning``)."""


def prefix_cache_warning(level: LevelResult) -> str | None:
    """What to say of a level whose prompt tokens the server's prefix cache held above
    ``PREFIX_CACHE_WARN_ABOVE``; None otherwise, or without the server's counters."""
    rate = level.figure("prefix_cache_hit_rate")
    if rate is None or rate <= PREFIX_CACHE_WARN_ABOVE or level.count("shared_prefix_len") or \
            (level.count("turns") or 1) > 1:
        return None  # prompts that share a prefix on purpose (--prefix-len, a conversation's history) are to hit it
    hits, queries = level.count("prefix_cache_hits"), level.count("prefix_cache_queries")
    counted = f" ({hits:,} of {queries:,})" if hits is not None and queries is not None else ""
    return (f"the server's prefix cache held {rate:.0%} of the prompt tokens{counted}: TTFT was measured on a "
            "warm cache (prompts an earlier run or level sent; --reset-prefix-cache drops the cache before each "
            "level where the server offers it)")
