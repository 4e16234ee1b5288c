"""The campaign file (TOML): the host, the service and its URLs, each phase's settings, the consent policy.

``load_config(path)`` reads and checks it (an unknown key, a wrong type or a bad value is one line naming
the file, the section and the key); ``INIT_TEXT`` is the commented example ``kimitui campaign --init``
writes; ``demo_config()`` is the embedded default ``kimitui demo --campaign`` runs on the simulated host.
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

    def macro_config(self, url: str, levels: list[int] | None = None) -> MacroConfig:
        """The load generator's settings for these levels (all of them by default) against ``url``: the
        campaign's Phase 1 runs it, and the file is checked by its ``validate``."""
        from kimitui.bench.macro.config import MacroConfig, parse_requests
        from kimitui.bench.macro.verdict import parse_goodput

        per_stream, count = parse_requests(self.requests)
        return MacroConfig(url=url, model=self.model or None, endpoint=self.endpoint,  # type: ignore[arg-type]
                           concurrency=list(self.concurrency if levels is None else levels), requests=count,
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


def _check_type(where: str, value: Any, default: Any) -> Any:
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
    elif isinstance(default, list):
        item = default[0] if default else None
        ok = isinstance(value, list) and (item is None or all(
            isinstance(v, type(item)) and not isinstance(v, bool) for v in value))
        if isinstance(value, list) and not default:  # ms: whole numbers
            ok = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    else:
        ok = True
    if not ok:
        want = f"a list of {_kinds(default[0])}" if isinstance(default, list) and default else \
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
        setattr(target, key, _check_type(f"{path}: [{name}] {key}", value, getattr(target, key)))


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


def demo_config(engine: str = "sim") -> CampaignConfig:
    """The embedded default: the whole campaign on the simulated host, short (about a minute and a half):
    every consent given (the host is simulated), the macro levels up to the 1536 tok/s plateau at 128. With a
    real vLLM (``engine="vllm"``) the lighter ``VLLM_DEMO``."""
    data = tomllib.loads(DEMO_TEXT)
    if engine != "sim":
        for section, values in VLLM_DEMO.items():
            data.setdefault(section, {}).update(values)
    cfg = parse_config(data, "the demo campaign")
    cfg.file = "(built in: kimitui demo --campaign)" if engine == "sim" else \
        f"(built in: kimitui demo --campaign --engine {engine})"
    return cfg


VLLM_DEMO: dict[str, dict[str, Any]] = {
    "campaign": {"name": "demo: a real vLLM (a tiny random Llama on this machine's CPUs), simulated RTX PRO 6000s"},
    "macro": {"concurrency": [1, 2, 4], "requests": "8x", "warmup": 4, "max_tokens": 32},
    "cleanup": {"drain_s": 120, "graceful_s": 60, "term_grace_s": 5, "verify_s": 30},
    "micro": {"ms": [1, 2, 4]},
    "restart": {"health_s": 900},
    "check": {"requests": 8, "margin_pct": 50, "ttft_margin_pct": 1000},
}
"""The demo campaign over a real vLLM on a CPU of 2 cores or so (``kimitui demo --campaign --engine vllm``): a few
levels of short answers (32 tokens; about three minutes in all, most of it the engine's two starts), the waits of a
real engine (its start takes 45 s or more alone on 2 cores, eager), a few requests not counted before Phase 1 and the
probe (a freshly started engine's first ones are slow), 8 requests at concurrency 1 on each side of the check (judged
against their spread), and its margins wide: the tiny model's TTFT is about 10 ms, below this machine's own noise
(the engine's workers busy-poll both cores: the client waited for a CPU 86-98 % of each level and its loop lagged
~100 ms, TTFTs read 50-290 ms, a single stream's tok/s 217 in one run and 549 in the next), so the TTFT check is in
effect off and a drop of tok/s by half beyond the spread is what is flagged."""


DEMO_TEXT = """
[campaign]
name = "demo: Kimi-K2.5 on the simulated 8 x RTX PRO 6000"
host = "demo"
sample_interval_s = 0.5
operator = "kimitui-demo"

[service]
spec = "sim:vllm"

[consent]
drain = "yes"
graceful = "yes"
process = "yes"
others = "yes"
device = "yes"
reset = "no"
restart = "yes"
abort_restart = "yes"

[macro]
concurrency = [1, 8, 32, 128]
requests = "2x"
max_tokens = 64
input_len = 32
warmup = 0

[cleanup]
drain_s = 20
graceful_s = 3
term_grace_s = 2
verify_s = 10

[micro]
ms = [1, 8, 32, 128]
sweep_max_bytes = 67108864
pace_s = 0.01

[restart]
health_s = 60

[check]
requests = 3
"""

INIT_TEXT = """\
# A kimitui campaign: Phase 1 macro against the live server, the transition (the cleanup escalation, each
# step previewed and consented), Phase 2 micro on the freed GPUs, Phase 3 the analysis of a decode step,
# the service restarted (health waited for), and a post-restart check against Phase 1.
#
#   kimitui campaign THIS_FILE              the campaign in the dashboard (consent "ask" opens a modal)
#   kimitui campaign THIS_FILE --headless   no dashboard: every consent must be yes/no here or by --yes/--no
#   kimitui campaign THIS_FILE --resume RUN after a crash or kill -9: go on from the first unfinished phase
#   kimitui report RUN                      the Markdown report of the campaign

[campaign]
name = "Kimi-K2.5 INT4, TP=8"
host = "ssh://ops@gpu-node-01"       # local, demo (the simulated 8-GPU host), ssh://[user@]host[:port] or an alias
# phases = ["macro", "cleanup", "micro", "analysis", "restart", "check"]   # a subset, in this order
sample_interval_s = 0.5             # telemetry sampling, 0.1 to 10 s
# remote_python = "/usr/bin/python3" # the python that runs kimitui's agent on an SSH host (3.8 or newer)
# operator = "ana"                   # who consents (audit log); default the current user
# accept_new_host_key = false

[service]
spec = "systemd:vllm.service"       # systemd:UNIT, docker:NAME, supervisor:PROGRAM[@CONF], pidfile:PATH, pid:N,
                                    # sim:NAME (the demo's), or none (free the GPUs of whatever holds them)
api_url = "http://gpu-node-01:8000" # the OpenAI-compatible server: the macro sweep, the drain, the probe
                                    # (with host = "demo" leave it out: the simulated host's own server is used)
# health_url = "http://127.0.0.1:8000/health"   # polled from the host after the restart (default api_url/health)
# metrics_url = "http://gpu-node-01:8000/metrics" # vLLM's Prometheus metrics, read for the drain

[consent]
# Per step: "ask" (a modal in the dashboard; refused by --headless unless --yes/--no answers it), "yes", "no".
drain = "ask"           # wait for the requests running and waiting on the server before the graceful stop
graceful = "ask"        # the service manager's stop
process = "ask"         # SIGTERM then SIGKILL what is left of the service (its processes as identified at the start)
others = "ask"          # the same for what holds the GPUs and is not the service (another user's job, a notebook)
device = "ask"          # the same for what still holds a CUDA context on the GPUs: the service's processes, and
                        # the others' only when "others" was consented
reset = "no"            # nvidia-smi --gpu-reset, offered only when nothing holds a GPU that is still not clean
restart = "ask"         # start the service again after Phase 3
abort_restart = "ask"   # after an abort (or a transition that did not free the GPUs): restart the service

[macro]
concurrency = [1, 2, 4, 8, 16, 32, 64, 128]
requests = "4x"         # per level: a count (64) or a multiple of the concurrency (4x)
max_tokens = 128
input_len = 128
warmup = 1
endpoint = "completions"  # or chat
# model = ""            # default: the first model /v1/models lists
ignore_eos = true       # vLLM's: every output max_tokens long; a server that refuses it runs without (a warning)
# goodput = "ttft:200,tpot:50"  # SLOs in ms (ttft, tpot, e2el): goodput, the top concurrency meeting them at p99
reset_prefix_cache = false  # drop the server's prefix cache before each level (vLLM: VLLM_SERVER_DEV_MODE=1)

[cleanup]
gpus = "all"            # or e.g. "0,1,2,3"
threshold_mib = 64      # a GPU is clean within this much of its idle memory
drain_s = 120           # the longest wait for the requests to drain
graceful_s = 30
term_grace_s = 5        # SIGTERM to SIGKILL
verify_s = 10
allow_other_users = false

[micro]
parts = ["gemm", "allreduce"]
# ms = [1, 2, 4, 8, 16, 32, 64, 128, 256]   # default: these and every macro level
backends = ["marlin", "torch-int4", "bf16"]
tp = 8
sweep_max_bytes = 1073741824
force = false           # run even when the GPUs hold memory (they should not after the transition)

[model]
# The model Phase 2 measures and Phase 3 divides. Left out, it is found from the server: the folder or
# Hugging Face id /v1/models names, its config.json read on the host (the folder, or the HF cache the
# server's processes use). A model that cannot be found is said before Phase 1.
# preset = "kimi-k2.5"  # measured when the server's model cannot be found: kimi-k2.5, glm-5, deepseek-v3,
#                       # qwen3-235b-a22b, llama-3.1-70b, gpt-oss-120b (kimitui shapes --model NAME)
# config = "/models/Kimi-K2.5/config.json"   # read on the host before the server's word (or its folder)
# tp = 8                # the tensor-parallel size it is served at (default: [micro] tp)
# expert_parallel = false  # served with --enable-expert-parallel

[restart]
health_s = 600          # the longest wait for the health endpoint after the start

[check]
requests = 8            # single-stream requests of the post-restart probe (5 or more: judged against their spread)
# max_tokens = 128      # default: the macro phase's
margin_pct = 10         # flag a single-stream tok/s that moved more than this from Phase 1's
ttft_margin_pct = 25    # flag a TTFT this much above Phase 1's
# warmup = 2            # requests sent first and not counted (a freshly started engine's first ones are slow);
                        # default: [macro] warmup, at least 2
"""
