"""The fold from events to what the dashboard shows.

``fold(state, event)`` is deterministic and does no I/O: the same events in the same order give the
same state, live or replayed. It updates the state in place and returns it (a fresh ``SessionState()``
is the empty state), so a 4 Hz stream of large samples costs no copies.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kimitui.core.events import (
    AllReduceRow,
    CleanupPlan,
    ConnectionState,
    Consent,
    Event,
    GemmRow,
    GpuSample,
    HostSample,
    LogLine,
    MacroPoint,
    MacroRequests,
    PhaseEnd,
    PhaseStart,
    ProcSample,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
    Verification,
)

HISTORY_POINTS = 240
"""Memory history kept per GPU, in samples (one minute at 4 Hz)."""
LOG_LINES = 1000


@dataclass(slots=True)
class PhaseSpan:
    phase: str
    title: str
    start: float
    end: float | None = None
    ok: bool | None = None
    note: str = ""


@dataclass(slots=True)
class StepState:
    step: str
    status: str = "pending"
    """pending, previewed, confirmed, running, done, skipped, declined, failed."""
    preview: StepPreview | None = None
    consent: Consent | None = None
    signals: list[SignalSent] = field(default_factory=list)
    outcomes: list[SignalOutcome] = field(default_factory=list)
    started: float | None = None
    elapsed_s: float | None = None
    reason: str = ""


@dataclass(slots=True)
class CleanupState:
    plan: CleanupPlan
    steps: dict[str, StepState] = field(default_factory=dict)
    verification: Verification | None = None


@dataclass(slots=True)
class LogEntry:
    t: float
    level: str
    source: str
    message: str


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


def _fold_requests(state: SessionState, ev: MacroRequests) -> None:
    level = state.macro_requests.get(ev.concurrency)
    if level is None or level.origin != ev.origin:  # a new level (or a new sweep) at this concurrency
        level = state.macro_requests[ev.concurrency] = LevelRequests(ev.origin, ev.total)
    for r in ev.requests:
        level.received += 1
        chunks = r.get("chunk_ms") or []
        if r.get("error") is not None or not chunks:
            level.failed += 1
            continue
        level.ttft_ms.append(chunks[0])
        level.input_tokens.append(r.get("in", 0))
        out = r.get("out", 0)
        if out > 1:
            level.tpot_ms.append((chunks[-1] - chunks[0]) / (out - 1))


@dataclass(slots=True)
class SessionState:
    host: str = ""
    connection: str = "unknown"
    connection_detail: str = ""
    clock: float = 0.0
    events: int = 0
    sample_seq: int = 0
    sample_t: float = 0.0
    sample_source: str = ""
    agent_pid: int | None = None
    gpus: dict[int, GpuSample] = field(default_factory=dict)
    mem_history: dict[int, deque[tuple[float, float]]] = field(default_factory=dict)
    procs: list[ProcSample] = field(default_factory=list)
    phases: list[PhaseSpan] = field(default_factory=list)
    cleanups: list[CleanupState] = field(default_factory=list)
    macro: dict[int, MacroPoint] = field(default_factory=dict)
    macro_requests: dict[int, LevelRequests] = field(default_factory=dict)
    gemm: list[GemmRow] = field(default_factory=list)
    allreduce: list[AllReduceRow] = field(default_factory=list)
    log: deque[LogEntry] = field(default_factory=lambda: deque(maxlen=LOG_LINES))

    @property
    def phase(self) -> PhaseSpan | None:
        """The phase in progress, if any."""
        for span in reversed(self.phases):
            if span.end is None:
                return span
        return None

    @property
    def cleanup(self) -> CleanupState | None:
        return self.cleanups[-1] if self.cleanups else None

    @property
    def macro_points(self) -> list[MacroPoint]:
        return [self.macro[c] for c in sorted(self.macro)]

    def single_stream_tok_s(self) -> float | None:
        point = self.macro.get(1)
        return None if point is None else point.metrics.get("output_throughput")


def _log(state: SessionState, t: float, level: str, source: str, message: str) -> None:
    state.log.append(LogEntry(t, level, source, message))


def _fold_sample(state: SessionState, ev: HostSample) -> None:
    if ev.host:
        state.host = ev.host
    state.sample_seq = ev.seq
    state.sample_t = ev.t
    state.sample_source = ev.source
    state.agent_pid = ev.agent_pid
    state.gpus = {g.index: g for g in ev.gpus}
    state.procs = ev.procs
    for g in ev.gpus:
        hist = state.mem_history.get(g.index)
        if hist is None:
            hist = state.mem_history[g.index] = deque(maxlen=HISTORY_POINTS)
        if g.mem_used_mib is not None:
            hist.append((ev.t, g.mem_used_mib))


def _step(state: SessionState, name: str) -> StepState | None:
    cleanup = state.cleanup
    if cleanup is None:
        return None
    step = cleanup.steps.get(name)
    if step is None:
        step = cleanup.steps[name] = StepState(name)
    return step


def fold(state: SessionState, ev: Event) -> SessionState:
    state.events += 1
    if ev.t > state.clock:
        state.clock = ev.t
    if isinstance(ev, HostSample):
        _fold_sample(state, ev)
    elif isinstance(ev, PhaseStart):
        state.phases.append(PhaseSpan(ev.phase, ev.title or ev.phase, ev.t))
        _log(state, ev.t, "info", "phase", f"phase {ev.phase} started" + (f": {ev.title}" if ev.title else ""))
    elif isinstance(ev, PhaseEnd):
        for span in reversed(state.phases):
            if span.phase == ev.phase and span.end is None:
                span.end, span.ok, span.note = ev.t, ev.ok, ev.note
                break
        outcome = "ended" if ev.ok else "FAILED"
        _log(state, ev.t, "info" if ev.ok else "error", "phase",
             f"phase {ev.phase} {outcome}" + (f": {ev.note}" if ev.note else ""))
    elif isinstance(ev, CleanupPlan):
        state.cleanups.append(CleanupState(ev, {s: StepState(s) for s in ev.steps}))
        _log(state, ev.t, "info", "cleanup",
             f"cleanup plan for {ev.service or 'GPUs'} ({ev.manager}) on GPUs {ev.gpus}: {', '.join(ev.steps)}")
    elif isinstance(ev, StepPreview):
        step = _step(state, ev.step)
        if step is not None:
            step.preview, step.status = ev, "previewed"
        _log(state, ev.t, "info", "cleanup",
             f"{ev.step}: preview, {len(ev.targets)} to signal, {len(ev.spared)} left alone")
    elif isinstance(ev, Consent):
        step = _step(state, ev.step)
        if step is not None:
            step.consent = ev
            step.status = "confirmed" if ev.accepted else "declined"
            step.started = ev.t
        who = f" by {ev.operator}" if ev.operator else ""
        verdict = f"confirmed{who} for pids {ev.pids}" if ev.accepted else f"declined{who}"
        _log(state, ev.t, "info" if ev.accepted else "warning", "cleanup", f"{ev.step}: {verdict}")
    elif isinstance(ev, SignalSent):
        step = _step(state, ev.step)
        if step is not None:
            step.signals.append(ev)
            step.status = "running"
        level = "info" if ev.outcome == "sent" else "warning"
        _log(state, ev.t, level, "signal", f"{ev.signal} -> pid {ev.pid}: {ev.outcome}"
             + (f" ({ev.detail})" if ev.detail else ""))
    elif isinstance(ev, SignalOutcome):
        step = _step(state, ev.step)
        if step is not None:
            step.outcomes.append(ev)
        level = "info" if ev.outcome == "exited" else "warning"
        _log(state, ev.t, level, "signal",
             f"pid {ev.pid} {ev.outcome} {ev.elapsed_s:.2f}s after {ev.signal}"
             + (f" (state {ev.state})" if ev.state else ""))
    elif isinstance(ev, StepResult):
        step = _step(state, ev.step)
        if step is not None:
            step.status, step.elapsed_s, step.reason = ev.status, ev.elapsed_s, ev.reason
        level = "error" if ev.status == "failed" else "info"
        _log(state, ev.t, level, "cleanup", f"{ev.step}: {ev.status} in {ev.elapsed_s:.2f}s"
             + (f" ({ev.reason})" if ev.reason else ""))
    elif isinstance(ev, Verification):
        if state.cleanup is not None:
            state.cleanup.verification = ev
        verdict = "CLEAN" if ev.clean else "NOT CLEAN"
        _log(state, ev.t, "info" if ev.clean else "error", "verify",
             f"verification: {verdict} after {ev.elapsed_s:.2f}s" + (f" ({ev.detail})" if ev.detail else ""))
    elif isinstance(ev, MacroPoint):
        state.macro[ev.concurrency] = ev
        tok = ev.metrics.get("output_throughput")
        tok_s = f"{tok:.0f} tok/s" if isinstance(tok, int | float) else "no throughput"
        _log(state, ev.t, "info", "macro", f"concurrency {ev.concurrency}: {tok_s}")
    elif isinstance(ev, MacroRequests):
        _fold_requests(state, ev)
    elif isinstance(ev, GemmRow):
        state.gemm.append(ev)
    elif isinstance(ev, AllReduceRow):
        state.allreduce.append(ev)
    elif isinstance(ev, ConnectionState):
        state.host = ev.host or state.host
        state.connection, state.connection_detail = ev.state, ev.detail
        gap = f", gap {ev.gap_s:.1f}s" if ev.gap_s else ""
        level = "info" if ev.state in ("connecting", "connected", "closed") else "warning"
        _log(state, ev.t, level, "connection", f"{ev.host}: {ev.state}{gap}"
             + (f" ({ev.detail})" if ev.detail else ""))
    elif isinstance(ev, LogLine):
        _log(state, ev.t, ev.level, ev.source, ev.message)
    return state


def fold_all(events: list[Event] | tuple[Event, ...], state: SessionState | None = None) -> SessionState:
    state = SessionState() if state is None else state
    for ev in events:
        fold(state, ev)
    return state


def proc_mem_mib(proc: ProcSample) -> float:
    return float(sum(proc.gpu_mem_mib.values()))
