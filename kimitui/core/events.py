"""The vocabulary of a profiling session: every event that can happen, as typed records.

Each event serialises to one JSON object whose first two keys are always ``t`` (unix seconds) and
``type`` (the registry name below), so a run file can be indexed without decoding every line.

An event is a value: a frozen dataclass (the records inside one too), built once and never changed
(``dataclasses.replace`` makes a changed copy), so the fold, a replay's seeks and every view can share it.
Decoding checks every field against its annotation (``kimitui.core.typed``): a line of the wrong shape is
refused whole, with the event type and the field named, rather than becoming an event the fold trips on.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from kimitui.core.error_words import json_words
from kimitui.core.typed import NON_FINITE, FieldTypeError, build, finite

ProcKind = Literal["cuda", "handle", "unknown"]
"""How a process holds a GPU: a CUDA context (device files mapped), a handle only (open, not mapped,
like an NVML monitor), or unknown (NVML lists memory for a PID that is not visible here)."""


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    uuid: str
    name: str
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    mem_reserved_mib: float | None = None
    util_pct: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ProcSample:
    pid: int
    start_time: int | None = None
    """Clock ticks after boot (/proc/PID/stat field 22): with the pid, the identity of a process."""
    user: str | None = None
    gpu_mem_mib: dict[int, float] = field(default_factory=dict)
    kind: ProcKind = "unknown"
    unit: str | None = None
    container: str | None = None
    cmdline: str = ""
    state: str | None = None
    ppid: int | None = None
    gpus: list[int] = field(default_factory=list)
    """GPUs whose device files the process holds (may differ from the GPUs NVML lists memory on)."""
    visible: bool = True
    flags: list[str] = field(default_factory=list)
    exe: str | None = None
    """The executable's path (/proc/PID/exe); None when it could not be read (or an older run)."""


@dataclass(frozen=True, slots=True)
class ProcRef:
    """A process as a preview lists it: who, and why it is (or is not) included."""

    pid: int
    start_time: int | None
    user: str | None = None
    gpus: list[int] = field(default_factory=list)
    mem_mib: float = 0.0
    unit: str | None = None
    cmdline: str = ""
    reason: str = ""
    kind: ProcKind = "unknown"
    exe: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event. ``t`` is unix time in seconds."""

    t: float
    type: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": self.t, "type": self.type}
        for f in dataclasses.fields(self):
            if f.name != "t":
                out[f.name] = _plain(getattr(self, f.name))
        return out


@dataclass(frozen=True, slots=True)
class HostSample(Event):
    type: ClassVar[str] = "sample"
    host: str = ""
    seq: int = 0
    gpus: list[GpuSample] = field(default_factory=list)
    procs: list[ProcSample] = field(default_factory=list)
    agent_pid: int | None = None
    source: str = "nvml"
    boot_time: float | None = None
    """When the host booted (unix seconds, /proc/stat btime), on the recording side's clock like ``t``:
    with ``clock_ticks`` it turns a process' start time (ticks after boot) into a time of day."""
    clock_ticks: int | None = None
    """The host's clock ticks per second (os.sysconf("SC_CLK_TCK"), 100 on Linux)."""


@dataclass(frozen=True, slots=True)
class PhaseStart(Event):
    type: ClassVar[str] = "phase_start"
    phase: str = ""
    title: str = ""


@dataclass(frozen=True, slots=True)
class PhaseEnd(Event):
    type: ClassVar[str] = "phase_end"
    phase: str = ""
    ok: bool = True
    note: str = ""


def phase_outcome(ok: bool | None, note: str) -> str:
    """How a phase ended, as the record says it, in one word: ok, cancelled (the operator's cancel or an
    interrupt: a sweep's "cancelled after 2 of 5 levels", a micro run's "gemm done, allreduce cancelled"),
    refused (a micro run the GPUs' holders stopped before it began), cut off (kimitui stopped during it),
    else FAILED."""
    if ok:
        return "ok"
    note = note.strip()
    if note.startswith("refused"):
        return "refused"
    if note.startswith("cut off"):  # kimitui.core.campaign_events.CUT_OFF
        return "cut off"
    if note.startswith(("cancelled", "interrupted")) or ("cancelled" in note and "failed" not in note):
        return "cancelled"
    return "FAILED"


@dataclass(frozen=True, slots=True)
class CleanupPlan(Event):
    type: ClassVar[str] = "cleanup_plan"
    host: str = ""
    service: str = ""
    manager: str = ""
    gpus: list[int] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    clean_threshold_mib: float = 0.0


@dataclass(frozen=True, slots=True)
class StepPreview(Event):
    type: ClassVar[str] = "step_preview"
    step: str = ""
    action: str = ""
    targets: list[ProcRef] = field(default_factory=list)
    spared: list[ProcRef] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Consent(Event):
    type: ClassVar[str] = "consent"
    step: str = ""
    accepted: bool = False
    operator: str = ""
    pids: list[int] = field(default_factory=list)
    note: str = ""


@dataclass(frozen=True, slots=True)
class SignalSent(Event):
    type: ClassVar[str] = "signal"
    step: str = ""
    pid: int = 0
    start_time: int | None = None
    signal: str = ""
    outcome: Literal["sent", "gone", "mismatch", "refused", "error", "unknown"] = "sent"
    """unknown: the channel dropped with the request in flight (it was not resent)."""
    detail: str = ""
    cmdline: str = ""


@dataclass(frozen=True, slots=True)
class SignalOutcome(Event):
    type: ClassVar[str] = "signal_outcome"
    step: str = ""
    pid: int = 0
    start_time: int | None = None
    signal: str = ""
    outcome: Literal["exited", "survived", "stuck", "unknown"] = "exited"
    """unknown: the host could not be asked again (the channel dropped and did not come back in time)."""
    elapsed_s: float = 0.0
    state: str | None = None


@dataclass(frozen=True, slots=True)
class SignalLate(Event):
    """What became of a signal whose outcome was unknown, learnt only after the wait had given up on it:
    the agent's reply that came late (``how`` "reply": its outcome, e.g. sent), or what the host showed
    once it was back (``how`` "look": exited or alive, the same identity)."""

    type: ClassVar[str] = "signal_late"
    step: str = ""
    pid: int = 0
    start_time: int | None = None
    signal: str = ""
    how: Literal["reply", "look"] = "reply"
    outcome: str = ""
    """reply: the agent's outcome (sent, gone, mismatch, error); look: exited or alive."""
    detail: str = ""
    after_s: float = 0.0
    """Seconds from the signal's request to this news."""
    after_end: bool = False
    """The cleanup had ended (every step reported) when this was learnt."""


@dataclass(frozen=True, slots=True)
class HostCommand(Event):
    """A command a step ran on the host to change its state and the one that restores it (the reset's
    persistence mode, the DCGM unit), with what came of it."""

    type: ClassVar[str] = "host_command"
    step: str = ""
    argv: list[str] = field(default_factory=list)
    purpose: str = ""
    ok: bool = True
    detail: str = ""
    """Why it failed (rc and the first of its output, or the host's error); '' when it worked."""


@dataclass(frozen=True, slots=True)
class StepResult(Event):
    type: ClassVar[str] = "step_result"
    step: str = ""
    status: Literal["done", "skipped", "declined", "failed"] = "done"
    reason: str = ""
    elapsed_s: float = 0.0


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    index: int
    used_mib: float | None
    baseline_mib: float
    clean: bool
    holders: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Verification(Event):
    type: ClassVar[str] = "verification"
    clean: bool = False
    gpus: list[GpuVerdict] = field(default_factory=list)
    holders_left: list[ProcRef] = field(default_factory=list)
    elapsed_s: float = 0.0
    detail: str = ""


@dataclass(frozen=True, slots=True)
class MacroPoint(Event):
    """One concurrency level of a serving sweep; ``metrics`` uses vLLM's result key names."""

    type: ClassVar[str] = "macro_point"
    concurrency: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    """Plain JSON, not checked when decoded (its keys are open-ended): read its numbers with ``metric``."""

    def metric(self, key: str) -> float | None:
        """A metric as a finite float; None when it is missing or no number (NaN, a string, a list, ...)."""
        return finite(self.metrics.get(key))


def metrics_failed(m: Mapping[str, object]) -> bool:
    """A level's metrics say every request of it failed."""
    return "completed" in m and not m["completed"] and bool(m.get("failed") or m.get("num_prompts"))


@dataclass(frozen=True, slots=True)
class MacroVerdict(Event):
    """A sweep's verdict, published when it ends (``kimitui.bench.macro.verdict``): the highest concurrency
    whose level meets the goodput SLOs at p99, and the knee, the first level past which output tok/s grows
    by less than ``knee_growth`` per doubling of the concurrency."""

    type: ClassVar[str] = "macro_verdict"
    slo: dict[str, float] = field(default_factory=dict)
    """The SLOs in ms by vLLM's key (``ttft``, ``tpot``, ``e2el``); empty: none given."""
    meets: list[int] = field(default_factory=list)
    """The concurrencies whose level meets the SLOs at p99."""
    slo_concurrency: int | None = None
    knee_concurrency: int | None = None
    knee_tok_s: float | None = None
    peak_tok_s: float | None = None
    knee_growth: float = 0.10


def level_failed(point: MacroPoint) -> bool:
    """Every request of the level failed: it has no throughput or latency to show (never a zero)."""
    return metrics_failed(point.metrics)


def metrics_error(m: Mapping[str, object]) -> str | None:
    """The most frequent failure of a level's metrics (the load generator counts them by reason, most first)."""
    failures = m.get("failures")
    if isinstance(failures, dict) and failures:
        return str(next(iter(failures)))
    return None


def first_error(point: MacroPoint) -> str | None:
    """The most frequent failure of a level."""
    return metrics_error(point.metrics)


@dataclass(frozen=True, slots=True)
class MacroProgress(Event):
    """Where a serving sweep is, for its panel (live and replayed alike): published when the sweep starts,
    when a level starts or ends, at most ``PROGRESS_EVERY_S`` apart while a level runs, and when the sweep
    ends (with its status and, when it could not run, why)."""

    type: ClassVar[str] = "macro_progress"
    status: Literal["starting", "running", "cancelling", "done", "cancelled", "failed"] = "running"
    levels: list[int] = field(default_factory=list)
    """The planned concurrency levels, in order."""
    level_index: int = 0
    concurrency: int = 0
    stage: Literal["", "warmup", "run", "done"] = ""
    done: int = 0
    """Requests of this level finished (successful or failed)."""
    total: int | None = None
    """Requests in this level; None in duration mode."""
    failed: int = 0
    in_flight: int = 0
    level_fraction: float = 0.0
    elapsed_s: float = 0.0
    """Since the sweep started."""
    error: str = ""

    @property
    def overall_fraction(self) -> float:
        if self.status == "done":
            return 1.0
        return (self.level_index + self.level_fraction) / max(1, len(self.levels))


@dataclass(frozen=True, slots=True)
class MacroRequests(Event):
    """A batch of one level's per-request records (``kimitui.bench.macro.records``), published when the
    level ends, before its ``MacroPoint``: ``requests[k]`` is request ``first + k`` of ``total``, in
    dispatch order. Each is an object: ``start_ms`` (after ``origin``, the level's first dispatch in unix
    seconds), ``end_ms`` and ``chunk_ms`` (token chunk arrivals; after the request's start), ``in``,
    ``out``, ``max_tokens``, and when they apply ``target_in``, ``first_ms`` (a role-only chunk ahead of the
    first token), ``error``, ``in_estimated``,
    ``usage_missing``, ``sched_ms``, ``late_ms``."""

    type: ClassVar[str] = "macro_requests"
    concurrency: int = 0
    level_index: int = 0
    origin: float = 0.0
    first: int = 0
    total: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        # ``requests`` already holds plain JSON values: walking its thousands of floats one by one (the
        # generic ``_plain``) would triple the cost of writing a level's records
        return {"t": self.t, "type": self.type, "concurrency": self.concurrency, "level_index": self.level_index,
                "origin": self.origin, "first": self.first, "total": self.total, "requests": self.requests}


@dataclass(frozen=True, slots=True)
class ServerSample(Event):
    """The server's own gauges, read from its Prometheus ``/metrics`` while a sweep runs (every
    ``MacroConfig.scrape_s``), with the level it was read during (``kimitui.core.server_metrics`` names
    them per engine). A gauge the engine does not have is None."""

    type: ClassVar[str] = "server_sample"
    engine: str = ""
    concurrency: int = 0
    level_index: int = 0
    running: float | None = None
    waiting: float | None = None
    kv_cache: float | None = None
    """The fraction of the KV cache in use (0 to 1)."""
    preemptions: float | None = None
    """Preemptions since the server started (a counter)."""


@dataclass(frozen=True, slots=True)
class RequestFieldsDropped(Event):
    """The server refused request fields the load generator sends by default (vLLM's ``ignore_eos``, ...):
    its first answer, a 4xx naming them, was retried without them, and the rest of the run goes without."""

    type: ClassVar[str] = "request_fields_dropped"
    fields: list[str] = field(default_factory=list)
    reason: str = ""
    """The server's answer that named them (``HTTP 422: ...``)."""
    url: str = ""


@dataclass(frozen=True, slots=True)
class GemmRow(Event):
    type: ClassVar[str] = "gemm_row"
    name: str = ""
    m: int = 0
    n: int = 0
    k: int = 0
    dtype: str = ""
    kernel: str = ""
    time_us: float = 0.0
    tflops: float = 0.0
    gbps: float = 0.0
    roofline_us: float | None = None
    rel_err: Annotated[float | None, NON_FINITE] = None
    """Mean |out - ref| / mean |ref|: NaN or infinite when the kernel's output is (a broken kernel), kept so."""
    # micro runner (kimitui.bench.micro): which backend, how many bytes the roofline counts, and why
    backend: str = ""
    """marlin, torch-int4 or bf16 (what the row measured; ``kernel`` names the op)."""
    note: str = ""
    run_id: str = ""
    bytes_moved: int = 0
    experts: int = 0
    """MoE rows: distinct experts the routing touched per call (their weights are the bytes moved)."""
    correct: bool | None = None
    """rel_err against the dequantized bf16 reference below the limit (None: not checked)."""
    simulated: bool = False


@dataclass(frozen=True, slots=True)
class AllReduceRow(Event):
    type: ClassVar[str] = "allreduce_row"
    size_bytes: int = 0
    count: int = 0
    dtype: str = "bfloat16"
    ranks: int = 0
    time_us: float = 0.0
    algbw_gbps: float = 0.0
    busbw_gbps: float = 0.0
    burst: int = 1
    tokens: int | None = None
    # micro runner: eager or captured in a CUDA graph; nccl-tests' #wrong; the whole burst's time
    mode: str = "eager"
    wrong: int = 0
    backend: str = ""
    run_id: str = ""
    burst_us: float | None = None
    simulated: bool = False


@dataclass(frozen=True, slots=True)
class ConnectionState(Event):
    type: ClassVar[str] = "connection"
    host: str = ""
    state: Literal["connecting", "connected", "lost", "reconnecting", "closed", "failed"] = "connected"
    detail: str = ""
    gap_s: float | None = None


@dataclass(frozen=True, slots=True)
class LogLine(Event):
    type: ClassVar[str] = "log"
    level: Literal["debug", "info", "warning", "error"] = "info"
    source: str = ""
    message: str = ""


# --- micro benchmarks (kimitui.bench.micro) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopoGpu:
    index: int
    name: str = ""
    bus_id: str = ""
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlinks: int = 0
    """Active NVLink links."""
    nvlink_gbps: float | None = None
    """All active links together, per direction."""
    numa_node: int | None = None
    cpu_affinity: str = ""


@dataclass(frozen=True, slots=True)
class Topology(Event):
    """The interconnect, as ``nvidia-smi topo -m`` shows it (read from NVML)."""

    type: ClassVar[str] = "topology"
    host: str = ""
    source: str = ""
    """nvml, nvidia-smi (PCIe only) or modelled (the simulated host)."""
    gpus: list[TopoGpu] = field(default_factory=list)
    links: list[list[str]] = field(default_factory=list)
    """GPU x GPU: X, NV# (# links), PIX, PXB, PHB, NODE, SYS (nvidia-smi topo -m's legend)."""
    p2p: list[list[str]] = field(default_factory=list)
    """GPU x GPU peer-to-peer read status: OK, NS (not supported), ... or X on the diagonal."""
    summary: str = ""
    link_kind: str = ""
    """NVLink or PCIe: what an all-reduce between the GPUs goes over."""
    link_gbps: float | None = None
    """That link's bandwidth per direction (GB/s): the limit drawn beside the measured busbw."""
    simulated: bool = False
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MicroPlan(Event):
    """A micro run starts: what it will measure."""

    type: ClassVar[str] = "micro_plan"
    run_id: str = ""
    host: str = ""
    model: str = ""
    tp: int = 0
    parts: list[str] = field(default_factory=list)
    gemms: list[dict[str, Any]] = field(default_factory=list)
    """The per-GPU GEMM shapes (kimitui.bench.micro.shapes.GemmShape as dicts)."""
    ms: list[int] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    """All-reduce message sizes, bytes."""
    ranks: int = 0
    gpus: list[int] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    """Items per part (gemm, allreduce), for the progress bars."""
    simulated: bool = False
    forced: bool = False
    """Started with the GPU-memory check overridden."""


@dataclass(frozen=True, slots=True)
class MicroEnv(Event):
    """What a worker found on the host: its torch, device, backends (used or why not), memory bandwidth."""

    type: ClassVar[str] = "micro_env"
    run_id: str = ""
    part: str = ""
    python: str = ""
    torch: str = ""
    device: str = ""
    backends: dict[str, str] = field(default_factory=dict)
    """Backend -> what is used ("fused_marlin_moe (vllm 0.x)") or why not ("not available: ...")."""
    mem_bw_gbps: float | None = None
    """Measured on the spot by a device copy (bytes read + written / time)."""
    datasheet_gbps: float | None = None
    l2_mb: float | None = None
    ranks: int = 0
    simulated: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MicroProgress(Event):
    type: ClassVar[str] = "micro_progress"
    run_id: str = ""
    part: str = ""
    item: str = ""
    done: int = 0
    total: int = 0


@dataclass(frozen=True, slots=True)
class MicroEnd(Event):
    type: ClassVar[str] = "micro_end"
    run_id: str = ""
    part: str = ""
    """gemm, allreduce, topology, or all (a refusal before any part started)."""
    status: Literal["done", "cancelled", "failed", "refused", "skipped"] = "done"
    detail: str = ""
    elapsed_s: float = 0.0
    rows: int = 0
    holders: list[ProcRef] = field(default_factory=list)
    """A refusal: the processes holding memory on the GPUs in scope."""


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        HostSample,
        PhaseStart,
        PhaseEnd,
        CleanupPlan,
        StepPreview,
        Consent,
        SignalSent,
        SignalOutcome,
        SignalLate,
        HostCommand,
        StepResult,
        Verification,
        MacroPoint,
        MacroProgress,
        MacroRequests,
        ServerSample,
        RequestFieldsDropped,
        MacroVerdict,
        GemmRow,
        AllReduceRow,
        ConnectionState,
        LogLine,
        Topology,
        MicroPlan,
        MicroEnv,
        MicroProgress,
        MicroEnd,
    )
}

class EventDecodeError(ValueError):
    """A line that is not a valid event."""


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def from_dict(data: dict[str, Any]) -> Event:
    """Build an event from its JSON object, every field checked against its annotation
    (``kimitui.core.typed``); unknown keys are ignored (forward compatible). EventDecodeError names the
    event type and the field."""
    name = data.get("type")
    cls = EVENT_TYPES.get(name) if type(name) is str else None
    if cls is None:
        shown = repr(name) if len(repr(name)) <= 40 else repr(name)[:37] + "..."
        raise EventDecodeError(f"unknown or missing event type {shown}")
    try:
        return build(cls, data)
    except FieldTypeError as exc:
        raise EventDecodeError(f"bad {name} event: {exc}") from exc


def encode(event: Event) -> str:
    """One compact JSON line (no newline), ``t`` and ``type`` first."""
    return json.dumps(event.to_dict(), separators=(",", ":"), ensure_ascii=False)


def decode(line: str | bytes) -> Event:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EventDecodeError(f"not JSON: {json_words(exc)}") from exc
    except UnicodeDecodeError as exc:
        raise EventDecodeError(f"not UTF-8 at byte {exc.start}") from exc
    except ValueError as exc:  # an integer of more than 4300 digits (sys.set_int_max_str_digits)
        raise EventDecodeError(f"not readable JSON: {str(exc).split(';')[0]}") from exc
    except RecursionError as exc:
        raise EventDecodeError("not readable JSON: nested too deep") from exc
    if not isinstance(data, dict):
        raise EventDecodeError("not a JSON object")
    return from_dict(data)



# The campaign's events live in their own module; importing it registers them above (EVENT_TYPES).
from kimitui.core import campaign_events as _campaign_events  # noqa: E402, F401
