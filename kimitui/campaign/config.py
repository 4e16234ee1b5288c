"""The campaign file (TOML): the host, the service and its URLs, each phase's settings, the consent policy.

``load_config(path)`` reads and checks it (an unknown key, a wrong type or a bad value is one line naming
the file, the section and the key); ``INIT_TEXT`` is the commented example ``kimitui campaign --init``
writes; ``demo_config()`` is the embedded default ``kimitui demo --campaign`` runs on the simulated host.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimitui.core.campaign_events import CAMPAIGN_PHASES

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

    def macro_config(self, url: str, levels: list[int] | None = None) -> MacroConfig:
        """The load generator's settings for these levels (all of them by default) against ``url``: the
        campaign's Phase 1 runs it, and the file is checked by its ``validate``."""
        from kimitui.bench.macro.config import MacroConfig, parse_requests

        per_stream, count = parse_requests(self.requests)
        return MacroConfig(url=url, model=self.model or None, endpoint=self.endpoint,  # type: ignore[arg-type]
                           concurrency=list(self.concurrency if levels is None else levels), requests=count,
                           requests_per_stream=per_stream, max_tokens=self.max_tokens, input_len=self.input_len,
                           warmup=self.warmup)


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
class RestartSettings:
    health_s: float = 600.0


@dataclass(slots=True)
class CheckSettings:
    requests: int = 4
    max_tokens: int = 0
    """0: Phase 1's max_tokens."""
    margin_pct: float = 10.0
    """A drift in single-stream tok/s beyond this (either way) is flagged."""
    ttft_margin_pct: float = 25.0
    """A TTFT higher than Phase 1's by more than this is flagged."""


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
    restart: RestartSettings = field(default_factory=RestartSettings)
    check: CheckSettings = field(default_factory=CheckSettings)
    file: str = ""

    def micro_ms(self) -> list[int]:
        if self.micro.ms:
            return sorted(set(self.micro.ms))
        return sorted({1 << i for i in range(9)} | set(self.macro.concurrency))

    def settings(self) -> dict[str, Any]:
        """Each phase's settings as plain values (the CampaignPlan event carries them)."""
        from dataclasses import asdict

        return {"macro": asdict(self.macro), "cleanup": asdict(self.cleanup),
                "micro": {**asdict(self.micro), "ms": self.micro_ms()}, "restart": asdict(self.restart),
                "check": asdict(self.check), "sample_interval_s": self.sample_interval_s}


# --- reading -------------------------------------------------------------------------------------------

_TOP = {"campaign", "service", "consent", "macro", "cleanup", "micro", "restart", "check"}


def _kind(value: Any) -> str:
    return {bool: "true/false", int: "a whole number", float: "a number", str: "a string",
            list: "a list"}.get(type(value), type(value).__name__)


def _check_type(where: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
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
        want = f"a list of {_kind(default[0])}s" if isinstance(default, list) and default else \
            "a list of whole numbers" if isinstance(default, list) else _kind(default)
        raise CampaignConfigError(f"{where}: expected {want}, got {value!r}")
    return value


def _section(path: str, name: str, data: Any, target: Any) -> None:
    if not isinstance(data, dict):
        raise CampaignConfigError(f"{path}: [{name}] must be a table")
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
    top = dict(data.get("campaign") or {})
    svc = dict(data.get("service") or {})
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
    consent = data.get("consent") or {}
    if not isinstance(consent, dict):
        raise CampaignConfigError(f"{path}: [consent] must be a table")
    for step, answer in consent.items():
        if step not in CONSENT_STEPS:
            raise CampaignConfigError(f"{path}: [consent] unknown step {step!r} (steps: {', '.join(CONSENT_STEPS)})")
        if answer not in ANSWERS:
            raise CampaignConfigError(f"{path}: [consent] {step} = {answer!r}: ask, yes or no")
        cfg.consent[step] = answer
    for name in ("macro", "cleanup", "micro", "restart", "check"):
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
    from kimitui.bench.macro.config import ConfigError

    try:  # the load generator's own checks (levels, lengths, endpoint), on the URL it will be given
        cfg.macro.macro_config(cfg.api_url or "http://127.0.0.1").validate()
    except ConfigError as exc:
        raise CampaignConfigError(f"{path}: [macro] {exc}") from None
    except ValueError as exc:  # parse_requests
        raise CampaignConfigError(f"{path}: [macro] requests: {exc}") from None
    c = cfg.cleanup
    for key in ("drain_s", "graceful_s", "term_grace_s", "verify_s"):
        if not 0 <= getattr(c, key) <= 3600:
            raise CampaignConfigError(f"{path}: [cleanup] {key} {getattr(c, key):g}: 0 to 3600 s")
    mi = cfg.micro
    if any(p not in ("gemm", "allreduce") for p in mi.parts) or not mi.parts:
        raise CampaignConfigError(f"{path}: [micro] parts: gemm and/or allreduce")
    if any(v < 1 for v in mi.ms) or mi.tp < 1:
        raise CampaignConfigError(f"{path}: [micro] ms and tp must be 1 or more")
    if any(b not in ("marlin", "torch-int4", "bf16") for b in mi.backends) or not mi.backends:
        raise CampaignConfigError(f"{path}: [micro] backends: marlin, torch-int4, bf16")
    if not 0 <= cfg.restart.health_s <= 7200:
        raise CampaignConfigError(f"{path}: [restart] health_s {cfg.restart.health_s:g}: 0 to 7200 s")
    k = cfg.check
    if k.requests < 1 or k.max_tokens < 0 or k.margin_pct <= 0 or k.ttft_margin_pct <= 0:
        raise CampaignConfigError(f"{path}: [check] requests at least 1, margins above 0")


def load_config(path: str | Path) -> CampaignConfig:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CampaignConfigError(f"{p}: no such campaign file (kimitui campaign --init {p} writes an example)") \
            from None
    except OSError as exc:
        raise CampaignConfigError(f"{p}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CampaignConfigError(f"{p}: not TOML: {exc}") from None
    return parse_config(data, str(p))


def demo_config() -> CampaignConfig:
    """The embedded default: the whole campaign on the simulated host, short (about a minute and a half):
    every consent given (the host is simulated), the macro levels up to the 1536 tok/s plateau at 128."""
    cfg = parse_config(tomllib.loads(DEMO_TEXT), "the demo campaign")
    cfg.file = "(built in: kimitui demo --campaign)"
    return cfg


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
# health_url = "http://127.0.0.1:8000/health"   # polled from the host after the restart (default api_url/health)
# metrics_url = "http://gpu-node-01:8000/metrics" # vLLM's Prometheus metrics, read for the drain

[consent]
# Per step: "ask" (a modal in the dashboard; refused by --headless unless --yes/--no answers it), "yes", "no".
drain = "ask"           # wait for the requests running and waiting on the server before the graceful stop
graceful = "ask"        # the service manager's stop
process = "ask"         # SIGTERM then SIGKILL what is left of the service (its processes as identified at the start)
others = "ask"          # the same for what holds the GPUs and is not the service (another user's job, a notebook)
device = "ask"          # the same for the CUDA-context holders of the GPUs left (not the service's: only after others)
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

[restart]
health_s = 600          # the longest wait for the health endpoint after the start

[check]
requests = 4            # single-stream requests of the post-restart probe
# max_tokens = 128      # default: the macro phase's
margin_pct = 10         # flag a single-stream tok/s that moved more than this from Phase 1's
ttft_margin_pct = 25    # flag a TTFT this much above Phase 1's
"""
