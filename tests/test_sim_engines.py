"""The simulated server behaves like the engines operators run: vLLM's Prometheus histograms (names,
labels, buckets) observed from the requests it served, and the quirks of other engines (strict fields,
a role chunk first, no [DONE], EOS, a late port, SGLang's names, the tokenize forms), over real HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from kimitui.bench.macro import MacroConfig, run_sweep
from kimitui.bench.macro.lengths import TokenizeCounter, calibrate, prompt_text
from kimitui.core.events import Event, LogLine
from kimitui.hosts.sim import SimHost
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.metrics import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from kimitui.hosts.sim.openai_server import SimOpenAIServer
from kimitui.hosts.sim.quirks import EngineQuirks, QuirkError
from tests.waiting import DEADLINE_S, until

FAST = BatchingModel.from_targets(single_stream_tps=1000, plateau_tps=16_000, plateau_batch=32, prefill_tps=1e6)
MODEL = "moonshotai/Kimi-K2.5"


def families(text: str) -> dict[str, tuple[str, list[Sample]]]:
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(text)}


def sample(samples: Iterable[Sample], suffix: str, name: str) -> float:
    (value,) = [s.value for s in samples if s.name == name + suffix]
    return value


def buckets(samples: Iterable[Sample], name: str) -> list[float]:
    return [float(s.labels["le"]) for s in samples if s.name == name + "_bucket"]


def sse_events(text: str) -> list[str]:
    return [block[len("data: "):] for block in text.split("\n\n") if block.strip()]


async def _timed_stream(c: httpx.AsyncClient, max_tokens: int) -> tuple[float, float, int]:
    """(client TTFT, client e2e, prompt tokens) of one streamed completion, on the client's clock."""
    start = time.perf_counter()
    first = 0.0
    prompt_tokens = -1
    async with c.stream("POST", "/v1/completions", json={
            "prompt": "the quick brown fox", "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk["choices"] and not first:
                    first = time.perf_counter() - start
                if chunk.get("usage"):
                    prompt_tokens = chunk["usage"]["prompt_tokens"]
    return first, time.perf_counter() - start, prompt_tokens


async def test_vllm_histograms_names_labels_buckets_and_what_was_served() -> None:
    # two slots, four requests: two of them wait for a slot for at least the others' whole decode
    model = BatchingModel.from_targets(single_stream_tps=500, plateau_tps=800, plateau_batch=2, prefill_tps=1e6)
    n, tokens = 4, 6
    async with SimOpenAIServer(batching=model) as srv, httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        timed = await asyncio.gather(*(_timed_stream(c, tokens) for _ in range(n)))
        text = (await c.get("/metrics")).text
    fams = families(text)
    labels = {"model_name": MODEL, "engine": "0"}
    for name, kind in (("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                       ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:num_preemptions", "counter"),
                       ("vllm:time_to_first_token_seconds", "histogram"),
                       ("vllm:inter_token_latency_seconds", "histogram"),
                       ("vllm:e2e_request_latency_seconds", "histogram"),
                       ("vllm:request_queue_time_seconds", "histogram")):
        assert fams[name][0] == kind and fams[name][1], name
        assert all({k: v for k, v in s.labels.items() if k != "le"} == labels for s in fams[name][1]), name
    assert "vllm:time_per_output_token_seconds" not in fams  # the deprecated name is not served
    assert sample(fams["vllm:num_preemptions"][1], "_total", "vllm:num_preemptions") == 0
    assert sample(fams["vllm:num_requests_running"][1], "", "vllm:num_requests_running") == 0
    assert sample(fams["vllm:kv_cache_usage_perc"][1], "", "vllm:kv_cache_usage_perc") == 0
    for name, bounds in (("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
                         ("vllm:inter_token_latency_seconds", ITL_BUCKETS),
                         ("vllm:e2e_request_latency_seconds", REQUEST_LATENCY_BUCKETS),
                         ("vllm:request_queue_time_seconds", REQUEST_LATENCY_BUCKETS)):
        assert buckets(fams[name][1], name) == [*bounds, float("inf")]
    assert TTFT_BUCKETS[:3] == (0.001, 0.005, 0.01) and len(TTFT_BUCKETS) == 22 and len(ITL_BUCKETS) == 19
    assert len(REQUEST_LATENCY_BUCKETS) == 21 and REQUEST_LATENCY_BUCKETS[-1] == 7680.0

    def hist(name: str) -> tuple[float, float]:
        s = fams[name][1]
        inf = [x.value for x in s if x.name == name + "_bucket" and x.labels["le"] == "+Inf"]
        count = sample(s, "_count", name)
        assert inf == [count]
        return count, sample(s, "_sum", name)

    ttft_n, ttft_sum = hist("vllm:time_to_first_token_seconds")
    itl_n, itl_sum = hist("vllm:inter_token_latency_seconds")
    e2e_n, e2e_sum = hist("vllm:e2e_request_latency_seconds")
    queue_n, queue_sum = hist("vllm:request_queue_time_seconds")
    assert (ttft_n, itl_n, e2e_n, queue_n) == (n, n * (tokens - 1), n, n)
    # the gaps of a request add up to its last token's time minus its first's
    assert itl_sum == pytest.approx(e2e_sum - ttft_sum, abs=1e-9)
    # the server's intervals lie inside the client's: it sees a request after it is sent, and hands the
    # last token out before the client reads it
    assert 0 < ttft_sum <= sum(t[0] for t in timed) and 0 < e2e_sum <= sum(t[1] for t in timed)
    # the two that waited did so for at least the first two's whole decode (steps never run early)
    assert queue_sum >= 2 * tokens * model.step_time(2)
    assert sample(fams["vllm:generation_tokens"][1], "_total", "vllm:generation_tokens") == n * tokens
    assert sample(fams["vllm:prompt_tokens"][1], "_total", "vllm:prompt_tokens") == sum(t[2] for t in timed)


async def test_gauges_while_a_request_runs_and_a_cancelled_one_is_not_observed() -> None:
    slow = BatchingModel.from_targets(single_stream_tps=20, plateau_tps=40, plateau_batch=2)
    async with SimOpenAIServer(batching=slow) as srv, httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        async with c.stream("POST", "/v1/completions", json={
                "prompt": "one two three", "max_tokens": 10_000, "stream": True, "ignore_eos": True}) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: {"):
                    break  # a token came: the request is in the batch, holding its prompt's KV
            fams = families((await c.get("/metrics")).text)
        assert sample(fams["vllm:num_requests_running"][1], "", "vllm:num_requests_running") == 1
        assert sample(fams["vllm:kv_cache_usage_perc"][1], "", "vllm:kv_cache_usage_perc") > 0
        await until(lambda: srv.app.scheduler.in_flight == (0, 0), "the cancelled request to leave the batch")
        fams = families((await c.get("/metrics")).text)
    assert sample(fams["vllm:e2e_request_latency_seconds"][1], "_count", "vllm:e2e_request_latency_seconds") == 0


async def test_sglang_names_and_no_metrics() -> None:
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse("metrics=sglang")) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        await _timed_stream(c, 3)
        fams = families((await c.get("/metrics")).text)
    assert not [name for name in fams if name.startswith("vllm:")]
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"):
        assert fams[name][0] == "gauge" and fams[name][1][0].labels == {"model_name": MODEL}
    for name in ("sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                 "sglang:e2e_request_latency_seconds"):
        assert fams[name][0] == "histogram" and sample(fams[name][1], "_count", name) in (1, 2)
    assert sample(fams["sglang:inter_token_latency_seconds"][1], "_count", "sglang:inter_token_latency_seconds") == 2
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse("metrics=none")) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        assert (await c.get("/metrics")).status_code == 404


async def test_strict_fields_answer_422_like_transformers_serve() -> None:
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse("strict_fields")) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        r = await c.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "ignore_eos": True})
        assert r.status_code == 422
        assert r.json() == {"detail": "Unexpected fields in the request: {'ignore_eos'}"}
        r = await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "stream": True,
                                                  "stream_options": {"include_usage": True}})
        assert r.status_code == 200 and sse_events(r.text)[-1] == "[DONE]"
        assert srv.app.generation_requests == 1
    async with SimOpenAIServer(batching=FAST) as srv, httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        r = await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "ignore_eos": True,
                                                  "min_tokens": 1})
        assert r.status_code == 200  # vLLM itself takes its own fields


async def test_role_chunk_comes_ahead_of_the_first_token() -> None:
    # a step takes 1000 s: a chunk read within the deadline cannot carry a token
    glacial = BatchingModel.from_targets(single_stream_tps=0.001, plateau_tps=0.002, plateau_batch=2)
    async with SimOpenAIServer(batching=glacial, quirks=EngineQuirks.parse("role_first")) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        async with c.stream("POST", "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}) as resp:
            lines = resp.aiter_lines()

            async def first_event() -> str:
                async for line in lines:
                    if line.startswith("data: "):
                        return line[6:]
                return ""

            first = json.loads(await asyncio.wait_for(first_event(), DEADLINE_S))
        assert first["choices"][0]["delta"] == {"role": "assistant"}
        assert srv.app.scheduler.steps == 0


async def test_role_first_then_tokens_without_a_role() -> None:
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse("role_first")) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        r = await c.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True})
    chunks = [json.loads(e) for e in sse_events(r.text)[:-1]]
    deltas = [ch["choices"][0]["delta"] for ch in chunks]
    assert deltas[0] == {"role": "assistant"} and len(deltas) == 6
    assert all(set(d) == {"content"} and d["content"].strip() for d in deltas[1:])


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_no_done_ends_with_a_content_free_chunk(path: str) -> None:
    body = {"prompt": "hi"} if "chat" not in path else {"messages": [{"role": "user", "content": "hi"}]}
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse("no_done")) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        r = await c.post(path, json={**body, "max_tokens": 4, "stream": True,
                                     "stream_options": {"include_usage": True}})
        bare = await c.post(path, json={**body, "max_tokens": 2, "stream": True})
    events = sse_events(r.text)
    assert "[DONE]" not in events
    chunks = [json.loads(e) for e in events]
    last = chunks[-1]
    (choice,) = last["choices"]
    assert choice["finish_reason"] == "length" and choice.get("text", "") == "" and choice.get("delta", {}) == {}
    assert last["usage"]["completion_tokens"] == 4
    tokens = [ch["choices"][0] for ch in chunks[:-1] if (ch["choices"][0].get("text")
                                                         or ch["choices"][0].get("delta", {}).get("content"))]
    assert len(tokens) == 4 and all(t["finish_reason"] is None for t in tokens)
    bare_chunks = [json.loads(e) for e in sse_events(bare.text)]
    assert "usage" not in bare_chunks[-1] and bare_chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_eos_stops_early_unless_ignore_eos() -> None:
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse("eos=3")) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        plain = (await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 10})).json()
        kept = (await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 10, "ignore_eos": True})).json()
        short = (await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})).json()
        streamed = await c.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "stream": True,
            "stream_options": {"include_usage": True}})
    assert plain["usage"]["completion_tokens"] == 3 and plain["choices"][0]["finish_reason"] == "stop"
    assert len(plain["choices"][0]["text"].split()) == 3
    assert kept["usage"]["completion_tokens"] == 10 and kept["choices"][0]["finish_reason"] == "length"
    assert short["usage"]["completion_tokens"] == 2 and short["choices"][0]["finish_reason"] == "length"
    chunks = [json.loads(e) for e in sse_events(streamed.text)[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] == 3
    assert [ch["choices"][0]["finish_reason"] for ch in chunks[:-1] if ch["choices"]][-1] == "stop"


async def test_nothing_listens_while_loading() -> None:
    srv = SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse("listen_delay=0.3"))
    await srv.start()
    try:
        # a blocking connect: the event loop cannot open the port while it runs
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((srv.host, srv.port), timeout=5).close()
        assert not srv.listening.is_set()
        await asyncio.wait_for(srv.listening.wait(), DEADLINE_S)
        async with httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
            assert (await c.get("/health")).status_code == 200
    finally:
        await srv.close()


def test_quirk_specs_parse_and_round_trip() -> None:
    q = EngineQuirks.parse("transformers, eos=7,listen_delay=1.5,cold=3")
    assert (q.strict_fields, q.role_first, q.no_done, q.metrics, q.tokenize) == (True, True, True, "none", "none")
    assert (q.eos_after, q.listen_delay_s, q.cold_requests) == (7, 1.5, 3)
    assert EngineQuirks.parse(q.spec()) == q and EngineQuirks.parse("") == EngineQuirks()
    assert EngineQuirks.parse("metrics=sglang,tokenize=llamacpp").spec() == "metrics=sglang,tokenize=llamacpp"
    for bad, says in (("eos=0", "eos="), ("fast", "unknown quirk 'fast'"), ("metrics=tgi", "metrics=tgi"),
                      ("listen_delay=-1", "listen_delay"), ("cold=0", "cold="), ("cold=x", "cold=")):
        with pytest.raises(QuirkError, match=says):
            EngineQuirks.parse(bad)


def test_a_cold_engines_first_requests_are_marked_cold() -> None:
    """``cold=N``: the first N requests submitted after the start are cold (each step while one of them is in
    the batch takes ``COLD_FACTOR`` times: tests/test_campaign.py measures it through a campaign)."""
    from kimitui.hosts.sim.batching import COLD_FACTOR, DecodeScheduler

    sched = DecodeScheduler(FAST, cold_requests=2)
    assert [sched.submit(4).cold for _ in range(4)] == [True, True, False, False] and COLD_FACTOR > 1
    assert not DecodeScheduler(FAST).submit(4).cold


async def test_sim_host_serves_with_its_quirks() -> None:
    quirks = EngineQuirks.parse("strict_fields,metrics=sglang")
    async with SimHost(gpus=1, stuck_workers=0, nvml_monitor=False, load_time=0.05, quirks=quirks) as host, \
            httpx.AsyncClient(base_url=host.api_url, timeout=DEADLINE_S) as c:
        r = await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "ignore_eos": True})
        text = (await c.get("/metrics")).text
    assert r.status_code == 422 and "ignore_eos" in r.json()["detail"]
    assert "sglang:num_running_reqs" in families(text)


# --- tokenize forms ----------------------------------------------------------------------------------------

async def test_each_tokenize_form_is_served_as_its_engine_does() -> None:
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse("tokenize=sglang")) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        assert (await c.post("/tokenize", json={"prompt": "the fox"})).status_code == 404
        answer = (await c.post("/v1/tokenize", json={"prompt": "the fox"})).json()
        assert answer["count"] == len(answer["tokens"]) > 0
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse("tokenize=llamacpp")) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c:
        assert (await c.post("/tokenize", json={"model": MODEL, "prompt": "the fox"})).json() == {"tokens": []}
        plain = (await c.post("/tokenize", json={"content": "the fox"})).json()["tokens"]
        special = (await c.post("/tokenize", json={"content": "the fox", "add_special": True})).json()["tokens"]
        assert len(special) == len(plain) + 1


@pytest.mark.parametrize(("form", "via"), [("vllm", "POST /tokenize"), ("sglang", "POST /v1/tokenize"),
                                           ("llamacpp", "POST /tokenize (llama.cpp's form)")])
async def test_sweep_lengths_exact_through_every_tokenize_form(form: str, via: str) -> None:
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse(f"tokenize={form}")) as srv:
        async with httpx.AsyncClient(timeout=DEADLINE_S) as c:
            counter = TokenizeCounter(c, srv.url, MODEL, chat=False)
            cal = await calibrate(counter, 100)
        assert counter.form is not None and counter.form.name == form and cal.method == "tokenize"
        cfg = MacroConfig(url=srv.url, endpoint="completions", concurrency=[2], requests=4, input_len=100,
                          max_tokens=2, warmup=0)
        events: list[Event] = []
        result = await run_sweep(cfg, events.append)
        tokenized = srv.app.tokenize_requests
    assert result.lengths is not None and result.lengths.method == "tokenize" and tokenized > 0
    assert [r.input_tokens for r in result.levels[0].records] == [100] * 4
    said = [e.message for e in events if isinstance(e, LogLine)]
    assert any(m.startswith(f"input lengths exact, counted by the server ({via})") for m in said), said
    assert len(prompt_text(["of"] * cal.words_for(100)).split()) == cal.words_for(100) + 1


@pytest.mark.parametrize("spec", ["tokenize=sglang", "tokenize=none"])
async def test_chat_without_a_template_counting_tokenize_calibrates_from_usage(spec: str) -> None:
    async with SimOpenAIServer(batching=FAST, quirks=EngineQuirks.parse(spec)) as srv:
        cfg = MacroConfig(url=srv.url, endpoint="chat", concurrency=[2], requests=4, input_len=80,  # type: ignore[arg-type]
                          max_tokens=2, warmup=0)
        result = await run_sweep(cfg, lambda e: None)
        tokenized = srv.app.tokenize_requests
    assert result.lengths is not None and result.lengths.method == "usage" and tokenized == 0
    assert [r.input_tokens for r in result.levels[0].records] == [80] * 4
