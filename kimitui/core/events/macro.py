"""The serving sweep: a level's figures and requests, its progress, the server's own samples, the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, overload

from kimitui.core.events.base import Event, _plain
from kimitui.core.level_result import LevelResult
from kimitui.core.typed import finite


@dataclass(frozen=True, slots=True)
class MacroPoint(Event):
    """One level of a serving sweep: ``metrics`` is the record (vLLM's result key names, plain JSON not checked
    when decoded), ``result`` its figures typed once (``kimitui.core.level_result``): every surface reads
    ``result``. A sweep's levels are concurrencies, or request rates (``rate``: the level's own rate, with
    ``concurrency`` the cap on requests at once); ``key`` is the one a sweep's levels are ordered by."""

    type: ClassVar[str] = "macro_point"
    concurrency: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    rate: float | None = None
    """Requests/s of this level where the sweep's levels are rates (``--request-rate 2 4 8``, a rate search);
    None where they are concurrencies (a single ``--request-rate`` included)."""
    result: LevelResult = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "result", LevelResult.from_json(self.concurrency, self.metrics))

    @property
    def key(self) -> float:
        """The level's place on its sweep's axis: its rate, else its concurrency."""
        return self.rate if self.rate is not None else self.concurrency

    @property
    def label(self) -> str:
        """``c=8`` or ``2.5 req/s``."""
        return level_label(self.key, "rate" if self.rate is not None else "concurrency")

    def to_dict(self) -> dict[str, Any]:
        out = {"t": self.t, "type": self.type, "concurrency": self.concurrency, "metrics": _plain(self.metrics)}
        if self.rate is not None:
            out["rate"] = self.rate
        return out


LevelAxis = Literal["concurrency", "rate"]
"""What a sweep's levels are: concurrencies (closed loop, or a cap under one request rate), or request rates."""


def level_label(key: float, axis: LevelAxis) -> str:
    """A level as the operator reads it: ``c=8``, or ``2.5 req/s`` on a rate axis."""
    return f"{key:g} req/s" if axis == "rate" else f"c={key:g}"


def level_words(concurrency: int, rate: float | None) -> str:
    """A level in a sentence: ``concurrency 8``, or ``rate 2.5 req/s`` where the sweep's levels are rates."""
    return f"rate {rate:g} req/s" if rate is not None else f"concurrency {concurrency}"


@dataclass(frozen=True, slots=True)
class MacroVerdict(Event):
    """A sweep's verdict, published when it ends (``kimitui.bench.macro.verdict``): the highest concurrency
    whose level meets the goodput SLOs at p99, and the knee, the first level past which output tok/s grows
    by less than ``knee_growth`` per doubling of the concurrency."""

    type: ClassVar[str] = "macro_verdict"
    slo: dict[str, float] = field(default_factory=dict)
    """The SLOs in ms by vLLM's key (``ttft``, ``tpot``, ``e2el``); empty: none given."""
    meets: list[float] = field(default_factory=list)
    """The levels (on the sweep's ``axis``) that meet the SLOs at p99."""
    slo_concurrency: float | None = None
    """The highest level meeting them: a concurrency, or a rate in requests/s where ``axis`` is rate."""
    knee_concurrency: float | None = None
    """The knee, on the same axis."""
    knee_tok_s: float | None = None
    peak_tok_s: float | None = None
    knee_growth: float = 0.10
    searched: list[float] = field(default_factory=list)
    """An SLO search's probes in the order they ran (``kimitui.bench.macro.search``; empty: a fixed sweep):
    ``slo_concurrency`` is then the search's answer."""
    axis: LevelAxis = "concurrency"
    """What the levels above are: concurrencies, or request rates (requests/s)."""

    def label(self, key: float) -> str:
        return level_label(key, self.axis)


def level_failed(point: MacroPoint) -> bool:
    """Every request of the level failed: it has no throughput or latency to show (never a zero)."""
    return point.result.all_failed


def first_error(point: MacroPoint) -> str | None:
    """The most frequent failure of a level."""
    return point.result.first_error


SweepStatus = Literal["starting", "running", "cancelling", "done", "cancelled", "failed"]
"""Where a serving sweep is: the one vocabulary of the load generator's phase, its events and the dashboard."""
LevelStage = Literal["", "warmup", "run", "done"]


class LevelCounts(Protocol):
    """A level in progress as the load generator counts it (``kimitui.bench.macro.LevelProgress``)."""

    level_index: int
    concurrency: int
    rate: float | None
    stage: Literal["warmup", "run", "done"]
    done: int
    total: int | None
    failed: int
    in_flight: int

    @property
    def level_fraction(self) -> float: ...


@dataclass(frozen=True, slots=True)
class MacroProgress(Event):
    """Where a serving sweep is, for its panel (live and replayed alike): published when the sweep starts,
    when a level starts or ends, at most ``PROGRESS_EVERY_S`` apart while a level runs, and when the sweep
    ends (with its status and, when it could not run, why)."""

    type: ClassVar[str] = "macro_progress"
    status: SweepStatus = "running"
    levels: list[float] = field(default_factory=list)
    """The planned levels, in order: concurrencies, or request rates where ``axis`` is rate."""
    level_index: int = 0
    concurrency: int = 0
    """The level's concurrency (on a rate axis: its cap on requests at once)."""
    rate: float | None = None
    """The level's request rate where the levels are rates."""
    axis: LevelAxis = "concurrency"
    stage: LevelStage = ""
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

    @classmethod
    def of(cls, t: float, status: SweepStatus, levels: list[float], elapsed_s: float, level: LevelCounts | None = None,
           error: str = "", axis: LevelAxis = "concurrency") -> MacroProgress:
        """The sweep's progress with LEVEL's counts (None: before the first level); a sweep that is done ends on
        its last level, whole."""
        if status == "done":
            return cls(t, status=status, levels=list(levels), level_index=len(levels) - 1,
                       concurrency=level.concurrency if level is not None else 0,
                       rate=level.rate if level is not None else None, axis=axis, stage="done",
                       done=level.done if level is not None else 0, total=level.total if level is not None else None,
                       failed=level.failed if level is not None else 0, in_flight=0, level_fraction=1.0,
                       elapsed_s=elapsed_s, error=error)
        if level is None:
            return cls(t, status=status, levels=list(levels), elapsed_s=elapsed_s, error=error, axis=axis)
        return cls(t, status=status, levels=list(levels), level_index=level.level_index,
                   concurrency=level.concurrency, rate=level.rate, axis=axis, stage=level.stage, done=level.done,
                   total=level.total, failed=level.failed, in_flight=level.in_flight,
                   level_fraction=round(level.level_fraction, 4), elapsed_s=elapsed_s, error=error)

    @property
    def key(self) -> float:
        """The level in flight on the sweep's axis (its rate, else its concurrency)."""
        return self.rate if self.axis == "rate" and self.rate is not None else self.concurrency

    @property
    def label(self) -> str:
        return level_label(self.key, self.axis)

    @property
    def overall_fraction(self) -> float:
        if self.status == "done":
            return 1.0
        return (self.level_index + self.level_fraction) / max(1, len(self.levels))


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one measured request of a level did, in ms (``kimitui.bench.macro.records`` builds them when the
    level ends; ``MacroRequests`` carries them in their JSON form, ``to_json``)."""

    start_ms: float
    """Dispatch (the request's ``t0``) after the level's origin."""
    end_ms: float
    """The request's end (its last byte, or the failure) after its start."""
    chunk_ms: list[float] = field(default_factory=list)
    """Arrival of each token chunk after the start: ``chunk_ms[0]`` is the TTFT, ``chunk_ms[-1]`` the E2EL."""
    first_ms: float | None = None
    """Arrival of the first chunk with a choice (a role-only delta) after the start, where it came before
    the first token chunk (None: with it, as on vLLM, or no chunk at all)."""
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    input_from_usage: bool = True
    """``input_tokens`` is the server's ``usage.prompt_tokens`` (else the client's estimate)."""
    usage_missing: bool = False
    """No usage chunk: ``output_tokens`` counts content chunks (a lower bound)."""
    target_input: int | None = None
    """The input length asked for (None: a dataset prompt)."""
    max_tokens: int = 0
    sched_ms: float | None = None
    """Open-loop arrivals: when the schedule said to send it, after the origin."""
    late_ms: float | None = None
    """Open-loop arrivals: how long the client took to send it once it could (its own lateness)."""
    output_ms: float | None = None
    """A reasoning model's first output token (content, not thinking) after the start, where thinking came
    first (None: the first token chunk was output, or there was none)."""
    reasoning_tokens: int = 0
    """Tokens of thinking before the answer: the server's usage count where it gave one, else the chunks that
    held reasoning only."""
    turn: int = 1
    """Its turn in a multi-turn conversation (1: the first, or none)."""

    @property
    def success(self) -> bool:
        return self.error is None

    @property
    def ttfo_ms(self) -> float | None:
        """Time to the first output token: the TTFT where the request did not think first; None for one that
        thought and never answered (or never sent a token)."""
        if self.output_ms is not None:
            return self.output_ms
        return None if self.reasoning_tokens or not self.chunk_ms else self.chunk_ms[0]

    @property
    def ttft_ms(self) -> float:
        return self.chunk_ms[0] if self.chunk_ms else 0.0

    @property
    def e2el_ms(self) -> float:
        return self.chunk_ms[-1] if self.chunk_ms else 0.0

    def to_json(self) -> dict[str, Any]:
        """A compact object: optional keys are left out at their default."""
        out: dict[str, Any] = {"start_ms": self.start_ms, "end_ms": self.end_ms, "chunk_ms": self.chunk_ms,
                               "in": self.input_tokens, "out": self.output_tokens, "max_tokens": self.max_tokens}
        if self.target_input is not None:
            out["target_in"] = self.target_input
        if self.first_ms is not None:
            out["first_ms"] = self.first_ms
        if self.error is not None:
            out["error"] = self.error
        if not self.input_from_usage:
            out["in_estimated"] = True
        if self.usage_missing:
            out["usage_missing"] = True
        if self.sched_ms is not None:
            out["sched_ms"] = self.sched_ms
        if self.late_ms is not None:
            out["late_ms"] = self.late_ms
        if self.output_ms is not None:
            out["output_ms"] = self.output_ms
        if self.reasoning_tokens:
            out["think"] = self.reasoning_tokens
        if self.turn != 1:
            out["turn"] = self.turn
        return out

    @classmethod
    def read(cls, obj: Any) -> RequestRecord | None:
        """The record of a JSON object, every field checked; None for one that is not a record (a run file
        is read as it is: a hostile or damaged one loses that request, never the session)."""
        if not isinstance(obj, dict):
            return None
        start, end = finite(obj.get("start_ms")), finite(obj.get("end_ms"))
        chunks = obj.get("chunk_ms") or []
        if start is None or end is None or not isinstance(chunks, list) or not _times(chunks):
            return None
        first, sched, late, output = (_opt_ms(obj.get(k)) for k in ("first_ms", "sched_ms", "late_ms", "output_ms"))
        ints = [obj.get(k, 0) for k in ("in", "out", "max_tokens", "think")] + [obj.get("turn", 1)]
        target, error = obj.get("target_in"), obj.get("error")
        if (any(v is False for v in (first, sched, late, output)) or any(type(v) is not int for v in ints)
                or (target is not None and type(target) is not int) or (error is not None and type(error) is not str)):
            return None
        return cls(start_ms=start, end_ms=end, chunk_ms=[float(x) for x in chunks], first_ms=first,
                   input_tokens=ints[0], output_tokens=ints[1], error=error,
                   input_from_usage=obj.get("in_estimated") is not True, usage_missing=obj.get("usage_missing") is True,
                   target_input=target, max_tokens=ints[2], sched_ms=sched, late_ms=late,
                   output_ms=output, reasoning_tokens=max(0, ints[3]), turn=max(1, ints[4]))

    @classmethod
    def from_json(cls, obj: Any) -> RequestRecord:
        """``read``, raising ValueError for what is not a record."""
        r = cls.read(obj)
        if r is None:
            raise ValueError("not a per-request record")
        return r


def _times(values: list[Any]) -> bool:
    """Every value a finite number (a bool is none): the sum of finite floats is finite, a NaN or an infinity
    makes it not."""
    try:
        return all(type(v) is float or type(v) is int for v in values) and math.isfinite(math.fsum(values))
    except OverflowError:
        return False


def _opt_ms(value: Any) -> float | bool | None:
    """An optional time: the float, None when absent, False when it is there and not a finite number."""
    if value is None:
        return None
    v = finite(value)
    return False if v is None else v


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
    rate: float | None = None
    """The level's request rate where the sweep's levels are rates (``MacroPoint.rate``)."""
    origin: float = 0.0
    first: int = 0
    total: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)

    @overload
    def records(self, keep_malformed: Literal[False] = False) -> list[RequestRecord]: ...

    @overload
    def records(self, keep_malformed: Literal[True]) -> list[RequestRecord | None]: ...

    def records(self, keep_malformed: bool = False) -> list[RequestRecord] | list[RequestRecord | None]:
        """The batch's records, typed (``RequestRecord.read``); with KEEP_MALFORMED, None in the place of each
        object that is not a record (so ``first + k`` still numbers them), else those are left out."""
        read = [RequestRecord.read(obj) for obj in self.requests]
        return read if keep_malformed else [r for r in read if r is not None]

    def to_dict(self) -> dict[str, Any]:
        # ``requests`` already holds plain JSON values: walking its thousands of floats one by one (the
        # generic ``_plain``) would triple the cost of writing a level's records
        out = {"t": self.t, "type": self.type, "concurrency": self.concurrency, "level_index": self.level_index,
               "origin": self.origin, "first": self.first, "total": self.total, "requests": self.requests}
        if self.rate is not None:
            out["rate"] = self.rate
        return out


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
