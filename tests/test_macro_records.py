"""Per-request records (bench/macro/records.py) through a run file: compact, folded for the views, and
recomputing each level's summary exactly; the report's distributions; trace files."""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path

import pytest

from kimitui.bench.macro import MacroConfig, run_sweep
from kimitui.bench.macro.arrivals import load_trace, ramp_rate, schedule
from kimitui.bench.macro.config import ConfigError, RampUp
from kimitui.bench.macro.metrics import LevelContext, summarize
from kimitui.bench.macro.records import RECORDS_PER_EVENT, from_events
from kimitui.core.events import MacroPoint, MacroRequests
from kimitui.core.runfile import RunReader, RunWriter
from kimitui.core.state import fold_all
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.openai_server import SimOpenAIServer
from kimitui.report.markdown import render_report

MODEL = BatchingModel.from_targets(single_stream_tps=2000, plateau_tps=32000, plateau_batch=32, prefill_tps=200_000)


@pytest.fixture(scope="module")
def run_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of three levels against the simulated server, recorded the way a session records it."""
    import asyncio

    path = tmp_path_factory.mktemp("run") / "sweep.jsonl"

    async def sweep() -> None:
        async with SimOpenAIServer(batching=MODEL) as srv:
            cfg = MacroConfig(url=srv.url, concurrency=[2, 8, 32], requests=250, max_tokens=12, input_len=64,
                              input_len_stddev=8, warmup=1, percentiles=(50.0, 90.0, 99.9))
            with RunWriter(path, host="sim") as writer:
                await run_sweep(cfg, writer.append)

    asyncio.run(sweep())
    return path


def test_records_recompute_every_level_exactly_from_the_run_file(run_file: Path) -> None:
    reader = RunReader(run_file)
    events = list(reader.events())
    points = [e for e in events if isinstance(e, MacroPoint)]
    assert [p.concurrency for p in points] == [2, 8, 32]
    for p in points:
        batches = [e for e in events if isinstance(e, MacroRequests) and e.concurrency == p.concurrency]
        assert len(batches) == 2  # 250 requests: 200 + 50 (RECORDS_PER_EVENT a batch)
        assert [b.first for b in batches] == [0, RECORDS_PER_EVENT] and {b.total for b in batches} == {250}
        records = from_events(batches)
        assert len(records) == 250 and all(r.success for r in records)
        # the server's own figures come from its /metrics histograms and counters, not from the records: apart
        server = {k: v for k, v in p.metrics.items() if k.startswith(("server_", "overhead_", "prefix_cache_"))}
        assert server["server_requests"] == 250  # the simulated server counted each request the client made
        assert server["prefix_cache_hits"] == 0  # no prompt shares a block with another
        assert server["prefix_cache_queries"] == sum(r.input_tokens for r in records)
        client = {k: v for k, v in p.metrics.items() if k not in server}
        assert summarize(records, LevelContext.from_metrics(p.metrics)) == client
        assert p.metrics["p99.9_ttft_ms"] >= p.metrics["p90_ttft_ms"] >= p.metrics["p50_ttft_ms"] > 0
        # the batches come before the level's point, in dispatch order
        assert max(events.index(b) for b in batches) < events.index(p)
        assert [r.start_ms for r in records] == sorted(r.start_ms for r in records) and records[0].start_ms == 0


def test_records_are_compact(run_file: Path) -> None:
    lines = [line for line in run_file.read_text().splitlines() if '"type":"macro_requests"' in line]
    requests = sum(len(json.loads(line)["requests"]) for line in lines)
    size = sum(len(line) for line in lines)
    chunks = 3 * 250 * 12
    assert requests == 750
    # times in ms with at most 2 decimals: at most 8 bytes a chunk time, and ~120 bytes of fields a request
    assert size < 8 * chunks + 120 * requests, (size, chunks)
    numbers = re.findall(r"-?\d+\.\d+", "".join(json.dumps(json.loads(line)["requests"]) for line in lines))
    assert numbers and all(len(n.split(".")[1]) <= 2 for n in numbers)


def test_the_fold_keeps_each_level_distribution_and_the_report_draws_it(run_file: Path) -> None:
    state = fold_all(list(RunReader(run_file).events()))
    assert sorted(state.macro_requests) == [2, 8, 32]
    for c, level in state.macro_requests.items():
        point = state.macro_by_level[c].metrics
        assert level.total == level.received == 250 and level.failed == 0
        assert len(level.ttft_ms) == len(level.tpot_ms) == 250
        assert sum(level.ttft_ms) / 250 == pytest.approx(point["mean_ttft_ms"])
        assert sum(level.tpot_ms) / 250 == pytest.approx(point["mean_tpot_ms"])
    report = render_report(RunReader(run_file))
    macro = report[report.index("## Serving sweep (macro)"):]
    assert "| concurrency | ok/failed | output tok/s | TTFT mean | TTFT p99.9 | TPOT mean | TPOT p99.9 |" in macro
    assert "Input lengths: exact, counted by the server's /tokenize." in macro
    for name in ("TTFT", "TPOT"):
        block = macro[macro.index(f"{name} per request at each level"):]
        opened = block.index("```text\n") + 8
        body = block[opened: block.index("\n```", opened)].splitlines()
        assert [line.split()[0] for line in body] == ["c=2", "c=8", "c=32"]
        assert all("|" in line and "(n=250)" in line for line in body)
    # a level sent again (a second sweep at the same concurrency) replaces the first one's distribution
    again = fold_all([MacroRequests(t=1.0, concurrency=8, origin=99.0, total=1,
                                    requests=[{"start_ms": 0.0, "end_ms": 5.0, "chunk_ms": [1.0, 3.0],
                                               "in": 9, "out": 2}])], state)
    assert again.macro_requests[8].ttft_ms == [1.0] and again.macro_requests[8].tpot_ms == [2.0]


def test_trace_files_and_their_errors(tmp_path: Path) -> None:
    good = tmp_path / "t.jsonl"
    good.write_text('{"timestamp": 5.5, "output_len": 3}\n\n{"timestamp": 5.0, "input_tokens": 40}\n')
    arrivals = load_trace(good)
    assert [(a.offset, a.input_len, a.output_len) for a in arrivals] == [(0.0, 40, None), (0.5, None, 3)]
    cfg = MacroConfig(url="http://x", trace=good, duration_s=0.3)
    assert [a.offset for a in schedule(cfg, None, 0, arrivals)] == [0.0]  # the duration cuts the trace
    for text, message in [("", "no arrivals"), ("{nope\n", "t.jsonl:1: not JSON"),
                          ('{"t": 1}\n', 'expected {"timestamp"'),
                          ('{"timestamp": 1, "input_len": 0}\n', "input_len must be a positive integer")]:
        good.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_trace(good)


def test_ramp_and_gamma_schedules() -> None:
    ramp = RampUp("linear", 10.0, 30.0)
    assert [ramp_rate(ramp, f) for f in (0, 0.5, 1, 2)] == [10.0, 20.0, 30.0, 30.0]
    exp = RampUp("exponential", 1.0, 100.0)
    assert ramp_rate(exp, 0.5) == pytest.approx(10.0)
    cfg = MacroConfig(url="http://x", ramp_up=ramp)
    offsets = [a.offset for a in schedule(cfg, 400, 7)]
    gaps = [b - a for a, b in pairwise(offsets)]
    # the rate triples over the level: the last gaps are about a third of the first ones
    early, late = sum(gaps[:100]) / 100, sum(gaps[-100:]) / 100
    assert 2.0 < early / late < 4.5
    steady = MacroConfig(url="http://x", request_rate=50.0, burstiness=4.0)
    offsets = [a.offset for a in schedule(steady, 200, 1)]
    assert offsets[-1] == pytest.approx(200 / 50.0)  # rescaled as vLLM does
    bursty = MacroConfig(url="http://x", request_rate=50.0, burstiness=0.25)
    b_offsets = [a.offset for a in schedule(bursty, 200, 1)]
    b_gaps = [y - x for x, y in pairwise(b_offsets)]
    s_gaps = [y - x for x, y in pairwise(offsets)]

    def cv(v: list[float]) -> float:
        m = sum(v) / len(v)
        return (sum((x - m) ** 2 for x in v) / len(v)) ** 0.5 / m

    # gamma gaps of shape k have a coefficient of variation 1/sqrt(k): 2 when bursty, 0.5 when regular
    assert cv(b_gaps) > 1.4 and cv(s_gaps) < 0.7
