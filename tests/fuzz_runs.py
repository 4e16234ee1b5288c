"""Mutated copies of the bundled run, for tests/test_fuzz_runfile.py: one parsed copy of the run, and
mutations made in memory on it (a field's type changed, a key dropped, huge or non-finite numbers,
Unicode of every kind, absurd times and durations, a truncation, lines duplicated, swapped or dropped, an
unknown type)."""

from __future__ import annotations

import copy
import gzip
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kimitui.resources import bundled_sample_run

SLICE_SAMPLES_EVERY = 12
"""The slice keeps every 12th sample (6 of 72), and of the events many of a type have, every fifth."""
SLICE_REQUESTS = 12
"""And the first 12 per-request records of each macro_requests event (the whole run has thousands)."""

HUGE_INTS: tuple[int, ...] = (2**70, -(2**70), -1, 0, 2**63, -(2**63) - 1, 10**300)
HUGE_FLOATS: tuple[float, ...] = (1e308, -1e308, -1.0, 0.0, -0.0, 5e-324, 1.7976931348623157e308)
HUGE: tuple[Any, ...] = (*HUGE_INTS, *HUGE_FLOATS, 10**400, float("nan"), float("inf"), float("-inf"))
"""Numbers at the edges: most of the same type as the number they replace (well-typed, so they reach the
fold), some beyond what a float holds or not finite (refused when decoded)."""
UNICODE: tuple[str, ...] = (
    "\u202eRTL override\u202c", "שלום עולם", "مرحبا", "emoji 🎉👩‍👩‍👧‍👦🏳️‍🌈", "\x00nul\x01\x1b[31mred\x1b[0m",
    "tab\tnew\nline\rcr", "\u200bzero\u200dwidth\ufeff", "e\u0301\u0301\u0301 combining", "\ud800 lone surrogate",
    "x" * 5000, "", " ", "\\", '"quoted"', "\U0001d54c\U0001d55f\U0001d55a double-struck", "\u2028line sep\u2029",
)
OTHER_TYPES: tuple[Any, ...] = ("text", "12", 12, -3, 1.5, True, False, None, [], [1, "a"], {}, {"k": "v"},
                                [[1, 2], [3]], {"0": 1.0})


@dataclass(frozen=True, slots=True)
class Run:
    """A run as lines: its header and its events, each as bytes and as a parsed object."""

    header: bytes
    lines: tuple[bytes, ...]
    parsed: tuple[dict[str, Any], ...]

    @property
    def types(self) -> set[str]:
        return {p["type"] for p in self.parsed}


def load_bundled() -> Run:
    raw = gzip.decompress(bundled_sample_run().read_bytes())
    header, *lines = [line for line in raw.split(b"\n") if line]
    return Run(header, tuple(lines), tuple(json.loads(line) for line in lines))


def slice_of(run: Run) -> Run:
    """A smaller run with every event type of the whole: every fifth event of the types with many, all
    of the others, every 12th sample, macro_requests cut to their first records."""
    keep_lines: list[bytes] = []
    keep: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for line, p in zip(run.lines, run.parsed, strict=True):
        n = seen[p["type"]] = seen.get(p["type"], -1) + 1
        if p["type"] == "sample":
            if n % SLICE_SAMPLES_EVERY:
                continue
        elif n % 5 and p["type"] in ("micro_progress", "macro_progress", "gemm_row", "allreduce_row",
                                    "signal_outcome", "log"):
            continue
        if p["type"] == "macro_requests":
            p = {**p, "requests": p["requests"][:SLICE_REQUESTS]}
            line = _dumps(p)
        keep_lines.append(line)
        keep.append(p)
    return Run(run.header, tuple(keep_lines), tuple(keep))


def _dumps(obj: Any, ascii_only: bool = True) -> bytes:
    # allow_nan (json's default): a run written by Python may hold NaN and Infinity
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


# -- mutations --------------------------------------------------------------------------------------------


def _spot(obj: Any, rng: random.Random) -> tuple[Any, Any]:
    """A random (container, key) inside a parsed line (or a list in it): a random walk down from the top."""
    container, key = obj, rng.randrange(len(obj)) if isinstance(obj, list) else rng.choice(list(obj))
    while True:
        value = container[key]
        if not isinstance(value, dict | list) or not value or rng.random() < 0.3:
            return container, key
        container = value
        key = rng.randrange(len(value)) if isinstance(value, list) else rng.choice(list(value))


def _leaf(obj: Any, rng: random.Random, want: Callable[[Any], bool], tries: int = 12) -> tuple[Any, Any]:
    """A spot whose value passes ``want`` if a few tries find one, else any spot."""
    spot = _spot(obj, rng)
    for _ in range(tries):
        if want(spot[0][spot[1]]):
            return spot
        spot = _spot(obj, rng)
    return spot


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _retype(obj: dict[str, Any], rng: random.Random) -> str:
    container, key = _spot(obj, rng)
    old = container[key]
    new = rng.choice([v for v in OTHER_TYPES if type(v) is not type(old)])
    container[key] = copy.deepcopy(new)
    return f"{key!r} {type(old).__name__} -> {new!r}"


def _drop(obj: dict[str, Any], rng: random.Random) -> str:
    container, key = _spot(obj, rng)
    del container[key]
    return f"dropped {key!r}"


def _huge(obj: dict[str, Any], rng: random.Random) -> str:
    container, key = _leaf(obj, rng, _is_number)
    old, roll = container[key], rng.random()
    if roll < 0.7 and type(old) is int:
        container[key] = rng.choice(HUGE_INTS)
    elif roll < 0.7 and type(old) is float:
        container[key] = rng.choice(HUGE_FLOATS)
    else:
        container[key] = rng.choice(HUGE)
    return f"{key!r} -> {container[key]!r:.40}"


def _unicode(obj: dict[str, Any], rng: random.Random) -> str:
    container, key = _leaf(obj, rng, lambda v: isinstance(v, str))
    text = rng.choice(UNICODE)
    if rng.random() < 0.5 and isinstance(container[key], str):
        text = container[key] + text
    container[key] = text
    if isinstance(container, dict) and rng.random() < 0.2:  # a key of odd Unicode as well
        container[rng.choice(UNICODE)] = 1
    return f"{key!r} -> {text!r:.40}"


def _other_type(obj: dict[str, Any], rng: random.Random, types: list[str]) -> str:
    obj["type"] = rng.choice([*types, "no_such_event", "", "SAMPLE"])
    return f"type -> {obj['type']!r}"


def _time(obj: dict[str, Any], rng: random.Random) -> str:
    obj["t"] = rng.choice([*HUGE, obj.get("t", 0) - 3600, obj.get("t", 0) + 86400 * 365, "now", None])
    return f"t -> {obj['t']!r:.40}"


def _empty(obj: dict[str, Any], rng: random.Random) -> str:
    container, key = _leaf(obj, rng, lambda v: isinstance(v, dict | list) and bool(v))
    value = container[key]
    if isinstance(value, list) and value and rng.random() < 0.5:
        container[key] = value * rng.randint(2, 6)  # repeated items: duplicate GPUs, pids, levels
        return f"{key!r} repeated"
    container[key] = type(value)() if isinstance(value, dict | list) else value
    return f"{key!r} emptied"


STARTS = frozenset({"step_preview", "signal", "signal_outcome", "sample"})
"""Events that carry processes' start times (and a sample, the boot time that dates them)."""
ANY_ZONES = {"macro_point": "metrics", "macro_requests": "requests", "campaign_plan": "settings",
             "micro_plan": "gemms"}
"""Fields of plain JSON (``dict[str, Any]``: vLLM's result keys, per-request records, settings), which
decoding does not check inside: their readers must take any value."""
ODD: tuple[Any, ...] = (*HUGE, *OTHER_TYPES, *UNICODE[:6])


def _any_zone(obj: dict[str, Any], rng: random.Random) -> str:
    zone = ANY_ZONES.get(obj.get("type", ""))
    value = obj.get(zone) if zone else None
    if not value or not isinstance(value, dict | list):
        return _retype(obj, rng)
    container, key = _spot(value, rng)
    container[key] = copy.deepcopy(rng.choice(ODD))
    return f"{zone}: {key!r} -> {container[key]!r:.40}"


ABSURD_KEYS = frozenset({"start_time", "boot_time", "clock_ticks", "elapsed_s", "duration_s", "t_s"})
"""Times and durations a report turns into dates and clock readings."""
ABSURD_INTS: tuple[int, ...] = (10**20, -(10**20), 2**62, -1)
ABSURD_FLOATS: tuple[float, ...] = (1e20, -1e20, 1e308, -3600.0, -1e308)


def _absurd(obj: dict[str, Any], rng: random.Random) -> str:
    """Every time or duration of the line (a process's start, a host's boot, a step's elapsed time) set to
    one absurd value of its own type (well typed: it reaches the fold, the report, the clocks)."""
    spots: list[tuple[Any, Any]] = []
    stack: list[Any] = [obj]
    while stack:
        node = stack.pop()
        for key, value in node.items() if isinstance(node, dict) else enumerate(node):
            if isinstance(value, dict | list):
                stack.append(value)
            elif key in ABSURD_KEYS and _is_number(value):
                spots.append((node, key))
    if not spots:
        return _huge(obj, rng)
    as_int, as_float = rng.choice(ABSURD_INTS), rng.choice(ABSURD_FLOATS)
    for container, key in spots:
        container[key] = as_int if type(container[key]) is int else as_float
    return f"{len(spots)} times -> {as_int} / {as_float:g}"


LINE_MUTATIONS: tuple[Callable[[dict[str, Any], random.Random], str], ...] = (
    _retype, _retype, _retype, _drop, _drop, _huge, _huge, _unicode, _unicode, _time, _empty, _any_zone,
    _any_zone, _absurd, _absurd)


@dataclass(frozen=True, slots=True)
class Mutant:
    data: bytes
    what: str
    may_refuse: bool = False
    """The header itself is cut (a truncation inside it, a gzip stream cut short): RunFileError is right."""


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) and obj else None


def mutate(run: Run, rng: random.Random) -> Mutant:
    """One mutated copy of ``run`` as the bytes of a file: one to three mutations, most on one line."""
    lines = list(run.lines)
    objs: list[dict[str, Any] | None] = [None] * len(lines)
    """The lines changed as objects (re-encoded at the end); None: the line's bytes as they are."""
    whats: list[str] = []
    header = run.header
    types = sorted(run.types)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        roll = rng.random()
        i = rng.randrange(len(lines))
        if roll < 0.72:
            if rng.random() < 0.15:  # a line with plain JSON inside, most of the time
                i = rng.choice([k for k, p in enumerate(run.parsed[: len(lines)]) if p["type"] in ANY_ZONES] or [i])
            elif rng.random() < 0.06:  # a line with process start times (a cleanup step's preview, a signal)
                i = rng.choice([k for k, p in enumerate(run.parsed[: len(lines)]) if p["type"] in STARTS] or [i])
            obj = objs[i] if objs[i] is not None else _parse(lines[i])
            if obj is None:
                continue
            objs[i] = obj
            change = _other_type(obj, rng, types) if rng.random() < 0.1 else rng.choice(LINE_MUTATIONS)(obj, rng)
            whats.append(f"line {i + 2}: {change}")
        elif roll < 0.78:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            objs[i], objs[j] = objs[j], objs[i]
            whats.append(f"lines {i + 2} and {j + 2} swapped")
        elif roll < 0.84:
            lines.insert(i, lines[i])
            objs.insert(i, None if objs[i] is None else copy.deepcopy(objs[i]))
            whats.append(f"line {i + 2} duplicated")
        elif roll < 0.88 and len(lines) > 1:
            del lines[i], objs[i]
            whats.append(f"line {i + 2} dropped")
        elif roll < 0.93:
            if objs[i] is not None:
                lines[i] = _dumps(objs[i])
                objs[i] = None
            raw = bytearray(lines[i])
            k = rng.randrange(len(raw))
            raw[k] = rng.choice(b'{}[]",:\\0\xff\xc3\n ')
            lines[i] = bytes(raw)
            whats.append(f"line {i + 2}: byte {k} -> {raw[k]:#x}")
        elif roll < 0.96:
            head = json.loads(header)
            key = rng.choice(["created", "host", "meta", "meta", "extra"])
            head[key] = rng.choice([*OTHER_TYPES, *UNICODE[:4], 1e308, float("nan")])
            header = _dumps(head)
            whats.append(f"header {key} -> {head[key]!r:.40}")
        else:
            t = run.parsed[min(i, len(run.parsed) - 1)]["t"]
            lines.insert(i, _dumps({"t": t, "type": rng.choice(["no_such_event", "hello"]), "x": 1}))
            objs.insert(i, None)
            whats.append(f"unknown type at line {i + 2}")
    for i, obj in enumerate(objs):
        if obj is not None:
            lines[i] = _dumps(obj, ascii_only=rng.random() < 0.5)
    data = header + b"\n" + b"\n".join(lines) + b"\n"
    may_refuse = False
    if rng.random() < 0.08:  # a run cut short: anywhere after the header, now and then inside it
        cut = rng.randrange(len(header) + 1, len(data)) if rng.random() < 0.9 else rng.randrange(len(header))
        data = data[:cut]
        may_refuse = cut < len(header)
        whats.append(f"truncated at byte {cut}")
    if rng.random() < 0.05:
        data = gzip.compress(data, mtime=0)
        if rng.random() < 0.5:
            data = data[: rng.randrange(20, len(data))]
            may_refuse = True
            whats.append("compressed and cut short")
        else:
            whats.append("compressed")
    return Mutant(data, "; ".join(whats) or "none", may_refuse)
