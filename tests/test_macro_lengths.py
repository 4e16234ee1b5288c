"""Exact prompt lengths (bench/macro/lengths.py): through /tokenize on the simulated vLLM server, through
usage on a server without /tokenize, spreads, the fallback when the server cannot count, and the
calibration's word selection."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from kimitui.bench.macro import MacroConfig, run_sweep
from kimitui.bench.macro.lengths import CANDIDATES, MIN_WORDS, CountError, calibrate, prompt_text
from kimitui.core.events import Event, LogLine
from kimitui.hosts.sim import toy_tokenizer
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.openai_server import SimOpenAIServer
from tests.faulty_server import Behavior, FaultyServer, count_prompt

FAST = BatchingModel.from_targets(single_stream_tps=2000, plateau_tps=32000, plateau_batch=32, prefill_tps=1e6)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
async def test_sim_tokenize_gives_every_prompt_its_exact_length(endpoint: str) -> None:
    async with SimOpenAIServer(batching=FAST) as srv:
        cfg = MacroConfig(url=srv.url, endpoint=endpoint, concurrency=[1, 4], requests=8, input_len=100,  # type: ignore[arg-type]
                          max_tokens=4, warmup=1)
        events: list[Event] = []
        result = await run_sweep(cfg, events.append)
        generated = srv.app.generation_requests
        tokenized = srv.app.tokenize_requests
    cal = result.lengths
    assert cal is not None and cal.method == "tokenize" and cal.exact
    # the sim's toy tokenizer makes about a quarter of the candidates 2 tokens: only the others are used
    assert all(toy_tokenizer.count_text(w) == 1 for w in cal.words) and len(cal.words) >= MIN_WORDS
    assert toy_tokenizer.count_text(" ".join(CANDIDATES)) > len(CANDIDATES)
    # counting cost no generation request (the one before the levels is the request-field check)
    assert tokenized == cal.counts and generated == 1 + 2 * (1 + 8)
    for level in result.levels:
        assert [r.input_tokens for r in level.records] == [100] * 8
        assert all(r.input_from_usage and r.target_input == 100 for r in level.records)
        m = level.metrics
        assert m["mean_input_tokens"] == 100 and m["std_input_tokens"] == 0 and m["requested_input_len"] == 100
        assert m["input_len_method"] == "tokenize" and m["input_tokens_source"] == "usage"
    said = [e.message for e in events if isinstance(e, LogLine)]
    assert any(msg.startswith("input lengths exact, counted by the server (POST /tokenize)") for msg in said)


async def test_usage_calibration_without_tokenize_is_exact_too() -> None:
    """The second server has no /tokenize and another tokenizer (2 characters a token, 2 special tokens):
    the calibration goes through usage.prompt_tokens and still hits the length exactly."""
    async with FaultyServer(Behavior(n_tokens=3)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[2], requests=10, input_len=333, max_tokens=3, warmup=0)
        result = await run_sweep(cfg, lambda e: None)
        bodies = srv.stats.bodies[1:]  # after the request-field check (bench.macro.fields)
    cal = result.lengths
    assert cal is not None and cal.method == "usage"
    assert all(len(w) <= 2 for w in cal.words)  # this tokenizer's one-token words
    assert cal.overhead == 2 + 2  # its special tokens and the anchor ("The": 2 tokens here)
    assert len(bodies) == cal.counts + 10 and all(b["max_tokens"] == 1 for b in bodies[:cal.counts])
    assert [count_prompt(b, chat=False) for b in bodies[cal.counts:]] == [333] * 10
    m = result.levels[0].metrics
    assert m["mean_input_tokens"] == 333 and m["input_len_method"] == "usage"


async def test_length_spreads_are_drawn_per_request_and_each_is_hit() -> None:
    async with SimOpenAIServer(batching=FAST) as srv:
        cfg = MacroConfig(url=srv.url, concurrency=[8], requests=64, input_len=128, input_len_stddev=16,
                          max_tokens=32, max_tokens_stddev=8, warmup=0, seed=5)
        result = await run_sweep(cfg, lambda e: None)
    level = result.levels[0]
    targets = [r.target_input for r in level.records]
    assert [r.input_tokens for r in level.records] == targets  # each one exact
    assert [r.output_tokens for r in level.records] == [r.max_tokens for r in level.records]
    assert len(set(targets)) > 10 and len({r.max_tokens for r in level.records}) > 5
    assert statistics.mean(targets) == pytest.approx(128, abs=16 * 3 / 8)  # 3 standard errors of 64 draws
    assert 16 * 0.6 < statistics.pstdev(targets) < 16 * 1.4
    m = level.metrics
    assert m["mean_input_tokens"] == pytest.approx(statistics.mean(targets))
    assert m["std_input_tokens"] == pytest.approx(statistics.pstdev(targets))
    assert m["requested_input_len"] == pytest.approx(statistics.mean(targets))
    assert m["requested_input_len_stddev"] == 16 and m["requested_output_len_stddev"] == 8
    assert m["mean_output_tokens"] == pytest.approx(statistics.mean(r.max_tokens for r in level.records))
    # the same seed draws the same lengths
    async with SimOpenAIServer(batching=FAST) as srv:
        cfg.url = srv.url
        again = await run_sweep(cfg, lambda e: None)
    assert [r.target_input for r in again.levels[0].records] == targets


async def test_a_server_that_cannot_count_falls_back_to_estimates_and_says_so() -> None:
    # usage.prompt_tokens is always 7: the counts do not follow the prompt
    async with FaultyServer(Behavior(n_tokens=2, prompt_tokens=7)) as srv:
        events: list[Event] = []
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1], requests=2, input_len=50, max_tokens=2, warmup=0)
        result = await run_sweep(cfg, events.append)
    assert result.lengths is not None and result.lengths.method == "estimated"
    m = result.levels[0].metrics
    assert m["completed"] == 2 and m["input_len_method"] == "estimated" and m["mean_input_tokens"] == 7
    warned = [e.message for e in events if isinstance(e, LogLine) and e.level == "warning"]
    assert any(w.startswith("input lengths estimated") and "do not follow the prompt" in w for w in warned)


class _Counter:
    """A tokenizer as a counter (no server): ``cost(word)`` tokens per word, ``special`` more per prompt."""

    method = "tokenize"

    def __init__(self, cost: dict[str, int], special: int = 1) -> None:
        self.cost, self.special, self.calls = cost, special, 0

    async def count(self, text: str) -> int:
        self.calls += 1
        return self.special + sum(self.cost.get(w, 1) for w in text.split())


async def test_calibration_finds_the_one_token_words_by_groups() -> None:
    # every three-letter candidate is two tokens: the groups holding only two-letter words pass
    costs = {w: len(w) - 1 for w in CANDIDATES}
    counter = _Counter(costs, special=3)
    cal = await calibrate(counter, check_target=64)
    assert cal.exact and set(cal.words) == {w for w in CANDIDATES if len(w) == 2}
    assert cal.overhead == 3 + 1  # special tokens and the anchor
    assert counter.calls == cal.counts < len(CANDIDATES)
    words = cal.words_for(64)
    assert await counter.count(prompt_text([cal.words[0]] * words)) == 64


async def test_calibration_singles_and_the_check_prompt_correction() -> None:
    # one bad word in each group of 8: no group passes, single words are tested until there are enough
    costs = {w: (2 if i % 8 == 0 else 1) for i, w in enumerate(CANDIDATES)}
    cal = await calibrate(_Counter(costs), check_target=32)
    assert cal.exact and len(cal.words) >= MIN_WORDS and all(costs[w] == 1 for w in cal.words)

    class Quirky(_Counter):  # a template that adds a token to long prompts: the check corrects the overhead
        async def count(self, text: str) -> int:
            n = await super().count(text)
            return n + (1 if len(text.split()) > 40 else 0)

    cal = await calibrate(Quirky({}), check_target=100)
    assert cal.overhead == 3 and "corrected" in cal.note


async def test_calibration_gives_up_on_a_tokenizer_with_few_one_token_words() -> None:
    cal = await calibrate(_Counter({w: 2 for w in CANDIDATES}), check_target=32)
    assert cal.method == "estimated" and cal.tokens_per_word == 2.0

    class Broken:
        method = "usage"

        async def count(self, text: str) -> int:
            raise CountError("HTTP 500")

    with pytest.raises(CountError):
        await calibrate(Broken(), check_target=32)


def test_the_toy_tokenizers_disagree_with_word_counts() -> None:
    """Why the calibration exists: neither test server counts one token per word."""
    text = " ".join(CANDIDATES)
    assert toy_tokenizer.count_text(text) != len(CANDIDATES)
    assert count_prompt({"prompt": text}, chat=False) != len(CANDIDATES)
    assert asyncio.run(_Counter({}).count(text)) == len(CANDIDATES) + 1


async def test_ttft_follows_the_prompt_length_on_the_sim() -> None:
    """Why lengths matter: the simulated server prefills what its tokenizer counts (8,000 tok/s here)."""
    model = BatchingModel.from_targets(single_stream_tps=1000, plateau_tps=16000, plateau_batch=16, prefill_tps=8000)
    ttft = {}
    async with SimOpenAIServer(batching=model) as srv:
        for n in (16, 2048):
            cfg = MacroConfig(url=srv.url, concurrency=[1], requests=3, input_len=n, max_tokens=2, warmup=0)
            m = (await run_sweep(cfg, lambda e: None)).levels[0].metrics
            assert m["mean_input_tokens"] == n
            ttft[n] = m["mean_ttft_ms"]
    # never sooner than one step plus the prefill of the 2,048 tokens the server counted (causal: the model
    # says 3 ms for the 16-token prompt against 257 ms; how close a run comes is the machine's)
    assert ttft[16] >= (model.step_time(1) + model.prefill_time(16)) * 1000
    assert ttft[2048] >= (model.step_time(1) + model.prefill_time(2048)) * 1000
