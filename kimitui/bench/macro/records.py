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
from dataclasses import dataclass
from typing import Any

from kimitui.bench.macro.request import RequestOutcome
from kimitui.core.events import MacroRequests, RequestRecord

MS_DIGITS = 2
RECORDS_PER_EVENT = 200


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
    turn: int = 1
    """Its turn in a conversation (``MacroConfig.turns``)."""


_SCALE = 1000.0 * 10**MS_DIGITS
_UNIT = float(10**MS_DIGITS)


def _ms(seconds: float) -> float:
    # k / 100.0 is the double nearest to the decimal k/100, so its repr has at most 2 decimals (and this is
    # twice as fast as round(x, 2), which matters a little at a million chunks)
    return round(seconds * _SCALE) / _UNIT


def _thinking(o: RequestOutcome) -> int:
    """A request's reasoning tokens: the server's count where its usage gave one, else the chunks of thinking."""
    return o.reasoning_tokens if o.reasoning_tokens is not None else o.reasoning_chunks


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
            late_ms=None if s.ready is None else _ms(max(0.0, t0 - s.ready)),
            output_ms=_ms(o.first_output - t0) if o.times and o.first_output > o.times[0] else None,
            reasoning_tokens=_thinking(o) if o.success else 0, turn=s.turn))
    return out


def events(records: Sequence[RequestRecord], *, t: float, concurrency: int, level_index: int,
           origin: float, rate: float | None = None) -> list[MacroRequests]:
    """The records as ``MacroRequests`` events of at most ``RECORDS_PER_EVENT`` requests each."""
    batches = range(0, len(records), RECORDS_PER_EVENT)
    return [MacroRequests(t=t, concurrency=concurrency, level_index=level_index, origin=origin, first=i,
                          total=len(records), requests=[r.to_json() for r in records[i:i + RECORDS_PER_EVENT]],
                          rate=rate)
            for i in batches]


def from_events(evs: Sequence[MacroRequests]) -> list[RequestRecord]:
    return [r for ev in evs for r in ev.records()]


def export_lines(ev: MacroRequests) -> Iterator[dict[str, Any]]:
    """One self-describing object per request of ``ev``, for ``--requests-out`` (JSON Lines): every key
    present (null where it has no value), ``start`` in unix seconds, the other times in ms."""
    for n, r in enumerate(ev.records(keep_malformed=True)):
        if r is None:
            continue
        yield {"concurrency": ev.concurrency, "request_rate": ev.rate, "level_index": ev.level_index,
               "index": ev.first + n,
               "start": round(ev.origin + r.start_ms / 1000.0, 6), "start_ms": r.start_ms,
               "status": "ok" if r.success else "failed", "error": r.error,
               "ttft_ms": r.ttft_ms if r.chunk_ms else None, "e2el_ms": r.e2el_ms if r.chunk_ms else None,
               "first_chunk_ms": r.first_ms if r.first_ms is not None else (r.ttft_ms if r.chunk_ms else None),
               "end_ms": r.end_ms, "chunk_ms": r.chunk_ms, "input_tokens": r.input_tokens,
               "output_tokens": r.output_tokens, "target_input_tokens": r.target_input,
               "max_tokens": r.max_tokens, "input_estimated": not r.input_from_usage,
               "usage_missing": r.usage_missing, "sched_ms": r.sched_ms, "late_ms": r.late_ms,
               "ttfo_ms": r.ttfo_ms, "reasoning_tokens": r.reasoning_tokens, "turn": r.turn}
