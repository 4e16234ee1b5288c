"""Prefix cache hygiene (issue 34, item 4): each level's prefix-cache hit rate from the server's counters,
a warning above 10 %, ``--reset-prefix-cache`` (vLLM's ``POST /reset_prefix_cache``, dev mode only), and
prompts that never share a prefix unless asked to. Against the simulated vLLM server, whose prefix cache
keeps and counts blocks of 16 tokens as vLLM's v1 engine does (``kimitui/hosts/sim/prefix_cache.py``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kimitui.bench.macro import MacroConfig, run_sweep
from kimitui.bench.macro.sweep import SweepResult
from kimitui.commands.bench import add_parser, cmd_bench
from kimitui.core.events import Event, LogLine
from kimitui.core.runfile import RunReader
from kimitui.core.server_metrics import parse_snapshot
from kimitui.core.state import fold_all
from kimitui.hosts.sim.batching import BatchingModel, DecodeScheduler
from kimitui.hosts.sim.openai_server import SimOpenAIServer
from kimitui.report.bench import macro_section
from tests.waiting import wait_until

FAST = BatchingModel.from_targets(single_stream_tps=2000, plateau_tps=16000, plateau_batch=16)
WARM = "the server's prefix cache held"
BLOCK = 16
"""vLLM's default block size: its prefix cache keeps whole blocks of this many tokens."""


def cached_share(prompt_tokens: int) -> int:
    """The tokens of a prompt vLLM can serve from its cache: whole blocks, its last token always computed."""
    return (prompt_tokens - 1) // BLOCK * BLOCK


def warnings(events: list[Event]) -> list[str]:
    return [e.message for e in events if isinstance(e, LogLine) and e.level == "warning"]


def prefix(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k.startswith("prefix_cache")}


async def sweep(url: str, events: list[Event] | None = None, **kw: Any) -> SweepResult:
    cfg = MacroConfig(url=url, **{"concurrency": [1, 4], "requests": 8, "max_tokens": 4, "warmup": 1, **kw})
    return await run_sweep(cfg, (events if events is not None else []).append)


# --- a sweep's own prompts ------------------------------------------------------------------------------

@pytest.mark.parametrize("endpoint", ["completions", "chat"])
async def test_a_sweeps_prompts_share_no_prefix(endpoint: str) -> None:
    """Every prompt of a sweep (its warm-ups and measured requests, every level) differs from the others
    within its first block: the server counts every prompt token as looked up and none as found."""
    events: list[Event] = []
    async with SimOpenAIServer(batching=FAST) as srv:
        result = await sweep(srv.url, events, endpoint=endpoint, concurrency=[1, 4, 8])
    for lv in result.levels:
        assert prefix(lv.metrics) == {"prefix_cache_queries": sum(r.input_tokens for r in lv.records),
                                      "prefix_cache_hits": 0, "prefix_cache_hit_rate": 0.0}, lv.concurrency
        assert all(r.input_tokens == 128 for r in lv.records)
    assert not [w for w in warnings(events) if WARM in w]


async def test_a_second_sweep_sends_new_prompts_unless_its_seed_is_given() -> None:
    """Two sweeps against one server: fresh prompts each (no hit); with the seed given (unsalted), the
    second repeats the first's prompts, the server serves 7 of each prompt's 8 blocks from its cache, and
    each level is warned about."""
    async with SimOpenAIServer(batching=FAST) as srv:
        await sweep(srv.url)
        fresh = await sweep(srv.url)
        await sweep(srv.url, prompt_salt="", seed=3)
        events: list[Event] = []
        again = await sweep(srv.url, events, prompt_salt="", seed=3)
    assert [lv.metrics["prefix_cache_hits"] for lv in fresh.levels] == [0, 0]
    for lv in again.levels:
        queries = sum(r.input_tokens for r in lv.records)
        assert prefix(lv.metrics) == {"prefix_cache_queries": queries,
                                      "prefix_cache_hits": sum(cached_share(r.input_tokens) for r in lv.records),
                                      "prefix_cache_hit_rate": 112 / 128}
    warm = [w for w in warnings(events) if WARM in w]
    assert [w.split(":")[0] for w in warm] == ["concurrency 1", "concurrency 4"]
    assert "88% of the prompt tokens (896 of 1,024)" in warm[0]


async def test_a_dataset_that_repeats_a_prompt_hits_the_cache(tmp_path: Path) -> None:
    """Asked to (a dataset of one prompt): the warm-up caches it, every measured request finds it."""
    data = tmp_path / "one.jsonl"
    data.write_text('{"prompt": "' + " ".join(f"w{i}" for i in range(100)) + '"}\n')
    events: list[Event] = []
    async with SimOpenAIServer(batching=FAST) as srv:
        result = await sweep(srv.url, events, dataset=data, concurrency=[4])
    (lv,) = result.levels
    (tokens,) = {r.input_tokens for r in lv.records}
    assert prefix(lv.metrics) == {"prefix_cache_queries": 8 * tokens, "prefix_cache_hits": 8 * cached_share(tokens),
                                  "prefix_cache_hit_rate": cached_share(tokens) / tokens}
    assert len([w for w in warnings(events) if w.startswith(f"concurrency 4: {WARM}")]) == 1


# --- --reset-prefix-cache -----------------------------------------------------------------------------

async def test_reset_prefix_cache_drops_the_cache_before_each_level() -> None:
    """In dev mode the server drops its cache before each level when asked: the repeated prompts miss."""
    events: list[Event] = []
    async with SimOpenAIServer(batching=FAST, dev_mode=True) as srv:
        await sweep(srv.url, prompt_salt="")
        result = await sweep(srv.url, events, prompt_salt="", reset_prefix_cache=True, concurrency=[1, 4, 2])
        assert srv.app.prefix_cache is not None and srv.app.prefix_cache.resets == 3
    assert [(lv.metrics["prefix_cache_hits"], lv.metrics["prefix_cache_reset"]) for lv in result.levels] == [
        (0, True), (0, True), (0, True)]
    said = [e.message for e in events if isinstance(e, LogLine) and "reset_prefix_cache" in e.message]
    assert said == ["prefix cache: POST /reset_prefix_cache before each level"]
    assert not [w for w in warnings(events) if WARM in w]


async def test_a_server_without_the_reset_is_said_once_and_the_sweep_goes_on() -> None:
    events: list[Event] = []
    async with SimOpenAIServer(batching=FAST, dev_mode=False) as srv:
        result = await sweep(srv.url, events, reset_prefix_cache=True, concurrency=[1, 2, 4])
    assert [lv.metrics["completed"] for lv in result.levels] == [8, 8, 8]
    assert [lv.metrics["prefix_cache_reset"] for lv in result.levels] == [False, False, False]
    said = [w for w in warnings(events) if "reset_prefix_cache" in w]
    assert said == ["the server does not offer POST /reset_prefix_cache (HTTP 404; vLLM serves it with "
                    "VLLM_SERVER_DEV_MODE=1): the levels run without dropping its prefix cache"]


# --- the simulated server, as vLLM -------------------------------------------------------------------

async def test_the_sim_counts_its_prefix_cache_as_vllm_and_resets_only_in_dev_mode() -> None:
    from kimitui.core.server_metrics import prefix_hit_rate

    body = {"model": "moonshotai/Kimi-K2.5", "prompt": " ".join(f"w{i}" for i in range(60)), "max_tokens": 2}
    for dev in (False, True):
        async with SimOpenAIServer(batching=FAST, dev_mode=dev) as srv, httpx.AsyncClient(base_url=srv.url) as c:
            before = parse_snapshot((await c.get("/metrics")).text)
            usage = [(await c.post("/v1/completions", json=body)).json()["usage"]["prompt_tokens"] for _ in range(2)]
            page = (await c.get("/metrics")).text
            reset = await c.post("/reset_prefix_cache")
            third = await c.post("/v1/completions", json=body)
            after = parse_snapshot((await c.get("/metrics")).text)
            wrong_method = await c.get("/reset_prefix_cache")
        n = usage[0]
        assert 'vllm:prefix_cache_queries_total{engine="0",model_name="moonshotai/Kimi-K2.5"}' in page
        assert "# TYPE vllm:prefix_cache_hits_total counter" in page
        assert third.status_code == 200
        if dev:
            assert (reset.status_code, reset.content, wrong_method.status_code) == (200, b"", 405)
            assert prefix_hit_rate(before, after) == (3 * n, cached_share(n), cached_share(n) / (3 * n))
        else:
            assert (reset.status_code, reset.json(), wrong_method.status_code) == (404, {"detail": "Not Found"}, 404)
            assert prefix_hit_rate(before, after) == (3 * n, 2 * cached_share(n), 2 * cached_share(n) / (3 * n))


async def test_cached_tokens_are_not_prefilled_again() -> None:
    """A prompt whose blocks are cached is prefilled from its first uncached token: with 16 prompt tokens a
    step, the first 128-token prompt takes 8 steps to its first token, the same prompt again 1."""
    from kimitui.hosts.sim.prefix_cache import PrefixCache, block_hashes

    model = BatchingModel(base_s=1e-4, per_seq_s=0.0, max_batch=4, prefill_tps=1e9, prefill_chunk=16)
    cache = PrefixCache(capacity_blocks=64)
    sched = DecodeScheduler(model, prefix_cache=cache)
    hashes = block_hashes(list(range(128)))
    sched.start()
    try:
        steps = []
        for _ in range(2):
            start = sched.steps
            seq = sched.submit(3, 128, hashes)
            for _ in range(3):
                await asyncio.wait_for(seq.queue.get(), 10)
            steps.append((sched.steps - start, seq.cached_tokens))
    finally:
        await sched.stop()
    assert steps == [(8 + 2, 0), (1 + 2, 112)]
    assert (cache.queries, cache.hits) == (256, 112)
    assert not cache.reset(requests_holding_blocks=1) and cache.cached_blocks == 8
    assert cache.reset(requests_holding_blocks=0) and cache.cached_blocks == 0


def test_the_deprecated_counters_are_read_and_the_new_ones_preferred() -> None:
    gauges = 'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
    new = 'vllm:prefix_cache_queries_total{engine="0"} 100.0\nvllm:prefix_cache_hits_total{engine="0"} 40.0\n'
    old = 'vllm:gpu_prefix_cache_queries_total{engine="0"} 7.0\nvllm:gpu_prefix_cache_hits_total{engine="0"} 1.0\n'
    two_engines = new + new.replace('engine="0"', 'engine="1"')
    assert parse_snapshot(gauges + old + new).prefix_cache == (100.0, 40.0)
    assert parse_snapshot(gauges + old).prefix_cache == (7.0, 1.0)
    assert parse_snapshot(gauges + two_engines).prefix_cache == (200.0, 80.0)
    assert parse_snapshot(gauges).prefix_cache is None


# --- the command line, its run file and the report ----------------------------------------------------

@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The simulated server in a process of its own, not in dev mode."""
    port_file = tmp_path_factory.mktemp("sim") / "port"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_SERVER_DEV_MODE"}
    proc = subprocess.Popen([sys.executable, "-m", "kimitui.hosts.sim.openai_server", "--port-file", str(port_file),
                             "--single-stream-tps", "2000", "--plateau-tps", "16000", "--plateau-batch", "16"],
                            stdout=subprocess.DEVNULL, env=env)
    try:
        wait_until(lambda: port_file.exists() or proc.poll() is not None, "the simulated server's port file")
        assert proc.poll() is None
        yield f"http://127.0.0.1:{int(port_file.read_text())}"
    finally:
        proc.terminate()
        proc.wait(10)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kimitui")
    add_parser(parser.add_subparsers(dest="command"))
    return cmd_bench(parser.parse_args(["bench", "macro", *argv]))


def test_the_command_line_reports_the_hit_rate_warns_and_records_it(
        sim_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    data_home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home))
    args = ["--url", sim_url, "--concurrency", "2", "--requests", "4", "--max-tokens", "4"]
    assert _run([*args, "--seed", "5"]) == 0
    first = capsys.readouterr()
    assert "prefix cache 0%" in first.out and WARM not in first.err
    assert _run([*args, "--seed", "5", "--reset-prefix-cache"]) == 0
    again = capsys.readouterr()
    assert "prefix cache 88%" in again.out
    assert [line for line in again.err.splitlines() if WARM in line] == [
        f"warning: concurrency 2: {WARM} 88% of the prompt tokens (448 of 512): TTFT was measured on a warm cache "
        "(prompts an earlier run or level sent; --reset-prefix-cache drops the cache before each level where "
        "the server offers it)"]
    assert len([line for line in again.err.splitlines() if "does not offer POST /reset_prefix_cache" in line]) == 1
    assert _run(args) == 0  # no seed given: new prompts
    assert "prefix cache 0%" in capsys.readouterr().out
    runs = sorted((data_home / "kimitui" / "runs").glob("*.jsonl*"))
    assert len(runs) == 3
    warm_run = [list(RunReader(p).events()) for p in runs if any(
        isinstance(e, LogLine) and WARM in e.message for e in RunReader(p).events())]
    assert len(warm_run) == 1
    report = "\n".join(macro_section(fold_all(warm_run[0])))
    assert "| prefix cache hit |" in report and "| 87.5% |" in report
    assert f"- concurrency 2: {WARM} 88% of the prompt tokens (448 of 512)" in report
