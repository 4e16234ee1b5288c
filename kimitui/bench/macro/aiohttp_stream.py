"""aiohttp as a third HTTP client of the load generator, measured beside the lean one in benchmarks/loadgen.py
(issue 36 item 5: the hand-written client stays only while it is at least 2x cheaper in CPU at equal fidelity).

The same accounting as the other two (``StreamAccount``: every body block timed as it is read, the same SSE
decoder, the same failure reasons), one ``aiohttp.ClientSession`` per shard of connections as httpx has.
aiohttp comes with the ``serve`` extra; without it ``MacroConfig.validate`` says so in one line.

Measured on 2 cores, quiet (``benchmarks/loadgen.py --quick``, 2026-12-05; the figures in http_stream.py's
docstring): the hand-written client is 1.0-1.9x cheaper in CPU per chunk, and times chunks closer to their arrival
(added ITL p99 at c=64 0.40-1.03 against 1.84-2.44 ms; one-way delay median 0.16 against 0.38-0.46 ms): here a
block reaches ``_read`` one pass of the event loop after aiohttp's protocol received it. It stays the default for
that fidelity; this one is the library beside it (``--client aiohttp``).
"""

from __future__ import annotations

import asyncio
import ssl
from time import perf_counter
from typing import Any

from kimitui.bench.macro.request import (
    Gauge,
    RequestFailed,
    RequestOutcome,
    StreamAccount,
    _short,
    http_status_reason,
)
from kimitui.core.error_words import exc_words


class AiohttpStream:
    """One aiohttp session of ``n`` connections, with the lean client's ``stream`` signature."""

    __slots__ = ("session", "url")

    def __init__(self, url: str, n: int, headers: dict[str, str], connect_s: float, read_s: float,
                 ssl_context: ssl.SSLContext) -> None:
        import aiohttp

        self.url = url
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=n, ssl=ssl_context), headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_s, sock_read=read_s))

    async def close(self) -> None:
        await self.session.close()

    async def stream(self, body: bytes, est_prompt_tokens: int, chat: bool, t0: float, total_timeout_s: float,
                     gauge: Gauge | None = None, keep_text: bool = False) -> RequestOutcome:
        import aiohttp

        out = RequestOutcome(t0=t0, prompt_tokens=est_prompt_tokens)
        gauge = gauge or Gauge()
        try:
            async with asyncio.timeout(total_timeout_s):
                await self._run(body, chat, out, gauge, keep_text)
        except RequestFailed as exc:
            out.error = str(exc)
        except aiohttp.ConnectionTimeoutError:
            out.error = "timeout: connect"
        except aiohttp.ServerTimeoutError:  # a TimeoutError too: before the total's
            out.error = "timeout: read (no data between chunks)"
        except TimeoutError:
            out.error = f"timeout: total {total_timeout_s:g}s exceeded"
        except aiohttp.ClientConnectorError as exc:
            out.error = f"connect error: {_short(exc_words(exc.os_error), 80)}"
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
            out.error = "stream closed early (before [DONE])"
        except aiohttp.ClientError as exc:
            out.error = f"{type(exc).__name__}: {_short(str(exc), 80)}"
        except OSError as exc:
            out.error = f"{type(exc).__name__}: {_short(exc_words(exc), 80)}"
        out.end = perf_counter()
        out.success = out.error is None
        return out

    async def _run(self, body: bytes, chat: bool, out: RequestOutcome, gauge: Gauge, keep_text: bool = False) -> None:
        # in flight from the request's send to its end, as the lean client counts (a server that answers at
        # once would otherwise never show two at a time)
        gauge.up()
        try:
            async with self.session.post(self.url, data=body, headers={"content-type": "application/json"}) as resp:
                await _read(resp, chat, out, keep_text)
        finally:
            gauge.down()


async def _read(resp: Any, chat: bool, out: RequestOutcome, keep_text: bool = False) -> None:
    if resp.status != 200:
        raw = await resp.content.read(2049)
        raise RequestFailed(http_status_reason(resp.status, raw, resp.reason or ""))
    account = StreamAccount(out, chat, keep_text)
    feed = account.feed
    async for block in resp.content.iter_any():
        feed(block, perf_counter())
    account.finish()
