"""What every HTTP client of a sweep shares: headers, the TLS context, the httpx pool shape."""

from __future__ import annotations

import ssl

from kimitui.bench.macro.config import MacroConfig

POOL_SHARD = 1
"""Connections per httpx client: one client per worker (see ``shard_sizes``)."""

_SSL: list[ssl.SSLContext] = []


def headers(cfg: MacroConfig) -> dict[str, str]:
    out = dict(cfg.headers)
    if cfg.api_key:
        out["authorization"] = f"Bearer {cfg.api_key}"
    return out


def ssl_context() -> ssl.SSLContext:
    """One verifying context for every client (building one costs tens of milliseconds)."""
    if not _SSL:
        _SSL.append(ssl.create_default_context())
    return _SSL[0]


def shard_sizes(c: int, shard: int) -> list[int]:
    """Pool sizes of the clients of a level: ``c`` connections in all, at most ``shard`` a client, and
    worker ``j`` uses client ``j % len(sizes)`` (so each client has exactly as many workers as
    connections). httpcore's pool scans every connection (and checks each for expiry) for every queued
    request on each request and each release: quadratic in the pool size. Measured on 2 cores, 4 tokens
    a chunk: one pool of 64 reached 16 streams at once and 19k tok/s; pools of 1 reached 64 and 27k tok/s
    (256: 256 streams, 40k tok/s)."""
    k = -(-c // shard)
    return [c // k + (1 if i < c % k else 0) for i in range(k)]
