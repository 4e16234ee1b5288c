"""One level of a serving sweep as every surface reads it: its figures typed, once, from the plain JSON the
load generator records (``MacroPoint.metrics``, ``--output``'s levels, ``--json``'s lines), whose keys are
vLLM's ``bench serve`` result names (``output_throughput``, ``mean_ttft_ms``, ``p99_tpot_ms``, ...).

The JSON is what a run file keeps, so an older run, another tool's file or a hostile one is read here and
nowhere else: a number that is missing, not finite, a string or a bool is None, never a crash and never 0.
The views, the CLI, the report, the check and the analysis take their figures from ``LevelResult`` and say
them with the same statistic: a key a surface names that no level result has is an error (``figure``),
not a silent blank.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kimitui.core.typed import finite

SERIES = ("ttft", "tpot", "itl", "e2el", "ttfo")
"""The latency series, each in ms: ``{mean,median,std,pXX}_<name>_ms``: vLLM's four and a reasoning model's
time to its first output token (``ttfo``: the TTFT where the model did not think first)."""
STATS = ("mean", "median", "std")
DEFAULT_PERCENTILES = (99.0,)
"""What vLLM's ``--metric-percentiles`` defaults to, and a level recorded without ``percentiles`` is read with."""
COUNTS = ("completed", "failed", "num_prompts", "total_input_tokens", "total_output_tokens", "concurrency_reached",
          "max_concurrent_requests", "usage_missing", "answered", "total_reasoning_tokens", "server_requests",
          "prefix_cache_queries", "prefix_cache_hits", "shared_prefix_len", "num_prefixes", "turns")
RATES = ("duration", "output_throughput", "request_throughput", "request_goodput", "total_token_throughput",
         "mean_input_tokens", "std_input_tokens", "requested_input_len", "mean_output_tokens", "mean_reasoning_tokens",
         "prefix_cache_hit_rate", "client_cpu_pct", "client_cpu_wait_pct", "client_loop_lag_p99_ms",
         "client_loop_lag_max_ms", "mean_ttft_first_turn_ms", "mean_ttft_later_turns_ms")
SERVER_SERIES = ("ttft", "itl", "e2e", "queue")
"""The server's own means joined over a level (``server_mean_<name>_ms``; the client's overhead over the first
three, ``overhead_<name>_ms``): names as ``kimitui.bench.macro.server_scrape`` writes them."""


def pword(p: float) -> str:
    """vLLM's spelling of a percentile in a key: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def series_key(stat: str, name: str) -> str:
    """The JSON key of one statistic of a series: ``series_key("p99", "ttft")`` is ``p99_ttft_ms``."""
    return f"{stat}_{name}_ms"


MAX_COUNT = 2**53
"""A count above this is no count a level had (a float could not hold it either)."""


def _count(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value <= MAX_COUNT else None


def _words(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if type(v) is str) if isinstance(value, list) else ()


@dataclass(frozen=True, slots=True)
class Series:
    """One latency series of a level, in ms (None: not recorded or not a finite number)."""

    name: str
    mean: float | None = None
    median: float | None = None
    std: float | None = None
    percentiles: tuple[tuple[float, float | None], ...] = ()

    def p(self, q: float) -> float | None:
        for at, value in self.percentiles:
            if at == q:
                return value
        return None

    def stat(self, stat: str) -> float | None:
        """"mean", "median", "std" or "pXX" as a key spells it."""
        if stat in STATS:
            return getattr(self, stat)  # type: ignore[no-any-return]
        try:
            return self.p(float(stat[1:])) if stat.startswith("p") else None
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class ServerFigures:
    """What the server's own ``/metrics`` said of the level (empty when the sweep did not read it)."""

    engine: str = ""
    mean_ms: Mapping[str, float] = field(default_factory=dict)
    """The server's mean by ``SERVER_SERIES`` name, where it had one."""
    overhead_ms: Mapping[str, float] = field(default_factory=dict)
    """The client's mean minus the server's, by name."""
    prefix_cache_reset: bool = False

    @property
    def read(self) -> bool:
        return bool(self.mean_ms)


@dataclass(frozen=True, slots=True)
class LevelResult:
    """One level's figures, typed. Built by ``from_json`` only; ``json`` is the record it was read from."""

    concurrency: int
    json: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    numbers: Mapping[str, float | None] = field(default_factory=dict)
    """Every figure of ``RATES`` (None where it is not a finite number)."""
    counts: Mapping[str, int | None] = field(default_factory=dict)
    """Every figure of ``COUNTS`` (None where it is not an integer)."""
    ttft: Series = field(default_factory=lambda: Series("ttft"))
    ttfo: Series = field(default_factory=lambda: Series("ttfo"))
    tpot: Series = field(default_factory=lambda: Series("tpot"))
    itl: Series = field(default_factory=lambda: Series("itl"))
    e2el: Series = field(default_factory=lambda: Series("e2el"))
    percentiles: tuple[float, ...] = ()
    """The percentiles the level says it reports (its series are read at these, or at ``DEFAULT_PERCENTILES``)."""
    failures: tuple[tuple[str, int], ...] = ()
    """Failed requests by reason, most first (as the load generator counts them)."""
    input_len_method: str | None = None
    client_warnings: tuple[str, ...] = ()
    request_fields_dropped: tuple[str, ...] = ()
    server: ServerFigures = field(default_factory=ServerFigures)

    @classmethod
    def from_json(cls, concurrency: int, m: Mapping[str, Any]) -> LevelResult:
        raw_ps = m.get("percentiles")
        ps = tuple(v for v in map(finite, raw_ps if isinstance(raw_ps, list) else []) if v is not None and 0 < v <= 100)
        read = ps or DEFAULT_PERCENTILES
        series = {name: Series(name, *(finite(m.get(series_key(s, name))) for s in STATS),
                               percentiles=tuple((p, finite(m.get(series_key("p" + pword(p), name)))) for p in read))
                  for name in SERIES}
        numbers = {k: finite(m.get(k)) for k in RATES}
        counts = {k: _count(m.get(k)) for k in COUNTS}
        fails = m.get("failures")
        failures = tuple((str(r), n) for r, n in fails.items() if _count(n)) if isinstance(fails, dict) else ()
        method = m.get("input_len_method")
        server = ServerFigures(
            engine=str(m.get("server_engine") or ""),
            mean_ms={k: v for k in SERVER_SERIES if (v := finite(m.get(f"server_mean_{k}_ms"))) is not None},
            overhead_ms={k: v for k in SERVER_SERIES if (v := finite(m.get(f"overhead_{k}_ms"))) is not None},
            prefix_cache_reset=m.get("prefix_cache_reset") is True)
        return cls(concurrency=concurrency, json=m, numbers=numbers, counts=counts, percentiles=ps, failures=failures,
                   input_len_method=method if isinstance(method, str) else None,
                   client_warnings=_words(m.get("client_warnings")),
                   request_fields_dropped=_words(m.get("request_fields_dropped")), server=server, **series)

    def to_json(self) -> dict[str, Any]:
        """The record as it was read (vLLM's keys, and whatever else it held)."""
        return dict(self.json)

    # -- the figures, by name -------------------------------------------------------------------------------

    def figure(self, key: str) -> float | None:
        """A figure by its JSON key (``output_throughput``, ``p99_tpot_ms``, ``server_mean_itl_ms``, ...);
        KeyError for a key no level result has (a typo on a surface shows up as an error, not a blank)."""
        if key in RATES:
            return self.numbers.get(key)
        if key in COUNTS:
            return finite(self.counts.get(key))
        parts = key.split("_")
        if len(parts) == 3 and parts[2] == "ms" and parts[1] in SERIES:
            return self.series(parts[1]).stat(parts[0])
        for prefix, table in (("server_mean_", self.server.mean_ms), ("overhead_", self.server.overhead_ms)):
            name = key.removeprefix(prefix).removesuffix("_ms")
            if key.startswith(prefix) and key.endswith("_ms") and name in SERVER_SERIES:
                return table.get(name)
        raise KeyError(f"no level figure {key!r}")

    def series(self, name: str) -> Series:
        if name not in SERIES:
            raise KeyError(f"no latency series {name!r}")
        return getattr(self, name)  # type: ignore[no-any-return]

    def count(self, key: str) -> int | None:
        if key not in COUNTS:
            raise KeyError(f"no level count {key!r}")
        return self.counts.get(key)

    @property
    def completed(self) -> int | None:
        return self.count("completed")

    @property
    def failed(self) -> int | None:
        return self.count("failed")

    @property
    def num_prompts(self) -> int | None:
        return self.count("num_prompts")

    @property
    def output_throughput(self) -> float | None:
        return self.numbers.get("output_throughput")

    @property
    def duration(self) -> float | None:
        return self.numbers.get("duration")

    @property
    def all_failed(self) -> bool:
        """Every request of the level failed: it has no throughput or latency to show (never a zero)."""
        return "completed" in self.json and not self.json["completed"] and bool(
            self.json.get("failed") or self.json.get("num_prompts"))

    @property
    def first_error(self) -> str | None:
        """The most frequent failure of the level."""
        return self.failures[0][0] if self.failures else None

    @property
    def top_percentile(self) -> float:
        """The highest percentile the level reports (vLLM's default, 99, for one that does not say)."""
        return max(self.percentiles or DEFAULT_PERCENTILES)

    @property
    def top_word(self) -> str:
        """``top_percentile`` as a key spells it: ``p99``, ``p99.9``."""
        return "p" + pword(self.top_percentile)

    @property
    def reasoning(self) -> bool:
        """The level's requests thought before they answered (a reasoning model on the chat endpoint)."""
        return bool(self.counts.get("total_reasoning_tokens"))

    @property
    def tok_per_stream(self) -> float | None:
        tok = self.output_throughput
        return tok / self.concurrency if tok is not None and self.concurrency else None
