"""A level's summary from its per-request records, with vLLM's formulas and result key names.

Statistics follow numpy as vLLM uses it: ``std`` is the population standard deviation, percentiles use
linear interpolation, and an empty series reports 0. TPOT only counts requests with more than one output
token (for goodput, a one-token request's TPOT is 0, as in vLLM). Every figure that depends on the
requests is computed from the records (``records.RequestRecord``) and nothing else, so the records of a
level recompute its summary exactly; the level facts that are not about single requests (the
concurrency the server saw, the client's own health) come in through ``LevelContext``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kimitui.bench.macro import client_health
from kimitui.bench.macro.config import PERCENTILES, SLO
from kimitui.bench.macro.records import RequestRecord
from kimitui.bench.macro.stats import mean_std, percentile, pword
from kimitui.bench.macro.verdict import request_is_good, slo_dict
from kimitui.core.figures import request_tpot

CLIENT_KEYS = client_health.PROBE_KEYS
__all__ = ["LevelContext", "mean_std", "percentile", "pword", "series_stats", "summarize"]


def series_stats(name: str, values_ms: list[float], percentiles: Sequence[float] = PERCENTILES) -> dict[str, float]:
    """``{mean,median,std,pXX}_<name>_ms`` from values in milliseconds."""
    s = sorted(values_ms)
    mean, std = mean_std(s)
    out = {f"mean_{name}_ms": mean, f"median_{name}_ms": percentile(s, 50), f"std_{name}_ms": std}
    out.update({f"p{pword(p)}_{name}_ms": percentile(s, p) for p in percentiles})
    return out


def peak_overlap(records: Sequence[RequestRecord]) -> int:
    """vLLM's ``max_concurrent_requests``: the most successful requests overlapping in time, over
    half-open intervals [start, start + E2EL) (an end sorts before a start at the same instant)."""
    events: list[tuple[float, int]] = []
    for r in records:
        if r.success and r.chunk_ms:
            events.append((r.start_ms, 1))
            events.append((r.start_ms + r.e2el_ms, -1))
    events.sort()
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


@dataclass(slots=True)
class LevelContext:
    """What a level's summary needs besides its records."""

    concurrency: int
    request_rate: float | None = None
    slo: SLO = field(default_factory=SLO)
    percentiles: tuple[float, ...] = PERCENTILES
    concurrency_reached: int = 0
    """The most responses in flight at once, as the client's gauge counted them."""
    input_len_method: str = "estimated"
    """How the prompts were given their lengths (``lengths.Calibration.method``, or "dataset")."""
    input_len_stddev: float = 0.0
    max_tokens_stddev: float = 0.0
    arrival: str = "closed loop"
    client: dict[str, float | None] = field(default_factory=dict)
    """``CLIENT_KEYS``: the client process's CPU and its event loop's lag during the level."""

    @classmethod
    def from_metrics(cls, m: dict[str, Any]) -> LevelContext:
        """The context a summary was computed with, read back from the summary."""
        slo = m.get("goodput_slo_ms") or {}
        rate = m.get("request_rate")
        return cls(concurrency=int(m["max_concurrency"]),
                   request_rate=None if rate in (None, "inf") else float(rate),
                   slo=SLO(ttft_ms=slo.get("ttft"), tpot_ms=slo.get("tpot"), e2el_ms=slo.get("e2el")),
                   percentiles=tuple(m.get("percentiles") or PERCENTILES),
                   concurrency_reached=int(m.get("concurrency_reached", 0)),
                   input_len_method=str(m.get("input_len_method", "estimated")),
                   input_len_stddev=float(m.get("requested_input_len_stddev", 0.0)),
                   max_tokens_stddev=float(m.get("requested_output_len_stddev", 0.0)),
                   arrival=str(m.get("arrival", "closed loop")),
                   client={k: m.get(k) for k in CLIENT_KEYS})


def _lengths(prefix: str, values: Sequence[float]) -> dict[str, float]:
    mean, std = mean_std(values)
    return {f"mean_{prefix}_tokens": mean, f"std_{prefix}_tokens": std,
            f"min_{prefix}_tokens": min(values, default=0), f"max_{prefix}_tokens": max(values, default=0)}


def summarize(records: Sequence[RequestRecord], ctx: LevelContext) -> dict[str, Any]:
    """The level's figures (vLLM's keys first) from its records."""
    ttfts: list[float] = []
    later: list[float] = []
    """The TTFTs of a conversation's later turns (its history cached by the server, where it caches)."""
    ttfos: list[float] = []
    thinking: list[int] = []
    tpots: list[float] = []
    all_tpots: list[float] = []
    itls: list[float] = []
    e2els: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    total_in = total_out = completed = usage_missing = from_usage = 0
    failures: Counter[str] = Counter()
    for r in records:
        if not r.success or not r.chunk_ms:
            failures[r.error or "unknown"] += 1
            continue
        completed += 1
        n = r.output_tokens
        total_out += n
        total_in += r.input_tokens
        inputs.append(r.input_tokens)
        outputs.append(n)
        usage_missing += r.usage_missing
        from_usage += r.input_from_usage
        c = r.chunk_ms
        ttft, e2el = c[0], c[-1]
        tpot = request_tpot(ttft, e2el, n)
        if tpot is not None:
            tpots.append(tpot)
        all_tpots.append(tpot or 0.0)  # for goodput a one-token request's TPOT is 0, as in vLLM
        itls.extend(c[i] - c[i - 1] for i in range(1, len(c)))
        ttfts.append(ttft)
        if r.turn > 1:
            later.append(ttft)
        e2els.append(e2el)
        thinking.append(r.reasoning_tokens)
        if (ttfo := r.ttfo_ms) is not None:
            ttfos.append(ttfo)
    duration = max((r.start_ms + r.end_ms for r in records), default=0.0) / 1000.0
    good = None
    slo = ctx.slo
    if slo.active:
        good = sum(1 for ttft, tpot, e2el in zip(ttfts, all_tpots, e2els, strict=True)
                   if request_is_good(ttft, tpot, e2el, slo))

    def per_s(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    m: dict[str, Any] = {
        "duration": duration,
        "completed": completed,
        "failed": len(records) - completed,
        "num_prompts": len(records),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(completed),
        "request_goodput": per_s(good) if good is not None else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        m.update(series_stats(name, values, ctx.percentiles))
    # a reasoning model's time to its first output token (the TTFT where it did not think first), over the
    # requests that answered; ITL and TPOT above run over thinking and answer alike, as vLLM's do
    m.update(series_stats("ttfo", ttfos, ctx.percentiles))
    m["answered"] = len(ttfos)
    m["total_reasoning_tokens"] = sum(thinking)
    m["mean_reasoning_tokens"] = mean_std(thinking)[0]
    turns = max((r.turn for r in records), default=1)
    if turns > 1:  # conversations: the first turn's TTFT beside the later ones' (the history is their prefix)
        first = [r.ttft_ms for r in records if r.success and r.chunk_ms and r.turn == 1]
        m["turns"] = turns
        m["mean_ttft_first_turn_ms"] = mean_std(first)[0]
        m["mean_ttft_later_turns_ms"] = mean_std(later)[0]
    m["percentiles"] = list(ctx.percentiles)
    m["max_concurrency"] = ctx.concurrency
    m["request_rate"] = ctx.request_rate if ctx.request_rate is not None else "inf"
    m["arrival"] = ctx.arrival
    m["max_concurrent_requests"] = peak_overlap(records)
    m["concurrency_reached"] = ctx.concurrency_reached
    m["usage_missing"] = usage_missing
    m["failures"] = dict(failures.most_common())
    if slo.active:
        m["goodput_slo_ms"] = slo_dict(slo)
    targets = [r.target_input for r in records if r.target_input is not None]
    m["requested_input_len"] = mean_std(targets)[0] if targets else None
    m["requested_input_len_stddev"] = ctx.input_len_stddev
    m["input_len_method"] = ctx.input_len_method
    m.update(_lengths("input", inputs))
    m["input_tokens_source"] = ("usage" if from_usage == completed else
                                "estimate" if from_usage == 0 else f"usage for {from_usage} of {completed}")
    m["requested_output_len"] = mean_std([r.max_tokens for r in records])[0] if records else None
    m["requested_output_len_stddev"] = ctx.max_tokens_stddev
    m.update(_lengths("output", outputs))
    m.update(client_figures(records, ctx))
    m["client_warnings"] = client_health.warnings(m)
    return m


def client_figures(records: Sequence[RequestRecord], ctx: LevelContext) -> dict[str, Any]:
    """The load generator's own health (see ``client_health``): its CPU, its event loop's lag and, with
    scheduled arrivals, how late it sent requests that it could have sent on time."""
    out: dict[str, Any] = {k: ctx.client.get(k) for k in CLIENT_KEYS}
    late = sorted(r.late_ms for r in records if r.late_ms is not None)
    out["client_send_late_p99_ms"] = percentile(late, 99) if late else None
    out["client_send_late_max_ms"] = late[-1] if late else None
    sched = [r.sched_ms for r in records if r.sched_ms is not None]
    out["mean_arrival_gap_ms"] = (max(sched) - min(sched)) / (len(sched) - 1) if len(sched) > 1 else None
    return out
