"""aiohttp as a third HTTP client of the load generator, measured beside the lean one in benchmarks/loadgen.py
(issue 36 item 5: the hand-written client stays only while it is at least 2x cheaper in CPU at equal fidelity).

The same accounting as the other two (``StreamAccount``: every body block timed as it is read, the same SSE
decoder, the same failure reasons), one ``aiohttp.ClientSession`` per shard of connections as httpx has.
aiohttp comes with the ``serve`` extra; without it ``MacroConfig.validate`` says so in one line.

Measured on 2 cores, quiet (``benchmarks/loadgen.py --quick``, 2026-12-05), client CPU per chunk lean / aiohttp /
httpx: burst server c=64 4.20 / 4.20 / 9.22 us, c=256 2.00 / 2.74 / 8.95 us; sim server c=64 2.88 / 3.08 / 4.30
us, c=256 1.99 / 2.28 / 3.70 us. Added ITL at c=64 (stamped server) median 0.106 / 0.109 / 0.219 ms, p99 1.76 /
1.81 / 10.2 ms; one-way delay median 0.195 / 0.485 / 0.665 ms. The hand-written client is 1.0-1.4x cheaper than
aiohttp, not the 2x that would keep it (issue 36 item 5): it is to give way to aiohttp.
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
                     gauge: Gauge | None = None) -> RequestOutcome:
        import aiohttp

        out = RequestOutcome(t0=t0, prompt_tokens=est_prompt_tokens)
        gauge = gauge or Gauge()
        try:
            async with asyncio.timeout(total_timeout_s):
                await self._run(body, chat, out, gauge)
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

    async def _run(self, body: bytes, chat: bool, out: RequestOutcome, gauge: Gauge) -> None:
        # in flight from the request's send to its end, as the lean client counts (a server that answers at
        # once would otherwise never show two at a time)
        gauge.up()
        try:
            async with self.session.post(self.url, data=body, headers={"content-type": "application/json"}) as resp:
                await _read(resp, chat, out)
        finally:
            gauge.down()


async def _read(resp: Any, chat: bool, out: RequestOutcome) -> None:
    if resp.status != 200:
        raw = await resp.content.read(2049)
        raise RequestFailed(http_status_reason(resp.status, raw, resp.reason or ""))
    account = StreamAccount(out, chat)
    feed = account.feed
    async for block in resp.content.iter_any():
        feed(block, perf_counter())
    account.finish()
