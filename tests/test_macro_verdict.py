"""Goodput SLOs (vLLM's ``--goodput``) and the sweep's verdict: where the SLOs hold at p99, and the knee."""

from __future__ import annotations

import math

import pytest

from kimitui.bench.macro import MacroConfig, run_sweep
from kimitui.bench.macro.config import SLO, ConfigError
from kimitui.bench.macro.records import RequestRecord
from kimitui.bench.macro.stats import percentile
from kimitui.bench.macro.verdict import (
    LevelFigures,
    Verdict,
    growth_per_doubling,
    knee,
    level_meets,
    p99s,
    parse_goodput,
    sweep_verdict,
)
from kimitui.core.describe import describe, verdict_line
from kimitui.core.events import Event, MacroPoint, MacroVerdict, decode, encode
from kimitui.core.state import fold_all
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.openai_server import SimOpenAIServer
from kimitui.report.bench import macro_section
from kimitui.tui.views.macro_progress import single_stream_content


def _ok(ttft: float, e2el: float, n: int) -> RequestRecord:
    return RequestRecord(start_ms=0.0, end_ms=e2el, chunk_ms=[ttft, e2el], output_tokens=n, max_tokens=n)


def test_goodput_takes_vllms_pairs_space_or_comma_separated() -> None:
    assert parse_goodput(["ttft:200,tpot:50"]) == SLO(ttft_ms=200, tpot_ms=50)
    assert parse_goodput(["ttft:200", "tpot:50", "e2el:1e3"]) == SLO(ttft_ms=200, tpot_ms=50, e2el_ms=1000)
    assert parse_goodput([]) == SLO() and not parse_goodput([]).active
    for bad in ("ttft", "ttft:", "ttft:abc", "tpot:-1", "itl:5", "ttft:nan", "ttft:200;tpot:50"):
        with pytest.raises(ConfigError, match="goodput takes ttft:MS"):
            parse_goodput([bad])


def test_level_meets_the_slos_at_p99_by_hand() -> None:
    # 100 requests: TTFT 1..100 ms, E2EL TTFT + 99 ms over 100 tokens (TPOT 1 ms), one of a single token
    recs = [_ok(float(i), i + 99.0, 100) for i in range(1, 100)] + [_ok(100.0, 100.0, 1)]
    p99 = p99s(recs)
    assert p99["ttft"] == pytest.approx(99.01)  # numpy: rank 0.99 * 99 = 98.01 between 99 and 100
    assert p99["tpot"] == pytest.approx(1.0)  # the one-token request has no TPOT, as the level reports it
    assert level_meets(recs, {"ttft": 99.01, "tpot": 1.0})
    assert not level_meets(recs, {"ttft": 99.0})
    assert not level_meets(recs, {"e2el": 150.0})  # p99 e2el is 197.02
    failed = [*recs, RequestRecord(start_ms=0.0, end_ms=5.0, error="HTTP 500: boom")]
    assert not level_meets(failed, {"ttft": 1e9})  # a failed request is a missed SLO
    assert not level_meets([], {"ttft": 1e9})


def test_knee_is_the_first_level_past_which_a_doubling_adds_under_10_percent() -> None:
    assert growth_per_doubling(64, 1000.0, 256, 1440.0) == pytest.approx(0.2)  # 1.44 over two doublings
    assert knee([(1, 50.0), (2, 100.0), (4, 200.0), (8, 215.0), (16, 216.0)]) == 4
    assert knee([(64, 1000.0), (256, 1200.0)]) == 64  # +20% over two doublings is ~9.5% each
    assert knee([(1, 50.0), (2, 100.0), (4, 200.0)]) is None  # still growing: beyond the sweep
    assert knee([(1, 50.0)]) is None
    assert knee([(1, 50.0), (2, 100.0), (4, 0.0), (8, 400.0)]) is None  # a failed level is no plateau
    assert sweep_verdict([LevelFigures(1, 0.0), LevelFigures(2, 0.0)], {"ttft": 1.0}) == Verdict(
        slo={"ttft": 1.0})  # a sweep that measured nothing: no knee, no peak, no level meets
    assert knee([(4, 200.0), (1, 50.0), (8, 150.0), (2, 100.0)]) == 4  # by concurrency, whatever the order


def test_knee_of_the_simulated_reference_host_is_its_plateau() -> None:
    ref = BatchingModel.from_targets()  # 50 tok/s for one stream, 1536 tok/s from c=128
    levels = [(c, ref.throughput(c)) for c in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    assert knee(levels) == 128
    v = sweep_verdict([LevelFigures(c, t) for c, t in levels], {})
    assert v.knee_tok_s == pytest.approx(1536.0) and v.slo_concurrency is None and v.meets == []


# 100 tok/s per stream up to batch 16, flat beyond: past c=16 requests queue for a whole request ahead
CURVE = BatchingModel.from_targets(single_stream_tps=100, plateau_tps=1600, plateau_batch=16, prefill_tps=1e9)
MAX_TOKENS = 48
TTFT_SLO_MS = 300.0
"""Under the wait of a queued request at c=32 (a whole request ahead: 48 tokens at 10 ms a step)."""


async def test_sweep_verdict_on_the_simulated_host() -> None:
    events: list[Event] = []
    async with SimOpenAIServer(batching=CURVE) as srv:
        cfg = MacroConfig(url=srv.url, concurrency=[4, 8, 16, 32], requests_per_stream=4,
                          max_tokens=MAX_TOKENS, warmup=0, slo=parse_goodput([f"ttft:{TTFT_SLO_MS:g},tpot:1000"]))
        result = await run_sweep(cfg, events.append)
    verdicts = [ev for ev in events if isinstance(ev, MacroVerdict)]
    assert len(verdicts) == 1 and result.verdict is verdicts[0]
    v = verdicts[0]
    assert v.slo == {"ttft": TTFT_SLO_MS, "tpot": 1000.0}
    # the expectation from the recorded requests: a level meets when none failed and its p99 TTFT is in
    expected = [lv.concurrency for lv in result.levels if lv.metrics["failed"] == 0
                and percentile(sorted(r.ttft_ms for r in lv.records), 99) <= TTFT_SLO_MS]
    assert v.meets == expected and v.slo_concurrency == (max(expected) if expected else None)
    # and causally: at c=32, half the requests wait a whole 48-token request (480 ms) for a slot
    assert 32 not in v.meets
    # goodput per level: good requests / duration, under the throughput where some miss the TTFT SLO
    for lv in result.levels:
        m = lv.metrics
        good = sum(1 for r in lv.records if r.success and r.ttft_ms <= TTFT_SLO_MS)
        assert m["request_goodput"] == pytest.approx(good / m["duration"])
    assert result.levels[-1].metrics["request_goodput"] < result.levels[-1].metrics["request_throughput"]
    # the knee: the verdict's is the one its rule finds in the throughput the sweep measured (where this
    # host's curve bends, c=16, is the model's: test_knee_of_the_simulated_reference_host_is_its_plateau;
    # what a run measures is the machine's: benchmarks/timing_figures.py)
    tput = {lv.concurrency: lv.metrics["output_throughput"] for lv in result.levels}
    assert v.knee_concurrency == knee(list(tput.items())), tput
    assert v.peak_tok_s == max(tput.values())
    assert v.knee_concurrency is None or v.knee_tok_s == tput[v.knee_concurrency]
    # recorded: it decodes back whole, after the last level's point, and reads as one line
    assert isinstance(events[-1], MacroVerdict) and any(isinstance(ev, MacroPoint) for ev in events)
    assert decode(encode(v)) == v
    line = describe(v)
    assert line is not None and (v.slo_concurrency is None or f"up to c={v.slo_concurrency}" in line)
    assert v.knee_concurrency is None or f"knee at c={v.knee_concurrency}" in line
    assert result.to_dict()["verdict"]["max_concurrency_meeting_slo"] == v.slo_concurrency
    # folded (so a replay has it): the sweep's verdict, in the report and the Benchmarks tab's headline
    state = fold_all(events)
    assert state.sweep is not None and state.sweep.verdict == v
    report = "\n".join(macro_section(state))
    assert f"Verdict: {verdict_line(v)}." in report and "Goodput (completed requests meeting every SLO" in report
    head = single_stream_content(state.sweep.point_list, state.sweep.verdict).plain
    assert f"p99 met up to c={v.slo_concurrency}" in head
    # the knee the run measured (c=16 on a quiet machine; none under two CPU hogs, the curve still rising at 32)
    assert (f"knee c={v.knee_concurrency}" in head) if v.knee_concurrency is not None else ("knee" not in head), head


def test_an_old_or_minimal_verdict_decodes_with_defaults() -> None:
    ev = decode('{"t": 1.0, "type": "macro_verdict"}')
    assert isinstance(ev, MacroVerdict) and ev.slo == {} and ev.knee_concurrency is None
    assert describe(ev) == "sweep verdict: no levels"
    assert math.isclose(ev.knee_growth, 0.10)
