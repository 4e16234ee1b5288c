"""The simulated server's Prometheus ``/metrics``: an engine's own accounting of the simulated requests.

Names, labels and buckets are vLLM's, as its ``PrometheusStatLogger`` declares them
(vllm-project/vllm ``vllm/v1/metrics/loggers.py``, read at commit 005a810bc40f; labels
``model_name`` and ``engine``; ``vllm:inter_token_latency_seconds`` is the later name of
``vllm:time_per_output_token_seconds``, with the same 19 buckets, which replaced it):

- gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``;
- counter ``vllm:num_preemptions`` (exposed as ``vllm:num_preemptions_total``; the simulator never
  preempts, so it stays 0), ``vllm:prompt_tokens`` and ``vllm:generation_tokens``;
- counters ``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits`` (prompt tokens looked up in the
  prefix cache and found there, ``prefix_cache.py``; SGLang has no such counters);
- histograms ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``,
  ``vllm:e2e_request_latency_seconds``, ``vllm:request_queue_time_seconds``.

The ``sglang`` flavour serves the same observations under SGLang's names (``sglang:num_running_reqs``,
``sglang:num_queue_reqs``, ``sglang:token_usage``, ``sglang:time_to_first_token_seconds``,
``sglang:inter_token_latency_seconds``, ``sglang:e2e_request_latency_seconds``,
``sglang:queue_time_seconds``) with the ``model_name`` label only; the buckets stay vLLM's.

Observations are the requests' real timings on the server's clock: the queue time from arrival to
admission into the batch, TTFT from arrival to the first token handed to the response, one inter-token
gap per later token (a token handed out in the same write as the one before counts 0, so the gaps of a
request add up to its last token's time minus its first's), e2e from arrival to the last token. Only
requests that finish (every token handed out) are observed, as vLLM observes finished requests.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Flavor = Literal["vllm", "sglang"]
FLAVORS: tuple[Flavor, ...] = ("vllm", "sglang")

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

# metric -> (vLLM name, SGLang name); None: the engine has no such metric
_NAMES: dict[str, tuple[str, str | None]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "kv": ("vllm:kv_cache_usage_perc", "sglang:token_usage"),
    "preemptions": ("vllm:num_preemptions", None),
    "prompt_tokens": ("vllm:prompt_tokens", "sglang:prompt_tokens"),
    "generation_tokens": ("vllm:generation_tokens", "sglang:generation_tokens"),
    "prefix_queries": ("vllm:prefix_cache_queries", None),
    "prefix_hits": ("vllm:prefix_cache_hits", None),
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl": ("vllm:inter_token_latency_seconds", "sglang:inter_token_latency_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    "queue": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
}
_HELP = {
    "running": "Number of requests in model execution batches.",
    "waiting": "Number of requests waiting to be processed.",
    "kv": "KV-cache usage. 1 means 100 percent usage.",
    "preemptions": "Cumulative number of preemption from the engine.",
    "prompt_tokens": "Number of prefill tokens processed.",
    "generation_tokens": "Number of generation tokens processed.",
    "prefix_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "prefix_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "ttft": "Histogram of time to first token in seconds.",
    "itl": "Histogram of inter-token latency in seconds.",
    "e2e": "Histogram of e2e request latency in seconds.",
    "queue": "Histogram of time spent in WAITING phase for request.",
}


@dataclass(slots=True)
class Histogram:
    """A Prometheus histogram: per-bucket (non-cumulative) counts, the sum and the count."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1

    def observe_zeros(self, n: int) -> None:
        """``n`` observations of 0 at once (tokens handed out in the same write as the one before)."""
        self.counts[0] += n
        self.count += n

    def lines(self, name: str, labels: str) -> list[str]:
        out = []
        cumulative = 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts, strict=True):
            cumulative += n
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {float(cumulative)}')
        out.append(f"{name}_count{{{labels}}} {float(self.count)}")
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        return out


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One finished request's timings, seconds on the server's monotonic clock."""

    arrived: float
    admitted: float
    writes: Sequence[tuple[float, int]]
    """(time, tokens) of each hand-out of tokens to the response, in order."""
    prompt_tokens: int


class ServerMetrics:
    """What the simulated engine counts; ``render`` gives the ``/metrics`` text."""

    def __init__(self, model: str, flavor: Flavor = "vllm") -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"unknown metrics flavour {flavor!r}; one of {', '.join(FLAVORS)}")
        self.model = model
        self.flavor = flavor
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(REQUEST_LATENCY_BUCKETS)
        self.queue = Histogram(REQUEST_LATENCY_BUCKETS)
        self.preemptions = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0

    def observe(self, timing: RequestTiming) -> None:
        writes = timing.writes
        if not writes:
            return
        self.queue.observe(max(0.0, timing.admitted - timing.arrived))
        self.ttft.observe(writes[0][0] - timing.arrived)
        self.itl.observe_zeros(writes[0][1] - 1)
        for (before, _), (after, tokens) in itertools.pairwise(writes):
            self.itl.observe(after - before)
            self.itl.observe_zeros(tokens - 1)
        self.e2e.observe(writes[-1][0] - timing.arrived)
        self.prompt_tokens += timing.prompt_tokens
        self.generation_tokens += sum(tokens for _, tokens in writes)

    def _name(self, key: str) -> str | None:
        vllm, sglang = _NAMES[key]
        return vllm if self.flavor == "vllm" else sglang

    def render(self, *, running: int, waiting: int, kv_usage: float, prefix_queries: int = 0,
               prefix_hits: int = 0) -> str:
        labels = (f'engine="0",model_name="{self.model}"' if self.flavor == "vllm"
                  else f'model_name="{self.model}"')
        lines: list[str] = []

        def head(key: str, kind: str) -> str | None:
            name = self._name(key)
            if name is not None:
                # as prometheus_client writes the text format 0.0.4: a counter's header names its sample
                shown = name + "_total" if kind == "counter" else name
                lines.extend((f"# HELP {shown} {_HELP[key]}", f"# TYPE {shown} {kind}"))
            return name

        for key, value in (("running", running), ("waiting", waiting), ("kv", kv_usage)):
            if (name := head(key, "gauge")) is not None:
                lines.append(f"{name}{{{labels}}} {float(value)!r}")
        for key, value in (("preemptions", self.preemptions), ("prompt_tokens", self.prompt_tokens),
                           ("generation_tokens", self.generation_tokens), ("prefix_queries", prefix_queries),
                           ("prefix_hits", prefix_hits)):
            if (name := head(key, "counter")) is not None:
                lines.append(f"{name}_total{{{labels}}} {float(value)!r}")
        for key, hist in (("ttft", self.ttft), ("itl", self.itl), ("e2e", self.e2e), ("queue", self.queue)):
            if (name := head(key, "histogram")) is not None:
                lines.extend(hist.lines(name, labels))
        return "\n".join(lines) + "\n"
