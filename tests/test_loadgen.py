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

from kimitui.bench.macro import LevelProgress, MacroConfig, run_sweep
from kimitui.bench.macro.http_stream import LeanClient
from kimitui.bench.macro.request import RequestOutcome, stream_request
from kimitui.core.events import Event, LogLine, MacroPoint, PhaseEnd, PhaseStart
from kimitui.core.state import SessionState, fold
from tests.faulty_server import Behavior, FaultyServer

POLL_S = 0.01
"""Interval between checks of a condition waited on with a deadline."""

FIRST, GAP = 0.08, 0.02


@pytest.fixture(params=["lean", "httpx"])
def client(request: pytest.FixtureRequest) -> str:
    """The HTTP client of the streamed requests: every test of the request path runs with both."""
    return str(request.param)


async def one_request(client: str, url: str, body: bytes, est: int = 3, chat: bool = False,
                      total_s: float = 10) -> RequestOutcome:
    if client == "lean":
        lean = LeanClient(url)
        try:
            return await lean.stream(body, est, chat, time.perf_counter(), total_s)
        finally:
            lean.close()
    async with httpx.AsyncClient() as hc:
        return await stream_request(hc, url, body, est, chat, time.perf_counter(), total_s)


async def test_one_request_timing_and_usage_with_multi_token_chunks(client: str) -> None:
    # 20 tokens in chunks of 4: 5 token chunks at 80, 100, ..., 160 ms, then usage (20 tokens)
    async with FaultyServer(Behavior(first_delay_s=FIRST, interval_s=GAP, tokens_per_chunk=4)) as srv:
        body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 20, "stream": True}).encode()
        out = await one_request(client, srv.url + "/v1/completions", body)
    assert out.success, out.error
    assert out.output_tokens == 20 and out.chunks == 5 and not out.usage_missing
    assert out.prompt_tokens == 7  # the server's usage.prompt_tokens wins over the estimate
    assert len(out.itl) == 4
    assert out.ttft == pytest.approx(FIRST, abs=0.03)
    assert out.latency == pytest.approx(FIRST + 4 * GAP, abs=0.04)
    assert sum(out.itl) == pytest.approx(out.latency - out.ttft, abs=1e-9)
    for gap in out.itl:
        assert gap == pytest.approx(GAP, abs=0.015)


async def test_level_metrics_on_a_known_server(client: str) -> None:
    async with FaultyServer(Behavior(first_delay_s=FIRST, interval_s=GAP, tokens_per_chunk=4)) as srv:
        events: list[Event] = []
        cfg = MacroConfig(client=client, url=srv.url, model="m", concurrency=[4], requests=8, max_tokens=20, warmup=2)
        result = await run_sweep(cfg, events.append)
        assert srv.stats.requests == 10  # warm-up requests were sent, and not counted below
    m = result.levels[0].metrics
    assert m["completed"] == 8 and m["failed"] == 0 and m["num_prompts"] == 8
    assert m["total_output_tokens"] == 160  # usage, not the 40 chunks
    assert m["total_input_tokens"] == 56
    assert m["mean_ttft_ms"] == pytest.approx(FIRST * 1000, abs=30)
    assert m["mean_e2el_ms"] == pytest.approx((FIRST + 4 * GAP) * 1000, abs=40)
    # TPOT = (E2EL - TTFT) / (N - 1) = 80 ms / 19 per token; ITL is per chunk: 20 ms
    assert m["mean_tpot_ms"] == pytest.approx(4 * GAP * 1000 / 19, abs=1.0)
    assert m["mean_itl_ms"] == pytest.approx(GAP * 1000, abs=5)
    assert m["p99_itl_ms"] >= m["median_itl_ms"] >= GAP * 1000 * 0.5
    # two waves of 4: duration ~ 2 x 160 ms; output throughput = tokens / duration
    assert 0.3 <= m["duration"] < 1.5
    assert m["output_throughput"] == pytest.approx(160 / m["duration"])
    assert m["request_throughput"] == pytest.approx(8 / m["duration"])
    assert m["total_token_throughput"] == pytest.approx((160 + 56) / m["duration"])
    assert m["concurrency_reached"] == 4 and m["max_concurrency"] == 4
    assert m["usage_missing"] == 0 and m["failures"] == {}
    types = [type(e) for e in events]
    assert types[0] is PhaseStart and types[-1] is PhaseEnd and types.count(MacroPoint) == 1


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
        body = srv.stats.bodies[0]
    m = result.levels[0].metrics
    assert m["completed"] == 2 and m["total_output_tokens"] == 10 and m["usage_missing"] == 0
    # vLLM's rule: the role-only first chunk is the first token chunk, so TTFT ~ the first delay
    assert m["mean_ttft_ms"] == pytest.approx(50, abs=25)
    assert body["messages"][0]["role"] == "user" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 5 and body["max_completion_tokens"] == 5 and body["ignore_eos"] is True
    assert body["model"] == "m" and body["temperature"] == 0.0


async def test_completions_body_synthetic_prompt_and_no_ignore_eos(client: str) -> None:
    async with FaultyServer(Behavior(n_tokens=2)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1], requests=3, input_len=50,
                          max_tokens=9, ignore_eos=False, warmup=0, client=client)
        await run_sweep(cfg, lambda e: None)
        bodies = srv.stats.bodies
    assert "ignore_eos" not in bodies[0] and bodies[0]["max_tokens"] == 9
    prompts = [bd["prompt"] for bd in bodies]
    assert all(len(p.split()) == 50 for p in prompts)
    assert len(set(prompts)) == 3  # distinct, deterministic
    async with FaultyServer(Behavior(n_tokens=2)) as srv:
        await run_sweep(MacroConfig(client=client, url=srv.url, model="m", concurrency=[1], requests=3, input_len=50,
                                    max_tokens=9, warmup=0), lambda e: None)
        assert [bd["prompt"] for bd in srv.stats.bodies] == prompts


async def test_jsonl_prompts_and_model_discovery(tmp_path: Path, client: str) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "hello there"}\n\n{"messages": [{"role": "user", "content": "hi"}]}\n')
    async with FaultyServer(Behavior(n_tokens=3)) as srv:
        cfg = MacroConfig(url=srv.url, concurrency=[1], requests=2, dataset=path, endpoint="chat",
                          warmup=0, client=client)
        result = await run_sweep(cfg, lambda e: None)
        bodies = srv.stats.bodies
    assert result.model == "fake-model" and bodies[0]["model"] == "fake-model"
    assert bodies[0]["messages"] == [{"role": "user", "content": "hello there"}]
    assert bodies[1]["messages"] == [{"role": "user", "content": "hi"}]
    assert result.levels[0].metrics["completed"] == 2


async def test_concurrency_150_is_really_reached(client: str) -> None:
    # The server holds every stream until 150 are open at once: a pool capped at 100 cannot get there.
    async with FaultyServer(Behavior(barrier=150, barrier_timeout_s=5, n_tokens=2)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[150], requests=150, max_tokens=2,
                          warmup=0, client=client)
        t = time.perf_counter()
        result = await run_sweep(cfg, lambda e: None)
        assert time.perf_counter() - t < 4.0  # the barrier opened; it did not time out
        assert srv.stats.peak_active == 150
    m = result.levels[0].metrics
    assert m["completed"] == 150 and m["concurrency_reached"] == 150


async def test_httpx_default_limits_would_cap_at_100() -> None:
    """The control for the test above: the same barrier with httpx's default pool stops at 100."""
    async with FaultyServer(Behavior(barrier=150, barrier_timeout_s=0.5, n_tokens=1)) as srv:
        body = json.dumps({"model": "m", "prompt": "x", "max_tokens": 1, "stream": True}).encode()
        async with httpx.AsyncClient(timeout=10) as client:
            outs = await asyncio.gather(*(stream_request(client, srv.url + "/v1/completions", body, 1, False,
                                                         time.perf_counter(), 10) for _ in range(150)))
        assert srv.stats.peak_active == 100
    assert all(o.success for o in outs)


async def test_poisson_mode_sends_the_count_at_the_seeded_rate(client: str) -> None:
    rate, n, seed = 40.0, 12, 3
    async with FaultyServer(Behavior(n_tokens=2)) as srv:
        cfg = MacroConfig(client=client, url=srv.url, model="m", concurrency=[8], requests=n, max_tokens=2, warmup=0,
                          request_rate=rate, seed=seed)
        result = await run_sweep(cfg, lambda e: None)
        assert srv.stats.requests == n
    m = result.levels[0].metrics
    rng = random.Random(seed)
    span = sum(rng.expovariate(rate) for _ in range(n - 1))  # the last arrival's offset
    assert m["completed"] == n and m["request_rate"] == rate
    assert span * 0.95 <= m["duration"] <= span + 1.0


async def test_duration_mode_keeps_dispatching_until_the_deadline(client: str) -> None:
    async with FaultyServer(Behavior(interval_s=0.01, n_tokens=4)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[2], duration_s=0.4, max_tokens=4,
                          warmup=1, client=client)
        result = await run_sweep(cfg, lambda e: None)
    m = result.levels[0].metrics
    # each request takes ~30 ms: 2 workers for 0.4 s make about 26; far more than 2, and all complete
    assert 8 <= m["completed"] <= 60 and m["failed"] == 0
    assert 0.4 <= m["duration"] < 0.8


async def test_cancel_keeps_finished_levels_and_stops_promptly(client: str) -> None:
    async with FaultyServer(Behavior(interval_s=0.05, n_tokens=4)) as srv:
        cancel = asyncio.Event()
        events: list[Event] = []

        def publish(ev: Event) -> None:
            events.append(ev)
            if isinstance(ev, MacroPoint):
                srv.behavior = Behavior(interval_s=0.05, n_tokens=400)  # the next level would take 20 s

        async def cancel_when_level_two_runs() -> None:
            deadline = time.perf_counter() + 10
            while not (srv.behavior.n_tokens == 400 and srv.stats.active >= 2):
                assert time.perf_counter() < deadline
                await asyncio.sleep(POLL_S)
            cancel.set()

        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1, 2, 4], requests=2, max_tokens=4,
                          warmup=0, client=client)
        watcher = asyncio.create_task(cancel_when_level_two_runs())
        t = time.perf_counter()
        result = await run_sweep(cfg, publish, cancel=cancel)
        elapsed = time.perf_counter() - t
        await watcher
    assert elapsed < 3.0
    assert result.cancelled and [lv.concurrency for lv in result.levels] == [1]
    assert result.single_stream_tok_s == result.levels[0].metrics["output_throughput"] > 0
    assert [type(e) for e in events] == [PhaseStart, MacroPoint, PhaseEnd]
    end = events[-1]
    assert isinstance(end, PhaseEnd) and not end.ok and "cancelled after 1 of 3" in end.note
    state = SessionState()
    for ev in events:
        fold(state, ev)
    assert list(state.macro) == [1] and state.single_stream_tok_s() == result.single_stream_tok_s


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
