"""A small HTTP/1.1 server on asyncio streams: keep-alive, Content-Length or chunked request bodies,
JSON responses, and chunked streaming responses (for SSE). Enough for an OpenAI-compatible API at a few
hundred concurrent connections, and nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024


class BadRequest(Exception):
    """The request cannot be parsed; answered with 400 and the connection closed."""


@dataclass(slots=True)
class Request:
    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes = b""

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return conn == "keep-alive"
        return conn != "close"


@dataclass(slots=True)
class Responder:
    """Writes one response. Either ``send`` (complete body) or ``start_stream`` + ``write``... + ``end``."""

    writer: asyncio.StreamWriter
    keep_alive: bool
    reader: asyncio.StreamReader | None = None
    started: bool = False
    finished: bool = False
    aborted: bool = False
    extra_headers: dict[str, str] = field(default_factory=dict)

    def _head(self, status: int, headers: dict[str, str]) -> bytes:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Status"
        lines = [f"HTTP/1.1 {status} {reason}"]
        headers = {**headers, **self.extra_headers,
                   "Connection": "keep-alive" if self.keep_alive else "close"}
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.started = True
        self.writer.write(self._head(status, {"Content-Type": content_type,
                                              "Content-Length": str(len(body))}) + body)
        await self.writer.drain()
        self.finished = True

    async def send_json(self, status: int, obj: object) -> None:
        await self.send(status, json.dumps(obj).encode())

    async def start_stream(self, status: int = 200, content_type: str = "text/event-stream") -> None:
        self.started = True
        self.writer.write(self._head(status, {"Content-Type": content_type, "Cache-Control": "no-cache",
                                              "Transfer-Encoding": "chunked"}))

    def write(self, data: bytes) -> None:
        """Queue one chunk of a streamed body (call ``drain`` to apply back-pressure)."""
        if data:
            self.writer.write(b"%x\r\n%b\r\n" % (len(data), data))

    async def drain(self) -> None:
        await self.writer.drain()

    async def end(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()
        self.finished = True

    def client_gone(self) -> bool:
        """The client closed its side (or the connection broke)."""
        return self.writer.transport.is_closing() or (self.reader is not None and self.reader.at_eof())

    def abort(self) -> None:
        """Drop the connection mid-response (a server that dies half-way)."""
        self.aborted = True
        self.writer.transport.abort()


Handler = Callable[[Request, Responder], Awaitable[None]]


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts: list[bytes] = []
        total = 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError as exc:
                raise BadRequest("bad chunk size") from exc
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return b"".join(parts)
            total += size
            if total > MAX_BODY_BYTES:
                raise BadRequest("body too large")
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    raw = headers.get("content-length", "0")
    if not raw.isdigit():
        raise BadRequest("bad Content-Length")
    length = int(raw)
    if length > MAX_BODY_BYTES:
        raise BadRequest("body too large")
    return await reader.readexactly(length) if length else b""


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on the connection, or None when the client closed it between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise BadRequest("truncated request head") from exc
        return None
    except asyncio.LimitOverrunError as exc:
        raise BadRequest("request head too large") from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"bad request line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest("bad header line")
        headers[name.strip().lower()] = value.strip()
    body = await _read_body(reader, headers)
    return Request(parts[0].upper(), parts[1], parts[2], headers, body)


class HttpServer:
    """Serves ``handler`` on ``host:port`` (port 0: the OS picks one; see ``port``)."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0) -> None:
        self._handler = handler
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port, backlog=2048,
                                                  reuse_address=True, limit=MAX_HEAD_BYTES)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._conns):
                task.cancel()
            for task in list(self._conns):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            await self._connection(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._conns.discard(task)
            writer.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                request = await read_request(reader)
            except BadRequest as exc:
                await Responder(writer, keep_alive=False).send_json(
                    400, {"error": {"message": str(exc), "type": "BadRequestError", "code": 400}})
                return
            if request is None:
                return
            responder = Responder(writer, keep_alive=request.keep_alive, reader=reader)
            await self._handler(request, responder)
            if responder.aborted:
                return
            if not responder.finished:
                # The handler gave up half-way through a stream: close rather than leave a torn response.
                return
            if not request.keep_alive:
                return
