"""A level's results from its requests, with vLLM's formulas and result key names.

Statistics follow numpy as vLLM uses it: ``std`` is the population standard deviation, percentiles use
linear interpolation, and an empty series reports 0. TPOT only counts requests with more than one output
token (for goodput, a one-token request's TPOT is 0, as in vLLM).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from kimitui.bench.macro.config import PERCENTILES, SLO
from kimitui.bench.macro.request import RequestOutcome

SERIES = ("ttft", "tpot", "itl", "e2el")


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """numpy.percentile(values, p) with the default linear interpolation; values sorted ascending."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    rank = (n - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    frac = rank - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def _pword(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def series_stats(name: str, values: list[float], percentiles: Sequence[float] = PERCENTILES) -> dict[str, float]:
    """``{mean,median,std,pXX}_<name>_ms`` from values in seconds."""
    if not values:
        out = {f"mean_{name}_ms": 0.0, f"median_{name}_ms": 0.0, f"std_{name}_ms": 0.0}
        out.update({f"p{_pword(p)}_{name}_ms": 0.0 for p in percentiles})
        return out
    s = sorted(values)
    n = len(s)
    mean = math.fsum(s) / n
    var = math.fsum((v - mean) ** 2 for v in s) / n
    out = {
        f"mean_{name}_ms": mean * 1000,
        f"median_{name}_ms": percentile(s, 50) * 1000,
        f"std_{name}_ms": math.sqrt(var) * 1000,
    }
    out.update({f"p{_pword(p)}_{name}_ms": percentile(s, p) * 1000 for p in percentiles})
    return out


def peak_overlap(outcomes: Sequence[RequestOutcome]) -> int:
    """vLLM's ``max_concurrent_requests``: the most successful requests overlapping in time, over
    half-open intervals [t0, t0 + E2EL)."""
    events: list[tuple[float, int]] = []
    for o in outcomes:
        if o.success:
            events.append((o.t0, 1))
            events.append((o.t0 + o.latency, -1))
    events.sort()
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def level_metrics(outcomes: Sequence[RequestOutcome], *, duration_s: float, max_concurrency: int,
                  request_rate: float | None, slo: SLO, concurrency_reached: int,
                  percentiles: Sequence[float] = PERCENTILES) -> dict[str, Any]:
    ttfts: list[float] = []
    tpots: list[float] = []
    all_tpots: list[float] = []
    itls: list[float] = []
    e2els: list[float] = []
    total_in = total_out = completed = usage_missing = 0
    failures: Counter[str] = Counter()
    for o in outcomes:
        if not o.success:
            failures[o.error or "unknown"] += 1
            continue
        completed += 1
        n = o.output_tokens
        total_out += n
        total_in += o.prompt_tokens
        usage_missing += o.usage_missing
        tpot = 0.0
        if n > 1:
            tpot = (o.latency - o.ttft) / (n - 1)
            tpots.append(tpot)
        all_tpots.append(tpot)
        itls.extend(o.itl)
        ttfts.append(o.ttft)
        e2els.append(o.latency)
    dur = duration_s if duration_s > 0 else float("nan")
    good = None
    if slo.active:
        good = 0
        for ttft, tpot, e2el in zip(ttfts, all_tpots, e2els, strict=True):
            if ((slo.ttft_ms is None or ttft * 1000 <= slo.ttft_ms)
                    and (slo.tpot_ms is None or tpot * 1000 <= slo.tpot_ms)
                    and (slo.e2el_ms is None or e2el * 1000 <= slo.e2el_ms)):
                good += 1
    m: dict[str, Any] = {
        "duration": duration_s,
        "completed": completed,
        "failed": len(outcomes) - completed,
        "num_prompts": len(outcomes),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": completed / dur if duration_s > 0 else 0.0,
        "request_goodput": (good / dur if duration_s > 0 else 0.0) if good is not None else None,
        "output_throughput": total_out / dur if duration_s > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / dur if duration_s > 0 else 0.0,
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        m.update(series_stats(name, values, percentiles))
    m["max_concurrency"] = max_concurrency
    m["request_rate"] = request_rate if request_rate is not None else "inf"
    m["max_concurrent_requests"] = peak_overlap(outcomes)
    m["concurrency_reached"] = concurrency_reached
    m["usage_missing"] = usage_missing
    m["failures"] = dict(failures.most_common())
    if slo.active:
        m["goodput_slo_ms"] = {k: v for k, v in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms),
                                                 ("e2el", slo.e2el_ms)) if v is not None}
    return m
