"""The simulated OpenAI-compatible server over real HTTP (in this process; no GPU holders)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.openai_server import FaultPlan, SimOpenAIServer
from tests.waiting import DEADLINE_S, until

FAST = BatchingModel.from_targets(single_stream_tps=1000, plateau_tps=16_000, plateau_batch=32)
MODEL = "moonshotai/Kimi-K2.5"


@pytest_asyncio.fixture
async def server() -> AsyncIterator[SimOpenAIServer]:
    async with SimOpenAIServer(batching=FAST) as srv:
        yield srv


@pytest_asyncio.fixture
async def client(server: SimOpenAIServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=DEADLINE_S,
                                 limits=httpx.Limits(max_connections=300)) as c:
        yield c


def sse_events(text: str) -> list[str]:
    events = [block for block in text.split("\n\n") if block.strip()]
    assert all(e.startswith("data: ") for e in events), events
    return [e[len("data: "):] for e in events]


async def test_models_and_health(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/models")
    assert r.status_code == 200
    data = r.json()["data"]
    assert [m["id"] for m in data] == [MODEL] and data[0]["object"] == "model"
    assert (await client.get("/health")).status_code == 200


async def test_streamed_completion_with_usage(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/completions", json={
        "model": MODEL, "prompt": "one two three four five", "max_tokens": 7, "stream": True,
        "stream_options": {"include_usage": True}, "ignore_eos": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    tokens = [c for c in chunks if c["choices"]]
    assert len(tokens) == 7
    assert all(c["object"] == "text_completion" and c["model"] == MODEL for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 6 + ["length"]
    text = "".join(c["choices"][0]["text"] for c in tokens)
    assert len(text.split()) == 7
    usage = chunks[-1]
    assert usage["choices"] == []
    # the toy tokenizer: BOS, then a token per 4 characters of each word ("three" is two), "rare" slices
    # two ("one" here)
    assert usage["usage"] == {"prompt_tokens": 8, "completion_tokens": 7, "total_tokens": 15}
    assert len({c["id"] for c in chunks}) == 1


async def test_stream_without_include_usage_has_no_usage_chunk(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 3, "stream": True})
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    assert all(json.loads(e)["choices"] for e in events[:-1]) and len(events) == 4


async def test_chat_stream_and_plain(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}
    r = await client.post("/v1/chat/completions", json={**body, "stream": True,
                                                         "stream_options": {"include_usage": True}})
    chunks = [json.loads(e) for e in sse_events(r.text)[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c["choices"][0]["delta"]["content"] for c in chunks[1:] if c["choices"]]
    assert len(content) == 4 and all(c.strip() for c in content)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["usage"]["completion_tokens"] == 4
    r = await client.post("/v1/chat/completions", json=body)
    out = r.json()
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert len(out["choices"][0]["message"]["content"].split()) == 4
    assert out["usage"]["completion_tokens"] == 4 and out["usage"]["prompt_tokens"] > 2


@pytest.mark.parametrize("text", ["", "hi", "one two three, four five!", "everything between us\nand 12345678",
                                  " ".join(["which"] * 300)])
async def test_tokenize_agrees_with_usage_and_counts_the_toy_way(client: httpx.AsyncClient, text: str) -> None:
    """POST /tokenize (vLLM's shape) and usage.prompt_tokens count the same, completions and chat alike."""
    tok = (await client.post("/tokenize", json={"model": MODEL, "prompt": text})).json()
    assert set(tok) == {"count", "max_model_len", "tokens", "token_strs"}
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 262_144
    assert tok["tokens"][:1] == [1]  # BOS
    slices = sum(-(-len(p) // 4) for p in re.findall(r"\w+|[^\w\s]", text))  # 4 characters a slice
    assert 1 + slices <= tok["count"] <= 1 + 2 * slices  # a "rare" slice is two tokens
    bare = (await client.post("/tokenize", json={"prompt": text, "add_special_tokens": False})).json()
    assert bare["count"] == tok["count"] - 1
    r = await client.post("/v1/completions", json={"model": MODEL, "prompt": text, "max_tokens": 1})
    assert r.json()["usage"]["prompt_tokens"] == tok["count"]
    messages = [{"role": "system", "content": "be kind"}, {"role": "user", "content": text}]
    chat_tok = (await client.post("/tokenize", json={"model": MODEL, "messages": messages})).json()
    # without BOS, plus "be kind", 3 per message, BOS and the generation prompt
    assert chat_tok["count"] == tok["count"] - 1 + 2 + 3 + 3 + 3
    r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": messages, "max_tokens": 1})
    assert r.json()["usage"]["prompt_tokens"] == chat_tok["count"]


@pytest.mark.parametrize(("body", "status"), [
    (b"not json", 400), (b'{"prompt": 5}', 400), (b'{"prompt": "x", "add_special_tokens": "yes"}', 400),
    (b'{"prompt": "x", "model": "gpt-9"}', 404), (b'{"messages": []}', 400),
])
async def test_tokenize_bad_requests(client: httpx.AsyncClient, body: bytes, status: int) -> None:
    r = await client.post("/tokenize", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status and r.json()["error"]["message"]
    assert (await client.get("/tokenize")).status_code == 405


async def test_plain_completion_default_max_tokens(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/completions", json={"prompt": "hi"})
    out = r.json()
    assert r.status_code == 200 and out["object"] == "text_completion"
    assert out["usage"] == {"prompt_tokens": 3, "completion_tokens": 16, "total_tokens": 19}  # BOS, "h", "i"


@pytest.mark.parametrize(("path", "body", "status"), [
    ("/v1/completions", b"not json", 400),
    ("/v1/completions", b"[1, 2]", 400),
    ("/v1/completions", b'{"max_tokens": 4}', 400),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 0}', 400),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": "many"}', 400),
    ("/v1/completions", b'{"prompt": "x", "stream_options": {"include_usage": true}}', 400),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 300000}', 400),
    ("/v1/completions", b'{"prompt": "x", "model": "gpt-9"}', 404),
    ("/v1/chat/completions", b'{"messages": []}', 400),
    ("/v1/chat/completions", b'{"messages": [{"content": "no role"}]}', 400),
])
async def test_bad_requests(client: httpx.AsyncClient, path: str, body: bytes, status: int) -> None:
    r = await client.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == status and err["message"]


async def test_unknown_path_and_wrong_method(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/nothing")).status_code == 404
    assert (await client.post("/v2/completions", json={})).status_code == 404
    assert (await client.get("/v1/completions")).status_code == 405
    # the connection survives errors (keep-alive): a good request still works after them
    assert (await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})).status_code == 200


async def test_garbage_request_line_gets_400() -> None:
    async with SimOpenAIServer(batching=FAST) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(b"HELLO\r\n\r\n")
        status = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
    assert status.startswith(b"HTTP/1.1 400")


async def test_health_503_until_ready() -> None:
    ready = False
    async with SimOpenAIServer(batching=FAST, ready=lambda: ready) as srv, \
            httpx.AsyncClient(base_url=srv.url) as c:
        assert (await c.get("/health")).status_code == 503
        assert (await c.post("/v1/completions", json={"prompt": "x"})).status_code == 503
        ready = True
        assert (await c.get("/health")).status_code == 200


async def _stream_tokens(c: httpx.AsyncClient, max_tokens: int) -> int:
    async with c.stream("POST", "/v1/completions", json={
            "prompt": "x", "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}) as resp:
        assert resp.status_code == 200
        usage = None
        async for line in resp.aiter_lines():
            if line.startswith("data: {") and '"usage"' in line:
                usage = json.loads(line[6:])["usage"]["completion_tokens"]
    assert usage == max_tokens
    return usage


async def test_throughput_follows_batching_over_http() -> None:
    """16 streams at once are decoded in shared steps (the server's own count of steps and batches), and never
    faster than the model allows; how much faster than one stream is the machine's (benchmarks/timing_figures.py)."""
    # 100 tok/s single stream, 16 streams: 16 / step_time(16), about 1,080 tok/s
    model = BatchingModel.from_targets(single_stream_tps=100, plateau_tps=1600, plateau_batch=32)
    batches: list[int] = []
    async with SimOpenAIServer(batching=model, on_batch=batches.append) as srv, httpx.AsyncClient(
            base_url=srv.url, timeout=DEADLINE_S, limits=httpx.Limits(max_connections=64)) as c:
        await _stream_tokens(c, 2)  # connection warm-up
        t0 = time.perf_counter()
        n = await _stream_tokens(c, 30)
        single = n / (time.perf_counter() - t0)
        steps = srv.app.scheduler.steps
        t0 = time.perf_counter()
        total = sum(await asyncio.gather(*(_stream_tokens(c, 30) for _ in range(16))))
        sixteen = total / (time.perf_counter() - t0)
        steps = srv.app.scheduler.steps - steps
    # batching, not serial decoding: 480 tokens in fewer steps than tokens, several sequences a step
    assert total == 480 and steps < total and max(batches) > 1, (steps, batches)
    # never faster than the model (causal: steps never end early)
    assert single < 1.05 * 100
    assert sixteen < 1.05 * model.throughput(16)


async def test_instant_mode_streams_fast() -> None:
    async with SimOpenAIServer(batching=BatchingModel.instant()) as srv, httpx.AsyncClient(
            base_url=srv.url, timeout=DEADLINE_S, limits=httpx.Limits(max_connections=64)) as c:
        total = sum(await asyncio.gather(*(_stream_tokens(c, 2000) for _ in range(8))))
        # every token handed out at once: no decode step paced any of them (its rate: benchmarks/loadgen.py)
        assert srv.app.scheduler.steps == 0
    assert total == 16_000


async def _fault_response(fault: str, stream: bool = True,
                          timeout: float = DEADLINE_S) -> tuple[int | None, str, str | None]:
    """(status, body text, error class name) for one request carrying the X-Sim-Fault header."""
    async with SimOpenAIServer(batching=FAST) as srv, httpx.AsyncClient(base_url=srv.url, timeout=timeout) as c:
        body = {"prompt": "x", "max_tokens": 8, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        try:
            r = await c.post("/v1/completions", json=body, headers={"X-Sim-Fault": fault})
        except httpx.HTTPError as exc:
            return None, "", type(exc).__name__
        return r.status_code, r.text, None


async def test_fault_injection_per_request() -> None:
    status, _, _ = await _fault_response("http500")
    assert status == 500
    _, _, err = await _fault_response("hang", timeout=0.3)
    assert err == "ReadTimeout"
    _, _, err = await _fault_response("close")
    assert err in ("RemoteProtocolError", "ReadError")
    _, _, err = await _fault_response("stop_midstream")
    assert err in ("RemoteProtocolError", "ReadError")
    status, text, _ = await _fault_response("malformed_sse")
    assert status == 200
    with pytest.raises(json.JSONDecodeError):
        [json.loads(e) for e in sse_events(text)[:-1]]
    status, text, _ = await _fault_response("no_usage")
    events = sse_events(text)
    assert events[-1] == "[DONE]" and all(json.loads(e)["choices"] for e in events[:-1])
    assert len(events) == 9


async def test_fault_plan_every_nth_request() -> None:
    async with SimOpenAIServer(batching=FAST, faults=FaultPlan("http500", every=3)) as srv, \
            httpx.AsyncClient(base_url=srv.url) as c:
        codes = [(await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})).status_code
                 for _ in range(6)]
    assert codes == [200, 200, 500, 200, 200, 500]
    with pytest.raises(ValueError):
        FaultPlan("explode")


async def test_client_leaving_mid_stream_frees_its_batch_slot() -> None:
    slow = BatchingModel.from_targets(single_stream_tps=200, plateau_tps=1600, plateau_batch=8)
    async with SimOpenAIServer(batching=slow) as srv:
        async with httpx.AsyncClient(base_url=srv.url, timeout=DEADLINE_S) as c, c.stream(
                "POST", "/v1/completions", json={"prompt": "x", "max_tokens": 10_000, "stream": True}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    break
            assert srv.app.scheduler.batch == 1
        await until(lambda: srv.app.scheduler.batch == 0, "the abandoned request to leave the batch")


async def test_standalone_instant_server_cli(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import signal
    import subprocess
    import sys

    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "kimitui.hosts.sim.openai_server", "--instant",
                             "--port-file", str(port_file)], stdout=subprocess.DEVNULL)
    try:
        await until(lambda: port_file.exists() or proc.poll() is not None, "the server's port file")
        assert proc.poll() is None
        url = f"http://127.0.0.1:{int(port_file.read_text())}"
        async with httpx.AsyncClient(base_url=url, timeout=DEADLINE_S) as c:
            assert await _stream_tokens(c, 500) == 500
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(asyncio.to_thread(proc.wait), 10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
