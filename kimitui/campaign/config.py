"""The campaign file (TOML): the host, the service and its URLs, each phase's settings, the consent policy.

``load_config(path)`` reads and checks it (an unknown key, a wrong type or a bad value is one line naming
the file, the section and the key). The files kimitui writes or runs itself (``--init``'s example, the demo's)
are in ``examples.py``.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimitui.core.events import CAMPAIGN_PHASES

if TYPE_CHECKING:
    from kimitui.bench.macro.config import MacroConfig

CONSENT_STEPS = ("drain", "graceful", "process", "others", "device", "reset", "restart", "abort_restart")
"""The steps the consent policy answers; ``abort_restart`` is the restart offered after an abort."""
ANSWERS = ("ask", "yes", "no")


class CampaignConfigError(ValueError):
    """A campaign file that cannot run (one line)."""


@dataclass(slots=True)
class MacroSettings:
    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128])
    requests: str = "4x"
    """Per level: a count (64) or a multiple of the concurrency (4x)."""
    max_tokens: int = 128
    input_len: int = 128
    warmup: int = 1
    endpoint: str = "completions"
    model: str = ""
    ignore_eos: bool = True
    """Send vLLM's ``ignore_eos`` (a server that refuses it gets the run without it, with a warning)."""
    goodput: str = ""
    """SLOs in ms, vLLM's ``--goodput`` form (``ttft:200,tpot:50``); empty: none."""
    reset_prefix_cache: bool = False
    """Ask the server to drop its prefix cache before each level (vLLM's ``POST /reset_prefix_cache``, served
    in its dev mode); a server that does not offer it is said once."""
    rates: list[float] = field(default_factory=list)
    """Levels by request rate (req/s), each capped at the highest ``concurrency`` at once; empty: the levels are
    the concurrencies. Phase 3's budget divides a decode step at concurrency levels and the check compares with
    concurrency 1: a campaign of rates has neither phase (the file is refused with them)."""
    search: bool = False
    """With ``goodput`` SLOs: Phase 1 searches the highest concurrency from the lowest to the highest of
    ``concurrency`` that meets them at p99 (with ``rates``, the highest rate between theirs) instead of running
    every level."""

    @property
    def levels(self) -> list[float]:
        """What Phase 1's levels are keyed by: the rates, else the concurrencies."""
        return list(self.rates) if self.rates else [float(c) for c in self.concurrency]

    def macro_config(self, url: str, levels: list[float] | None = None) -> MacroConfig:
        """The load generator's settings for these levels (all of them by default: ``levels``' keys) against
        ``url``: the campaign's Phase 1 runs it, and the file is checked by its ``validate``."""
        from kimitui.bench.macro.config import MacroConfig, parse_requests
        from kimitui.bench.macro.verdict import parse_goodput

        per_stream, count = parse_requests(self.requests)
        keys = list(self.levels if levels is None else levels)
        if self.rates:
            concurrency, rate_levels = [max(self.concurrency, default=0)], keys
        else:
            concurrency, rate_levels = [int(c) for c in keys], []
        return MacroConfig(url=url, model=self.model or None, endpoint=self.endpoint,  # type: ignore[arg-type]
                           concurrency=concurrency, rate_levels=rate_levels, search=self.search, requests=count,
                           requests_per_stream=per_stream, max_tokens=self.max_tokens, input_len=self.input_len,
                           warmup=self.warmup, slo=parse_goodput([self.goodput]), ignore_eos=self.ignore_eos,
                           reset_prefix_cache=self.reset_prefix_cache)


@dataclass(slots=True)
class CleanupSettings:
    gpus: str = "all"
    threshold_mib: float = 64.0
    drain_s: float = 120.0
    graceful_s: float = 30.0
    term_grace_s: float = 5.0
    verify_s: float = 10.0
    allow_other_users: bool = False


@dataclass(slots=True)
class MicroSettings:
    parts: list[str] = field(default_factory=lambda: ["gemm", "allreduce"])
    ms: list[int] = field(default_factory=list)
    """Token counts M; empty: 1, 2, 4 ... 256 and every macro level (the budget needs each level's M)."""
    backends: list[str] = field(default_factory=lambda: ["marlin", "torch-int4", "bf16"])
    tp: int = 8
    sweep_max_bytes: int = 1 << 30
    force: bool = False
    pace_s: float = 0.0
    """The simulated host's modelled workers: seconds per row (0: as fast as they go)."""


@dataclass(slots=True)
class ModelSettings:
    """The served model, where the server cannot say it (``kimitui.campaign.served_model``)."""

    preset: str = ""
    """A preset by name (``kimitui shapes --model``): measured when the server's model cannot be found."""
    config: str = ""
    """Its config.json (or the folder holding it) on the host: read there, before the server's word."""
    tp: int = 0
    """The tensor-parallel size it is served at; 0: [micro] tp (read only where this is not set)."""
    expert_parallel: bool = False
    """Served with vLLM's --enable-expert-parallel."""


@dataclass(slots=True)
class RestartSettings:
    health_s: float = 600.0


@dataclass(slots=True)
class CheckSettings:
    requests: int = 8
    """Enough to tell a change from the requests' own spread (``figures.NOISE_MIN_REQUESTS`` at the least)."""
    max_tokens: int = 0
    """0: Phase 1's max_tokens."""
    margin_pct: float = 10.0
    """A drift in single-stream tok/s beyond this (either way) is flagged."""
    ttft_margin_pct: float = 25.0
    """A TTFT higher than Phase 1's by more than this is flagged."""
    warmup: int = -1
    """Requests sent before the probe and not counted (a freshly started engine's first ones are slow); -1 (not
    set): as many as Phase 1's, at least ``MIN_CHECK_WARMUP`` (``CampaignConfig.check_warmup``)."""


@dataclass(slots=True)
class CampaignConfig:
    name: str = "campaign"
    host: str = "local"
    phases: list[str] = field(default_factory=lambda: list(CAMPAIGN_PHASES))
    sample_interval_s: float = 0.5
    remote_python: str = ""
    operator: str = ""
    accept_new_host_key: bool = False
    service: str = ""
    api_url: str = ""
    health_url: str = ""
    metrics_url: str = ""
    consent: dict[str, str] = field(default_factory=lambda: dict.fromkeys(CONSENT_STEPS, "ask") | {"reset": "no"})
    macro: MacroSettings = field(default_factory=MacroSettings)
    cleanup: CleanupSettings = field(default_factory=CleanupSettings)
    micro: MicroSettings = field(default_factory=MicroSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    restart: RestartSettings = field(default_factory=RestartSettings)
    check: CheckSettings = field(default_factory=CheckSettings)
    file: str = ""

    def micro_ms(self) -> list[int]:
        if self.micro.ms:
            return sorted(set(self.micro.ms))
        return sorted({1 << i for i in range(9)} | set(self.macro.concurrency))

    def tp(self) -> int:
        """The TP the model is served at: [model] tp, else [micro] tp."""
        return self.model.tp or self.micro.tp

    def check_warmup(self) -> int:
        """The probe's uncounted requests: as set, else Phase 1's and at least ``MIN_CHECK_WARMUP`` (a restarted
        engine is cold whatever Phase 1 met: on the H200 a probe of 3 cold requests read -63 % tok/s)."""
        return self.check.warmup if self.check.warmup >= 0 else max(self.macro.warmup, MIN_CHECK_WARMUP)

    def settings(self) -> dict[str, Any]:
        """Each phase's settings as plain values (the CampaignPlan event carries them)."""
        from dataclasses import asdict

        return {"macro": asdict(self.macro), "cleanup": asdict(self.cleanup),
                "micro": {**asdict(self.micro), "ms": self.micro_ms(), "tp": self.tp()},
                "model": asdict(self.model), "restart": asdict(self.restart),
                "check": {**asdict(self.check), "warmup": self.check_warmup()},
                "sample_interval_s": self.sample_interval_s}


# --- reading -------------------------------------------------------------------------------------------

_TOP = {"campaign", "service", "consent", "macro", "cleanup", "micro", "model", "restart", "check"}


def _kind(value: Any) -> str:
    return {bool: "true/false", int: "a whole number", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)


def _kinds(value: Any) -> str:
    """The plural of ``_kind``: "whole numbers", not "a whole numbers"."""
    return {bool: "true/false values", int: "whole numbers", float: "numbers", str: "strings", list: "lists",
            dict: "tables"}.get(type(value), f"{type(value).__name__} values")


def _got(value: Any) -> str:
    """What the file gave, short: a scalar as written (cut at 40 characters), a list or table by its kind
    (its repr could be megabytes, or nested past the recursion limit)."""
    if isinstance(value, list | dict):
        return _kind(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_type(where: str, value: Any, default: Any, item: type | None = None) -> Any:
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and not (abs(value) < 1e300 and math.isfinite(value)):  # nan, inf, or an int no float holds
            raise CampaignConfigError(f"{where}: expected a finite number, got {_got(value)}")
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, list) and item is float:  # numbers: whole ones are taken as they are
        ok = isinstance(value, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        if ok and not all(abs(v) < 1e300 and math.isfinite(v) for v in value):
            raise CampaignConfigError(f"{where}: expected finite numbers")
        value = [float(v) for v in value] if ok else value
    elif isinstance(default, list):
        first = default[0] if default else None
        ok = isinstance(value, list) and (first is None or all(
            isinstance(v, type(first)) and not isinstance(v, bool) for v in value))
        if isinstance(value, list) and not default:  # ms: whole numbers
            ok = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    else:
        ok = True
    if not ok:
        want = "a list of numbers" if item is float else \
            f"a list of {_kinds(default[0])}" if isinstance(default, list) and default else \
            "a list of whole numbers" if isinstance(default, list) else _kind(default)
        raise CampaignConfigError(f"{where}: expected {want}, got {_got(value)}")
    return value


def _table(path: str, name: str, data: Any) -> dict[str, Any]:
    """A section as the file gives it (absent: empty); anything but a table is the one-line error."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CampaignConfigError(f"{path}: [{name}]: expected a table, got {_got(data)}")
    return data


def _section(path: str, name: str, data: Any, target: Any) -> None:
    data = _table(path, name, data)
    known = {f.name: f for f in fields(target)}
    for key, value in data.items():
        if key not in known:
            raise CampaignConfigError(f"{path}: [{name}] unknown key {key!r} (known: {', '.join(known)})")
        item = float if str(known[key].type) == "list[float]" else None
        setattr(target, key, _check_type(f"{path}: [{name}] {key}", value, getattr(target, key), item))


def parse_config(data: dict[str, Any], path: str = "campaign file") -> CampaignConfig:
    cfg = CampaignConfig(file=path)
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise CampaignConfigError(f"{path}: unknown section [{unknown[0]}] (sections: {', '.join(sorted(_TOP))})")
    top = _table(path, "campaign", data.get("campaign"))
    svc = _table(path, "service", data.get("service"))
    base = {"name": cfg.name, "host": cfg.host, "phases": cfg.phases, "sample_interval_s": cfg.sample_interval_s,
            "remote_python": "", "operator": "", "accept_new_host_key": False}
    for key, value in top.items():
        if key not in base:
            raise CampaignConfigError(f"{path}: [campaign] unknown key {key!r} (known: {', '.join(base)})")
        setattr(cfg, key, _check_type(f"{path}: [campaign] {key}", value, base[key]))
    svc_keys = {"spec": "service", "api_url": "api_url", "health_url": "health_url", "metrics_url": "metrics_url"}
    for key, value in svc.items():
        if key not in svc_keys:
            raise CampaignConfigError(f"{path}: [service] unknown key {key!r} (known: {', '.join(svc_keys)})")
        setattr(cfg, svc_keys[key], _check_type(f"{path}: [service] {key}", value, ""))
    consent = _table(path, "consent", data.get("consent"))
    for step, answer in consent.items():
        if step not in CONSENT_STEPS:
            raise CampaignConfigError(f"{path}: [consent] unknown step {step!r} (steps: {', '.join(CONSENT_STEPS)})")
        if not isinstance(answer, str) or answer not in ANSWERS:
            raise CampaignConfigError(f"{path}: [consent] {step} = {_got(answer)}: ask, yes or no")
        cfg.consent[step] = answer
    for name in ("macro", "cleanup", "micro", "model", "restart", "check"):
        if name in data:
            _section(path, name, data[name], getattr(cfg, name))
    validate(cfg, path)
    return cfg


def validate(cfg: CampaignConfig, path: str) -> None:
    bad = [p for p in cfg.phases if p not in CAMPAIGN_PHASES]
    if bad or not cfg.phases:
        raise CampaignConfigError(f"{path}: [campaign] phases: {', '.join(bad) or 'none'} (phases, in order: "
                                  f"{', '.join(CAMPAIGN_PHASES)})")
    order = [CAMPAIGN_PHASES.index(p) for p in cfg.phases]
    if order != sorted(set(order)):
        raise CampaignConfigError(f"{path}: [campaign] phases must be in order, each once: "
                                  f"{', '.join(CAMPAIGN_PHASES)}")
    if not 0.1 <= cfg.sample_interval_s <= 10:
        raise CampaignConfigError(f"{path}: [campaign] sample_interval_s {cfg.sample_interval_s:g}: 0.1 to 10 s")
    if not cfg.service and any(p in cfg.phases for p in ("cleanup", "restart")) and cfg.host != "demo":
        raise CampaignConfigError(f"{path}: [service] spec is required for the cleanup and the restart "
                                  "(systemd:UNIT, docker:NAME, supervisor:PROGRAM[@CONF], pidfile:PATH, pid:N, "
                                  "sim:NAME, or none)")
    if not cfg.api_url and cfg.host != "demo" and any(p in cfg.phases for p in ("macro", "check")):
        raise CampaignConfigError(f"{path}: [service] api_url is required for the macro phase and the check "
                                  "(the OpenAI-compatible server, e.g. http://gpu-host:8000)")
    for url_key in ("api_url", "health_url", "metrics_url"):
        url = getattr(cfg, url_key)
        if url and not url.startswith(("http://", "https://")):
            raise CampaignConfigError(f"{path}: [service] {url_key} {url!r}: an http:// or https:// URL")
    if cfg.macro.search and not cfg.macro.goodput:
        raise CampaignConfigError(f"{path}: [macro] search finds where SLOs hold: give them "
                                  '(goodput = "ttft:200,tpot:50")')
    needs_levels = [p for p in ("analysis", "check") if p in cfg.phases]
    if cfg.macro.rates and "macro" in cfg.phases and needs_levels:
        raise CampaignConfigError(f"{path}: [macro] rates: {' and '.join(needs_levels)} need concurrency levels (a "
                                  "decode step's batch, a single-stream baseline): leave them out of [campaign] "
                                  "phases, or sweep concurrencies")
    if cfg.macro.search and cfg.macro.rates and len(set(cfg.macro.rates)) < 2:
        raise CampaignConfigError(f"{path}: [macro] search with rates searches between the lowest and the highest "
                                  "of them: give two different rates")
    from kimitui.bench.macro.config import MAX_TOKENS_LEN, ConfigError

    try:  # the load generator's own checks (levels, lengths, endpoint), on the URL it will be given
        cfg.macro.macro_config(cfg.api_url or "http://127.0.0.1").validate()
    except ConfigError as exc:
        raise CampaignConfigError(f"{path}: [macro] {exc}") from None
    except ValueError as exc:  # parse_requests
        raise CampaignConfigError(f"{path}: [macro] requests: {exc}") from None
    _validate_cleanup(cfg.cleanup, path)
    _validate_micro(cfg.micro, path)
    _validate_model(cfg, path)
    if not 0 <= cfg.restart.health_s <= 7200:
        raise CampaignConfigError(f"{path}: [restart] health_s {cfg.restart.health_s:g}: 0 to 7200 s")
    k = cfg.check
    if not 1 <= k.requests <= MAX_CHECK_REQUESTS or not 0 <= k.max_tokens <= MAX_TOKENS_LEN \
            or not -1 <= k.warmup <= MAX_CHECK_REQUESTS:
        raise CampaignConfigError(f"{path}: [check] requests 1 to {MAX_CHECK_REQUESTS}, max_tokens 0 to "
                                  f"{MAX_TOKENS_LEN:,}, warmup 0 to {MAX_CHECK_REQUESTS}")
    if not (0 < k.margin_pct <= 1000 and 0 < k.ttft_margin_pct <= 1000):
        raise CampaignConfigError(f"{path}: [check] margin_pct and ttft_margin_pct above 0, at most 1000")


MAX_THRESHOLD_MIB = float(1 << 20)
"""A clean threshold above 1 TiB of GPU memory would call any GPU clean."""
MAX_M = 1 << 16
MAX_TP = 64
MAX_SWEEP_BYTES = 1 << 34
MAX_CHECK_REQUESTS = 1000
MIN_CHECK_WARMUP = 2


def _validate_cleanup(c: CleanupSettings, path: str) -> None:
    from kimitui.cleanup.setup import UsageError, parse_gpus

    try:
        parse_gpus(c.gpus)
    except UsageError:
        raise CampaignConfigError(f"{path}: [cleanup] gpus {c.gpus!r}: all, or GPU indexes such as \"0,1\"") \
            from None
    if not 0 <= c.threshold_mib <= MAX_THRESHOLD_MIB:
        raise CampaignConfigError(f"{path}: [cleanup] threshold_mib {c.threshold_mib:g}: 0 to "
                                  f"{MAX_THRESHOLD_MIB:,.0f} MiB")
    for key in ("drain_s", "graceful_s", "term_grace_s", "verify_s"):
        if not 0 <= getattr(c, key) <= 3600:
            raise CampaignConfigError(f"{path}: [cleanup] {key} {getattr(c, key):g}: 0 to 3600 s")


def _validate_micro(mi: MicroSettings, path: str) -> None:
    if any(p not in ("gemm", "allreduce") for p in mi.parts) or not mi.parts:
        raise CampaignConfigError(f"{path}: [micro] parts: gemm and/or allreduce")
    if any(not 1 <= v <= MAX_M for v in mi.ms) or not 1 <= mi.tp <= MAX_TP:
        raise CampaignConfigError(f"{path}: [micro] ms 1 to {MAX_M:,}, tp 1 to {MAX_TP}")
    if any(b not in ("marlin", "torch-int4", "bf16") for b in mi.backends) or not mi.backends:
        raise CampaignConfigError(f"{path}: [micro] backends: marlin, torch-int4, bf16")
    if not 0 <= mi.sweep_max_bytes <= MAX_SWEEP_BYTES or not 0 <= mi.pace_s <= 60:
        raise CampaignConfigError(f"{path}: [micro] sweep_max_bytes 0 to {MAX_SWEEP_BYTES:,}, pace_s 0 to 60")


def _validate_model(cfg: CampaignConfig, path: str) -> None:
    from kimitui.bench.micro.presets import PRESETS, preset
    from kimitui.bench.micro.shapes import ShapeError, shapes_for

    mo = cfg.model
    if not 0 <= mo.tp <= MAX_TP:
        raise CampaignConfigError(f"{path}: [model] tp {mo.tp}: 1 to {MAX_TP} (0: [micro] tp)")
    if mo.preset and mo.preset not in PRESETS:
        raise CampaignConfigError(f"{path}: [model] preset {mo.preset!r}: one of {', '.join(PRESETS)}")
    if mo.config and not mo.config.startswith("/"):
        raise CampaignConfigError(f"{path}: [model] config {mo.config!r}: an absolute path on the host (its "
                                  "config.json or the folder holding it)")
    if mo.preset:
        try:  # the preset's dimensions split over TP (the same check ``kimitui bench micro`` makes)
            shapes_for(preset(mo.preset), cfg.tp(), mo.expert_parallel)
        except ShapeError as exc:
            raise CampaignConfigError(f"{path}: [model] preset {mo.preset} at tp {cfg.tp()}: {exc}") from None


def load_config(path: str | Path) -> CampaignConfig:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CampaignConfigError(f"{p}: no such campaign file (kimitui campaign --init {p} writes an example)") \
            from None
    except OSError as exc:
        raise CampaignConfigError(f"{p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise CampaignConfigError(f"{p}: not UTF-8 text (byte {exc.object[exc.start]:#04x} on line {line})") \
            from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CampaignConfigError(f"{p}: not TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise CampaignConfigError(f"{p}: not TOML that can be read: arrays or tables nested too deep") from None
    return parse_config(data, str(p))
