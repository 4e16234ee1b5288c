"""The per-request distributions of a macro level, folded from its ``MacroRequests`` events."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from kimitui.core.events import MacroRequests
from kimitui.core.figures import request_tpot
from kimitui.core.typed import finite


@dataclass(slots=True)
class LevelRequests:
    """The per-request distributions of one macro level (from its ``MacroRequests`` events), in ms."""

    origin: float
    total: int
    received: int = 0
    failed: int = 0
    ttft_ms: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)
    """Only requests with more than one output token (vLLM's TPOT)."""
    input_tokens: list[int] = field(default_factory=list)


def fold_requests(levels: dict[int, LevelRequests], ev: MacroRequests) -> None:
    """Add a batch of records to its level in LEVELS (by concurrency)."""
    level = levels.get(ev.concurrency)
    if level is None or level.origin != ev.origin:  # a new level (or a new sweep) at this concurrency
        level = levels[ev.concurrency] = LevelRequests(ev.origin, ev.total)
    for r in ev.requests:
        level.received += 1
        chunks = r.get("chunk_ms") or []
        if r.get("error") is not None or not chunks or not isinstance(chunks, list):
            level.failed += 1
            continue
        first, last = finite(chunks[0]), finite(chunks[-1])  # plain JSON, not checked when decoded
        if first is None or last is None:  # a malformed record: no time to show
            continue
        level.ttft_ms.append(first)
        tokens_in = r.get("in", 0)
        level.input_tokens.append(tokens_in if type(tokens_in) is int else 0)
        out = finite(r.get("out", 0))
        tpot = request_tpot(first, last, out)
        if tpot is not None and math.isfinite(tpot):
            level.tpot_ms.append(tpot)


def level_requests(events: Iterable[MacroRequests]) -> LevelRequests | None:
    """The per-request distributions of one level's ``MacroRequests`` events (the last level among them)."""
    levels: dict[int, LevelRequests] = {}
    for ev in events:
        fold_requests(levels, ev)
    return next(reversed(levels.values()), None)
