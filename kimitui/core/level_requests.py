"""The per-request distributions of a macro level, folded from its ``MacroRequests`` events."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kimitui.core.events import MacroRequests
from kimitui.core.figures import request_tpot


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
    ttfo_ms: list[float] = field(default_factory=list)
    """A reasoning model's time to its first output token, over the requests that answered."""


def fold_requests(levels: dict[Any, LevelRequests], ev: MacroRequests) -> None:
    """Add a batch of records to its level in LEVELS (by rate where it has one, else by concurrency)."""
    key = ev.rate if ev.rate is not None else ev.concurrency
    level = levels.get(key)
    if level is None or level.origin != ev.origin:  # a new level (or a new sweep) at this concurrency
        level = levels[key] = LevelRequests(ev.origin, ev.total)
    for r in ev.records(keep_malformed=True):
        level.received += 1
        if r is None:  # a malformed record (a damaged or hostile file): no time to show
            continue
        if not r.success or not r.chunk_ms:
            level.failed += 1
            continue
        level.ttft_ms.append(r.ttft_ms)
        level.input_tokens.append(r.input_tokens)
        if (ttfo := r.ttfo_ms) is not None:
            level.ttfo_ms.append(ttfo)
        tpot = request_tpot(r.ttft_ms, r.e2el_ms, r.output_tokens)
        if tpot is not None and math.isfinite(tpot):
            level.tpot_ms.append(tpot)


def level_requests(events: Iterable[MacroRequests]) -> LevelRequests | None:
    """The per-request distributions of one level's ``MacroRequests`` events (the last level among them)."""
    levels: dict[int, LevelRequests] = {}
    for ev in events:
        fold_requests(levels, ev)
    return next(reversed(levels.values()), None)
