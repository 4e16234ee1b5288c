"""Request fields found, not assumed: before the sweep, one short request with every field the load
generator sends; a 4xx whose body names optional fields we sent (vLLM's ``ignore_eos``, ``stream_options``,
...) is retried without them, and the run goes without them (``MacroConfig.omit_fields``).

transformers serve, for one, answers ``HTTP 422 {"detail": "Unexpected fields in the request:
{'ignore_eos'}"}`` to every request that carries ``ignore_eos``. Only the fields in ``OPTIONAL_FIELDS`` are
ever dropped: a server that refuses the model, the prompt or ``max_tokens`` fails the sweep as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from kimitui.bench.macro.config import MacroConfig
from kimitui.bench.macro.prompts import PromptSource
from kimitui.bench.macro.request import http_status_reason
from kimitui.bench.macro.transport import headers, ssl_context

OPTIONAL_FIELDS = ("ignore_eos", "stream_options", "max_completion_tokens")
"""Fields the figures can do without (``describe.FIELD_CONSEQUENCES`` says what each costs)."""
PROBE_TEXT = "Hello"
ERROR_BODY_LIMIT = 4096
"""Bytes of a refusal read to find the fields it names."""


@dataclass(frozen=True, slots=True)
class FieldCheck:
    dropped: tuple[str, ...] = ()
    """The optional fields the server refused, in the order found."""
    reason: str = ""
    """The first refusal that named them (``HTTP 422: ...``); empty when none was dropped."""


def named_fields(body: str, sent: Iterable[str]) -> list[str]:
    """The optional fields of ``sent`` that an error body names (as a whole word: ``ignore_eos`` is not
    named by ``ignore_eos_x``)."""
    return [name for name in OPTIONAL_FIELDS if name in set(sent)
            and re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", body)]


async def _refusal(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> tuple[int, bytes]:
    """The status and the start of the body of a 4xx answer; (status, b"") for any other answer (read to
    its end: a one-token stream, so that the server is not left holding it)."""
    async with client.stream("POST", url, content=json.dumps(body).encode(),
                             headers={"content-type": "application/json"}) as resp:
        if not 400 <= resp.status_code < 500:
            async for _ in resp.aiter_raw():
                pass
            return resp.status_code, b""
        raw = b""
        async for part in resp.aiter_bytes():
            raw += part
            if len(raw) >= ERROR_BODY_LIMIT:
                break
        return resp.status_code, raw[:ERROR_BODY_LIMIT]


async def check_fields_or_cancel(cfg: MacroConfig, model: str, cancel: asyncio.Event) -> FieldCheck:
    """``check_fields``, given up (nothing dropped) when ``cancel`` is set first."""
    check = asyncio.ensure_future(check_fields(cfg, model))
    stop = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait({check, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not check.done():
            check.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await check
    return FieldCheck() if check.cancelled() else check.result()


async def check_fields(cfg: MacroConfig, model: str) -> FieldCheck:
    """Send one short request as the sweep would; while the server refuses it naming optional fields we
    sent, leave them out and send it again (each field is dropped once; at most one retry per field).
    A server that cannot be reached or fails otherwise is left to the sweep to report."""
    builder = PromptSource(cfg, model, None, stream=-1)
    url = cfg.base_url + cfg.endpoint_path
    dropped: list[str] = []
    reason = ""
    timeout = httpx.Timeout(cfg.timeouts.connect_s, read=cfg.timeouts.read_s)
    async with httpx.AsyncClient(timeout=timeout, headers=headers(cfg), verify=ssl_context()) as client:
        for _ in range(len(OPTIONAL_FIELDS)):
            body = builder.body(PROBE_TEXT, None, 1)
            for name in dropped:
                body.pop(name, None)
            try:
                async with asyncio.timeout(cfg.timeouts.total_s):
                    status, raw = await _refusal(client, url, body)
            except (httpx.HTTPError, OSError, TimeoutError):
                break
            named = named_fields(raw.decode("utf-8", "replace"), body)
            if not named:
                break
            dropped += named
            reason = reason or http_status_reason(status, raw, "")
    return FieldCheck(tuple(dropped), reason)
