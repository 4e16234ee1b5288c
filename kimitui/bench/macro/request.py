"""One streamed request, timed the way vLLM's benchmark times it.

``t0`` is taken by the caller once the concurrency slot is held. A *token chunk* is an SSE event whose
first choice carries a token: non-empty ``text`` (completions) or ``content``, ``reasoning_content``
(``reasoning``) or ``tool_calls`` (chat). A role-only delta (``{"role": "assistant"}``, which some
servers, transformers serve among them, send before they generate) and a content-free final chunk
(``finish_reason`` / ``usage`` only) are not: they would stop the TTFT clock early and add a gap that is
not between tokens. On vLLM the role and the first token arrive together, so nothing changes there.
Each token chunk's arrival is appended to ``times`` (the only per-chunk work besides parsing: one list
append); TTFT is the first arrival minus ``t0``, E2EL the last minus ``t0``, ITL the gaps between
successive arrivals. ``first_chunk`` keeps the arrival of the first chunk with any choice (the role
chunk, where there is one). A stream with choices but no token chunk at all (an output that is only an
end-of-sequence) is timed by its choice chunks instead.
Arrival is the time the byte block that completed the event was read, taken once per block (events that
arrive together share it). Output tokens come from ``usage.completion_tokens``;
without a usage chunk the request still succeeds and counts its non-empty content chunks (a lower bound),
flagged ``usage_missing``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from time import perf_counter

import httpx

from kimitui.bench.macro.sse import DONE, SSEDecoder, SSEOverflow
from kimitui.core.error_words import exc_words

_loads = json.loads
_scan_once = json.JSONDecoder().scan_once


def _parse(payload: bytes) -> object:
    """``json.loads(payload)``, with its exact accept/reject rules, minus its per-call wrappers (encoding
    detection, whitespace regexes: about a third of its cost on a short chunk): the C scanner parses the
    common case, anything else (whitespace, a BOM, trailing bytes, invalid JSON) goes to json.loads."""
    try:
        text = payload.decode()
        obj, end = _scan_once(text, 0)
    except (UnicodeDecodeError, StopIteration):
        return _loads(payload)
    return obj if end == len(text) else _loads(payload)


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
    times: list[float] = field(default_factory=list)
    """perf_counter at the arrival of each token chunk."""
    first_chunk: float = 0.0
    """perf_counter at the arrival of the first chunk with a choice (a role-only one counts; 0: none)."""
    output_tokens: int = 0
    prompt_tokens: int = 0
    prompt_from_usage: bool = False
    """``prompt_tokens`` is the server's ``usage.prompt_tokens`` (else the client's estimate)."""
    usage_missing: bool = False
    chunks: int = 0
    first_output: float = 0.0
    """perf_counter at the first token chunk that is no reasoning (content or a tool call; 0: none): a reasoning
    model's time to first output token (TTFO) is this, its TTFT the first chunk of either."""
    reasoning_chunks: int = 0
    """Token chunks that held reasoning only (``delta.reasoning``, or ``reasoning_content`` of older servers)."""
    reasoning_tokens: int | None = None
    """The server's ``usage.completion_tokens_details.reasoning_tokens`` where it gave them."""
    text: list[str] | None = None
    """The answer's content as it streamed, where it was asked for (a conversation's next turn sends it back)."""

    @property
    def itl(self) -> list[float]:
        """The gaps between successive token chunks, in seconds."""
        t = self.times
        return [t[i] - t[i - 1] for i in range(1, len(t))]


class Gauge:
    """Requests in flight, the concurrency the server actually sees (which a connection-pool cap would
    hold down). httpx: from the response's status line to its end (a request can wait inside its pool
    before that). The lean client: from writing the request on its own connection to the response's end."""

    __slots__ = ("active", "peak")

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0

    def up(self) -> None:
        self.active += 1
        if self.active > self.peak:
            self.peak = self.active

    def down(self) -> None:
        self.active -= 1


class RequestFailed(Exception):
    """A request failed; its message is the failure reason counted in the level's metrics."""


_Fail = RequestFailed


def _short(body: bytes | str, limit: int = 120) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def stream_request(client: httpx.AsyncClient, url: str, body: bytes, est_prompt_tokens: int,
                         chat: bool, t0: float, total_timeout_s: float, gauge: Gauge | None = None,
                         keep_text: bool = False) -> RequestOutcome:
    """Send one request and time its stream; never raises except CancelledError."""
    out = RequestOutcome(t0=t0, prompt_tokens=est_prompt_tokens)
    try:
        async with asyncio.timeout(total_timeout_s):
            await _run(client, url, body, chat, out, gauge or Gauge(), keep_text)
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
        out.error = f"connect error: {_short(exc_words(exc), 80)}"
    except httpx.RemoteProtocolError as exc:
        msg = str(exc)
        if "incomplete" in msg.lower() or "closed" in msg.lower() or "disconnect" in msg.lower():
            out.error = "stream closed early (before [DONE])"
        else:
            out.error = f"protocol error: {_short(msg, 80)}"
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {_short(str(exc), 80)}"
    except OSError as exc:
        out.error = f"{type(exc).__name__}: {_short(exc_words(exc), 80)}"
    out.end = perf_counter()
    out.success = out.error is None
    return out


async def _run(client: httpx.AsyncClient, url: str, body: bytes, chat: bool, out: RequestOutcome,
               gauge: Gauge, keep_text: bool = False) -> None:
    async with client.stream("POST", url, content=body,
                             headers={"content-type": "application/json"}) as resp:
        gauge.up()
        try:
            await _read(resp, chat, out, keep_text)
        finally:
            gauge.down()


async def _read(resp: httpx.Response, chat: bool, out: RequestOutcome, keep_text: bool = False) -> None:
    if resp.status_code != 200:
        raw = b""
        async for part in resp.aiter_raw():
            raw += part
            if len(raw) > 2048:
                break
        raise _Fail(http_status_reason(resp.status_code, raw, resp.reason_phrase))
    account = StreamAccount(out, chat, keep_text)
    feed = account.feed
    blocks = resp.aiter_bytes() if resp.headers.get("content-encoding") else resp.aiter_raw()
    async for block in blocks:
        feed(block, perf_counter())
    account.finish()


def http_status_reason(status: int, body: bytes, reason_phrase: str) -> str:
    """The failure reason of a response that is not 200: its status and the start of its body."""
    return f"HTTP {status}: {_short(body) or reason_phrase}"


class StreamAccount:
    """The per-request accounting of one streamed 200 response, shared by both HTTP clients.

    ``feed(block, now)`` takes a block of body bytes (transfer framing removed) and the perf_counter at
    which it was read; it splits the SSE events and times every token chunk at ``now``. It raises
    ``_Fail`` on a malformed event or an error event. ``finish()`` at the end of the body checks that the
    stream ended properly and fills the outcome (TTFT, E2EL, token count).
    """

    __slots__ = ("_chat", "_completion_tokens", "_content_chunks", "_last_choice", "_out", "chunks", "decoder",
                 "done", "usage_seen")

    def __init__(self, out: RequestOutcome, chat: bool, keep_text: bool = False) -> None:
        self._out = out
        self._chat = chat
        if keep_text:
            out.text = []
        self.decoder = SSEDecoder()
        self.done = False
        self.usage_seen = False
        self._completion_tokens = 0
        self._content_chunks = 0
        self._last_choice = 0.0
        self.chunks = 0

    def feed(self, block: bytes, now: float) -> None:
        try:
            payloads = self.decoder.feed(block)
        except SSEOverflow as exc:
            raise _Fail(str(exc)) from None
        if not payloads:
            return
        out = self._out
        chat = self._chat
        arrived = out.times.append
        chunks = self.chunks
        content_chunks = self._content_chunks
        try:
            for payload in payloads:
                if payload == DONE:
                    self.done = True
                    continue
                try:
                    obj = _parse(payload)
                    choices = obj.get("choices")  # type: ignore[attr-defined]
                except (ValueError, AttributeError):
                    raise _Fail(f"malformed SSE: {_short(payload, 60)}") from None
                if choices:
                    if not chunks:
                        out.first_chunk = now
                    chunks += 1
                    try:
                        c0 = choices[0]
                        if chat:
                            delta = c0["delta"]
                            text = delta.get("content")
                            if text or delta.get("tool_calls"):
                                arrived(now)
                                if not out.first_output:
                                    out.first_output = now
                                if text and out.text is not None:
                                    out.text.append(text)
                            elif delta.get("reasoning") or delta.get("reasoning_content"):
                                arrived(now)
                                out.reasoning_chunks += 1
                        else:
                            text = c0.get("text")
                            if text:
                                arrived(now)
                    except (KeyError, TypeError, AttributeError, IndexError):
                        text = None
                    if text:
                        content_chunks += 1
                usage = obj.get("usage")
                if usage:
                    self.usage_seen = True
                    if isinstance(usage.get("completion_tokens"), int):
                        self._completion_tokens = usage["completion_tokens"]
                    if isinstance(usage.get("prompt_tokens"), int):
                        out.prompt_tokens = usage["prompt_tokens"]
                        out.prompt_from_usage = True
                    details = usage.get("completion_tokens_details")
                    if isinstance(details, dict) and type(details.get("reasoning_tokens")) is int:
                        out.reasoning_tokens = details["reasoning_tokens"]
                elif not choices and obj.get("error"):
                    err = obj["error"]
                    msg = err.get("message", err) if isinstance(err, dict) else err
                    raise _Fail(f"server error in stream: {_short(str(msg), 80)}")
        finally:
            if chunks != self.chunks:
                self._last_choice = now
            self.chunks = chunks
            self._content_chunks = content_chunks

    def finish(self) -> None:
        try:
            rest = self.decoder.flush()
        except SSEOverflow as exc:
            raise _Fail(str(exc)) from None
        for payload in rest:
            if payload == DONE:
                self.done = True
        done = self.done or self.usage_seen
        out = self._out
        times = out.times
        if not times and self.chunks:  # choices but no token in them: time the stream by its choice chunks
            times += [out.first_chunk] if self._last_choice == out.first_chunk else [out.first_chunk,
                                                                                   self._last_choice]
        if not times:
            raise _Fail("no token chunk before the end of the stream" if done
                        else "stream closed early (before [DONE])")
        if not done:
            raise _Fail("stream closed early (before [DONE])")
        out.chunks = self.chunks
        out.ttft = times[0] - out.t0
        out.latency = times[-1] - out.t0
        if not self._chat and times:
            out.first_output = times[0]  # a completion has no reasoning: its first token is its first output
        if self.usage_seen and self._completion_tokens:
            out.output_tokens = self._completion_tokens
        else:
            out.usage_missing = True
            out.output_tokens = self._content_chunks + out.reasoning_chunks
