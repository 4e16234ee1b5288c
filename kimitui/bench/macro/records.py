"""Per-request records: what each measured request of a level did, in milliseconds after the level began.

A level's *origin* is its first dispatch (``t0`` of its first request). A record holds the request's
start after the origin, the arrival of each of its token chunks after its start (the first is its TTFT,
the last its E2EL), the arrival of a role-only chunk that came before the first token, its end (last byte
or failure) after its start, its tokens in and out, and its error. Every time is rounded to ``MS_DIGITS``
decimals of a millisecond (10 µs), so a record is small and the level's summary, which
``metrics.summarize`` computes from the records and nothing else, recomputes exactly from a run file or a
``--requests-out`` file.

Records are built when the level ends, from the arrival times the stream parser appended (one float a
chunk): nothing here runs while requests stream. They are published as ``MacroRequests`` events, up to
``RECORDS_PER_EVENT`` a batch, before the level's ``MacroPoint``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kimitui.bench.macro.request import RequestOutcome
from kimitui.core.events import MacroRequests

MS_DIGITS = 2
RECORDS_PER_EVENT = 200


@dataclass(slots=True)
class RequestRecord:
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

    @property
    def success(self) -> bool:
        return self.error is None

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
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RequestRecord:
        return cls(start_ms=float(obj["start_ms"]), end_ms=float(obj["end_ms"]),
                   chunk_ms=[float(x) for x in obj.get("chunk_ms") or []],
                   first_ms=None if obj.get("first_ms") is None else float(obj["first_ms"]),
                   input_tokens=int(obj.get("in", 0)), output_tokens=int(obj.get("out", 0)),
                   error=obj.get("error"), input_from_usage=not obj.get("in_estimated", False),
                   usage_missing=bool(obj.get("usage_missing", False)), target_input=obj.get("target_in"),
                   max_tokens=int(obj.get("max_tokens", 0)), sched_ms=obj.get("sched_ms"),
                   late_ms=obj.get("late_ms"))


@dataclass(slots=True)
class Sent:
    """What the level knows of one measured request besides its outcome."""

    outcome: RequestOutcome
    target_input: int | None
    max_tokens: int
    sched: float | None = None
    """perf_counter at which the arrival schedule said to send it (open loop)."""
    ready: float | None = None
    """perf_counter from which it could be sent: its scheduled time or, if later, when a slot freed."""


_SCALE = 1000.0 * 10**MS_DIGITS
_UNIT = float(10**MS_DIGITS)


def _ms(seconds: float) -> float:
    # k / 100.0 is the double nearest to the decimal k/100, so its repr has at most 2 decimals (and this is
    # twice as fast as round(x, 2), which matters a little at a million chunks)
    return round(seconds * _SCALE) / _UNIT


def build(sent: Sequence[Sent], origin: float) -> list[RequestRecord]:
    """Records of a level's requests, in dispatch order, relative to ``origin`` (perf_counter)."""
    out = []
    for s in sorted(sent, key=lambda s: s.outcome.t0):
        o = s.outcome
        t0 = o.t0
        out.append(RequestRecord(
            start_ms=_ms(t0 - origin), end_ms=_ms(o.end - t0),
            chunk_ms=[round((t - t0) * _SCALE) / _UNIT for t in o.times],
            first_ms=_ms(o.first_chunk - t0) if o.times and 0.0 < o.first_chunk < o.times[0] else None,
            input_tokens=o.prompt_tokens, output_tokens=o.output_tokens if o.success else 0, error=o.error,
            input_from_usage=o.prompt_from_usage, usage_missing=o.usage_missing, target_input=s.target_input,
            max_tokens=s.max_tokens, sched_ms=None if s.sched is None else _ms(s.sched - origin),
            late_ms=None if s.ready is None else _ms(max(0.0, t0 - s.ready))))
    return out


def events(records: Sequence[RequestRecord], *, t: float, concurrency: int, level_index: int,
           origin: float) -> list[MacroRequests]:
    """The records as ``MacroRequests`` events of at most ``RECORDS_PER_EVENT`` requests each."""
    batches = range(0, len(records), RECORDS_PER_EVENT)
    return [MacroRequests(t=t, concurrency=concurrency, level_index=level_index, origin=origin, first=i,
                          total=len(records), requests=[r.to_json() for r in records[i:i + RECORDS_PER_EVENT]])
            for i in batches]


def from_events(evs: Sequence[MacroRequests]) -> list[RequestRecord]:
    return [RequestRecord.from_json(obj) for ev in evs for obj in ev.requests]


def export_lines(ev: MacroRequests) -> Iterator[dict[str, Any]]:
    """One self-describing object per request of ``ev``, for ``--requests-out`` (JSON Lines): every key
    present (null where it has no value), ``start`` in unix seconds, the other times in ms."""
    for n, obj in enumerate(ev.requests):
        r = RequestRecord.from_json(obj)
        yield {"concurrency": ev.concurrency, "level_index": ev.level_index, "index": ev.first + n,
               "start": round(ev.origin + r.start_ms / 1000.0, 6), "start_ms": r.start_ms,
               "status": "ok" if r.success else "failed", "error": r.error,
               "ttft_ms": r.ttft_ms if r.chunk_ms else None, "e2el_ms": r.e2el_ms if r.chunk_ms else None,
               "first_chunk_ms": r.first_ms if r.first_ms is not None else (r.ttft_ms if r.chunk_ms else None),
               "end_ms": r.end_ms, "chunk_ms": r.chunk_ms, "input_tokens": r.input_tokens,
               "output_tokens": r.output_tokens, "target_input_tokens": r.target_input,
               "max_tokens": r.max_tokens, "input_estimated": not r.input_from_usage,
               "usage_missing": r.usage_missing, "sched_ms": r.sched_ms, "late_ms": r.late_ms}
