"""Issue 38 item 2: ``bench macro --slo ... --search`` finds the highest concurrency meeting the SLOs at p99 by
bracketing and bisection: every answer of a monotone server is found, in at most the probes it plans; against the
simulated server the answer is bracketed by its own probes (it met, the next one up missed), recorded in the
verdict with the probes in order, and the command says it in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimitui.bench.macro import ConfigError, MacroConfig, run_sweep
from kimitui.bench.macro.config import RATE_LEVEL_MIN_REQUESTS, RATE_LEVEL_S, SLO
from kimitui.bench.macro.search import PROBE_WAVES, RATE_RESOLUTION, RateSearch, SloSearch
from kimitui.core.events import Event, MacroPoint, MacroVerdict
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.openai_server import SimOpenAIServer
from tests.support import sim_server_thread


def _run(s: SloSearch, limit: float | None) -> SloSearch:
    """Run search S on a server that meets the SLOs up to level ``limit`` (None: nowhere)."""
    while (c := s.next()) is not None:
        assert c not in s.order and s.lowest <= c <= s.highest
        s.record(c, limit is not None and c <= limit)
    return s


def _search(lowest: int, highest: int, limit: int | None) -> SloSearch:
    return _run(SloSearch(lowest, highest), limit)


@pytest.mark.parametrize("lowest,highest", [(1, 128), (1, 100), (4, 512), (1, 1), (3, 7)])
def test_every_answer_of_a_monotone_server_is_found(lowest: int, highest: int) -> None:
    for limit in [None, *range(lowest, highest + 1)]:
        s = _search(lowest, highest, limit)
        assert s.answer == limit, (limit, s.order)
        assert len(s.order) <= s.planned, (limit, s.order)
    above = _search(lowest, highest, highest + 50)  # meets beyond the highest level: the highest is the answer
    assert above.answer == highest


def test_a_probe_runs_four_requests_a_slot_or_the_sweeps_own() -> None:
    s = SloSearch(1, 64)
    assert PROBE_WAVES == 4 and s.probe_requests(8, 16) == 32 and s.probe_requests(2, 16) == 16


def test_a_search_needs_slos_and_closed_loop_levels() -> None:
    with pytest.raises(ConfigError, match="give them"):
        MacroConfig(url="http://x", search=True).validate()
    with pytest.raises(ConfigError, match="closed-loop"):
        MacroConfig(url="http://x", search=True, slo=SLO(tpot_ms=30), request_rate=5.0).validate()


# the step grows 4 ms a request: TPOT 10 ms at c=1, 18 at c=3, 22 at c=4: a 20 ms SLO is met up to c=3, 2 ms each side
STEEP = BatchingModel.from_targets(single_stream_tps=100, plateau_tps=210, plateau_batch=8, prefill_tps=1e6)


async def test_the_search_against_the_simulated_server_is_bracketed_by_its_probes() -> None:
    events: list[Event] = []
    async with SimOpenAIServer(batching=STEEP) as srv:
        cfg = MacroConfig(url=srv.url, concurrency=[1, 16], requests=4, max_tokens=12, warmup=0,
                          slo=SLO(tpot_ms=20.0), search=True)
        result = await run_sweep(cfg, events.append)
    (verdict,) = [e for e in events if isinstance(e, MacroVerdict)]
    probes = [e.concurrency for e in events if isinstance(e, MacroPoint)]
    assert verdict.searched == probes == [lv.concurrency for lv in result.levels]
    assert probes[:2] == [1, 2] and len(probes) == len(set(probes)) and not result.cancelled
    answer = verdict.slo_concurrency
    assert answer is not None and answer in verdict.meets and answer + 1 in probes
    assert answer + 1 not in verdict.meets  # bracketed: the next level up was probed and missed
    assert verdict.meets == sorted(c for c in probes if c <= answer)  # monotone here: a fixed sweep's verdict
    for lv in result.levels:  # each probe ran 4 requests a slot at least
        assert lv.metrics["num_prompts"] >= PROBE_WAVES * lv.concurrency


def test_the_command_says_the_answer_and_its_probes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from kimitui.commands.bench import add_parser, cmd_bench

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the run file goes here
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    out = tmp_path / "search.json"
    with sim_server_thread(STEEP) as url:
        args = parser.parse_args(["bench", "macro", "--url", url, "--model", "moonshotai/Kimi-K2.5",
                                  "--slo", "tpot:20", "--search", "--concurrency", "1,16", "--max-tokens", "12",
                                  "--warmup", "0", "--output", str(out)])
        assert cmd_bench(args) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("verdict: "))
    saved = json.loads(out.read_text())["verdict"]
    probes = saved["search_probes"]
    assert f"met at p99 up to c={saved['max_concurrency_meeting_slo']} (searched: c={','.join(map(str, probes))}; " \
           f"{len(probes)} probes)" in line


# -- a search over request rates (--request-rate LOW HIGH --search) -----------------------------------------

def _rate_search(lowest: float, highest: float, limit: float | None) -> SloSearch:
    return _run(RateSearch(lowest, highest), limit)


@pytest.mark.parametrize("lowest,highest", [(1.0, 64.0), (0.5, 100.0), (2.0, 3.0)])
def test_every_rate_of_a_monotone_server_is_found_to_ten_percent(lowest: float, highest: float) -> None:
    limits = [lowest * 1.07 ** k for k in range(200) if lowest * 1.07 ** k <= highest]
    for limit in limits:
        s = _rate_search(lowest, highest, limit)
        assert s.answer is not None and s.answer <= limit, (limit, s.order)
        above = [r for r, met in s.tried if not met]
        # the answer is within RATE_RESOLUTION of the lowest rate that missed (or is the highest rate given)
        assert s.answer == highest or (above and min(above) <= s.answer * (1 + RATE_RESOLUTION) + 0.01), s.order
        assert len(s.order) <= s.planned, (limit, s.order, s.planned)
    assert _rate_search(lowest, highest, None).answer is None
    assert _rate_search(lowest, highest, highest * 2).answer == highest


def test_a_rate_search_needs_two_rates_and_a_request_count() -> None:
    with pytest.raises(ConfigError, match="lowest and the highest"):
        MacroConfig(url="http://x", search=True, slo=SLO(tpot_ms=30), rate_levels=[5.0], concurrency=[8]).validate()
    with pytest.raises(ConfigError, match="one cap"):
        MacroConfig(url="http://x", rate_levels=[1.0, 2.0], concurrency=[1, 8]).validate()
    with pytest.raises(ConfigError, match="positive"):
        MacroConfig(url="http://x", rate_levels=[1.0, float("nan")], concurrency=[8]).validate()
    with pytest.raises(ConfigError, match="--duration"):
        MacroConfig(url="http://x", search=True, slo=SLO(tpot_ms=30), rate_levels=[1.0, 8.0], concurrency=[8],
                    duration_s=5).validate()
    per_slot = MacroConfig(url="http://x", rate_levels=[1.0, 20.0], concurrency=[64], requests_per_stream=4)
    assert per_slot.rate_level_requests(1.0) == RATE_LEVEL_MIN_REQUESTS
    assert per_slot.rate_level_requests(20.0) == int(20 * RATE_LEVEL_S)
    assert MacroConfig(url="http://x", rate_levels=[1.0], requests=12).rate_level_requests(50.0) == 12


# 4 tokens a request, TPOT 20 ms alone and 8 ms more for each request beside it, 8 at most (76 ms): open loop, a
# 60 ms TPOT SLO holds up to about 25 req/s (6 requests in flight), with room for a loaded machine's stalls at 5 and
# 10 req/s (TPOT about 21 ms; a stall only adds to it), and is missed where 8 decode at once (from about 35 req/s)
SLOW_STEEP = BatchingModel.from_targets(single_stream_tps=50, plateau_tps=105, plateau_batch=8, prefill_tps=1e6)
FOUR_TOKENS = dict(requests=16, max_tokens=4, warmup=0, slo=SLO(tpot_ms=60.0))


async def test_the_rate_search_against_the_simulated_server_agrees_with_a_fixed_sweep() -> None:
    events: list[Event] = []
    fixed: list[Event] = []
    async with SimOpenAIServer(batching=SLOW_STEEP) as srv:
        cfg = MacroConfig(url=srv.url, concurrency=[64], rate_levels=[5.0, 80.0], search=True, **FOUR_TOKENS)
        result = await run_sweep(cfg, events.append)
        sweep = MacroConfig(url=srv.url, concurrency=[64], rate_levels=[5.0, 80.0], **FOUR_TOKENS)
        await run_sweep(sweep, fixed.append)
    (verdict,) = [e for e in events if isinstance(e, MacroVerdict)]
    points = [e for e in events if isinstance(e, MacroPoint)]
    probes = [p.rate for p in points]
    assert verdict.axis == "rate" and verdict.searched == probes == [lv.rate for lv in result.levels]
    assert [p.metrics["request_rate"] for p in points] == probes and {p.concurrency for p in points} == {64}
    assert probes[:3] == [5.0, 10.0, 20.0] and len(probes) == len(set(probes)) and not result.cancelled
    answer = verdict.slo_concurrency
    assert answer is not None and answer in verdict.meets
    missed = [r for r in probes if r not in verdict.meets and r > answer]
    assert missed and min(missed) <= answer * (1 + RATE_RESOLUTION) + 0.01  # bracketed to 10 % by its probes
    assert all(r in verdict.meets for r in probes if r <= answer / 2)  # far below: met, as the fixed sweep says
    assert all(r not in verdict.meets for r in probes if r >= answer * 2)
    (fixed_verdict,) = [e for e in fixed if isinstance(e, MacroVerdict)]
    assert fixed_verdict.axis == "rate" and fixed_verdict.meets == [5.0] and fixed_verdict.slo_concurrency == 5.0
    assert 5.0 <= answer < 80.0  # the search's answer lies where the fixed sweep says the SLOs turn
    assert result.to_dict()["verdict"]["max_rate_meeting_slo"] == answer
    for lv in result.levels:
        assert lv.metrics["num_prompts"] == 16 and lv.metrics["request_rate"] == lv.rate
