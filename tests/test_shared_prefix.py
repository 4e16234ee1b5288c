"""Issue 38 item 4 (its first half): ``--prefix-len N --num-prefixes K`` starts every synthetic prompt with one of
K shared prefixes of N tokens, before its own ``--input-len`` tokens (vLLM's ``--random-prefix-len``), so a sweep
measures the server's prefix cache on purpose: the level's hit rate from the server's own counters, the input
length exact, and no warning of a warm cache (that is the point); without it no two prompts share a prefix."""

from __future__ import annotations

import pytest

from kimitui.bench.macro import ConfigError, MacroConfig, run_sweep
from kimitui.core.events import Event, LevelResult, LogLine
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.openai_server import SimOpenAIServer

FAST = BatchingModel.from_targets(single_stream_tps=2000, plateau_tps=16000, plateau_batch=16, prefill_tps=1e6)


async def _level(prefix_len: int, num_prefixes: int = 1) -> tuple[LevelResult, list[Event]]:
    events: list[Event] = []
    async with SimOpenAIServer(batching=FAST) as srv:
        cfg = MacroConfig(url=srv.url, concurrency=[2], requests=16, max_tokens=4, warmup=1,
                          input_len=320 - prefix_len, prefix_len=prefix_len, num_prefixes=num_prefixes,
                          scrape_s=0.05)
        result = await run_sweep(cfg, events.append)
    return result.levels[0].result, events


async def test_shared_prefixes_are_found_in_the_servers_cache() -> None:
    shared, events = await _level(256, num_prefixes=2)
    alone, _ = await _level(0)
    for r in (shared, alone):  # the same prompt length either way, exact through /tokenize
        assert (r.completed, r.figure("mean_input_tokens"), r.figure("std_input_tokens")) == (16, 320.0, 0.0)
    rate, rate_alone = shared.figure("prefix_cache_hit_rate"), alone.figure("prefix_cache_hit_rate")
    assert rate is not None and rate_alone is not None
    # 256 of 320 tokens shared (the warm-up sent both prefixes' blocks first): most of every prompt is a hit
    assert rate >= 0.6 and rate_alone < 0.1, (rate, rate_alone)
    assert (shared.count("shared_prefix_len"), shared.count("num_prefixes")) == (256, 2)
    assert not any(isinstance(e, LogLine) and "prefix cache" in e.message for e in events)


def test_a_shared_prefix_is_checked() -> None:
    with pytest.raises(ConfigError, match="--prefix-len 0 or more"):
        MacroConfig(url="http://x", prefix_len=-1).validate()
    with pytest.raises(ConfigError, match="--num-prefixes 1 or more"):
        MacroConfig(url="http://x", prefix_len=16, num_prefixes=0).validate()
