"""A lean HTTP/1.1 client for the load generator's hot path: POST one request, stream its SSE response.

Against aiohttp (issue 36 item 5; ``benchmarks/loadgen.py --quick --clients lean,aiohttp``, 2 cores, quiet,
three runs in a row, 2026-12-05), lean / aiohttp:

- client CPU per chunk: 1.0-1.9x lower, never the 2x that would keep it on CPU alone (c=256: simulated server
  1.86-2.05 / 2.35-2.67 us, burst 1.96-2.12 / 2.80-2.92, burst4 (4 tokens an event) 3.03-3.28 / 5.14-6.23;
  c=64: 3.99-4.32 / 3.85-4.42, 2.32-2.52 / 2.98-3.12, 4.75-4.95 / 6.15-6.47);
- fidelity, not equal: the ITL the client adds at c=64 (stamped server) p99 0.40-1.03 / 1.84-2.44 ms (the
  target is <= 1 ms: aiohttp missed it in every run), the one-way delay median 0.16-0.17 / 0.38-0.46 ms. aiohttp
  hands a body block to the reading task through its StreamReader (a future set in ``data_received``, the task
  woken on a later pass of the loop), so each chunk is timed after every other ready callback of that pass; this
  client times it in ``data_received`` itself. No public aiohttp API times a block earlier.

So it stays, for what it measures, not for its CPU; aiohttp (``aiohttp_stream.py``, ``--client aiohttp``) is
held to the same accounting and failure reasons in every fault test, the library to fall back on.

Why hand-write this when httpx is the project's HTTP library: the load generator must measure a server
without becoming the bottleneck itself (docs/reference.md section 3: on 2 cores a Python client can saturate
before the server). Through httpx -> httpcore -> h11 -> anyio every HTTP chunk costs several awaits and
parser events, one chunk at a time even when one socket read holds hundreds of them: about 130-200 µs of
client CPU per chunk. vLLM sends one token per chunk, so at concurrency 64 x 100 chunks/s the client is
at 100% of a core and its queueing shows up in the very latencies it measures. Measured on the 2-core
development machine with ``benchmarks/loadgen.py`` (one token per chunk; servers in their own process):

    ==================================  =============  =============  ==========
    figure                              httpx          lean (this)    target
    ==================================  =============  =============  ==========
    output tok/s, burst server, c=256   28-49k         136-218k       >= 50,000
    added latency per chunk, c=64       med 2-14 ms    med 0.2-0.8    -
                                        p99 23-52 ms   p99 1.2-16 ms  <= 1 ms
    client CPU per chunk (in-process)   ~130-200 µs    4-6 µs + loop  -
    ==================================  =============  =============  ==========

The latency p99 is at this machine's floor, not the client's: a bare asyncio Protocol that only finds the
stamps (``benchmarks/loadgen.py`` prints it) measured p99 1.8-10 ms in the same runs. A VM with ~50% CPU
steal pays ~20 µs per ``recv`` and ~35 µs per chunk in the event loop, and a server at c=64 sends 64 chunks
at nearly the same moment, so the last one waits for the other 63 to be read.

What it does: one keep-alive connection per worker on asyncio's Protocol API (``loop.create_connection``,
TLS through an ``ssl.SSLContext`` for https, TCP_NODELAY), reused across that worker's requests and
re-opened when the server closed it. ``data_received`` takes the perf_counter once per socket read,
parses the status line and headers, then a chunked, Content-Length or close-delimited body, and hands
the body bytes with that timestamp straight to the request's ``StreamAccount`` (SSE split, JSON, TTFT,
ITL, usage): no await per chunk. The request coroutine awaits one future that the protocol resolves at
the end of the body or on a failure. The read timeout is a timer that checks the time of the last read
(so a read costs one attribute store, not a timer reset); the total timeout wraps the whole request.

Failures carry the same reasons as the httpx client (see ``request.stream_request``): ``connect error:
...``, ``timeout: connect``, ``timeout: read (no data between chunks)``, ``timeout: total Ns exceeded``,
``HTTP <status>: <start of body>``, ``malformed SSE: ...``, ``SSE line over 1 MiB`` (or ``SSE event
over 1 MiB``: the stream is closed at the cap, see ``sse.MAX_LINE``), ``server error in stream: ...``,
``stream closed early (before [DONE])``, ``protocol error: ...`` for a response that is not HTTP/1.1 as expected,
and ``ReadError: ...`` for a connection reset mid-response.

Not supported (``lean_unsupported`` says so and the sweep falls back to httpx): proxies from the
environment (``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY``, which httpx honours). Content encodings
other than identity, gzip and deflate fail the request. ``GET /v1/models`` stays on httpx.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import urllib.request
import zlib
from time import perf_counter
from urllib.parse import urlsplit

from kimitui.bench.macro.request import (
    Gauge,
    RequestFailed,
    RequestOutcome,
    StreamAccount,
    _short,
    http_status_reason,
)

CLOSED_EARLY = "stream closed early (before [DONE])"
READ_TIMEOUT = "timeout: read (no data between chunks)"
CONNECT_TIMEOUT = "timeout: connect"
ERROR_BODY_LIMIT = 2048
"""Bytes of a non-200 body read for its failure reason (as the httpx client)."""
MAX_HEAD = 64 * 1024
INFLATE_STEP = 256 * 1024
"""Most bytes one decompression step gives (a compressed body is inflated and split in such steps)."""
USER_AGENT = "kimitui-loadgen"

# where the response stands
_HEAD, _BODY, _ENDED = 0, 1, 2
# body framing
_CHUNKED, _LENGTH, _EOF = 0, 1, 2
# chunked decoder: a positive ``need`` is chunk data left; these mark what is expected next
_SIZE, _CRLF, _TRAILER = 0, -1, -2


def lean_unsupported(url: str) -> str | None:
    """Why the lean client cannot talk to ``url`` the way httpx would (None: it can)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return f"scheme {parts.scheme!r} is not http or https"
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        return f"a proxy is configured for {parts.scheme} ({proxy}); the lean client does not use proxies"
    return None


class _Conn(asyncio.Protocol):
    """One TCP (or TLS) connection and the exchange on it, if any."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_s: float) -> None:
        self.loop = loop
        self.read_s = read_s
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.fut: asyncio.Future[None] | None = None
        self.account: StreamAccount | None = None
        self.gauge: Gauge | None = None
        self.counted = False
        self.state = _HEAD
        self.buf = b""
        self.framing = _EOF
        self.need = 0
        self.status = 0
        self.reason = ""
        self.error_body: bytearray | None = None
        self.keep_alive = False
        self.decomp: zlib._Decompress | None = None
        self.last_rx = 0.0
        self.timer: asyncio.TimerHandle | None = None

    # -- asyncio callbacks ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        now = perf_counter()
        self.last_rx = now
        if self.fut is None:  # bytes nobody asked for: the connection is not usable any more
            self._drop()
            return
        try:
            if self.state == _BODY:
                self._body(data, now)
            else:
                self._head(data, now)
        except RequestFailed as exc:
            self._resolve(exc)
        except (ValueError, IndexError, zlib.error) as exc:
            self._resolve(RequestFailed(f"protocol error: {_short(str(exc) or type(exc).__name__, 80)}"))

    def eof_received(self) -> bool:
        self.closed = True
        if self.fut is not None and self.state == _BODY and self.framing == _EOF:
            self._complete()  # the end of a close-delimited body
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.fut is None:
            return
        if exc is None and self.state == _BODY and self.framing == _EOF:
            self._complete()
        elif exc is None:
            self._resolve(RequestFailed(CLOSED_EARLY))
        else:
            self._resolve(RequestFailed(f"ReadError: {_short(str(exc) or type(exc).__name__, 80)}"))

    # -- one exchange -----------------------------------------------------------------------------------
    def begin(self, fut: asyncio.Future[None], account: StreamAccount, gauge: Gauge | None) -> None:
        self.fut = fut
        self.account = account
        self.gauge = gauge
        # In flight from the moment the request goes on its own connection (no pool can hold it back):
        # a response that arrives whole in one read still overlaps the others in the level.
        self.counted = gauge is not None
        if gauge is not None:
            gauge.up()
        self.state = _HEAD
        self.buf = b""
        self.error_body = None
        self.decomp = None
        self.last_rx = perf_counter()
        self.timer = self.loop.call_later(self.read_s, self._check_idle)

    def abandon(self, fut: asyncio.Future[None]) -> None:
        """The request coroutine left (cancelled, total timeout) before the exchange ended."""
        if self.fut is fut:
            self._end()
            self._drop()

    def _check_idle(self) -> None:
        self.timer = None
        if self.fut is None:
            return
        idle = perf_counter() - self.last_rx
        if idle >= self.read_s:
            self._resolve(RequestFailed(READ_TIMEOUT))
        else:
            self.timer = self.loop.call_later(self.read_s - idle, self._check_idle)

    def _head(self, data: bytes, now: float) -> None:
        buf = self.buf + data if self.buf else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise RequestFailed("protocol error: response head too long")
                self.buf = buf
                return
            lines = buf[:end].split(b"\r\n")
            rest = buf[end + 4:]
            first = lines[0].split(b" ", 2)
            version = first[0]
            if not version.startswith(b"HTTP/1.") or len(first) < 2:
                raise RequestFailed(f"protocol error: not an HTTP/1.x response: {_short(lines[0], 60)}")
            status = int(first[1])
            if 100 <= status < 200 and status != 101:  # interim response (100 Continue): the real one follows
                buf = rest
                continue
            break
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            key = name.strip().lower()
            headers[key] = headers[key] + b", " + value.strip() if key in headers else value.strip()
        self.status = status
        self.reason = first[2].decode("latin-1").strip() if len(first) > 2 else ""
        connection = headers.get(b"connection", b"").lower()
        self.keep_alive = (b"close" not in connection if version == b"HTTP/1.1"
                           else b"keep-alive" in connection)
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self.framing, self.need = _CHUNKED, _SIZE
        elif status in (204, 304):
            self.framing, self.need = _LENGTH, 0
        elif b"content-length" in headers:
            self.framing, self.need = _LENGTH, int(headers[b"content-length"])
            if self.need < 0:
                raise RequestFailed("protocol error: negative Content-Length")
        else:
            self.framing, self.keep_alive = _EOF, False
        if status != 200:
            self.error_body = bytearray()
        else:
            encoding = headers.get(b"content-encoding", b"identity").strip().lower()
            if encoding in (b"gzip", b"x-gzip"):
                self.decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
            elif encoding == b"deflate":
                self.decomp = zlib.decompressobj()
            elif encoding not in (b"identity", b""):
                raise RequestFailed(f"protocol error: content-encoding {encoding.decode('latin-1')!r} "
                                    "is not supported by the lean client (use --client httpx)")
        self.state = _BODY
        self.buf = b""
        if self.framing == _LENGTH and self.need == 0:
            self.state = _ENDED
            self._complete()
        elif rest:
            self._body(rest, now)

    def _body(self, data: bytes, now: float) -> None:
        framing = self.framing
        if framing == _CHUNKED:
            payload = self._dechunk(data)
        elif framing == _LENGTH:
            need = self.need
            if len(data) >= need:
                payload = data[:need] if len(data) > need else data
                if len(data) > need:
                    self.keep_alive = False  # bytes past the body: do not trust the connection again
                self.need = 0
                self.state = _ENDED
            else:
                payload = data
                self.need = need - len(data)
        else:
            payload = data
        if payload:
            if self.error_body is not None:
                self.error_body += payload
                if len(self.error_body) > ERROR_BODY_LIMIT:
                    self.keep_alive = False
                    raise RequestFailed(http_status_reason(self.status, bytes(self.error_body), self.reason))
            elif self.decomp is not None:
                self._inflate(payload, now)
            else:
                assert self.account is not None
                self.account.feed(payload, now)
        if self.state == _ENDED:
            self._complete()

    def _inflate(self, payload: bytes, now: float) -> None:
        """Decompress in steps of ``INFLATE_STEP``: a small compressed block can stand for gigabytes."""
        assert self.decomp is not None and self.account is not None
        decomp, feed = self.decomp, self.account.feed
        feed(decomp.decompress(payload, INFLATE_STEP), now)
        while decomp.unconsumed_tail:
            feed(decomp.decompress(decomp.unconsumed_tail, INFLATE_STEP), now)

    def _dechunk(self, data: bytes) -> bytes:
        """The chunk data in ``data``; sets ``state`` to ``_ENDED`` after the last chunk and its trailers."""
        buf = self.buf + data if self.buf else data
        pos, n = 0, len(buf)
        need = self.need
        parts: list[bytes] = []
        while pos < n:
            if need > 0:
                end = pos + need
                if end > n:
                    parts.append(buf[pos:] if pos else buf)
                    need -= n - pos
                    pos = n
                    break
                parts.append(buf[pos:end])
                pos = end
                need = _CRLF
            elif need == _CRLF:
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise RequestFailed("protocol error: chunk data not followed by CRLF")
                pos += 2
                need = _SIZE
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > 4096:
                        raise RequestFailed("protocol error: chunk size line too long")
                    break
                if need == _SIZE:
                    size = int(buf[pos:eol].split(b";", 1)[0], 16)
                    if size < 0:
                        raise RequestFailed("protocol error: negative chunk size")
                    need = size if size else _TRAILER
                elif eol == pos:  # the blank line after the trailers: the body is complete
                    pos += 2
                    self.state = _ENDED
                    if pos < n:
                        self.keep_alive = False
                    pos = n
                    break
                pos = eol + 2
        self.need = need
        self.buf = buf[pos:] if pos < n else b""
        if not parts:
            return b""
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _complete(self) -> None:
        """The body ended: the exchange succeeds or fails on what it received."""
        self.state = _ENDED
        try:
            if self.error_body is not None:
                raise RequestFailed(http_status_reason(self.status, bytes(self.error_body), self.reason))
            assert self.account is not None
            if self.decomp is not None:
                tail = self.decomp.flush()
                if tail:
                    self.account.feed(tail, self.last_rx)
            self.account.finish()
        except RequestFailed as exc:
            self._resolve(exc)
            return
        self._resolve(None)

    def _resolve(self, exc: BaseException | None) -> None:
        fut = self.fut
        reusable = self.state == _ENDED and self.keep_alive and not self.closed
        self._end()
        if not reusable:
            self._drop()
        if fut is not None and not fut.done():
            if exc is None:
                fut.set_result(None)
            else:
                fut.set_exception(exc)

    def _end(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.counted and self.gauge is not None:
            self.gauge.down()
        self.counted = False
        self.fut = None
        self.account = None

    def _drop(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class LeanClient:
    """One worker's client: a keep-alive connection to one server, opened on first use and re-opened
    whenever the server (or a failure) closed it. One request at a time."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None, connect_s: float = 10.0,
                 read_s: float = 60.0, ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the lean client needs an http:// or https:// URL with a host: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self.ssl = ssl_context or ssl.create_default_context()
        self.connect_s = connect_s
        self.read_s = read_s
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc.rpartition('@')[2]}",
                 f"User-Agent: {USER_AGENT}", "Accept: */*", "Accept-Encoding: identity",
                 "Connection: keep-alive", "Content-Type: application/json"]
        for name, value in (headers or {}).items():
            if any(ch in name + value for ch in "\r\n") or ":" in name:
                raise ValueError(f"header {name!r} has a line break or a colon in its name")
            if name.lower() not in ("content-type", "content-length", "host", "connection",
                                    "transfer-encoding"):
                lines.append(f"{name}: {value}")
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        self._conn: _Conn | None = None
        self.connections = 0
        """Connections opened so far (keep-alive reuse keeps this at 1 for a well-behaved server)."""

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        conn = _Conn(loop, self.read_s)
        try:
            async with asyncio.timeout(self.connect_s):
                await loop.create_connection(lambda: conn, self.host, self.port, ssl=self.ssl,
                                             server_hostname=self.host if self.ssl else None)
        except TimeoutError:
            conn._drop()
            raise RequestFailed(CONNECT_TIMEOUT) from None
        except OSError as exc:  # refused, unreachable, unknown host, TLS verification failed
            conn._drop()
            raise RequestFailed(f"connect error: {_short(str(exc) or type(exc).__name__, 80)}") from None
        self.connections += 1
        self._conn = conn
        return conn

    async def stream(self, body: bytes, est_prompt_tokens: int, chat: bool, t0: float, total_timeout_s: float,
                     gauge: Gauge | None = None, keep_text: bool = False) -> RequestOutcome:
        """Send one request and time its stream (as ``request.stream_request``); never raises except
        CancelledError."""
        out = RequestOutcome(t0=t0, prompt_tokens=est_prompt_tokens)
        try:
            async with asyncio.timeout(total_timeout_s):
                await self._exchange(body, chat, out, gauge, keep_text)
        except RequestFailed as exc:
            out.error = str(exc)
        except TimeoutError:
            out.error = f"timeout: total {total_timeout_s:g}s exceeded"
        out.end = perf_counter()
        out.success = out.error is None
        return out

    async def _exchange(self, body: bytes, chat: bool, out: RequestOutcome, gauge: Gauge | None,
                        keep_text: bool = False) -> None:
        conn = self._conn
        if conn is None or conn.closed or conn.transport is None or conn.transport.is_closing():
            conn = await self._connect()
        assert conn.transport is not None
        fut: asyncio.Future[None] = conn.loop.create_future()
        conn.begin(fut, StreamAccount(out, chat, keep_text), gauge)
        conn.transport.write(b"%s%d\r\n\r\n%s" % (self._head, len(body), body))
        try:
            await fut
        finally:
            conn.abandon(fut)

    def close(self) -> None:
        if self._conn is not None:
            self._conn._drop()
            self._conn = None
