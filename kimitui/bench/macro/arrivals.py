"""When each request of an open-loop level is due, as offsets in seconds from the level's start.

Follows vLLM's ``get_request`` (``vllm bench serve``): the gap before each request is drawn from a gamma
distribution of shape ``burstiness`` and scale ``1 / (rate * burstiness)`` (burstiness 1: exponential
gaps, a Poisson process), the first request included; the offsets are the running sums. With a fixed
rate and a known count, the offsets are rescaled so that the last one is ``count / rate`` (vLLM does this
to steady the throughput across seeds). A ramp-up changes the rate per request: linear,
``start + (end - start) * i / (count - 1)``, or exponential, ``start * (end / start) ** (i / (count - 1))``
(in duration mode the fraction is the elapsed part of the level instead of ``i / (count - 1)``). A trace
gives the offsets itself: each line's ``timestamp`` minus the first one's.

Draws come from ``random.Random(seed)``: the same seed gives the same schedule.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kimitui.bench.macro.config import ConfigError, MacroConfig, RampUp


@dataclass(slots=True)
class Arrival:
    offset: float
    """Seconds after the level's start."""
    input_len: int | None = None
    output_len: int | None = None


def _length(obj: dict[str, object], keys: tuple[str, ...], where: str) -> int | None:
    for key in keys:
        if key in obj and obj[key] is not None:
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where}: {key} must be a positive integer")
            return value
    return None


def load_trace(path: Path) -> list[Arrival]:
    """A JSONL trace: ``{"timestamp": seconds}`` a line, optionally ``input_len`` and ``output_len``
    (also read as ``input_tokens`` / ``output_tokens``); sorted by time, offsets from the first."""
    rows: list[Arrival] = []
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{where}: not JSON ({exc.msg})") from None
            ts = obj.get("timestamp") if isinstance(obj, dict) else None
            if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
                raise ConfigError(f'{where}: expected {{"timestamp": seconds, ...}}')
            rows.append(Arrival(float(ts), _length(obj, ("input_len", "input_tokens"), where),
                                _length(obj, ("output_len", "output_tokens"), where)))
    if not rows:
        raise ConfigError(f"{path}: no arrivals")
    rows.sort(key=lambda a: a.offset)
    first = rows[0].offset
    for a in rows:
        a.offset -= first
    return rows


def _gap(rng: random.Random, rate: float, burstiness: float) -> float:
    return rng.gammavariate(burstiness, 1.0 / (rate * burstiness))


def ramp_rate(ramp: RampUp, fraction: float) -> float:
    fraction = min(1.0, max(0.0, fraction))
    if ramp.strategy == "exponential":
        return ramp.start_rps * (ramp.end_rps / ramp.start_rps) ** fraction
    return ramp.start_rps + (ramp.end_rps - ramp.start_rps) * fraction


def schedule(cfg: MacroConfig, count: int | None, seed: int,
             trace: list[Arrival] | None = None) -> Iterator[Arrival]:
    """The level's arrivals in order: ``count`` of them, or (``count`` None, duration mode) until the
    offsets pass ``cfg.duration_s``."""
    if trace is not None:
        for a in trace[:count] if count is not None else trace:
            if cfg.duration_s is not None and a.offset >= cfg.duration_s:
                return
            yield a
        return
    rng = random.Random(seed)
    b = cfg.burstiness
    if count is not None:
        offsets: list[float] = []
        t = 0.0
        for i in range(count):
            if cfg.ramp_up is not None:
                rate = ramp_rate(cfg.ramp_up, i / max(count - 1, 1))
            else:
                assert cfg.request_rate is not None
                rate = cfg.request_rate
            t += _gap(rng, rate, b)
            offsets.append(t)
        if cfg.ramp_up is None and offsets and offsets[-1] > 0:
            assert cfg.request_rate is not None
            scale = count / cfg.request_rate / offsets[-1]
            offsets = [x * scale for x in offsets]
        for x in offsets:
            if cfg.duration_s is not None and x >= cfg.duration_s:
                return
            yield Arrival(x)
        return
    assert cfg.duration_s is not None
    t = 0.0
    while True:
        if cfg.ramp_up is not None:
            rate = ramp_rate(cfg.ramp_up, t / cfg.duration_s)
        else:
            assert cfg.request_rate is not None
            rate = cfg.request_rate
        t += _gap(rng, rate, b)
        if t >= cfg.duration_s:
            return
        yield Arrival(t)
