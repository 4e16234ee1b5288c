"""Goodput SLOs and the sweep's verdict: the answer an operator wants from a concurrency sweep.

Goodput is vLLM's (``vllm bench serve --goodput ttft:200 tpot:50``, milliseconds, keys ``ttft``, ``tpot``,
``e2el``): a completed request is *good* when every SLO given holds for it (a one-token request's TPOT is 0),
and ``request_goodput`` is good requests / the level's duration. ``metrics.summarize`` counts them with
``request_is_good``.

The verdict, from the levels' records once the sweep ends:

- ``slo_concurrency``: the highest concurrency at which the level *meets the SLOs at p99*: no request
  failed, and the 99th percentile (numpy's linear interpolation) of each metric an SLO is given for is
  within it, over the same series the level reports (``p99_ttft_ms``, ``p99_tpot_ms`` of the requests with
  more than one token, ``p99_e2el_ms``). Levels above a failing one are not required to fail: the highest
  that meets is the answer (a busy moment at a low level does not hide it).
- the *knee*: the first level (by concurrency) past which output tok/s grows by less than ``KNEE_GROWTH``
  (10%) per doubling of the concurrency, i.e. ``(tps[i+1] / tps[i]) ** (1 / log2(c[i+1] / c[i])) - 1 <
  KNEE_GROWTH``; per doubling, so levels 64,128 and 64,256 are judged alike. None when tok/s still grows at
  the last step (the knee is beyond the sweep). On the simulated reference host (50 tok/s for one stream,
  flat at 1536 tok/s from c=128) the knee is c=128.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from kimitui.bench.macro.config import SLO, ConfigError
from kimitui.bench.macro.records import RequestRecord
from kimitui.bench.macro.stats import percentile
from kimitui.core.figures import KNEE_GROWTH, growth_per_doubling, knee

__all__ = ["KNEE_GROWTH", "growth_per_doubling", "knee"]  # defined with the other derived figures

SLO_KEYS = ("ttft", "tpot", "e2el")


def parse_goodput(items: Sequence[str]) -> SLO:
    """vLLM's ``--goodput`` pairs, space- or comma-separated: ``["ttft:200", "tpot:50"]`` or
    ``["ttft:200,tpot:50"]``; milliseconds, non-negative. ConfigError names the bad pair."""
    values: dict[str, float] = {}
    for item in items:
        for pair in item.split(","):
            pair = pair.strip()
            if not pair:
                continue
            key, sep, text = pair.partition(":")
            key = key.strip().lower()
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if key not in SLO_KEYS or not sep or not math.isfinite(value) or value < 0:
                raise ConfigError(f"goodput takes ttft:MS, tpot:MS or e2el:MS (MS a number >= 0), not {pair!r}")
            values[key] = value
    return SLO(ttft_ms=values.get("ttft"), tpot_ms=values.get("tpot"), e2el_ms=values.get("e2el"))


def slo_dict(slo: SLO) -> dict[str, float]:
    """The SLOs given, by vLLM's key: ``{"ttft": 200.0, "tpot": 50.0}``."""
    return {k: v for k, v in zip(SLO_KEYS, (slo.ttft_ms, slo.tpot_ms, slo.e2el_ms), strict=True) if v is not None}


def slo_text(slo: dict[str, float]) -> str:
    """``ttft:200,tpot:50`` (the form ``--goodput`` and the campaign's ``goodput`` key take)."""
    return ",".join(f"{k}:{v:g}" for k, v in slo.items())


def request_is_good(ttft_ms: float, tpot_ms: float, e2el_ms: float, slo: SLO) -> bool:
    """vLLM's good request: every SLO given holds (``value <= slo``)."""
    return ((slo.ttft_ms is None or ttft_ms <= slo.ttft_ms) and (slo.tpot_ms is None or tpot_ms <= slo.tpot_ms)
            and (slo.e2el_ms is None or e2el_ms <= slo.e2el_ms))


def p99s(records: Sequence[RequestRecord]) -> dict[str, float]:
    """The level's p99 TTFT, TPOT (requests of more than one token) and E2EL in ms, as it reports them."""
    ok = [r for r in records if r.success and r.chunk_ms]
    tpots = [(r.e2el_ms - r.ttft_ms) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    return {"ttft": percentile(sorted(r.ttft_ms for r in ok), 99), "tpot": percentile(sorted(tpots), 99),
            "e2el": percentile(sorted(r.e2el_ms for r in ok), 99)}


def level_meets(records: Sequence[RequestRecord], slo: dict[str, float]) -> bool:
    """The level meets the SLOs at p99: some request completed, none failed, each p99 within its SLO."""
    if not records or any(not r.success or not r.chunk_ms for r in records):
        return False
    p99 = p99s(records)
    return all(p99[k] <= limit for k, limit in slo.items())


@dataclass(frozen=True, slots=True)
class LevelFigures:
    """What the verdict reads of one finished level (``concurrency``: its place on the sweep's axis, a
    concurrency or a request rate)."""

    concurrency: float
    output_tok_s: float
    records: Sequence[RequestRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Verdict:
    slo: dict[str, float] = field(default_factory=dict)
    """The SLOs in ms by vLLM's key (empty: no ``--goodput``)."""
    meets: list[float] = field(default_factory=list)
    """The levels (concurrencies, or rates) that meet the SLOs at p99."""
    slo_concurrency: float | None = None
    """The highest of them (None: none meets, or no SLO)."""
    knee_concurrency: float | None = None
    knee_tok_s: float | None = None
    peak_tok_s: float | None = None
    knee_growth: float = KNEE_GROWTH


def sweep_verdict(levels: Sequence[LevelFigures], slo: dict[str, float],
                  growth: float = KNEE_GROWTH) -> Verdict:
    """The sweep's verdict (see the module docstring) from its finished levels."""
    meets = sorted(lv.concurrency for lv in levels if slo and level_meets(lv.records, slo))
    tps = {lv.concurrency: lv.output_tok_s for lv in levels if lv.output_tok_s > 0}
    at = knee(list(tps.items()), growth)
    return Verdict(slo=dict(slo), meets=meets, slo_concurrency=meets[-1] if meets else None, knee_concurrency=at,
                   knee_tok_s=tps[at] if at is not None else None,
                   peak_tok_s=max(tps.values()) if tps else None, knee_growth=growth)
