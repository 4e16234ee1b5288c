"""What a macro sweep does: the target, the workload, the levels, the timeouts and the SLOs."""

from __future__ import annotations

import dataclasses
import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kimitui.core.events.macro import LevelAxis

Endpoint = Literal["completions", "chat"]
Client = Literal["lean", "httpx", "aiohttp"]
CLIENTS: tuple[str, ...] = ("lean", "httpx", "aiohttp")
"""aiohttp: measured beside the others in benchmarks/loadgen.py (kimitui/bench/macro/aiohttp_stream.py)."""
RampStrategy = Literal["linear", "exponential"]

MAX_CONCURRENCY = 512
MAX_LEVEL_REQUESTS = 1_000_000
"""The most measured requests one level may ask for (a typo such as 4000000x is found before the sweep)."""
MAX_TOKENS_LEN = 1_000_000
"""The longest prompt or output, in tokens, a request may ask for."""
MAX_WARMUP = 10_000
RATE_LEVEL_S = 10.0
RATE_LEVEL_MIN_REQUESTS = 32
"""A level whose levels are rates and whose requests are counted per slot (``4x``, the default, which means
nothing for a rate) sends ``RATE_LEVEL_S`` seconds of its arrivals, at least ``RATE_LEVEL_MIN_REQUESTS``: so
its p99 is over enough requests to tell, and a higher rate runs as long as a lower one."""
DEFAULT_LEVELS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
DEFAULT_REQUESTS = "4x"
"""Requests per level, for the CLI and the dialog alike: 4 per concurrency slot (4 at c=1, 512 at c=128),
so c=1 is over in seconds and every level reaches its concurrency."""
PERCENTILES: tuple[float, ...] = (90.0, 99.0)
"""Reported as ``p90_*_ms`` and ``p99_*_ms`` (vLLM's naming); the median is ``median_*_ms``."""


class ConfigError(ValueError):
    """The configuration cannot run: a one-line explanation for the operator."""


@dataclass(slots=True)
class Timeouts:
    connect_s: float = 10.0
    read_s: float = 60.0
    """Longest silence between two received blocks of a response (the first one included)."""
    total_s: float = 600.0
    """Longest a single request may take from dispatch to its last byte."""


@dataclass(slots=True)
class SLO:
    """Goodput thresholds in milliseconds (vLLM's ``--goodput ttft:X tpot:Y e2el:Z``); None: not checked."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    @property
    def active(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None or self.e2el_ms is not None


@dataclass(slots=True)
class RampUp:
    """vLLM's ``--ramp-up-strategy``: the request rate goes from ``start_rps`` to ``end_rps`` over the level
    (by request index when the level has a request count, by time in duration mode)."""

    strategy: RampStrategy = "linear"
    start_rps: float = 1.0
    end_rps: float = 10.0


@dataclass(slots=True)
class MacroConfig:
    url: str
    """Base URL of the server, e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1`` is accepted)."""
    model: str | None = None
    """None: ask ``GET /v1/models`` and take the first."""
    endpoint: Endpoint = "completions"
    concurrency: list[int] = field(default_factory=lambda: list(DEFAULT_LEVELS))
    requests: int = 64
    """Requests per level (ignored when ``duration_s`` or ``requests_per_stream`` is set)."""
    search: bool = False
    """Search for the highest concurrency meeting the SLOs at p99 between the lowest and the highest level of
    ``concurrency`` (``search.SloSearch``) instead of running each level; with ``rate_levels``, the highest
    request rate between the lowest and the highest of them (``search.RateSearch``)."""
    rate_levels: list[float] = field(default_factory=list)
    """Levels by request rate (``--request-rate 2 4 8``): each level sends its requests at its rate (arrivals as
    ``request_rate``'s), at most the highest ``concurrency`` at once; empty: the levels are the concurrencies."""
    requests_per_stream: int | None = None
    """When set, each level runs this many requests per concurrency slot (``k x c``: 4 at c=1, 512 at
    c=128) instead of a fixed ``requests``: every level reaches its concurrency and c=1 stays short."""
    duration_s: float | None = None
    """Per level: keep dispatching for this long, then let the requests in flight finish."""
    request_rate: float | None = None
    """Requests per second, Poisson arrivals (seeded), with the level as the concurrency cap; None: as fast
    as the level allows (vLLM's ``--request-rate inf``)."""
    burstiness: float = 1.0
    """vLLM's ``--burstiness``: the gaps between arrivals follow a gamma distribution of this shape (1:
    Poisson; below 1 burstier, above 1 more regular). Needs a request rate or a ramp-up."""
    ramp_up: RampUp | None = None
    """A request rate that ramps up over each level (exclusive with ``request_rate`` and ``trace``)."""
    trace: Path | None = None
    """JSONL of arrivals, ``{"timestamp": seconds}`` a line (optionally ``input_len`` / ``output_len``):
    each level replays it, its requests sent at those offsets from the first, up to the level's
    concurrency at once."""
    warmup: int = 1
    """Warm-up requests before each level, at up to the level's concurrency; not counted."""
    input_len: int = 128
    """Synthetic prompt length in tokens, hit exactly where the server can count them (see ``lengths``)."""
    input_len_stddev: float = 0.0
    """Spread of the synthetic prompt lengths: each request's length is drawn from a normal distribution
    (seeded; at least 1)."""
    dataset: Path | None = None
    """JSONL with ``{"prompt": ...}`` or ``{"messages": [...]}`` per line, used instead of synthetic prompts."""
    max_tokens: int = 128
    """Output length (vLLM's ``--output-len``): ``max_tokens`` of each request."""
    max_tokens_stddev: float = 0.0
    """Spread of the output lengths, as ``input_len_stddev``."""
    percentiles: tuple[float, ...] = PERCENTILES
    """Percentiles reported for TTFT, TPOT, ITL and E2EL (vLLM's ``--metric-percentiles``)."""
    ignore_eos: bool = True
    """Send ``ignore_eos`` (a vLLM extension) so every request yields ``max_tokens`` tokens."""
    omit_fields: tuple[str, ...] = ()
    """Request fields left out of every request: the ones the server refused (``fields.check_fields``)."""
    temperature: float = 0.0
    seed: int = 0
    """Seeds the prompts' lengths, the arrivals and (with ``prompt_salt``) the prompts' words."""
    prompt_salt: str = field(default_factory=lambda: secrets.token_hex(4))
    """Mixed into the synthetic prompts' words, fresh for each configuration: no sweep sends the prompts of
    an earlier one, which a long-lived server's prefix cache would serve warm. Empty: the words follow
    ``seed`` alone, and a sweep with the same seed repeats its prompts exactly (``--seed`` given)."""
    timeouts: Timeouts = field(default_factory=Timeouts)
    slo: SLO = field(default_factory=SLO)
    api_key: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    client: Client = "lean"
    """HTTP client of the streamed requests: ``lean`` (``http_stream``, asyncio protocol, the default: the
    httpx stack costs ~10x more CPU per chunk and saturates first) or ``httpx`` (the fallback; also used
    automatically when the lean client cannot reach the URL, e.g. through a proxy)."""
    metrics_url: str | None = None
    """The server's Prometheus metrics, read during the sweep; None: ``<url>/metrics``."""
    scrape_s: float = 0.2
    """How often the server's metrics are read during the sweep (0: not read)."""
    prefix_len: int = 0
    """Shared prefixes on purpose (vLLM's ``--random-prefix-len``): every synthetic prompt starts, after the
    anchor, with this many tokens of one of ``num_prefixes`` prefixes, before its own ``input_len`` tokens, so a
    sweep measures the server's prefix cache (0: no prompt shares a prefix with another)."""
    num_prefixes: int = 1
    """How many different shared prefixes the prompts take in turn (with ``prefix_len``)."""
    turns: int = 1
    """Multi-turn conversations (chat): each slot sends a conversation of this many turns, each turn after the
    answer to the last, with the whole history (its answers included) and a new user message of ``input_len``
    tokens; every turn is a measured request (1: single requests)."""
    reset_prefix_cache: bool = False
    """Ask the server to drop its prefix cache before each level (vLLM's ``POST /reset_prefix_cache``, in its
    dev mode; ``prefix_cache``): no level measures prompts an earlier one left cached."""

    def validate(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"url must start with http:// or https://: {self.url!r}")
        check_url(self.url)
        if not self.concurrency:
            raise ConfigError("no concurrency levels")
        for c in self.concurrency:
            if not 1 <= c <= MAX_CONCURRENCY:
                raise ConfigError(f"concurrency {c} is out of range (1 to {MAX_CONCURRENCY})")
        if self.duration_s is None and self.requests < 1:
            raise ConfigError("requests per level must be at least 1")
        if self.requests_per_stream is not None and self.requests_per_stream < 1:
            raise ConfigError("requests per stream must be at least 1")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ConfigError("duration per level must be positive")
        if self.request_rate is not None and not (self.request_rate > 0 and math.isfinite(self.request_rate)):
            raise ConfigError("request rate must be positive")
        if any(not (r > 0 and math.isfinite(r)) for r in self.rate_levels):
            raise ConfigError("request rates must be positive numbers")
        if self.rate_levels and len(self.concurrency) > 1:
            raise ConfigError("with request rates as the levels, --concurrency is one cap on the requests at once "
                              f"(not a list: {','.join(map(str, self.concurrency))})")
        if self.scrape_s and not 0.05 <= self.scrape_s <= 60:
            raise ConfigError(f"the metrics' read interval must be 0 (off) or 0.05 to 60 s: {self.scrape_s:g}")
        if self.metrics_url is not None:
            check_url(self.metrics_url)
        if not self.burstiness > 0:
            raise ConfigError("burstiness must be positive")
        if self.burstiness != 1.0 and self.request_rate is None and self.ramp_up is None and not self.rate_levels:
            raise ConfigError("burstiness shapes the gaps of a request rate: give --request-rate or a ramp-up")
        arrivals = [name for name, on in (("a request rate", self.request_rate is not None or bool(self.rate_levels)),
                                          ("a ramp-up", self.ramp_up is not None),
                                          ("a trace", self.trace is not None)) if on]
        if len(arrivals) > 1:
            raise ConfigError(f"choose one arrival mode: {' and '.join(arrivals)} were both given")
        if self.ramp_up is not None:
            r = self.ramp_up
            if r.strategy not in ("linear", "exponential"):
                raise ConfigError(f"unknown ramp-up strategy {r.strategy!r} (linear or exponential)")
            if not (r.start_rps > 0 and r.end_rps > 0):
                raise ConfigError("ramp-up start and end rates must be positive")
        if self.max_tokens < 1 or self.input_len < 1 or self.warmup < 0:
            raise ConfigError("max_tokens and input_len must be at least 1, warmup at least 0")
        if max(self.max_tokens, self.input_len) > MAX_TOKENS_LEN or self.warmup > MAX_WARMUP:
            raise ConfigError(f"max_tokens and input_len at most {MAX_TOKENS_LEN:,}, warmup at most {MAX_WARMUP:,}")
        largest = max([self.level_requests(c) for c in self.concurrency]
                      + [self.rate_level_requests(r) for r in self.rate_levels])
        if self.duration_s is None and largest > MAX_LEVEL_REQUESTS:
            raise ConfigError(f"requests per level at most {MAX_LEVEL_REQUESTS:,} (the largest level would run "
                              f"{largest:,})")
        if self.input_len_stddev < 0 or self.max_tokens_stddev < 0:
            raise ConfigError("length spreads (standard deviations) cannot be negative")
        if not self.percentiles or any(not 0 < p <= 100 for p in self.percentiles):
            raise ConfigError("percentiles must be between 0 (excluded) and 100")
        if self.endpoint not in ("completions", "chat"):
            raise ConfigError(f"unknown endpoint {self.endpoint!r} (completions or chat)")
        if self.dataset is not None and not self.dataset.is_file():
            raise ConfigError(f"{self.dataset}: no such file (the --dataset of prompts)")
        if self.client not in CLIENTS:
            raise ConfigError(f"unknown client {self.client!r} (lean, httpx or aiohttp)")
        if self.prefix_len < 0 or self.num_prefixes < 1:
            raise ConfigError("a shared prefix takes --prefix-len 0 or more and --num-prefixes 1 or more")
        if self.prefix_len and self.dataset is not None:
            raise ConfigError("--prefix-len shapes synthetic prompts: not with --dataset")
        if self.prefix_len + self.input_len > MAX_TOKENS_LEN:
            raise ConfigError(f"--prefix-len and --input-len together at most {MAX_TOKENS_LEN:,} tokens")
        if self.turns < 1:
            raise ConfigError("--turns must be 1 or more")
        if self.turns > 1 and (self.endpoint != "chat" or self.open_loop or self.dataset is not None):
            raise ConfigError("--turns holds conversations: the chat endpoint, closed-loop levels, synthetic prompts")
        if self.search:
            if not self.slo.active:
                raise ConfigError("--search finds where SLOs hold: give them (--slo ttft:200,tpot:50)")
            if self.rate_levels:
                if len(self.rate_levels) < 2 or min(self.rate_levels) == max(self.rate_levels):
                    raise ConfigError("--search with --request-rate searches between two rates: give the lowest and "
                                      "the highest (--request-rate 1 64)")
            elif self.open_loop:
                raise ConfigError("--search probes closed-loop levels, or rates (--request-rate LOW HIGH): not with "
                                  "a single request rate, a ramp-up or a trace")
            if self.duration_s is not None:
                raise ConfigError("--search probes levels of a request count: not with --duration")
        if self.client == "aiohttp":
            import importlib.util

            if importlib.util.find_spec("aiohttp") is None:
                raise ConfigError("client aiohttp: aiohttp is not installed (it comes with the serve extra)")

    def level_requests(self, concurrency: int) -> int:
        """Measured requests at one level (request-count mode)."""
        if self.requests_per_stream is not None:
            return self.requests_per_stream * concurrency
        return self.requests

    def rate_level_requests(self, rate: float) -> int:
        """Measured requests at a level of this rate (request-count mode, ``rate_levels``): the count given
        (``--requests 200``), or ``RATE_LEVEL_S`` seconds of arrivals and at least ``RATE_LEVEL_MIN_REQUESTS``
        where the count is per slot (``4x``)."""
        if self.requests_per_stream is None:
            return self.requests
        return max(RATE_LEVEL_MIN_REQUESTS, math.ceil(rate * RATE_LEVEL_S))

    @property
    def levels(self) -> list[float]:
        """The levels in order: the rates where they are rates, else the concurrencies."""
        return list(self.rate_levels) if self.rate_levels else list(self.concurrency)

    @property
    def axis(self) -> LevelAxis:
        return "rate" if self.rate_levels else "concurrency"

    @property
    def requests_label(self) -> str:
        if self.rate_levels and self.requests_per_stream is not None:
            return f"{RATE_LEVEL_S:g} s of arrivals per level (at least {RATE_LEVEL_MIN_REQUESTS} requests)"
        if self.requests_per_stream is not None:
            return f"{self.requests_per_stream}x the concurrency requests per level"
        return f"{self.requests} requests per level"

    @property
    def base_url(self) -> str:
        url = self.url.rstrip("/")
        return url[:-3] if url.endswith("/v1") else url

    @property
    def server_metrics_url(self) -> str:
        return self.metrics_url or self.base_url + "/metrics"

    @property
    def endpoint_path(self) -> str:
        return "/v1/completions" if self.endpoint == "completions" else "/v1/chat/completions"

    @property
    def open_loop(self) -> bool:
        """Requests are sent on a schedule (rate, ramp-up, trace) rather than as soon as a slot frees."""
        return (self.request_rate is not None or bool(self.rate_levels) or self.ramp_up is not None
                or self.trace is not None)

    @property
    def arrival_label(self) -> str:
        if self.trace is not None:
            return f"trace {self.trace.name}"
        shape = "Poisson" if self.burstiness == 1.0 else f"gamma, burstiness {self.burstiness:g}"
        if self.ramp_up is not None:
            r = self.ramp_up
            return f"{r.strategy} ramp-up {r.start_rps:g} to {r.end_rps:g} req/s ({shape})"
        if self.rate_levels:
            return f"arrivals {shape} at each level's rate, at most {max(self.concurrency)} at once"
        if self.request_rate is not None:
            return f"{self.request_rate:g} req/s {shape}"
        return "closed loop"

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["dataset"] = str(self.dataset) if self.dataset else None
        out["trace"] = str(self.trace) if self.trace else None
        out["percentiles"] = list(self.percentiles)
        out.pop("api_key", None)
        out.pop("headers", None)
        return out


def parse_levels(text: str) -> list[int]:
    """``1,8,64`` -> [1, 8, 64] (the range is checked by ``MacroConfig.validate``)."""
    try:
        levels = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ConfigError(f"not a list of integers: {text!r}") from None
    if not levels:
        raise ConfigError("no concurrency levels")
    return levels


def parse_rates(text: str) -> list[float]:
    """``2,4,8.5`` -> [2.0, 4.0, 8.5] (requests per second; blank: none); each checked by ``MacroConfig.validate``."""
    try:
        return [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ConfigError(f"request rates: numbers in requests/s (2,4,8), not {text!r}") from None


def check_url(url: str) -> None:
    """A URL both HTTP clients can use (a host, a numeric port, brackets closed); ConfigError says why not."""
    from urllib.parse import urlsplit

    import httpx

    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a port that is not a number in range
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        raise ConfigError(f"url {url!r} is not a valid URL: {exc}") from None
    if not parts.hostname:
        raise ConfigError(f"url {url!r} has no host")


def parse_percentiles(text: str) -> tuple[float, ...]:
    """``50,90,99.9`` -> (50.0, 90.0, 99.9): sorted, each above 0 and at most 100."""
    try:
        values = sorted({float(x) for x in text.replace(" ", "").split(",") if x})
    except ValueError:
        raise ConfigError(f"not a list of percentiles: {text!r}") from None
    if not values:
        raise ConfigError("no percentiles")
    for p in values:
        if not 0 < p <= 100:
            raise ConfigError(f"percentile {p:g} is out of range (above 0, at most 100)")
    return tuple(values)


def parse_requests(text: str) -> tuple[int | None, int]:
    """``64`` (requests per level) or ``4x`` (4 requests per concurrency slot): (per_stream, count)."""
    raw = text.strip().lower()
    per_stream = raw.endswith("x")
    try:
        n = int(raw[:-1] if per_stream else raw)
    except ValueError:
        raise ConfigError(f"requests: a count (64) or a multiple of the level (4x), not {text!r}") from None
    if n < 1:
        raise ConfigError("requests must be at least 1")
    return (n, 64) if per_stream else (None, n)
