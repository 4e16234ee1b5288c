"""A real HTTP/1.1 server on 127.0.0.1 that speaks enough of the OpenAI streaming API to test a load
generator, and injects faults on demand.

Modes (``Behavior.mode``):
  ok          stream ``n`` tokens in chunks of ``tokens_per_chunk``, then a usage chunk, then ``[DONE]``
  no_usage    the same without the usage chunk
  status      answer ``status`` with ``body`` (no stream)
  malformed   after ``fail_after`` chunks, a ``data:`` line that is not JSON
  truncate    after ``fail_after`` chunks, close the connection (chunked body left unterminated)
  truncate_eof  the same with a close-delimited body (no chunked encoding): a clean EOF before [DONE]
  stall       after ``fail_after`` chunks, send nothing more (until the client gives up)
  error_event after ``fail_after`` chunks, a ``data: {"error": ...}`` event (vLLM's mid-stream error)
  long_line   after ``fail_after`` chunks, a ``data:`` line of ``long_line_bytes`` that never ends, written
              in pieces of 64 KiB, each after the last was taken by the client (until it closes)

Engine quirks (transformers serve's, each on its own): ``reject_fields`` answers 422 with transformers'
``{"detail": "Unexpected fields in the request: {'ignore_eos'}"}`` to a request that sends one of them;
``role_chunk`` sends a role-only chat delta first, ``role_gap_s`` after it the first token; ``finish_chunk``
ends with a content-free chunk (``finish_reason`` and the usage), ``final_delay_s`` after the last token;
``done=False`` sends no ``[DONE]``.

It has no ``/tokenize`` (404, as servers other than vLLM): its ``usage.prompt_tokens`` comes from its own
toy tokenizer (``count_prompt``, different from the simulated vLLM server's), so a client can only
calibrate its prompt lengths from usage. ``Behavior.prompt_tokens`` fixes the count instead.

Timing: the first token chunk goes ``first_delay_s`` after the request is read, chunk i at
``first_delay_s + i * interval_s`` (an absolute schedule, so gaps do not drift). ``barrier`` holds the
first chunk until that many streams are open at once (or ``barrier_timeout_s``): the peak proves a
client really had that many requests in flight. ``burst`` writes the whole response at once (the fastest
zero-delay server); ``yield_chunks`` yields to the event loop between chunks (interleaved streams).

Framing (``Behavior.framing``): ``chunked`` (the default), ``length`` (the whole SSE body at once with a
Content-Length, keep-alive) or ``close`` (a close-delimited body: ``Connection: close``, then EOF).
``ssl`` (an ``ssl.SSLContext``) serves https. ``Stats.connections`` counts accepted connections (keep-alive
reuse shows as fewer connections than requests).

Run standalone (for benchmarks/loadgen.py): ``python tests/faulty_server.py --port 0 [--interval S]``
(``--status 500 --body TEXT``: every completion answered so); it prints ``PORT <n>`` on its first line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import sys
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Behavior:
    mode: str = "ok"
    status: int = 500
    body: str = '{"error": {"message": "injected failure", "type": "InternalServerError"}}'
    n_tokens: int | None = None
    """Tokens per response; None: the request's max_tokens (as with ignore_eos)."""
    tokens_per_chunk: int = 1
    interval_s: float = 0.0
    first_delay_s: float = 0.0
    fail_after: int = 2
    crlf: bool = False
    comments: bool = False
    multiline: bool = False
    role_chunk: bool = False
    barrier: int = 0
    barrier_timeout_s: float = 5.0
    barrier_spares_probes: bool = False
    """One-token requests (the sweep's request-field check, the calibration's) pass the barrier."""
    burst: bool = False
    yield_chunks: bool = False
    prompt_tokens: int | None = None
    """usage.prompt_tokens; None: counted by ``count_prompt`` (the server has no ``/tokenize``)."""
    framing: str = "chunked"
    """chunked, length (Content-Length) or close (close-delimited); see the module docstring."""
    long_line_bytes: int = 100 * 1024 * 1024
    """mode long_line: how long the endless line is (then the event ends, as a JSON object would not)."""
    stamp: bool = False
    reject_fields: tuple[str, ...] = ()
    """Request fields answered with a 422 naming them (as transformers serve does for ``ignore_eos``)."""
    role_gap_s: float = 0.0
    """With ``role_chunk``: how long after the role-only chunk the first token chunk goes."""
    models_status: int = 200
    """``GET /v1/models`` answered with this status (500: transformers 5.17 pinned to a folder, no HF cache)."""
    finish_chunk: bool = False
    """End with a chunk whose choice has no content, only ``finish_reason`` (the usage rides on it)."""
    final_delay_s: float = 0.0
    """How long after the last token chunk what follows it (usage, finish chunk, [DONE]) goes."""
    done: bool = True
    """Send ``data: [DONE]`` at the end."""
    gate: asyncio.Event | None = None
    """When set: the paced stream holds what follows its token chunks (usage, [DONE]) until the event is set
    (a request kept in flight while something else happens)."""
    """Each token chunk carries "sent": perf_counter() at its write (CLOCK_MONOTONIC, shared by every
    process on Linux), so a client in another process can measure the one-way delay it adds."""


SPECIAL_TOKENS = 2
"""Tokens the server adds to every completion prompt (two, unlike the simulated vLLM server's one)."""


def count_prompt(req: dict[str, Any], chat: bool) -> int:
    """This server's own tokenizer, different from the simulated vLLM server's: a whitespace-separated
    word of n characters is ceil(n / 2) tokens; a completion prompt gets ``SPECIAL_TOKENS`` more, a chat
    prompt 4 per message and 3 for the template."""

    def words(text: str) -> int:
        return sum(-(-len(w) // 2) for w in text.split())

    if chat:
        msgs = req.get("messages") or []
        return sum(words(str(m.get("content") or "")) + 4 for m in msgs if isinstance(m, dict)) + 3
    prompt = req.get("prompt")
    if isinstance(prompt, list):
        return len(prompt)
    return words(str(prompt or "")) + SPECIAL_TOKENS


@dataclass
class Stats:
    requests: int = 0
    active: int = 0
    peak_active: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    keep_bodies: bool = True
    connections: int = 0
    long_line_sent: int = 0
    """mode long_line: bytes of the endless line written so far (of the last request)."""


class FaultyServer:
    def __init__(self, behavior: Behavior | None = None, host: str = "127.0.0.1", port: int = 0,
                 ssl: ssl.SSLContext | None = None) -> None:
        self.behavior = behavior or Behavior()
        self.ssl = ssl
        self.host, self._port = host, port
        self.stats = Stats()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._barrier_event = asyncio.Event()

    def release_barrier(self) -> None:
        """Open the barrier now, as if enough streams were open (a test that holds fewer on purpose)."""
        self._barrier_event.set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl else 'http'}://{self.host}:{self.port}"

    async def start(self) -> FaultyServer:
        self._server = await asyncio.start_server(self._conn, self.host, self._port, backlog=1024,
                                                  ssl=self.ssl)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def __aenter__(self) -> FaultyServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- HTTP -------------------------------------------------------------------------------------------
    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.stats.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                keep = await self._handle(method, path, body, reader, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    def _head(status: int, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def _json(self, writer: asyncio.StreamWriter, status: int, payload: bytes) -> None:
        writer.write(self._head(status, {"Content-Type": "application/json",
                                         "Content-Length": str(len(payload))}) + payload)

    async def _handle(self, method: str, path: str, raw: bytes, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> bool:
        b = self.behavior
        if method == "GET" and path == "/v1/models" and b.models_status != 200:
            self._json(writer, b.models_status, b"Internal Server Error")
            return True
        if method == "GET" and path == "/v1/models":
            self._json(writer, 200, b'{"object": "list", "data": [{"id": "fake-model", "object": "model"}]}')
            return True
        if method != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(writer, 404, b'{"error": "not found"}')
            return True
        self.stats.requests += 1
        req = json.loads(raw or b"{}")
        if self.stats.keep_bodies:
            self.stats.bodies.append(req)
        if b.mode == "status":
            self._json(writer, b.status, b.body.encode())
            return True
        rejected = sorted(set(b.reject_fields) & set(req))
        if rejected:
            detail = f"Unexpected fields in the request: {set(rejected)}"
            self._json(writer, 422, json.dumps({"detail": detail}).encode())
            return True
        chat = path.endswith("chat/completions")
        prompt_tokens = b.prompt_tokens if b.prompt_tokens is not None else count_prompt(req, chat)
        n = b.n_tokens if b.n_tokens is not None else int(req.get("max_tokens") or 16)
        chunked = b.mode != "truncate_eof" and b.framing == "chunked"
        length = b.framing == "length" and b.mode in ("ok", "no_usage")
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        headers["Transfer-Encoding" if chunked else "Connection"] = "chunked" if chunked else "close"
        if not length:  # with a Content-Length, _stream writes the head with the whole body
            writer.write(self._head(200, headers))
        self.stats.active += 1
        self.stats.peak_active = max(self.stats.peak_active, self.stats.active)
        try:
            probe = req.get("max_tokens") == 1
            return await self._stream(reader, writer, chat, n, chunked, prompt_tokens, probe) and (chunked or length)
        finally:
            self.stats.active -= 1

    # -- SSE --------------------------------------------------------------------------------------------
    def _event(self, obj: dict[str, Any] | str) -> bytes:
        b = self.behavior
        nl = "\r\n" if b.crlf else "\n"
        text = obj if isinstance(obj, str) else json.dumps(obj)
        if b.multiline and not isinstance(obj, str) and ", " in text:
            head, tail = text.split(", ", 1)
            lines = f"data: {head},{nl}data: {tail}{nl}"
        else:
            lines = f"data: {text}{nl}"
        prefix = f": keep-alive{nl}" if b.comments else ""
        return (prefix + lines + nl).encode()

    def _chunk(self, chat: bool, text: str | None, role: bool = False) -> dict[str, Any]:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
            return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake-model",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        return {"id": "cmpl-1", "object": "text_completion", "model": "fake-model",
                "choices": [{"index": 0, "text": text, "finish_reason": None}]}

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, chat: bool, n: int,
                      chunked: bool, prompt_tokens: int, probe: bool = False) -> bool:
        b = self.behavior
        frame = (lambda d: b"%x\r\n%s\r\n" % (len(d), d)) if chunked else (lambda d: d)
        k = max(1, b.tokens_per_chunk)
        sizes = [min(k, n - i) for i in range(0, n, k)]
        frames: list[bytes] = []
        if chat and b.role_chunk:
            frames.append(frame(self._event(self._chunk(chat, None, role=True))))
        cache: dict[int, bytes] = {}
        for s in sizes:
            if s not in cache:
                cache[s] = frame(self._event(self._chunk(chat, " tok" * s)))
            frames.append(cache[s])
        fault_at: int | None = None
        if b.mode in ("malformed", "truncate", "truncate_eof", "stall", "error_event", "long_line"):
            fault_at = min(b.fail_after, len(frames))
            frames = frames[:fault_at]
        else:
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": n + prompt_tokens}
            if b.finish_chunk:
                end: dict[str, Any] = {"index": 0, "finish_reason": "length"}
                end.update({"delta": {}} if chat else {"text": ""})
                frames.append(frame(self._event({"id": "x", "object": "chunk", "model": "fake-model",
                                                 "choices": [end],
                                                 **({} if b.mode == "no_usage" else {"usage": usage})})))
            elif b.mode != "no_usage":
                frames.append(frame(self._event({"id": "x", "object": "text_completion", "model": "fake-model",
                                                 "choices": [], "usage": usage})))
            if b.done:
                frames.append(frame(self._event("[DONE]")))
            if chunked:
                frames.append(b"0\r\n\r\n")
        if b.barrier and not (b.barrier_spares_probes and probe):
            if self.stats.active >= b.barrier:
                self._barrier_event.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._barrier_event.wait(), b.barrier_timeout_s)
        if b.framing == "length" and fault_at is None:
            payload = b"".join(frames)
            writer.write(self._head(200, {"Content-Type": "text/event-stream",
                                          "Content-Length": str(len(payload))}) + payload)
        elif b.burst and b.interval_s == 0 and b.first_delay_s == 0:
            writer.write(b"".join(frames))
        else:
            start = time.perf_counter() + b.first_delay_s
            role = 1 if chat and b.role_chunk else 0
            ntok = len(sizes) + role
            for i, f in enumerate(frames):
                if i < ntok:
                    delay = start + i * b.interval_s + (b.role_gap_s if role and i else 0.0) - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    elif b.yield_chunks:
                        await asyncio.sleep(0)
                if i == ntok and b.final_delay_s > 0:
                    await writer.drain()
                    await asyncio.sleep(b.final_delay_s)
                if i == ntok and b.gate is not None:
                    await b.gate.wait()
                j = i - (ntok - len(sizes))  # index among the token chunks (after a role chunk)
                if b.stamp and 0 <= j < len(sizes):
                    obj = self._chunk(chat, " tok" * sizes[j])
                    obj["sent"] = time.perf_counter()
                    f = frame(self._event(obj))
                writer.write(f)
                if writer.transport.is_closing():
                    return False
            await writer.drain()
        await writer.drain()
        if fault_at is None:
            return True
        if b.mode == "malformed":
            writer.write(frame(b"data: {this is not json\n\n"))
        elif b.mode == "error_event":
            writer.write(frame(self._event({"error": {"message": "injected mid-stream error", "code": 500}})))
        elif b.mode == "stall":
            with contextlib.suppress(ConnectionError):
                await reader.read()  # until the client gives up and closes
        elif b.mode == "long_line":
            await self._long_line(writer, frame)
            return False
        await writer.drain()
        writer.transport.close()
        return False

    async def _long_line(self, writer: asyncio.StreamWriter, frame: Any) -> None:
        """``data: xxxx...`` of ``long_line_bytes`` in 64 KiB pieces, each written once the one before was
        sent (drain), so the client reads it as it comes; stops when the client closes."""
        piece = frame(b"x" * 65536)
        sent = 0
        with contextlib.suppress(ConnectionError):
            writer.write(frame(b"data: "))
            while sent < self.behavior.long_line_bytes and not writer.transport.is_closing():
                writer.write(piece)
                await writer.drain()
                sent += 65536
                self.stats.long_line_sent = sent
            writer.write(frame(b"\n\n"))
            await writer.drain()
        writer.transport.close()


async def _main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--interval", type=float, default=0.0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--burst", action="store_true")
    p.add_argument("--yield-chunks", action="store_true")
    p.add_argument("--stamp", action="store_true", help="stamp each token chunk with its send time")
    p.add_argument("--status", type=int, help="answer every completion with this HTTP status (mode status)")
    p.add_argument("--body", default=Behavior.body, help="the body of a --status answer")
    p.add_argument("--transformers", action="store_true",
                   help="transformers serve's ways: 422 to ignore_eos, a role-only chunk first, a content-free "
                        "finish chunk with the usage last, no [DONE]")
    p.add_argument("--role-gap", type=float, default=0.0, help="with --transformers: role chunk to first token (s)")
    p.add_argument("--models-status", type=int, default=200, help="the status GET /v1/models answers")
    a = p.parse_args(argv)
    quirks: dict[str, Any] = {}
    if a.transformers:
        quirks = {"reject_fields": ("ignore_eos",), "role_chunk": True, "role_gap_s": a.role_gap,
                  "finish_chunk": True, "done": False}
    srv = FaultyServer(Behavior(interval_s=a.interval, tokens_per_chunk=a.tokens_per_chunk, burst=a.burst,
                                yield_chunks=a.yield_chunks, stamp=a.stamp, mode="status" if a.status else "ok",
                                status=a.status or 500, body=a.body, models_status=a.models_status, **quirks),
                       port=a.port)
    srv.stats.keep_bodies = False
    await srv.start()
    print(f"PORT {srv.port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(sys.argv[1:]))
