"""The load generator against a deterministic real HTTP server: timing, token counts, request bodies,
modes (count, duration, Poisson), concurrency above 100, cancel, progress, events."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import httpx
import pytest

from kimitui.bench.macro import LevelProgress, MacroConfig, SweepResult, run_sweep
from kimitui.bench.macro.arrivals import schedule
from kimitui.bench.macro.request import stream_request
from kimitui.core.events import (
    Event,
    LogLine,
    MacroPoint,
    MacroProgress,
    MacroRequests,
    MacroVerdict,
    PhaseEnd,
    PhaseStart,
)
from kimitui.core.state import SessionState, fold
from kimitui.phases.macro import macro_phase
from tests.faulty_server import Behavior, FaultyServer, count_prompt
from tests.support import one_request
from tests.waiting import DEADLINE_S, until

FIRST, GAP = 0.08, 0.02
"""The server's schedule: a timing measured against it is checked only from below (nothing arrives before it
is sent, however busy the machine); how far above the schedule a figure lands is the machine's, not the
code's (benchmarks/loadgen.py measures the client's own lateness)."""


@pytest.fixture(params=["lean", "httpx"])
def client(request: pytest.FixtureRequest) -> str:
    """The HTTP client of the streamed requests: every test of the request path runs with both."""
    return str(request.param)


def measured(srv: FaultyServer, result: SweepResult) -> list[dict]:
    """The bodies the server received after the sweep's request-field check (one request, see
    bench.macro.fields) and its calibration requests (see bench.macro.lengths)."""
    return srv.stats.bodies[1 + (result.lengths.counts if result.lengths and result.lengths.method == "usage"
                                 else 0):]


async def test_one_request_timing_and_usage_with_multi_token_chunks(client: str) -> None:
    # 20 tokens in chunks of 4: 5 token chunks at 80, 100, ..., 160 ms, then usage (20 tokens)
    async with FaultyServer(Behavior(first_delay_s=FIRST, interval_s=GAP, tokens_per_chunk=4)) as srv:
        body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 20, "stream": True}).encode()
        out = await one_request(client, srv.url + "/v1/completions", body)
    assert out.success, out.error
    assert out.output_tokens == 20 and out.chunks == 5 and not out.usage_missing
    assert out.prompt_tokens == 3 and out.prompt_from_usage  # the server's count of "hi" wins over the estimate
    assert len(out.itl) == 4 and len(out.times) == 5
    # chunk i is written FIRST + i * GAP after the server read the request, which is after t0
    assert out.ttft >= FIRST and out.latency >= FIRST + 4 * GAP
    assert sum(out.itl) == pytest.approx(out.latency - out.ttft, abs=1e-9)
    assert out.times[0] - out.t0 == out.ttft and out.times[-1] - out.t0 == out.latency


async def test_level_metrics_on_a_known_server(client: str) -> None:
    async with FaultyServer(Behavior(first_delay_s=FIRST, interval_s=GAP, tokens_per_chunk=4)) as srv:
        events: list[Event] = []
        cfg = MacroConfig(client=client, url=srv.url, model="m", concurrency=[4], requests=8, max_tokens=20, warmup=2)
        result = await run_sweep(cfg, events.append)
        assert result.lengths is not None and result.lengths.method == "usage"  # no /tokenize here
        # the request-field check, the calibration's counting requests, the warm-up, then the measured ones
        assert srv.stats.requests == 1 + result.lengths.counts + 2 + 8
    m = result.levels[0].metrics
    assert m["completed"] == 8 and m["failed"] == 0 and m["num_prompts"] == 8
    assert m["total_output_tokens"] == 160  # usage, not the 40 chunks
    assert m["total_input_tokens"] == 8 * 128  # the default input length, hit exactly
    assert m["mean_ttft_ms"] >= FIRST * 1000 and m["mean_e2el_ms"] >= (FIRST + 4 * GAP) * 1000
    # TPOT = (E2EL - TTFT) / (N - 1) per token; ITL per chunk: 4 gaps a request
    assert m["mean_tpot_ms"] == pytest.approx((m["mean_e2el_ms"] - m["mean_ttft_ms"]) / 19)
    assert m["mean_itl_ms"] == pytest.approx((m["mean_e2el_ms"] - m["mean_ttft_ms"]) / 4)
    assert m["p99_itl_ms"] >= m["median_itl_ms"] > 0
    # two waves of 4 requests of at least FIRST + 4 GAP each; output throughput = tokens / duration
    assert m["duration"] >= 2 * (FIRST + 4 * GAP)
    assert m["output_throughput"] == pytest.approx(160 / m["duration"])
    assert m["request_throughput"] == pytest.approx(8 / m["duration"])
    assert m["total_token_throughput"] == pytest.approx((160 + 8 * 128) / m["duration"])
    assert m["concurrency_reached"] == 4 and m["max_concurrency"] == 4
    assert m["usage_missing"] == 0 and m["failures"] == {}
    types = [type(e) for e in events]
    assert types.count(MacroPoint) == 1
    assert PhaseStart not in types and PhaseEnd not in types  # the macro phase is macro_phase's, not the sweep's


async def test_no_usage_counts_content_chunks_and_says_so(client: str) -> None:
    async with FaultyServer(Behavior(mode="no_usage", tokens_per_chunk=3)) as srv:
        events: list[Event] = []
        cfg = MacroConfig(client=client, url=srv.url, model="m", concurrency=[2], requests=4, max_tokens=12, warmup=0)
        result = await run_sweep(cfg, events.append)
    m = result.levels[0].metrics
    assert m["completed"] == 4 and m["failed"] == 0
    assert m["usage_missing"] == 4
    assert m["total_output_tokens"] == 16  # 4 chunks each: a lower bound of the 12 tokens sent
    logs = [e.message for e in events if isinstance(e, LogLine)]
    assert any("no usage chunk" in msg and "4 of 4" in msg for msg in logs)


async def test_chat_sse_variants_and_request_body(client: str) -> None:
    b = Behavior(role_chunk=True, crlf=True, comments=True, multiline=True, first_delay_s=0.05, interval_s=0.01)
    async with FaultyServer(b) as srv:
        cfg = MacroConfig(client=client, url=srv.url + "/v1", model="m", endpoint="chat", concurrency=[1], requests=2,
                          max_tokens=5, warmup=0)
        result = await run_sweep(cfg, lambda e: None)
        body = measured(srv, result)[0]
    m = result.levels[0].metrics
    assert m["completed"] == 2 and m["total_output_tokens"] == 10 and m["usage_missing"] == 0
    assert m["input_len_method"] == "usage" and m["mean_input_tokens"] == m["min_input_tokens"] == 128
    # the role-only first chunk is not a token: TTFT is the first token chunk's, one interval after it
    assert m["mean_ttft_ms"] >= 60
    assert body["messages"][0]["role"] == "user" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 5 and body["max_completion_tokens"] == 5 and body["ignore_eos"] is True
    assert body["model"] == "m" and body["temperature"] == 0.0


async def test_completions_body_synthetic_prompt_and_no_ignore_eos(client: str) -> None:
    async with FaultyServer(Behavior(n_tokens=2)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1], requests=3, input_len=50,
                          max_tokens=9, ignore_eos=False, warmup=0, client=client, prompt_salt="")
        result = await run_sweep(cfg, lambda e: None)
        bodies = measured(srv, result)
    assert len(bodies) == 3 and "ignore_eos" not in bodies[0] and bodies[0]["max_tokens"] == 9
    prompts = [bd["prompt"] for bd in bodies]
    # 50 tokens as this server counts them (2 special tokens, a word of n characters is ceil(n/2))
    assert [count_prompt(bd, chat=False) for bd in bodies] == [50, 50, 50]
    assert len(set(prompts)) == 3  # distinct, deterministic (unsalted: from the seed alone, as with --seed)
    assert len({p.split()[:6] == prompts[0].split()[:6] for p in prompts[1:]}) == 1  # apart from the start
    async with FaultyServer(Behavior(n_tokens=2)) as srv:
        result = await run_sweep(MacroConfig(client=client, url=srv.url, model="m", concurrency=[1], requests=3,
                                             input_len=50, max_tokens=9, warmup=0, prompt_salt=""), lambda e: None)
        assert [bd["prompt"] for bd in measured(srv, result)] == prompts


async def test_jsonl_prompts_and_model_discovery(tmp_path: Path, client: str) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "hello there"}\n\n{"messages": [{"role": "user", "content": "hi"}]}\n')
    async with FaultyServer(Behavior(n_tokens=3)) as srv:
        cfg = MacroConfig(url=srv.url, concurrency=[1], requests=2, dataset=path, endpoint="chat",
                          warmup=0, client=client)
        result = await run_sweep(cfg, lambda e: None)
        bodies = measured(srv, result)
    assert result.model == "fake-model" and bodies[0]["model"] == "fake-model"
    assert bodies[0]["messages"] == [{"role": "user", "content": "hello there"}]
    assert bodies[1]["messages"] == [{"role": "user", "content": "hi"}]
    assert result.levels[0].metrics["completed"] == 2


async def test_concurrency_150_is_really_reached(client: str, tmp_path: Path) -> None:
    # The server holds every stream until 150 are open at once: a pool capped at 100 cannot get there.
    # (Dataset prompts: no calibration requests; the one-token request-field check passes the barrier.)
    (tmp_path / "p.jsonl").write_text('{"prompt": "x"}\n')
    async with FaultyServer(Behavior(barrier=150, barrier_timeout_s=DEADLINE_S, n_tokens=2,
                                     barrier_spares_probes=True)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[150], requests=150, max_tokens=2,
                          warmup=0, client=client, dataset=tmp_path / "p.jsonl")
        result = await run_sweep(cfg, lambda e: None)
        assert srv.stats.peak_active == 150  # the barrier opened: 150 streams were open at once
    m = result.levels[0].metrics
    assert m["completed"] == 150 and m["concurrency_reached"] == 150


async def test_httpx_default_limits_would_cap_at_100() -> None:
    """The control for the test above: the same barrier with httpx's default pool stops at 100."""
    async with FaultyServer(Behavior(barrier=150, barrier_timeout_s=DEADLINE_S, n_tokens=1)) as srv:
        body = json.dumps({"model": "m", "prompt": "x", "max_tokens": 1, "stream": True}).encode()
        async with httpx.AsyncClient(timeout=DEADLINE_S) as client:
            sent = asyncio.gather(*(stream_request(client, srv.url + "/v1/completions", body, 1, False,
                                                   time.perf_counter(), DEADLINE_S) for _ in range(150)))
            # the pool's 100 connections held at the barrier; the other 50 requests wait for one of them
            await until(lambda: srv.stats.active == 100, "100 streams at the barrier")
            srv.release_barrier()
            outs = await sent
        assert srv.stats.peak_active == 100
    assert all(o.success for o in outs)


async def test_poisson_mode_sends_the_count_at_the_seeded_rate(client: str) -> None:
    rate, n, seed = 40.0, 12, 3
    async with FaultyServer(Behavior(n_tokens=2)) as srv:
        cfg = MacroConfig(client=client, url=srv.url, model="m", concurrency=[8], requests=n, max_tokens=2, warmup=0,
                          request_rate=rate, seed=seed)
        result = await run_sweep(cfg, lambda e: None)
        assert len(measured(srv, result)) == n
    level = result.levels[0]
    m = level.metrics
    assert m["completed"] == n and m["request_rate"] == rate and m["arrival"] == "40 req/s Poisson"
    # vLLM's schedule: exponential gaps (the first one too), rescaled so the last arrival is at n / rate
    offsets = [a.offset for a in schedule(cfg, n, seed)]
    assert len(offsets) == n and offsets[-1] == pytest.approx(n / rate)
    rng = random.Random(seed)
    gaps = [rng.gammavariate(1.0, 1 / rate) for _ in range(n)]
    assert offsets[0] == pytest.approx(gaps[0] * (n / rate) / sum(gaps))
    # each request was due at its offset (the records keep the schedule), and none was sent early
    sched = [r.sched_ms for r in level.records]
    assert all(x is not None for x in sched)
    due = [x - sched[0] for x in sched]  # type: ignore[operator]
    assert due == pytest.approx([(o - offsets[0]) * 1000 for o in offsets], abs=0.02)
    assert all(r.start_ms >= r.sched_ms - 0.01 for r in level.records)  # type: ignore[operator]
    assert all(r.late_ms >= 0 for r in level.records)  # type: ignore[operator]
    assert m["client_send_late_p99_ms"] is not None and m["client_loop_lag_p99_ms"] is not None
    # the level's clock starts at the first dispatch, which may itself be a little late: the last request
    # was due at sched[-1] on that clock (records round to 0.01 ms)
    assert sched[-1] / 1000 - 2e-5 <= m["duration"]  # type: ignore[operator]


async def test_duration_mode_keeps_dispatching_until_the_deadline(client: str) -> None:
    async with FaultyServer(Behavior(interval_s=0.01, n_tokens=4)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[2], duration_s=0.4, max_tokens=4,
                          warmup=1, client=client)
        result = await run_sweep(cfg, lambda e: None)
    m = result.levels[0].metrics
    # a request takes at least 30 ms (4 chunks 10 ms apart): a worker starts at most 14 in 0.4 s, each at
    # least one; every request was started before the deadline, and the level ends after it
    assert 2 <= m["completed"] <= 28 and m["failed"] == 0
    assert all(r.start_ms < 400 for r in result.levels[0].records)
    assert m["duration"] >= 0.4


async def test_cancel_keeps_finished_levels_and_stops_promptly(client: str) -> None:
    async with FaultyServer(Behavior(interval_s=0.05, n_tokens=4)) as srv:
        cancel = asyncio.Event()
        events: list[Event] = []

        def publish(ev: Event) -> None:
            events.append(ev)
            if isinstance(ev, MacroPoint):
                srv.behavior = Behavior(interval_s=0.05, n_tokens=400)  # the next level would take 20 s

        async def cancel_when_level_two_runs() -> None:
            await until(lambda: srv.behavior.n_tokens == 400 and srv.stats.active >= 2, "level 2 running")
            cancel.set()

        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1, 2, 4], requests=2, max_tokens=4,
                          warmup=0, client=client)
        watcher = asyncio.create_task(cancel_when_level_two_runs())
        result = await macro_phase(publish, cfg, cancel)  # the sweep in its phase
        await watcher
    # the level it cut off (20 s of tokens) left no point: the cancel ended it, not its end
    assert result.cancelled and [lv.concurrency for lv in result.levels] == [1]
    assert result.single_stream_tok_s == result.levels[0].metrics["output_throughput"] > 0
    assert [type(e) for e in events if not isinstance(e, LogLine | MacroProgress)] == [
        PhaseStart, MacroRequests, MacroPoint, MacroVerdict, PhaseEnd]  # the verdict of the levels that ran
    (end,) = [e for e in events if isinstance(e, PhaseEnd)]
    assert not end.ok and "cancelled after 1 of 3" in end.note
    last = events[-1]
    assert isinstance(last, MacroProgress) and last.status == "cancelled"
    state = SessionState()
    for ev in events:
        fold(state, ev)
    assert list(state.macro_by_level) == [1] and state.single_stream_tok_s() == result.single_stream_tok_s
    assert list(state.macro_requests) == [1] and len(state.macro_requests[1].ttft_ms) == 2


async def test_progress_reports_each_level_and_overall(client: str) -> None:
    seen: list[LevelProgress] = []
    async with FaultyServer(Behavior(interval_s=0.02, n_tokens=10)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1, 2], requests=4, max_tokens=10,
                          warmup=1, client=client)
        result = await run_sweep(cfg, lambda e: None, progress=seen.append)
    assert len(result.levels) == 2 and not result.cancelled
    done = [p for p in seen if p.stage == "done"]
    assert [(p.concurrency, p.done, p.total, p.output_tokens) for p in done] == [(1, 4, 4, 40), (2, 4, 4, 40)]
    assert done[-1].overall_fraction == 1.0 and done[0].overall_fraction == 0.5
    running = [p for p in seen if p.stage == "run"]
    assert running and all(0.0 <= p.overall_fraction <= 1.0 for p in running)
    assert any(0 < p.done < 4 for p in running)  # reported while the level ran, not only at its end
    fractions = [p.overall_fraction for p in seen if p.stage != "warmup"]
    assert fractions == sorted(fractions)


async def test_sweep_json_export_uses_vllm_keys(client: str) -> None:
    async with FaultyServer(Behavior(n_tokens=3)) as srv:
        cfg = MacroConfig(client=client, url=srv.url, model="m", concurrency=[1, 2], requests=2, max_tokens=3, warmup=0)
        result = await run_sweep(cfg, lambda e: None)
    data = json.loads(result.to_json())
    assert data["model_id"] == "m" and data["single_stream_tok_s"] == result.single_stream_tok_s
    level = data["levels"][1]
    for key in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                "request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms",
                "median_ttft_ms", "std_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
                "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms", "max_concurrency", "request_rate",
                "concurrency_reached", "failures", "request_goodput"):
        assert key in level, key
    assert level["concurrency"] == 2 and level["completed"] == 2 and level["total_output_tokens"] == 6
