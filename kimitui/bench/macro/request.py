"""One streamed request, timed the way vLLM's benchmark times it.

``t0`` is taken by the caller once the concurrency slot is held. A *token chunk* is an SSE event whose
``choices`` is non-empty (vLLM's rule: its role-only first chat chunk counts too). TTFT is the first
token chunk's arrival minus ``t0``; E2EL the last token chunk's arrival minus ``t0``; ITL the gaps between
successive token chunks. Arrival is the time the byte block that completed the event was read, taken
once per block (events that arrive together share it). Output tokens come from ``usage.completion_tokens``;
without a usage chunk the request still succeeds and counts its non-empty content chunks (a lower bound),
flagged ``usage_missing``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from time import perf_counter

import httpx

from kimitui.bench.macro.sse import DONE, SSEDecoder

_loads = json.loads

if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
    # httpcore runs ``import sniffio`` for every lock and event it creates; when sniffio is not installed
    # each attempt searches sys.path again (about a third of a millisecond, several per request). A None
    # entry makes the failing import immediate; httpcore then assumes asyncio, which is what runs here.
    sys.modules["sniffio"] = None  # type: ignore[assignment]


@dataclass(slots=True)
class RequestOutcome:
    t0: float
    end: float = 0.0
    """perf_counter when the request finished (success or failure)."""
    success: bool = False
    error: str | None = None
    ttft: float = 0.0
    latency: float = 0.0
    """E2EL: last token chunk minus t0."""
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    usage_missing: bool = False
    chunks: int = 0


class Gauge:
    """Requests whose response has started (status line received) and not yet ended: the concurrency
    the server actually sees, which a connection-pool cap would hold down."""

    __slots__ = ("active", "peak")

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0


class _Fail(Exception):
    pass


def _short(body: bytes | str, limit: int = 120) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def stream_request(client: httpx.AsyncClient, url: str, body: bytes, est_prompt_tokens: int,
                         chat: bool, t0: float, total_timeout_s: float, gauge: Gauge | None = None) -> RequestOutcome:
    """Send one request and time its stream; never raises except CancelledError."""
    out = RequestOutcome(t0=t0, prompt_tokens=est_prompt_tokens)
    try:
        async with asyncio.timeout(total_timeout_s):
            await _run(client, url, body, chat, out, gauge or Gauge())
    except _Fail as exc:
        out.error = str(exc)
    except TimeoutError:
        out.error = f"timeout: total {total_timeout_s:g}s exceeded"
    except httpx.ReadTimeout:
        out.error = "timeout: read (no data between chunks)"
    except httpx.ConnectTimeout:
        out.error = "timeout: connect"
    except httpx.PoolTimeout:
        out.error = "timeout: connection pool"
    except httpx.ConnectError as exc:
        out.error = f"connect error: {_short(str(exc) or type(exc).__name__, 80)}"
    except httpx.RemoteProtocolError as exc:
        msg = str(exc)
        if "incomplete" in msg.lower() or "closed" in msg.lower() or "disconnect" in msg.lower():
            out.error = "stream closed early (before [DONE])"
        else:
            out.error = f"protocol error: {_short(msg, 80)}"
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {_short(str(exc), 80)}"
    except OSError as exc:
        out.error = f"{type(exc).__name__}: {_short(str(exc), 80)}"
    out.end = perf_counter()
    out.success = out.error is None
    return out


async def _run(client: httpx.AsyncClient, url: str, body: bytes, chat: bool, out: RequestOutcome,
               gauge: Gauge) -> None:
    async with client.stream("POST", url, content=body,
                             headers={"content-type": "application/json"}) as resp:
        gauge.active += 1
        if gauge.active > gauge.peak:
            gauge.peak = gauge.active
        try:
            await _read(resp, chat, out)
        finally:
            gauge.active -= 1


async def _read(resp: httpx.Response, chat: bool, out: RequestOutcome) -> None:
    t0 = out.t0
    if resp.status_code != 200:
        raw = b""
        async for part in resp.aiter_raw():
            raw += part
            if len(raw) > 2048:
                break
        raise _Fail(f"HTTP {resp.status_code}: {_short(raw) or resp.reason_phrase}")
    decoder = SSEDecoder()
    feed = decoder.feed
    itl = out.itl
    itl_append = itl.append
    first = last = 0.0
    have_first = False
    done = False
    usage_seen = False
    completion_tokens = 0
    content_chunks = 0
    chunks = 0
    blocks = resp.aiter_bytes() if resp.headers.get("content-encoding") else resp.aiter_raw()
    async for block in blocks:
        now = perf_counter()
        for payload in feed(block):
            if payload == DONE:
                done = True
                continue
            try:
                obj = _loads(payload)
                choices = obj.get("choices")
            except (ValueError, AttributeError):
                raise _Fail(f"malformed SSE: {_short(payload, 60)}") from None
            if choices:
                chunks += 1
                if have_first:
                    itl_append(now - last)
                else:
                    have_first = True
                    first = now
                last = now
                try:
                    c0 = choices[0]
                    text = c0["delta"].get("content") if chat else c0.get("text")
                except (KeyError, TypeError, AttributeError, IndexError):
                    text = None
                if text:
                    content_chunks += 1
            usage = obj.get("usage")
            if usage:
                usage_seen = True
                if isinstance(usage.get("completion_tokens"), int):
                    completion_tokens = usage["completion_tokens"]
                if isinstance(usage.get("prompt_tokens"), int):
                    out.prompt_tokens = usage["prompt_tokens"]
            elif not choices and obj.get("error"):
                err = obj["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                raise _Fail(f"server error in stream: {_short(str(msg), 80)}")
    for payload in decoder.flush():
        if payload == DONE:
            done = True
    if not have_first:
        raise _Fail("no token chunk before the end of the stream" if done or usage_seen
                    else "stream closed early (before [DONE])")
    if not (done or usage_seen):
        raise _Fail("stream closed early (before [DONE])")
    out.chunks = chunks
    out.ttft = first - t0
    out.latency = last - t0
    if usage_seen and completion_tokens:
        out.output_tokens = completion_tokens
    else:
        out.usage_missing = True
        out.output_tokens = content_chunks
