"""The post-restart check: a short single-stream probe (concurrency 1, a few requests, Phase 1's prompt
and output lengths) compared with Phase 1's single-stream figures; a drift beyond the margin is flagged
(the service may not come back the same: another build, a changed flag, a GPU at a lower clock).

The probe's requests go through the macro load generator; its figures are published as one
``ProbeResult`` (the probe's own requests are not a sweep of the campaign, so they are not recorded as one).
"""

from __future__ import annotations

import asyncio
import dataclasses

from kimitui.core.events import (
    Event,
    LogLine,
    MacroPoint,
    MacroRequests,
    PhaseEnd,
    PhaseStart,
    ProbeResult,
    RequestFieldsDropped,
    level_failed,
)
from kimitui.core.figures import noise
from kimitui.core.level_requests import LevelRequests, level_requests
from kimitui.core.level_result import LevelResult
from kimitui.phases.base import Publish, now


def _ttft(level: LevelResult) -> float | None:
    """The level's TTFT as the check reads it: the median, else (an older record) the mean."""
    return level.ttft.median if level.ttft.median is not None else level.ttft.mean


def _change(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else round((value - base) / base * 100.0, 2)


def _beyond(change: float | None, margin: float, judged: str) -> bool:
    """A change past the margin that the spread of the two sets of requests does not explain (with too few
    records to tell, the margin alone)."""
    return change is not None and change > margin and judged != "within noise"


def compare(probed: LevelResult | None, baseline: MacroPoint | None, margin_pct: float,
            ttft_margin_pct: float, t: float, note: str = "", *, probe: LevelRequests | None = None,
            base: LevelRequests | None = None) -> ProbeResult:
    """The probe's level against Phase 1's single-stream point: drift when tok/s moved more than
    ``margin_pct`` either way, or TTFT rose more than ``ttft_margin_pct``, and the change is beyond the noise
    (``figures.NOISE_RULE``: the p25-p75 of the per-request records of the probe (PROBE) and of Phase 1's level
    (BASE) do not overlap; with fewer than ``figures.NOISE_MIN_REQUESTS`` in either, the margin alone): the
    margins are floors, a change within the requests' own spread is not drift."""
    r = probed or LevelResult(concurrency=1)
    tok = r.output_throughput if r.completed else None
    ttft = _ttft(r) if r.completed else None
    base_ok = baseline is not None and not level_failed(baseline)
    base_tok = baseline.result.output_throughput if base_ok and baseline else None
    base_ttft = _ttft(baseline.result) if base_ok and baseline else None
    d_tok, d_ttft = _change(tok, base_tok), _change(ttft, base_ttft)
    p_ttft, p_tpot = (probe.ttft_ms, probe.tpot_ms) if probe else ([], [])
    b_ttft, b_tpot = (base.ttft_ms, base.tpot_ms) if base else ([], [])
    tok_noise, ttft_noise = noise(b_tpot, p_tpot), noise(b_ttft, p_ttft)
    drift = _beyond(None if d_tok is None else abs(d_tok), margin_pct, tok_noise) or \
        _beyond(d_ttft, ttft_margin_pct, ttft_noise)
    if tok is None:
        note = note or "no request of the probe completed"
    elif base_tok is None:
        note = note or "no Phase 1 single-stream figure to compare with"
    return ProbeResult(t, requests=r.num_prompts or r.completed or 0, failed=r.failed or 0, tok_s=tok, ttft_ms=ttft,
                       baseline_tok_s=base_tok,
                       baseline_ttft_ms=base_ttft, tok_s_change_pct=d_tok, ttft_change_pct=d_ttft,
                       margin_pct=margin_pct, ttft_margin_pct=ttft_margin_pct, drift=drift, note=note,
                       ttft_noise=ttft_noise, tok_s_noise=tok_noise, ttft_all_ms=_ms(p_ttft), tpot_all_ms=_ms(p_tpot),
                       baseline_ttft_all_ms=_ms(b_ttft), baseline_tpot_all_ms=_ms(b_tpot))


def _ms(values: list[float]) -> list[float]:
    return [round(v, 3) for v in values]


async def check_phase(publish: Publish, url: str, baseline: MacroPoint | None, *, requests: int, max_tokens: int,
                      input_len: int, endpoint: str, model: str | None, margin_pct: float,
                      ttft_margin_pct: float, cancel: asyncio.Event, ignore_eos: bool = True,
                      warmup: int = 0, base: LevelRequests | None = None) -> ProbeResult:
    from kimitui.bench.macro import MacroConfig, run_sweep

    publish(PhaseStart(now(), phase="check", title=f"post-restart probe: {requests} single-stream requests "
                                                   f"against Phase 1's figures"))
    result: ProbeResult | None = None
    batches: list[MacroRequests] = []

    def keep(ev: Event) -> None:  # the probe's warnings, said as the check's; its points are not a sweep
        if isinstance(ev, MacroRequests):  # judged against Phase 1's spread, kept in the ProbeResult
            batches.append(ev)
        elif isinstance(ev, LogLine):
            publish(dataclasses.replace(ev, source="check"))
        elif isinstance(ev, RequestFieldsDropped):  # the restarted server refused a field: the probe went without
            publish(ev)

    try:
        cfg = MacroConfig(url=url, model=model or None, endpoint=endpoint, concurrency=[1],  # type: ignore[arg-type]
                          requests=requests, max_tokens=max_tokens, input_len=input_len, warmup=warmup,
                          ignore_eos=ignore_eos)
        try:
            sweep = await run_sweep(cfg, keep, cancel=cancel)
            probed = sweep.levels[0].result if sweep.levels else None
            result = compare(probed, baseline, margin_pct, ttft_margin_pct, now(),
                             "" if sweep.levels else "cancelled before it finished",
                             probe=level_requests(batches), base=base)
        except Exception as exc:  # the server does not answer: that is the check's finding
            result = compare(None, baseline, margin_pct, ttft_margin_pct, now(), f"the probe failed: {exc}")
        publish(result)
        return result
    finally:
        ok = result is not None and result.tok_s is not None and not result.drift
        if result is None:
            note = "interrupted"
        elif result.drift:
            note = (f"DRIFT: tok/s {result.tok_s_change_pct:+.1f}%, TTFT "
                    + ("n/a" if result.ttft_change_pct is None else f"{result.ttft_change_pct:+.1f}%")
                    + " against Phase 1")
        elif result.tok_s is None:
            note = result.note
        else:
            note = (f"{result.tok_s:.1f} tok/s"
                    + (f", {result.tok_s_change_pct:+.1f}% against Phase 1" if result.tok_s_change_pct is not None
                       else f" ({result.note})"))
        publish(PhaseEnd(now(), phase="check", ok=ok, note=note))
