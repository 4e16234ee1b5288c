"""Issue 38 item 4 (its second half): ``--turns T`` holds multi-turn conversations on the chat endpoint: each slot
sends a conversation's turns one after the other, each with the whole history (the answers it got included) and
a new user message; every turn is a measured request, the server's prefix cache finds the history, and the level
reports the first turn's TTFT beside the later ones'."""

from __future__ import annotations

import pytest

from kimitui.bench.macro import ConfigError, MacroConfig, run_sweep
from kimitui.core.events import Event, MacroRequests
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.openai_server import SimOpenAIServer

FAST = BatchingModel.from_targets(single_stream_tps=2000, plateau_tps=16000, plateau_batch=16, prefill_tps=1e6)


async def test_each_turn_carries_the_conversation_so_far() -> None:
    events: list[Event] = []
    async with SimOpenAIServer(batching=FAST) as srv:
        cfg = MacroConfig(url=srv.url, endpoint="chat", concurrency=[2], requests=12, max_tokens=8, warmup=0,
                          input_len=64, turns=3, scrape_s=0.05)
        result = await run_sweep(cfg, events.append)
    m = result.levels[0].metrics
    records = [r for e in events if isinstance(e, MacroRequests) for r in e.records()]
    assert m["completed"] == 12 and m["failed"] == 0 and m["turns"] == 3
    by_turn = {t: [r.input_tokens for r in records if r.turn == t] for t in (1, 2, 3)}
    assert all(by_turn.values()) and sum(map(len, by_turn.values())) == 12
    # each turn's prompt is the last one's, its 8-token answer and a new 64-token message (server-counted)
    assert max(by_turn[1]) < min(by_turn[2]) and max(by_turn[2]) < min(by_turn[3])
    assert min(by_turn[2]) >= 2 * 64 + 8
    assert m["mean_ttft_first_turn_ms"] > 0 and m["mean_ttft_later_turns_ms"] > 0
    assert m["prefix_cache_hit_rate"] > 0.3  # the history is found in the server's cache
    assert "requested_input_len" in m and not any("averaged" in w for w in m["client_warnings"])


def test_turns_need_the_chat_endpoint_and_closed_loop_levels() -> None:
    with pytest.raises(ConfigError, match="conversations"):
        MacroConfig(url="http://x", turns=3).validate()  # completions
    with pytest.raises(ConfigError, match="conversations"):
        MacroConfig(url="http://x", endpoint="chat", turns=3, request_rate=4.0).validate()
    with pytest.raises(ConfigError, match="1 or more"):
        MacroConfig(url="http://x", endpoint="chat", turns=0).validate()
