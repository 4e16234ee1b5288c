"""Issue 38 item 1: a reasoning model thinks before it answers. TTFT is the first token of either (vLLM's
definition); TTFO, the time to the first output token, is the first token of the answer; the reasoning tokens
per request come from the server's usage where it gives them (``completion_tokens_details.reasoning_tokens``),
else from the chunks of thinking. The simulated Kimi-K2.5 thinks first on the chat endpoint (the ``reasoning=N``
quirk), streamed as vLLM 0.32 does (``delta.reasoning``); older servers' ``reasoning_content`` counts the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimitui.bench.macro import MacroConfig, run_sweep
from kimitui.bench.macro.request import RequestOutcome, StreamAccount
from kimitui.bench.sweep_output import format_level
from kimitui.core.events import Event, LevelResult, MacroPoint, MacroRequests
from kimitui.core.runfile import RunReader, RunWriter
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.openai_server import FaultPlan, SimOpenAIServer
from kimitui.hosts.sim.quirks import EngineQuirks
from kimitui.report.compare import load_runs, macro_compare
from kimitui.report.markdown import render_report

FAST = BatchingModel.from_targets(single_stream_tps=400, plateau_tps=3200, plateau_batch=8, prefill_tps=1e6)
THINK = 8


async def _sweep(endpoint: str, max_tokens: int, faults: FaultPlan | None = None,
                 think: int = THINK) -> tuple[dict[str, object], list[Event]]:
    events: list[Event] = []
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks(reasoning_tokens=think), faults=faults) as srv:
        cfg = MacroConfig(url=srv.url, endpoint=endpoint, concurrency=[2], requests=4, max_tokens=max_tokens,
                          warmup=0)  # type: ignore[arg-type]
        result = await run_sweep(cfg, events.append)
    return result.levels[0].metrics, events


def _records(events: list[Event]) -> list:  # type: ignore[type-arg]
    return [r for e in events if isinstance(e, MacroRequests) for r in e.records()]


async def test_a_thinking_model_has_its_first_output_token_after_its_first_token() -> None:
    m, events = await _sweep("chat", 20)
    r = LevelResult.from_json(2, m)
    assert (r.completed, r.failed, r.count("answered"), r.count("total_reasoning_tokens")) == (4, 0, 4, 4 * THINK)
    assert r.figure("mean_reasoning_tokens") == THINK and r.reasoning
    assert m["total_output_tokens"] == 4 * 20  # thinking counts as output, as the server's usage does
    records = _records(events)
    assert len(records) == 4
    for rec in records:
        # the answer's first token is the ninth token chunk: thinking, then the answer, one token a chunk
        assert rec.reasoning_tokens == THINK and rec.output_ms == rec.chunk_ms[THINK]
        assert rec.ttfo_ms is not None and rec.ttfo_ms > rec.ttft_ms
    assert r.ttfo.mean is not None and r.ttft.mean is not None and r.ttfo.mean > r.ttft.mean
    assert r.ttfo.p(99) is not None and r.itl.mean is not None  # ITL over thinking and answer alike


async def test_without_usage_the_thinking_is_counted_from_the_stream() -> None:
    m, events = await _sweep("chat", 12, FaultPlan("no_usage", every=1))
    r = LevelResult.from_json(2, m)
    assert r.count("usage_missing") == 4 and m["total_output_tokens"] == 4 * 12  # thinking chunks count as output
    assert r.count("total_reasoning_tokens") == 4 * THINK
    assert all(rec.reasoning_tokens == THINK and rec.output_ms == rec.chunk_ms[THINK] for rec in _records(events))


async def test_an_answer_cut_short_while_thinking_has_no_first_output_token() -> None:
    m, events = await _sweep("chat", THINK - 2)
    r = LevelResult.from_json(2, m)
    assert (r.completed, r.count("answered"), r.count("total_reasoning_tokens")) == (4, 0, 4 * (THINK - 2))
    assert all(rec.ttfo_ms is None and rec.output_ms is None for rec in _records(events))


@pytest.mark.parametrize("endpoint,think", [("completions", THINK), ("chat", 0)])
async def test_a_model_that_does_not_think_has_its_ttfo_at_its_ttft(endpoint: str, think: int) -> None:
    m, events = await _sweep(endpoint, 10, think=think)
    r = LevelResult.from_json(2, m)
    assert not r.reasoning and r.count("answered") == 4 and r.figure("mean_reasoning_tokens") == 0
    assert r.ttfo.mean == r.ttft.mean and r.ttfo.p(99) == r.ttft.p(99)
    for rec in _records(events):
        assert rec.output_ms is None and rec.reasoning_tokens == 0 and rec.ttfo_ms == rec.ttft_ms
        assert "output_ms" not in rec.to_json() and "think" not in rec.to_json()  # the record as before


def test_older_servers_reasoning_content_is_thinking_too() -> None:
    out = RequestOutcome(t0=0.0)
    account = StreamAccount(out, chat=True)

    def chunk(delta: dict[str, object]) -> bytes:
        return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode() + b"\n\n"

    account.feed(chunk({"role": "assistant", "content": ""}), 0.5)
    account.feed(chunk({"reasoning_content": "Let"}) + chunk({"reasoning_content": " me"}), 1.0)
    account.feed(chunk({"reasoning": " think"}), 2.0)
    account.feed(chunk({"content": "Yes"}), 3.0)
    account.feed(chunk({"content": "."}) + b"data: [DONE]\n\n", 4.0)
    account.finish()
    assert out.times == [1.0, 1.0, 2.0, 3.0, 4.0] and out.first_output == 3.0
    assert (out.reasoning_chunks, out.output_tokens, out.usage_missing) == (3, 5, True)


def test_ttfo_is_shown_beside_ttft_where_a_level_thought(tmp_path: Path) -> None:
    """The CLI's line, the report's table and compare say TTFO and the thinking where a level thought, and
    nothing more where none did (the runs recorded before read as they did)."""
    thought = {"completed": 4, "failed": 0, "num_prompts": 4, "output_throughput": 300.0, "mean_ttft_ms": 20.0,
               "p99_ttft_ms": 25.0, "mean_ttfo_ms": 60.0, "median_ttfo_ms": 58.0, "p99_ttfo_ms": 70.0,
               "mean_tpot_ms": 5.0, "p99_tpot_ms": 6.0, "answered": 4, "total_reasoning_tokens": 32,
               "mean_reasoning_tokens": 8.0, "percentiles": [99.0], "failures": {}}
    plain = {**thought, "total_reasoning_tokens": 0, "mean_reasoning_tokens": 0.0, "mean_ttfo_ms": 20.0}
    line = format_level(LevelResult.from_json(4, thought))
    assert "TTFO     60.0 ms (p99 70.0, thinking 8 tok)" in line
    assert "TTFO" not in format_level(LevelResult.from_json(4, plain))
    reports = {}
    for name, metrics in (("thought", thought), ("plain", plain)):
        path = tmp_path / f"{name}.jsonl"
        with RunWriter(path, host="node") as w:
            w.append(MacroPoint(1.0, concurrency=4, metrics=metrics))
        reports[name] = path
    report = render_report(RunReader(reports["thought"]))
    head = next(x for x in report.splitlines() if x.startswith("| concurrency |"))
    assert "| TTFT p99 | TTFO mean | TTFO p99 | thinking tok | TPOT mean |" in head
    row = next(x for x in report.splitlines() if x.startswith("| 4 |"))
    assert "| 25.0 | 60.0 | 70.0 | 8 | 5.0 |" in row
    assert "TTFO" not in render_report(RunReader(reports["plain"]))
    compared = "\n".join(macro_compare(load_runs([RunReader(reports["thought"]), RunReader(reports["plain"])])))
    assert "| 4 | TTFO mean | 60.0 | 20.0 |" in compared and "| 4 | TTFO p99 |" in compared


async def test_the_benchmarks_table_shows_ttfo_only_where_a_level_thought() -> None:
    from textual.app import App, ComposeResult

    from kimitui.core.state import SessionState, fold
    from kimitui.tui.views.result_tables import MacroTable

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield MacroTable(id="macro")

    def hidden(table: MacroTable) -> dict[str, bool]:
        return {c.key: c.hidden for c in table.columns if c.key in ("mean_ttfo_ms", "mean_reasoning_tokens")}

    app = One()
    async with app.run_test(size=(140, 20)) as pilot:
        table = app.query_one(MacroTable)
        state = SessionState()
        fold(state, MacroPoint(1.0, concurrency=1, metrics={"completed": 2, "output_throughput": 90.0,
                                                            "mean_ttft_ms": 20.0, "mean_ttfo_ms": 20.0}))
        table.show(state)
        await pilot.pause()
        assert hidden(table) == {"mean_ttfo_ms": True, "mean_reasoning_tokens": True}
        fold(state, MacroPoint(2.0, concurrency=4, metrics={"completed": 4, "output_throughput": 300.0,
                                                            "mean_ttft_ms": 20.0, "mean_ttfo_ms": 61.0,
                                                            "total_reasoning_tokens": 32,
                                                            "mean_reasoning_tokens": 8.0}))
        table.show(state)
        await pilot.pause()
        assert hidden(table) == {"mean_ttfo_ms": False, "mean_reasoning_tokens": False}
        assert table.cell_text("1:4", "mean_ttfo_ms") == "61" and table.cell_text("1:4", "mean_reasoning_tokens") == "8"


def test_the_demos_thinking_is_said_as_the_simulator_has_it() -> None:
    import argparse

    from kimitui.commands.demo_engine import add_engine_options
    from kimitui.hosts.sim.quirks import DEMO_REASONING_TOKENS

    p = argparse.ArgumentParser()
    add_engine_options(p)
    assert f"(default {DEMO_REASONING_TOKENS}; 0: no thinking)" in " ".join(p.format_help().split())
    assert EngineQuirks.parse(f"reasoning={DEMO_REASONING_TOKENS}").reasoning_tokens == DEMO_REASONING_TOKENS
    assert EngineQuirks.parse("reasoning=5").spec() == "reasoning=5"
