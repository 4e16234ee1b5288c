"""The campaign's parts on their own: the server's /metrics (the simulated server's, from its real requests
in flight; the parser on vLLM's text), the decode-step budget's arithmetic, stand-ins and verdict, the
probe's drift margins, the budget bars and the phase marks of the memory views, the campaign file."""

from __future__ import annotations

import asyncio
import tomllib

import httpx
import pytest

from kimitui.campaign.examples import DEMO_TEXT, demo_config
from kimitui.cleanup.drain import InFlight, MetricsError, parse_in_flight, read_in_flight
from kimitui.core.campaign_words import probe_words
from kimitui.core.events import AllReduceRow, BudgetRow, GemmRow, MacroPoint, MicroPlan, Topology
from kimitui.core.level_requests import LevelRequests
from kimitui.core.level_result import LevelResult
from kimitui.core.state import SessionState, fold
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.openai_server import SimOpenAIServer
from kimitui.phases.analysis import decode_budget
from kimitui.phases.check import compare
from kimitui.report.budget_text import stacked_bar
from kimitui.tui.fmt import phase_marks
from tests.waiting import until

VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="moonshotai/Kimi-K2.5"} 3.0
vllm:num_requests_running{engine="1",model_name="moonshotai/Kimi-K2.5"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="moonshotai/Kimi-K2.5"} 4.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="moonshotai/Kimi-K2.5"} 123456.0
"""


def test_the_metrics_parser_sums_the_engines() -> None:
    got = parse_in_flight(VLLM_METRICS)
    assert (got.running, got.waiting) == (5, 4)
    with pytest.raises(MetricsError, match="none of vllm:num_requests_running"):
        parse_in_flight("# TYPE up gauge\nup 1\n")


async def test_the_simulated_server_counts_its_requests_in_flight() -> None:
    model = BatchingModel(base_s=0.05, per_seq_s=0.0, max_batch=2)
    async with SimOpenAIServer(batching=model) as server:
        assert await read_in_flight(f"{server.url}/metrics") == parse_in_flight("vllm:num_requests_running 0\n")

        async def one() -> int:
            async with httpx.AsyncClient(timeout=30) as client:
                r = await client.post(f"{server.url}/v1/completions",
                                      json={"model": "moonshotai/Kimi-K2.5", "prompt": "hi", "max_tokens": 40,
                                                "ignore_eos": True})
                return r.status_code

        tasks = [asyncio.ensure_future(one()) for _ in range(3)]
        async def all_three() -> InFlight | None:
            seen = await read_in_flight(f"{server.url}/metrics")
            return seen if seen.total >= 3 else None

        seen = await until(all_three, "the 3 requests at the server")
        assert (seen.running, seen.waiting) == (2, 1)  # two in the batch, one waiting for a slot
        assert await asyncio.gather(*tasks) == [200, 200, 200]
        after = await read_in_flight(f"{server.url}/metrics")
        assert (after.running, after.waiting) == (0, 0)
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"{server.url}/metrics")).text
        assert "# TYPE vllm:num_requests_running gauge" in text and 'model_name="moonshotai/Kimi-K2.5"' in text


def _plan(t: float) -> MicroPlan:
    gemms = [{"name": "o_proj", "dtype": "bf16", "calls_per_token": 61, "experts": 0},
             {"name": "lm_head", "dtype": "bf16", "calls_per_token": 1, "experts": 0},
             {"name": "moe_w13", "dtype": "int4-g32", "calls_per_token": 60, "experts": 384},
             {"name": "moe_w2", "dtype": "int4-g32", "calls_per_token": 60, "experts": 384}]
    return MicroPlan(t, run_id="r", tp=8, parts=["gemm", "allreduce"], gemms=gemms)


def _state(moe_backend: str = "marlin", ar_us: float = 20.0) -> SessionState:
    s = SessionState()
    events = [MacroPoint(1.0, concurrency=c, metrics={"completed": 4, "output_throughput": tok,
                                                      "median_tpot_ms": tpot})
              for c, tok, tpot in ((1, 50.0, 20.0), (3, 140.0, 21.0), (4, 180.0, 22.0))]
    events.append(_plan(2.0))
    events.append(Topology(2.1, link_kind="PCIe", link_gbps=63.0, source="nvml"))
    for m, o, head, moe in ((1, 10.0, 100.0, 30.0), (4, 12.0, 110.0, 90.0)):
        events += [GemmRow(3.0, name="o_proj", m=m, backend="bf16", time_us=o),
                   GemmRow(3.0, name="lm_head", m=m, backend="bf16", time_us=head),
                   GemmRow(3.0, name="moe (8 of 384)", m=m, backend=moe_backend, time_us=moe)]
        events.append(AllReduceRow(3.0, size_bytes=m * 14336, tokens=m, ranks=8, time_us=ar_us * (1 + m / 10),
                                   mode="graph"))
    for e in events:
        fold(s, e)
    return s


def test_the_budget_multiplies_each_row_by_its_count() -> None:
    b = decode_budget(_state())
    r1 = b.rows[0]
    assert r1.m == 1 and r1.tpot_ms == 20.0
    assert r1.allreduce_ms == pytest.approx(122 * 22.0 / 1000)  # 2 per layer x 61 (o_proj's calls)
    assert r1.bf16_gemm_ms == pytest.approx((10.0 * 61 + 100.0) / 1000)
    assert r1.int4_gemm_ms == pytest.approx(30.0 * 60 / 1000)
    assert r1.rest_ms == pytest.approx(20.0 - r1.allreduce_ms - r1.bf16_gemm_ms - r1.int4_gemm_ms)
    r3 = b.rows[1]  # M=3 was not measured: between M=1 and M=4, linearly, and said so
    assert r3.int4_gemm_ms == pytest.approx((30.0 + (90.0 - 30.0) * 2 / 3) * 60 / 1000)
    assert any("interpolated from M=1 and M=4" in n for n in r3.notes)
    assert b.plateau_m == 4 and b.bound == "rest" and b.stand_ins == []
    assert b.level == "highest level measured"  # no knee in two levels still growing
    assert ("At the highest level measured (180 tok/s measured at concurrency 4; 4 / TPOT = 182 tok/s while "
            "decoding)") in b.verdict
    assert "PCIe, 63 GB/s per direction (nvml)" in b.link


def test_a_stand_in_for_marlin_is_named_and_a_heavy_allreduce_is_the_bound() -> None:
    b = decode_budget(_state(moe_backend="torch-int4", ar_us=120.0))
    assert b.stand_ins == ["moe (8 of 384): torch-int4 (tinygemm) stands in for Marlin"]
    assert b.bound == "allreduce" and "Throughput is bound by the all-reduce" in b.verdict
    assert "a stand-in for Marlin" in b.verdict and "Stand-ins:" in b.verdict


def test_without_marlin_the_faster_stand_in_at_each_m_is_counted_and_named() -> None:
    s = _state(moe_backend="torch-int4")  # the int4 loop: 30 us at M=1, 90 us at M=4
    for m, us in ((1, 45.0), (4, 60.0)):  # the grouped bf16 GEMM on the dequantized weights
        fold(s, GemmRow(3.5, name="moe (8 of 384)", m=m, backend="bf16", time_us=us))
    b = decode_budget(s)
    assert [r.int4_gemm_ms for r in b.rows] == pytest.approx([30.0 * 60 / 1000, (30.0 + (60.0 - 30.0) * 2 / 3)
                                                              * 60 / 1000, 60.0 * 60 / 1000])
    assert b.stand_ins == ["moe (8 of 384): torch-int4 (tinygemm) or bf16 on the dequantized weights, the "
                           "faster at each M, stands in for Marlin"]
    only_bf16 = _state(moe_backend="bf16")
    assert decode_budget(only_bf16).stand_ins == ["moe (8 of 384): bf16 on the dequantized weights stands in "
                                                  "for Marlin"]


def test_no_micro_rows_no_verdict() -> None:
    s = SessionState()
    fold(s, MacroPoint(1.0, concurrency=1, metrics={"completed": 1, "output_throughput": 50.0,
                                                    "median_tpot_ms": 20.0}))
    b = decode_budget(s)
    assert b.bound == "" and b.missing and "no GEMM rows" in b.missing[0]


def test_the_probe_margins() -> None:
    base = MacroPoint(1.0, concurrency=1, metrics={"completed": 4, "output_throughput": 50.0,
                                                   "median_ttft_ms": 40.0})

    def probe(tok: float, ttft: float):  # type: ignore[no-untyped-def]
        return compare(LevelResult.from_json(1, {"completed": 3, "num_prompts": 3, "failed": 0,
                                                 "output_throughput": tok, "median_ttft_ms": ttft}),
                       base, 10.0, 25.0, 2.0)

    assert not probe(46.0, 48.0).drift  # -8 %, +20 %: within
    assert probe(44.0, 40.0).drift and probe(44.0, 40.0).tok_s_change_pct == -12.0
    assert probe(56.0, 40.0).drift  # faster is a drift too: not the same service
    assert probe(50.0, 51.0).drift and not probe(50.0, 30.0).drift  # only a slower first token
    none = compare(None, base, 10.0, 25.0, 2.0, "the probe failed: refused")
    assert none.tok_s is None and not none.drift and none.note == "the probe failed: refused"


def test_the_probe_calls_drift_only_beyond_the_requests_spread() -> None:
    # issue 37 item 1: the margins are floors; a change the two sets of requests' p25-p75 overlap is noise
    base = MacroPoint(1.0, concurrency=1, metrics={"completed": 8, "output_throughput": 50.0,
                                                   "median_ttft_ms": 40.0})

    def requests(ttft: list[float], tpot: list[float]) -> LevelRequests:
        return LevelRequests(0.0, len(ttft), received=len(ttft), ttft_ms=ttft, tpot_ms=tpot)

    phase1 = requests([20, 30, 40, 50, 60, 70, 80, 90], [15, 17, 19, 20, 21, 23, 25, 40])
    wide = requests([25, 35, 60, 65, 70, 75, 80, 95], [14, 18, 20, 24, 26, 28, 30, 45])
    apart = requests([95, 96, 97, 98, 99, 100, 101, 102], [39, 40, 40, 41, 41, 42, 42, 43])
    metrics = {"completed": 8, "num_prompts": 8, "failed": 0, "output_throughput": 30.0, "median_ttft_ms": 67.5}
    level = LevelResult.from_json(1, metrics)

    within = compare(level, base, 10.0, 25.0, 2.0, probe=wide, base=phase1)
    assert within.tok_s_change_pct == -40.0 and within.ttft_change_pct == 68.75  # both past their margins
    assert (within.tok_s_noise, within.ttft_noise, within.drift) == ("within noise", "within noise", False)
    assert within.ttft_all_ms == wide.ttft_ms and within.baseline_tpot_all_ms == phase1.tpot_ms
    beyond = compare(level, base, 10.0, 25.0, 2.0, probe=apart, base=phase1)
    assert (beyond.tok_s_noise, beyond.ttft_noise, beyond.drift) == ("beyond noise", "beyond noise", True)
    few = compare(level, base, 10.0, 25.0, 2.0, probe=requests([95, 96], [40, 41]), base=phase1)
    assert few.ttft_noise == "too few requests" and few.drift  # too few to tell: the margin alone
    assert "within noise" in probe_words(within) and "beyond noise" in probe_words(beyond)
    assert "noise" not in probe_words(few)
    slower = LevelResult.from_json(1, {**metrics, "output_throughput": 48.0, "median_ttft_ms": 41.0})
    small = compare(slower, base, 10.0, 25.0, 2.0, probe=apart, base=phase1)
    assert small.ttft_noise == "beyond noise" and not small.drift  # beyond the spread, within the margin


def test_stacked_bars_fill_their_width() -> None:
    row = BudgetRow(m=8, tpot_ms=30.0, tok_s=260.0, allreduce_ms=3.3, int4_gemm_ms=11.0, bf16_gemm_ms=4.0,
                    rest_ms=11.7)
    for width in (10, 37, 50):
        bar = stacked_bar(row, width)
        assert sum(n for _, n in bar) == width and [k for k, _ in bar] == ["allreduce", "int4", "bf16", "rest"]
    over = BudgetRow(m=1, tpot_ms=5.0, tok_s=1.0, allreduce_ms=3.0, int4_gemm_ms=3.0, bf16_gemm_ms=None,
                     rest_ms=-1.0)
    assert stacked_bar(over, 10) == [("allreduce", 5), ("int4", 5)]


def test_phase_marks_sit_where_the_phases_began() -> None:
    times = [float(t) for t in range(10)]
    line = phase_marks(times, [(3.0, "macro"), (7.2, "cleanup"), (-5.0, "micro")], 12)
    assert line == "     M    C  "[:12] and len(line) == 12
    assert phase_marks(times, [(50.0, "macro")], 12) == ""
    many = [float(t) for t in range(100)]
    assert phase_marks(many, [(0.0, "micro"), (99.0, "restart")], 10) == "U        R"


def test_the_demo_campaign_reaches_the_plateau_level() -> None:
    cfg = demo_config()
    assert cfg.host == "demo" and 128 in cfg.macro.concurrency and set(cfg.micro_ms()) >= set(cfg.macro.concurrency)
    assert all(v in ("yes", "no") for v in cfg.consent.values()), "the demo runs headless without a flag"
    assert "[consent]" in DEMO_TEXT


def test_the_consent_table_takes_others_apart_and_headless_must_answer_it() -> None:
    """``others`` (what holds the GPUs and is not the service) is a step of the consent policy: the file
    answers it, it defaults to ask, and a headless campaign that leaves it at ask is refused before it runs."""
    from kimitui.campaign.config import parse_config
    from kimitui.campaign.examples import INIT_TEXT
    from kimitui.commands.campaign import CampaignUsageError, apply_answers

    data = tomllib.loads(DEMO_TEXT)
    assert data["consent"]["others"] == "yes"  # the demo's host is simulated: all on it is the command's
    data["consent"]["others"] = "no"
    assert parse_config(data, "demo.toml").consent["others"] == "no"
    del data["consent"]["others"]
    cfg = parse_config(data, "demo.toml")
    assert cfg.consent["others"] == "ask"
    with pytest.raises(CampaignUsageError, match="consent others is 'ask'"):
        apply_answers(cfg, None, None, headless=True)
    apply_answers(cfg, "others", None, headless=True)
    assert cfg.consent["others"] == "yes"
    assert tomllib.loads(INIT_TEXT)["consent"]["others"] == "ask"
