"""The lean HTTP client (kimitui/bench/macro/http_stream.py): body framings at any read boundaries,
keep-alive reuse and reconnects, error bodies, https, connect timeout, cancel, and the httpx fallback."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import random
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.bench.macro import LevelProgress, MacroConfig, Timeouts, run_sweep
from kimitui.bench.macro.http_stream import LeanClient, _Conn, lean_unsupported
from kimitui.bench.macro.request import Gauge, RequestOutcome, StreamAccount
from kimitui.core.events import Event, LogLine, PhaseStart
from kimitui.phases.macro import macro_phase
from tests.faulty_server import Behavior, FaultyServer
from tests.waiting import DEADLINE_S


@pytest.fixture(params=["lean", "httpx"])
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


BODY = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 6, "stream": True}).encode()


def _events(n: int) -> list[bytes]:
    ev = [b'data: {"choices": [{"index": 0, "text": " t%d"}]}\n\n' % i for i in range(n)]
    ev.append(b'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": %d}}\n\n' % n)
    ev.append(b"data: [DONE]\n\n")
    return ev


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


def _response(framing: str) -> bytes:
    events = _events(5)
    if framing == "chunked":
        body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\nX-Trailer: 1\r\n\r\n"
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    body = b"".join(events)
    if framing == "length":
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    return b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
@pytest.mark.parametrize("seed", range(4))
async def test_parser_any_read_boundaries(framing: str, seed: int) -> None:
    """The response cut into random reads (1 to 40 bytes): the same outcome, the connection kept only
    when the framing allows it."""
    loop = asyncio.get_running_loop()
    raw = _response(framing)
    rng = random.Random(seed)
    conn = _Conn(loop, 60.0)
    transport = _Transport()
    conn.transport = transport  # type: ignore[assignment]
    out = RequestOutcome(t0=time.perf_counter())
    fut: asyncio.Future[None] = loop.create_future()
    gauge = Gauge()
    conn.begin(fut, StreamAccount(out, False), gauge)
    i = 0
    while i < len(raw):
        n = rng.randint(1, 40)
        conn.data_received(raw[i:i + n])
        i += n
    if framing == "close":
        assert not fut.done()
        conn.eof_received()
    assert fut.done() and fut.exception() is None
    assert out.output_tokens == 5 and out.chunks == 5 and out.prompt_tokens == 2 and not out.usage_missing
    assert len(out.itl) == 4 and out.ttft >= 0
    assert gauge.active == 0 and gauge.peak == 1
    assert transport.aborted is (framing == "close")  # chunked and Content-Length bodies keep the connection


async def test_parser_rejects_a_bad_chunk_size() -> None:
    loop = asyncio.get_running_loop()
    conn = _Conn(loop, 60.0)
    conn.transport = _Transport()  # type: ignore[assignment]
    fut: asyncio.Future[None] = loop.create_future()
    conn.begin(fut, StreamAccount(RequestOutcome(t0=0.0), False), None)
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
    exc = fut.exception()
    assert exc is not None and str(exc).startswith("protocol error: ")


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
async def test_framings_and_keep_alive_reuse(client: str, framing: str) -> None:
    """Each worker keeps one connection across its requests (chunked and Content-Length bodies); a
    close-delimited body costs a new connection per request, and every request still succeeds."""
    async with FaultyServer(Behavior(framing=framing, n_tokens=6)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[2], requests=8, max_tokens=6, warmup=0,
                          client=client)  # type: ignore[arg-type]
        before: list[tuple[int, int]] = []  # (requests, connections) when the level starts (after calibration)

        def progress(p: LevelProgress) -> None:
            if not before:
                before.append((srv.stats.requests, srv.stats.connections))

        m = (await run_sweep(cfg, lambda e: None, progress)).levels[0].metrics
        assert srv.stats.requests - before[0][0] == 8
        assert srv.stats.connections - before[0][1] == (8 if framing == "close" else 2)
    assert m["completed"] == 8 and m["failed"] == 0 and m["total_output_tokens"] == 48
    assert m["usage_missing"] == 0 and m["mean_itl_ms"] >= 0


async def test_lean_reconnects_after_the_server_closed_and_after_a_failure() -> None:
    async with FaultyServer(Behavior(n_tokens=3)) as srv:
        lean = LeanClient(srv.url + "/v1/completions")
        try:
            first = await lean.stream(BODY, 1, False, time.perf_counter(), DEADLINE_S)
            srv.behavior = Behavior(mode="truncate", fail_after=1)
            broken = await lean.stream(BODY, 1, False, time.perf_counter(), DEADLINE_S)
            srv.behavior = Behavior(n_tokens=3)
            again = await lean.stream(BODY, 1, False, time.perf_counter(), DEADLINE_S)
            again2 = await lean.stream(BODY, 1, False, time.perf_counter(), DEADLINE_S)
        finally:
            lean.close()
        assert srv.stats.connections == 2  # the truncated stream closed the first one
    assert first.success and again.success and again2.success and first.output_tokens == 3
    assert broken.error == "stream closed early (before [DONE])"
    assert lean.connections == 2


async def test_long_error_body_is_cut(client: str) -> None:
    async with FaultyServer(Behavior(mode="status", status=503, body="overloaded " * 500)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[2], requests=4, max_tokens=4, warmup=0,
                          client=client)  # type: ignore[arg-type]
        m = (await run_sweep(cfg, lambda e: None)).levels[0].metrics
    (reason, count), = m["failures"].items()
    assert count == 4 and reason.startswith("HTTP 503: overloaded overloaded") and reason.endswith("...")
    assert len(reason) <= len("HTTP 503: ") + 120


async def test_total_timeout_mid_stream_frees_the_gauge_and_the_connection() -> None:
    async with FaultyServer(Behavior(interval_s=0.05, n_tokens=40)) as srv:
        lean = LeanClient(srv.url + "/v1/completions")
        gauge = Gauge()
        try:
            out = await lean.stream(BODY, 1, False, time.perf_counter(), 0.2, gauge)
            assert out.error == "timeout: total 0.2s exceeded"
            assert gauge.active == 0 and gauge.peak == 1
            srv.behavior = Behavior(n_tokens=2)
            ok = await lean.stream(BODY, 1, False, time.perf_counter(), DEADLINE_S, gauge)
        finally:
            lean.close()
    assert ok.success and ok.output_tokens == 2 and lean.connections == 2 and gauge.active == 0


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A self-signed certificate for 127.0.0.1 (the cryptography package is a dependency of the venv)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    d = tmp_path_factory.mktemp("tls")
    cert_path, key_path = d / "cert.pem", d / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    yield cert_path, key_path


async def test_https_with_a_trusted_self_signed_certificate(tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    async with FaultyServer(Behavior(n_tokens=4, crlf=True), ssl=server_ctx) as srv:
        assert srv.url.startswith("https://")
        lean = LeanClient(srv.url + "/v1/completions", ssl_context=client_ctx)
        try:
            outs = [await lean.stream(BODY, 1, False, time.perf_counter(), DEADLINE_S) for _ in range(3)]
        finally:
            lean.close()
        assert srv.stats.connections == 1
    assert all(o.success and o.output_tokens == 4 and len(o.itl) == 3 for o in outs), outs


async def test_https_certificate_not_trusted_is_a_connect_error(client: str, tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    async with FaultyServer(Behavior(n_tokens=2), ssl=server_ctx) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[2], requests=2, max_tokens=2, warmup=0,
                          client=client)  # type: ignore[arg-type]
        m = (await run_sweep(cfg, lambda e: None)).levels[0].metrics
    (reason, count), = m["failures"].items()
    assert count == 2 and reason.startswith("connect error: ") and "CERTIFICATE_VERIFY_FAILED" in reason


async def test_connect_timeout(client: str) -> None:
    """A listener whose accept queue is full drops new SYNs: the connect hangs until the timeout."""
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(0)
        port = lst.getsockname()[1]
        fillers = []
        try:
            for _ in range(4):  # fill the accept queue (never accepted)
                s = socket.socket()
                s.setblocking(False)
                try:
                    s.connect(("127.0.0.1", port))
                except BlockingIOError:
                    pass
                fillers.append(s)
            cfg = MacroConfig(url=f"http://127.0.0.1:{port}", model="m", concurrency=[2], requests=2, max_tokens=2,
                              warmup=0, timeouts=Timeouts(connect_s=0.3, read_s=2, total_s=5),
                              client=client)  # type: ignore[arg-type]
            m = (await run_sweep(cfg, lambda e: None)).levels[0].metrics
        finally:
            for s in fillers:
                s.close()
    # every request gave up at its connect timeout, which the failure names (not the read or total timeout)
    assert m["failures"] == {"timeout: connect": 2}


async def test_proxy_in_the_environment_falls_back_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a proxy nobody listens on: httpx goes there and fails to connect
        s.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{s.getsockname()[1]}"
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("http_proxy", proxy)
    assert lean_unsupported("https://127.0.0.1:1") is None  # no proxy for https
    reason = lean_unsupported("http://127.0.0.1:1")
    assert reason is not None and proxy in reason
    events: list[Event] = []
    async with FaultyServer(Behavior(n_tokens=2)) as srv:
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1], requests=1, max_tokens=2, warmup=0,
                          timeouts=Timeouts(connect_s=2, read_s=2, total_s=5))
        m = (await macro_phase(events.append, cfg, asyncio.Event())).levels[0].metrics
        assert srv.stats.requests == 0  # httpx went to the proxy
    (start,) = [e for e in events if isinstance(e, PhaseStart)]
    assert start.title.endswith("httpx client")
    assert any(isinstance(e, LogLine) and "lean HTTP client not usable" in e.message for e in events)
    (failure,) = m["failures"]
    assert failure.startswith("connect error")


async def test_the_httpx_fallback_finds_sniffio_installed() -> None:
    """sniffio is a declared dependency: httpcore's ``import sniffio`` for each lock and event of a request
    is a look-up, not a failing search of sys.path, and nothing stands in for the module."""
    import importlib.util
    import sys

    import httpx

    async with FaultyServer(Behavior(n_tokens=3)) as srv, httpx.AsyncClient() as http:
        response = await http.get(srv.url + "/v1/models")
        assert response.status_code in (200, 404)
    assert importlib.util.find_spec("sniffio") is not None
    assert sys.modules.get("sniffio") is not None  # httpcore imported the real module
