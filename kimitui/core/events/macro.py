"""The serving sweep: a level's figures and requests, its progress, the server's own samples, the verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from kimitui.core.events.base import Event
from kimitui.core.typed import finite


@dataclass(frozen=True, slots=True)
class MacroPoint(Event):
    """One concurrency level of a serving sweep; ``metrics`` uses vLLM's result key names."""

    type: ClassVar[str] = "macro_point"
    concurrency: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    """Plain JSON, not checked when decoded (its keys are open-ended): read its numbers with ``metric``."""

    def metric(self, key: str) -> float | None:
        """A metric as a finite float; None when it is missing or no number (NaN, a string, a list, ...)."""
        return finite(self.metrics.get(key))


def metrics_failed(m: Mapping[str, object]) -> bool:
    """A level's metrics say every request of it failed."""
    return "completed" in m and not m["completed"] and bool(m.get("failed") or m.get("num_prompts"))


@dataclass(frozen=True, slots=True)
class MacroVerdict(Event):
    """A sweep's verdict, published when it ends (``kimitui.bench.macro.verdict``): the highest concurrency
    whose level meets the goodput SLOs at p99, and the knee, the first level past which output tok/s grows
    by less than ``knee_growth`` per doubling of the concurrency."""

    type: ClassVar[str] = "macro_verdict"
    slo: dict[str, float] = field(default_factory=dict)
    """The SLOs in ms by vLLM's key (``ttft``, ``tpot``, ``e2el``); empty: none given."""
    meets: list[int] = field(default_factory=list)
    """The concurrencies whose level meets the SLOs at p99."""
    slo_concurrency: int | None = None
    knee_concurrency: int | None = None
    knee_tok_s: float | None = None
    peak_tok_s: float | None = None
    knee_growth: float = 0.10


def level_failed(point: MacroPoint) -> bool:
    """Every request of the level failed: it has no throughput or latency to show (never a zero)."""
    return metrics_failed(point.metrics)


def metrics_error(m: Mapping[str, object]) -> str | None:
    """The most frequent failure of a level's metrics (the load generator counts them by reason, most first)."""
    failures = m.get("failures")
    if isinstance(failures, dict) and failures:
        return str(next(iter(failures)))
    return None


def first_error(point: MacroPoint) -> str | None:
    """The most frequent failure of a level."""
    return metrics_error(point.metrics)


@dataclass(frozen=True, slots=True)
class MacroProgress(Event):
    """Where a serving sweep is, for its panel (live and replayed alike): published when the sweep starts,
    when a level starts or ends, at most ``PROGRESS_EVERY_S`` apart while a level runs, and when the sweep
    ends (with its status and, when it could not run, why)."""

    type: ClassVar[str] = "macro_progress"
    status: Literal["starting", "running", "cancelling", "done", "cancelled", "failed"] = "running"
    levels: list[int] = field(default_factory=list)
    """The planned concurrency levels, in order."""
    level_index: int = 0
    concurrency: int = 0
    stage: Literal["", "warmup", "run", "done"] = ""
    done: int = 0
    """Requests of this level finished (successful or failed)."""
    total: int | None = None
    """Requests in this level; None in duration mode."""
    failed: int = 0
    in_flight: int = 0
    level_fraction: float = 0.0
    elapsed_s: float = 0.0
    """Since the sweep started."""
    error: str = ""

    @property
    def overall_fraction(self) -> float:
        if self.status == "done":
            return 1.0
        return (self.level_index + self.level_fraction) / max(1, len(self.levels))


@dataclass(frozen=True, slots=True)
class MacroRequests(Event):
    """A batch of one level's per-request records (``kimitui.bench.macro.records``), published when the
    level ends, before its ``MacroPoint``: ``requests[k]`` is request ``first + k`` of ``total``, in
    dispatch order. Each is an object: ``start_ms`` (after ``origin``, the level's first dispatch in unix
    seconds), ``end_ms`` and ``chunk_ms`` (token chunk arrivals; after the request's start), ``in``,
    ``out``, ``max_tokens``, and when they apply ``target_in``, ``first_ms`` (a role-only chunk ahead of the
    first token), ``error``, ``in_estimated``,
    ``usage_missing``, ``sched_ms``, ``late_ms``."""

    type: ClassVar[str] = "macro_requests"
    concurrency: int = 0
    level_index: int = 0
    origin: float = 0.0
    first: int = 0
    total: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        # ``requests`` already holds plain JSON values: walking its thousands of floats one by one (the
        # generic ``_plain``) would triple the cost of writing a level's records
        return {"t": self.t, "type": self.type, "concurrency": self.concurrency, "level_index": self.level_index,
                "origin": self.origin, "first": self.first, "total": self.total, "requests": self.requests}


@dataclass(frozen=True, slots=True)
class ServerSample(Event):
    """The server's own gauges, read from its Prometheus ``/metrics`` while a sweep runs (every
    ``MacroConfig.scrape_s``), with the level it was read during (``kimitui.core.server_metrics`` names
    them per engine). A gauge the engine does not have is None."""

    type: ClassVar[str] = "server_sample"
    engine: str = ""
    concurrency: int = 0
    level_index: int = 0
    running: float | None = None
    waiting: float | None = None
    kv_cache: float | None = None
    """The fraction of the KV cache in use (0 to 1)."""
    preemptions: float | None = None
    """Preemptions since the server started (a counter)."""


@dataclass(frozen=True, slots=True)
class RequestFieldsDropped(Event):
    """The server refused request fields the load generator sends by default (vLLM's ``ignore_eos``, ...):
    its first answer, a 4xx naming them, was retried without them, and the rest of the run goes without."""

    type: ClassVar[str] = "request_fields_dropped"
    fields: list[str] = field(default_factory=list)
    reason: str = ""
    """The server's answer that named them (``HTTP 422: ...``)."""
    url: str = ""


EVENTS: tuple[type[Event], ...] = (MacroPoint, MacroVerdict, MacroProgress, MacroRequests, ServerSample,
                                   RequestFieldsDropped)
"""The events this module declares (the registry reads them)."""
