"""The simulated vLLM OpenAI-compatible HTTP server: routes, streaming, batching, fault injection.

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streamed SSE or one JSON body),
``GET /v1/models``, ``GET /health`` (503 until ``ready()`` says so), ``POST /tokenize`` (vLLM's, with the
toy tokenizer that also counts ``usage.prompt_tokens`` and the prefill cost), ``GET /metrics`` (vLLM's
Prometheus text: ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` count the requests in
flight now). Unknown paths answer 404, a
known path with the wrong method 405, a bad body 400 with an OpenAI-style error.

Faults, for load-generator tests, are chosen per server (``FaultPlan``: a mode applied to every Nth
generation request) or per request with the ``X-Sim-Fault: MODE`` header:
``http500``, ``hang`` (no answer until the client leaves), ``close`` (connection dropped before any
answer), ``malformed_sse`` (the second chunk is not JSON), ``stop_midstream`` (connection dropped after
half the tokens), ``no_usage`` (no usage chunk even when asked).

Standalone: ``python -m kimitui.hosts.sim.openai_server --port 0 --instant --port-file F`` serves until
SIGTERM / Ctrl-C (the zero-delay server for measuring a client's own ceiling).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from kimitui.hosts.sim.batching import REFERENCE_PREFILL_TPS, BatchingModel, DecodeScheduler
from kimitui.hosts.sim.http11 import HttpServer, Request, Responder
from kimitui.hosts.sim.layout import write_atomic
from kimitui.hosts.sim.openai_protocol import (
    ApiError,
    ChunkWriter,
    GenRequest,
    full_response,
    models_list,
    parse_generation,
    tokenize,
)

DEFAULT_MODEL = "moonshotai/Kimi-K2.5"
DEFAULT_MAX_MODEL_LEN = 262_144
FAULT_MODES = ("none", "http500", "hang", "close", "malformed_sse", "stop_midstream", "no_usage")
FAULT_HEADER = "x-sim-fault"
INSTANT_TOKENS_PER_WRITE = 256
_MALFORMED = b'data: {"id": "broken", "choices": [{"text": \n\n'


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Apply ``mode`` to every ``every``-th generation request (1: all of them)."""

    mode: str = "none"
    every: int = 1

    def __post_init__(self) -> None:
        if self.mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {self.mode!r}; one of {', '.join(FAULT_MODES)}")
        if self.every < 1:
            raise ValueError("fault 'every' must be >= 1")

    def pick(self, nth: int, header: str | None) -> str:
        if header:
            return header if header in FAULT_MODES else "none"
        return self.mode if nth % self.every == 0 else "none"


class OpenAIApp:
    """The request handler. Needs a running event loop for ``start`` (the decode loop)."""

    def __init__(self, *, model: str = DEFAULT_MODEL, batching: BatchingModel | None = None,
                 max_model_len: int = DEFAULT_MAX_MODEL_LEN, faults: FaultPlan | None = None,
                 ready: Callable[[], bool] | None = None,
                 on_batch: Callable[[int], None] | None = None) -> None:
        self.model = model
        self.batching = batching or BatchingModel.from_targets()
        self.max_model_len = max_model_len
        self.faults = faults or FaultPlan()
        self._ready = ready or (lambda: True)
        self.scheduler = DecodeScheduler(self.batching, on_batch=on_batch)
        self.created = int(time.time())
        self.generation_requests = 0
        self.tokenize_requests = 0

    def start(self) -> None:
        self.scheduler.start()

    async def stop(self) -> None:
        await self.scheduler.stop()

    async def handle(self, request: Request, out: Responder) -> None:
        path = request.path.split("?", 1)[0]
        routes = {"/health": "GET", "/v1/models": "GET", "/v1/completions": "POST",
                  "/v1/chat/completions": "POST", "/tokenize": "POST", "/metrics": "GET"}
        if path not in routes:
            await out.send_json(404, {"detail": "Not Found"})
            return
        if request.method != routes[path]:
            await out.send_json(405, {"detail": "Method Not Allowed"})
            return
        if path == "/health":
            await out.send(200 if self._ready() else 503, b"", "text/plain")
        elif path == "/metrics":
            await out.send(200, self.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/v1/models":
            await out.send_json(200, models_list(self.model, self.max_model_len, self.created))
        elif path == "/tokenize":
            try:
                answer = tokenize(request.body, served_model=self.model, max_model_len=self.max_model_len)
            except ApiError as exc:
                await out.send_json(exc.status, exc.body())
                return
            self.tokenize_requests += 1
            await out.send_json(200, answer)
        else:
            await self._generate("completion" if path == "/v1/completions" else "chat", request, out)

    def metrics_text(self) -> str:
        """vLLM's gauges in the Prometheus text format, from the requests really in flight."""
        running, waiting = self.scheduler.in_flight
        labels = f'{{engine="0",model_name="{self.model}"}}'
        return "".join(
            f"# HELP vllm:{name} {help_}\n# TYPE vllm:{name} {kind}\nvllm:{name}{labels} {value}\n"
            for name, kind, help_, value in (
                ("num_requests_running", "gauge", "Number of requests in model execution batches.", float(running)),
                ("num_requests_waiting", "gauge", "Number of requests waiting to be processed.", float(waiting))))

    async def _generate(self, kind: str, request: Request, out: Responder) -> None:
        try:
            if not self._ready():
                raise ApiError(503, "the model is still loading", "ServiceUnavailableError")
            req = parse_generation("completion" if kind == "completion" else "chat", request.body,
                                   served_model=self.model, max_model_len=self.max_model_len)
        except ApiError as exc:
            await out.send_json(exc.status, exc.body())
            return
        self.generation_requests += 1
        fault = self.faults.pick(self.generation_requests, request.headers.get(FAULT_HEADER))
        if fault == "http500":
            await out.send_json(500, ApiError(500, "injected failure", "InternalServerError").body())
            return
        if fault == "close":
            out.abort()
            return
        if fault == "hang":
            while not out.client_gone():
                await asyncio.sleep(0.05)
            return
        if req.stream:
            await self._stream(req, out, fault)
        else:
            await self._complete(req, out, fault)

    async def _tokens(self, req: GenRequest, out: Responder) -> AsyncIterator[list[int]]:
        """Yield lists of token indexes as the decode loop produces them (all at once when instant)."""
        if self.batching.is_instant:
            for start in range(0, req.max_tokens, INSTANT_TOKENS_PER_WRITE):
                yield list(range(start, min(start + INSTANT_TOKENS_PER_WRITE, req.max_tokens)))
            return
        seq = self.scheduler.submit(req.max_tokens, req.prompt_tokens)
        try:
            got = 0
            while got < req.max_tokens:
                batch = [await seq.queue.get()]
                while not seq.queue.empty():
                    batch.append(seq.queue.get_nowait())
                got += len(batch)
                yield batch
                if out.client_gone():
                    return
        finally:
            if not seq.done:
                self.scheduler.cancel(seq)

    async def _stream(self, req: GenRequest, out: Responder, fault: str) -> None:
        chunks = ChunkWriter(req)
        stop_at = req.max_tokens // 2 if fault == "stop_midstream" else -1
        await out.start_stream()
        sent = 0
        async with contextlib.aclosing(self._tokens(req, out)) as tokens:
            sent = await self._write_tokens(tokens, chunks, out, stop_at, fault)
        if sent < req.max_tokens:
            return  # the client left, or the stream was cut on purpose
        tail = [chunks.usage(sent)] if req.include_usage and fault != "no_usage" else []
        out.write(b"".join([*tail, chunks.done()]))
        await out.end()

    @staticmethod
    async def _write_tokens(tokens: AsyncIterator[list[int]], chunks: ChunkWriter, out: Responder,
                            stop_at: int, fault: str) -> int:
        sent = 0
        async for batch in tokens:
            buf = [chunks.role()] if sent == 0 else []
            for index in batch:
                if sent == stop_at:
                    out.write(b"".join(buf))
                    await out.drain()
                    out.abort()
                    return sent
                buf.append(_MALFORMED if fault == "malformed_sse" and sent == 1 else chunks.token(index))
                sent += 1
            out.write(b"".join(buf))
            await out.drain()
        return sent

    async def _complete(self, req: GenRequest, out: Responder, fault: str) -> None:
        got = 0
        async with contextlib.aclosing(self._tokens(req, out)) as tokens:
            async for batch in tokens:
                got += len(batch)
                if fault == "stop_midstream" and got >= req.max_tokens // 2:
                    out.abort()
                    return
        if got < req.max_tokens:
            return
        if fault == "malformed_sse":
            await out.send(200, b'{"id": "broken", "choices": [')
            return
        await out.send_json(200, full_response(req, with_usage=fault != "no_usage"))


class SimOpenAIServer:
    """An ``OpenAIApp`` served over HTTP on loopback: ``async with SimOpenAIServer(...) as server``."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, model: str = DEFAULT_MODEL,
                 batching: BatchingModel | None = None, max_model_len: int = DEFAULT_MAX_MODEL_LEN,
                 faults: FaultPlan | None = None, ready: Callable[[], bool] | None = None,
                 on_batch: Callable[[int], None] | None = None) -> None:
        self.app = OpenAIApp(model=model, batching=batching, max_model_len=max_model_len, faults=faults,
                             ready=ready, on_batch=on_batch)
        self._http = HttpServer(self.app.handle, host, port)
        self.host = host

    @property
    def port(self) -> int:
        return self._http.port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self.app.start()
        await self._http.start()

    async def close(self) -> None:
        await self._http.close()
        await self.app.stop()

    async def __aenter__(self) -> SimOpenAIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def add_batching_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--single-stream-tps", type=float, default=50.0)
    parser.add_argument("--plateau-tps", type=float, default=1536.0)
    parser.add_argument("--plateau-batch", type=int, default=128)
    parser.add_argument("--prefill-tps", type=float, default=REFERENCE_PREFILL_TPS,
                        help="prompt tokens prefilled per second (TTFT grows with the prompt)")
    parser.add_argument("--instant", action="store_true", help="no decode delay (client ceiling tests)")


def batching_from_args(ns: argparse.Namespace) -> BatchingModel:
    if ns.instant:
        return BatchingModel.instant()
    return BatchingModel.from_targets(single_stream_tps=ns.single_stream_tps, plateau_tps=ns.plateau_tps,
                                      plateau_batch=ns.plateau_batch, prefill_tps=ns.prefill_tps)


def batching_to_args(model: BatchingModel) -> list[str]:
    """The command-line flags that rebuild ``model`` in another process."""
    if model.is_instant:
        return ["--instant"]
    single = 1.0 / model.step_time(1)
    plateau = model.throughput(model.max_batch)
    return ["--single-stream-tps", repr(single), "--plateau-tps", repr(plateau),
            "--plateau-batch", str(model.max_batch), "--prefill-tps", repr(model.prefill_tps)]


async def _serve_forever(ns: argparse.Namespace) -> None:
    server = SimOpenAIServer(host=ns.host, port=ns.port, model=ns.model, batching=batching_from_args(ns),
                             faults=FaultPlan(ns.fault, ns.fault_every))
    await server.start()
    if ns.port_file:
        write_atomic(Path(ns.port_file), f"{server.port}\n")
    print(f"serving {server.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m kimitui.hosts.sim.openai_server",
                                description="A simulated vLLM OpenAI-compatible server (no GPUs).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", default="")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--fault", default="none", choices=FAULT_MODES)
    p.add_argument("--fault-every", type=int, default=1)
    add_batching_args(p)
    ns = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(ns))


if __name__ == "__main__":
    main()
