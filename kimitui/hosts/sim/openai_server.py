"""The simulated vLLM OpenAI-compatible HTTP server: routes, streaming, batching, fault injection.

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streamed SSE or one JSON body),
``GET /v1/models``, ``GET /health`` (503 until ``ready()`` says so), ``POST /tokenize`` (vLLM's, with the
toy tokenizer that also counts ``usage.prompt_tokens`` and the prefill cost), ``GET /metrics`` (vLLM's
Prometheus gauges, counters and latency histograms, ``metrics.py``, the prefix cache's counters among them:
``prefix_cache.py``), and in dev mode (``VLLM_SERVER_DEV_MODE=1``, as vLLM) ``POST /reset_prefix_cache``
(200, empty; the route does not exist otherwise: 404). ``EngineQuirks`` (``quirks.py``) make
it behave like other engines: strict fields, a role chunk first, no ``[DONE]``, EOS, a late port,
SGLang's metric names, other tokenize forms. Unknown paths answer 404, a
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
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from kimitui.hosts.sim.batching import REFERENCE_PREFILL_TPS, BatchingModel, DecodeScheduler
from kimitui.hosts.sim.http11 import HttpServer, Request, Responder
from kimitui.hosts.sim.layout import write_atomic
from kimitui.hosts.sim.metrics import RequestTiming, ServerMetrics
from kimitui.hosts.sim.openai_protocol import (
    ApiError,
    ChunkWriter,
    GenRequest,
    full_response,
    models_list,
    parse_generation,
    tokenize,
    tokenize_llamacpp,
    tokenize_sglang,
)
from kimitui.hosts.sim.prefix_cache import BLOCK_SIZE, PrefixCache
from kimitui.hosts.sim.quirks import EngineQuirks, QuirkError

DEFAULT_MODEL = "moonshotai/Kimi-K2.5"
DEFAULT_MAX_MODEL_LEN = 262_144
FAULT_MODES = ("none", "http500", "hang", "close", "malformed_sse", "stop_midstream", "no_usage")
FAULT_HEADER = "x-sim-fault"
INSTANT_TOKENS_PER_WRITE = 256
KV_CAPACITY_TOKENS = 1 << 20
"""Tokens of KV cache the simulated engine has (``kv_cache_usage_perc`` is the running requests' share)."""
_MALFORMED = b'data: {"id": "broken", "choices": [{"text": \n\n'
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


def dev_mode_from_env() -> bool:
    """vLLM's ``VLLM_SERVER_DEV_MODE``: an integer, on when not 0 (default 0)."""
    try:
        return bool(int(os.environ.get(DEV_MODE_ENV, "0")))
    except ValueError:
        return False


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
                 on_batch: Callable[[int], None] | None = None, quirks: EngineQuirks | None = None,
                 prefix_caching: bool = True, dev_mode: bool | None = None) -> None:
        self.model = model
        self.dev_mode = dev_mode_from_env() if dev_mode is None else dev_mode
        """Serve vLLM's development endpoints (``/reset_prefix_cache``); None: from VLLM_SERVER_DEV_MODE."""
        self.prefix_cache = PrefixCache(KV_CAPACITY_TOKENS // BLOCK_SIZE) if prefix_caching else None
        """vLLM's automatic prefix caching, on by default in its v1 engine (None: ``--no-enable-prefix-caching``)."""
        self.batching = batching or BatchingModel.from_targets()
        self.max_model_len = max_model_len
        self.faults = faults or FaultPlan()
        self.quirks = quirks or EngineQuirks()
        self._ready = ready or (lambda: True)
        self.scheduler = DecodeScheduler(self.batching, on_batch=on_batch, prefix_cache=self.prefix_cache,
                                         cold_requests=self.quirks.cold_requests)
        self.metrics = ServerMetrics(model, "sglang" if self.quirks.metrics == "sglang" else "vllm")
        self.created = int(time.time())
        self.generation_requests = 0
        self.tokenize_requests = 0

    def start(self) -> None:
        self.scheduler.start()

    async def stop(self) -> None:
        await self.scheduler.stop()

    def _routes(self) -> dict[str, str]:
        routes = {"/health": "GET", "/v1/models": "GET", "/v1/completions": "POST",
                  "/v1/chat/completions": "POST"}
        if self.quirks.metrics != "none":
            routes["/metrics"] = "GET"
        if self.dev_mode:
            routes["/reset_prefix_cache"] = "POST"
        if self.quirks.tokenize in ("vllm", "llamacpp"):
            routes["/tokenize"] = "POST"
        elif self.quirks.tokenize == "sglang":
            routes["/v1/tokenize"] = "POST"
        return routes

    async def handle(self, request: Request, out: Responder) -> None:
        path = request.path.split("?", 1)[0]
        routes = self._routes()
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
        elif path in ("/tokenize", "/v1/tokenize"):
            await self._tokenize(request, out)
        elif path == "/reset_prefix_cache":
            # as vLLM: the answer does not say whether the engine could drop the cache (it cannot while
            # requests hold blocks)
            if self.prefix_cache is not None:
                self.prefix_cache.reset(self.scheduler.in_flight[0])
            await out.send(200, b"", "text/plain")
        else:
            await self._generate("completion" if path == "/v1/completions" else "chat", request, out)

    async def _tokenize(self, request: Request, out: Responder) -> None:
        try:
            if self.quirks.tokenize == "llamacpp":
                answer = tokenize_llamacpp(request.body)
            elif self.quirks.tokenize == "sglang":
                answer = tokenize_sglang(request.body, served_model=self.model, max_model_len=self.max_model_len)
            else:
                answer = tokenize(request.body, served_model=self.model, max_model_len=self.max_model_len)
        except ApiError as exc:
            await out.send_json(exc.status, exc.body())
            return
        self.tokenize_requests += 1
        await out.send_json(200, answer)

    def metrics_text(self) -> str:
        """The engine's Prometheus text (``metrics.py``): gauges from the requests in flight now, counters
        and histograms from the finished ones."""
        running, waiting = self.scheduler.in_flight
        kv_usage = min(1.0, self.scheduler.kv_tokens / KV_CAPACITY_TOKENS)
        cache = self.prefix_cache
        return self.metrics.render(running=running, waiting=waiting, kv_usage=kv_usage,
                                   prefix_queries=cache.queries if cache else 0, prefix_hits=cache.hits if cache else 0)

    async def _generate(self, kind: str, request: Request, out: Responder) -> None:
        arrived = time.monotonic()
        try:
            if not self._ready():
                raise ApiError(503, "the model is still loading", "ServiceUnavailableError")
            req = parse_generation("completion" if kind == "completion" else "chat", request.body,
                                   served_model=self.model, max_model_len=self.max_model_len,
                                   strict_fields=self.quirks.strict_fields, eos_after=self.quirks.eos_after,
                                   reasoning=self.quirks.reasoning_tokens or None)
        except ApiError as exc:
            # a strict server answers as transformers serve (FastAPI) does: {"detail": ...}
            await out.send_json(exc.status, {"detail": str(exc)} if exc.status == 422 else exc.body())
            return
        req.arrived = arrived
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
        """Yield lists of token indexes as the decode loop produces them (all at once when instant); a
        request whose every token was handed out is observed in the metrics."""
        arrived = req.arrived or time.monotonic()
        writes: list[tuple[float, int]] = []
        admitted = arrived
        if self.batching.is_instant:
            if self.prefix_cache is not None:
                self.prefix_cache.schedule(req.block_hashes, req.prompt_tokens)
            for start in range(0, req.max_tokens, INSTANT_TOKENS_PER_WRITE):
                batch = list(range(start, min(start + INSTANT_TOKENS_PER_WRITE, req.max_tokens)))
                writes.append((time.monotonic(), len(batch)))
                yield batch
        else:
            seq = self.scheduler.submit(req.max_tokens, req.prompt_tokens, req.block_hashes)
            try:
                got = 0
                while got < req.max_tokens:
                    batch = [await seq.queue.get()]
                    while not seq.queue.empty():
                        batch.append(seq.queue.get_nowait())
                    got += len(batch)
                    writes.append((time.monotonic(), len(batch)))
                    yield batch
                    if out.client_gone():
                        return
            finally:
                if not seq.done:
                    self.scheduler.cancel(seq)
            admitted = seq.admitted_at if seq.admitted_at is not None else arrived
        self.metrics.observe(RequestTiming(arrived, admitted, writes, req.prompt_tokens))

    async def _stream(self, req: GenRequest, out: Responder, fault: str) -> None:
        chunks = ChunkWriter(req)
        chunks.finish_in_last_token = not self.quirks.no_done
        stop_at = req.max_tokens // 2 if fault == "stop_midstream" else -1
        await out.start_stream()
        role_sent = False
        if self.quirks.role_first and req.kind == "chat":
            out.write(chunks.role_only())
            await out.drain()
            role_sent = True
        sent = 0
        async with contextlib.aclosing(self._tokens(req, out)) as tokens:
            sent = await self._write_tokens(tokens, chunks, out, stop_at, fault, role_sent)
        if sent < req.max_tokens:
            return  # the client left, or the stream was cut on purpose
        with_usage = req.include_usage and fault != "no_usage"
        if self.quirks.no_done:
            out.write(chunks.final(sent, with_usage))
        else:
            out.write(b"".join([*([chunks.usage(sent)] if with_usage else []), chunks.done()]))
        await out.end()

    @staticmethod
    async def _write_tokens(tokens: AsyncIterator[list[int]], chunks: ChunkWriter, out: Responder,
                            stop_at: int, fault: str, role_sent: bool = False) -> int:
        sent = 0
        async for batch in tokens:
            buf = [chunks.role()] if sent == 0 and not role_sent else []
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
                 on_batch: Callable[[int], None] | None = None, quirks: EngineQuirks | None = None,
                 prefix_caching: bool = True, dev_mode: bool | None = None) -> None:
        self.app = OpenAIApp(model=model, batching=batching, max_model_len=max_model_len, faults=faults,
                             ready=ready, on_batch=on_batch, quirks=quirks, prefix_caching=prefix_caching,
                             dev_mode=dev_mode)
        if self.app.quirks.listen_delay_s and port == 0:
            port = free_port(host)  # the port is known before it opens
        self._http = HttpServer(self.app.handle, host, port)
        self._fixed_port = port
        self._opening: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()
        """Set once the port is open (at once, or ``listen_delay_s`` after ``start``)."""
        self.host = host

    @property
    def port(self) -> int:
        return self._fixed_port if not self.listening.is_set() else self._http.port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Start the decode loop and open the port; with ``listen_delay_s``, the port opens that long
        after (in the background: nothing listens while the model 'loads')."""
        self.app.start()
        if self.app.quirks.listen_delay_s:
            self._opening = asyncio.get_running_loop().create_task(self._open_later())
        else:
            await self._open()

    async def _open(self) -> None:
        await self._http.start()
        self.listening.set()

    async def _open_later(self) -> None:
        await asyncio.sleep(self.app.quirks.listen_delay_s)
        await self._open()

    async def close(self) -> None:
        if self._opening is not None:
            self._opening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._opening
        if self.listening.is_set():
            await self._http.close()
        await self.app.stop()

    async def __aenter__(self) -> SimOpenAIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def free_port(host: str) -> int:
    """A port nothing listens on now (for a server that opens it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def quirks_arg(spec: str) -> EngineQuirks:
    """argparse type for ``--quirks``."""
    try:
        return EngineQuirks.parse(spec)
    except QuirkError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_batching_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--single-stream-tps", type=float, default=50.0)
    parser.add_argument("--plateau-tps", type=float, default=1536.0)
    parser.add_argument("--plateau-batch", type=int, default=128)
    parser.add_argument("--prefill-tps", type=float, default=REFERENCE_PREFILL_TPS,
                        help="prompt tokens prefilled per second (TTFT grows with the prompt)")
    parser.add_argument("--instant", action="store_true", help="no decode delay (client ceiling tests)")
    parser.add_argument("--modelled-step", metavar="MODEL", default="",
                        help="the decode step from the simulated machine's modelled GEMMs and all-reduces of MODEL "
                             "plus a rest fitted to the targets (kimitui/hosts/sim/machine.py)")
    parser.add_argument("--modelled-tp", type=int, default=8, help="with --modelled-step: the tensor parallel size")
    parser.add_argument("--allreduce-speedup", type=float, default=1.0,
                        help="with --modelled-step: the modelled all-reduce this many times faster")


def batching_from_args(ns: argparse.Namespace) -> BatchingModel:
    if ns.instant:
        return BatchingModel.instant()
    if ns.modelled_step:
        return BatchingModel.simulated_machine(
            ns.modelled_step, ns.modelled_tp, allreduce_speedup=ns.allreduce_speedup,
            single_stream_tps=ns.single_stream_tps, plateau_tps=ns.plateau_tps, plateau_batch=ns.plateau_batch,
            prefill_tps=ns.prefill_tps)
    return BatchingModel.from_targets(single_stream_tps=ns.single_stream_tps, plateau_tps=ns.plateau_tps,
                                      plateau_batch=ns.plateau_batch, prefill_tps=ns.prefill_tps)


def batching_to_args(model: BatchingModel) -> list[str]:
    """The command-line flags that rebuild ``model`` in another process."""
    if model.is_instant:
        return ["--instant"]
    if model.machine is not None:
        name, tp, k = model.machine
        t = model._targets()
        return ["--modelled-step", name, "--modelled-tp", str(tp), "--allreduce-speedup", repr(k),
                "--single-stream-tps", repr(t["single_stream_tps"]), "--plateau-tps", repr(t["plateau_tps"]),
                "--plateau-batch", str(model.max_batch), "--prefill-tps", repr(model.prefill_tps)]
    single = 1.0 / model.step_time(1)
    plateau = model.throughput(model.max_batch)
    return ["--single-stream-tps", repr(single), "--plateau-tps", repr(plateau),
            "--plateau-batch", str(model.max_batch), "--prefill-tps", repr(model.prefill_tps)]


async def _serve_forever(ns: argparse.Namespace) -> None:
    server = SimOpenAIServer(host=ns.host, port=ns.port, model=ns.model, batching=batching_from_args(ns),
                             faults=FaultPlan(ns.fault, ns.fault_every), quirks=ns.quirks,
                             prefix_caching=ns.enable_prefix_caching)
    await server.start()
    await server.listening.wait()
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
    p.add_argument("--quirks", type=quirks_arg, default=EngineQuirks(),
                   help="behave like another engine (kimitui/hosts/sim/quirks.py), e.g. transformers")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="vLLM's automatic prefix caching (on by default, as in vLLM's v1 engine); "
                        "VLLM_SERVER_DEV_MODE=1 serves POST /reset_prefix_cache")
    add_batching_args(p)
    ns = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(ns))


if __name__ == "__main__":
    main()
