"""The fold from events to what the dashboard shows.

``fold(state, event)`` is deterministic and does no I/O: the same events in the same order give the
same state, live or replayed. It updates the state in place and returns it (a fresh ``SessionState()``
is the empty state), so a 4 Hz stream of large samples costs no copies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kimitui.core.campaign_state import CampaignRecords, CampaignState, fold_campaign
from kimitui.core.changes import SampleChanges, next_revision, sample_changes
from kimitui.core.cleanup_state import FINAL, CleanupState, SignalRecord, StepState
from kimitui.core.describe import describe, level_of, source_of
from kimitui.core.events import (
    CAMPAIGN_EVENT_TYPES,
    AllReduceRow,
    CleanupPlan,
    ConnectionState,
    Consent,
    DecodeBudget,
    DrainProgress,
    Event,
    FleetSample,
    GemmRow,
    GpuSample,
    HostSample,
    MacroPoint,
    MacroProgress,
    MacroRequests,
    MacroVerdict,
    MicroEnd,
    MicroEnv,
    MicroPlan,
    MicroProgress,
    PhaseEnd,
    PhaseStart,
    ProbeResult,
    ProcSample,
    ServedModel,
    ServerSample,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
    Topology,
    Verification,
    phase_outcome,
)
from kimitui.core.figures import single_stream
from kimitui.core.fleet_state import FleetState
from kimitui.core.level_energy import EnergyMeter
from kimitui.core.level_requests import LevelRequests, fold_requests
from kimitui.core.procdisplay import start_wall_time
from kimitui.core.sweep_state import Sweep

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

    @property
    def outcome(self) -> str:
        """``phase_outcome`` of its end; "unfinished" while it has none."""
        return "unfinished" if self.end is None else phase_outcome(self.ok, self.note)


@dataclass(slots=True)
class MicroRunState:
    """One micro run (kimitui bench micro, or the dashboard's): its plan, what each part's worker found,
    its progress and how each part ended."""

    plan: MicroPlan
    env: dict[str, MicroEnv] = field(default_factory=dict)
    progress: dict[str, MicroProgress] = field(default_factory=dict)
    ends: dict[str, MicroEnd] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return "all" not in self.ends and any(p not in self.ends for p in self.plan.parts)

    def status(self, part: str) -> str:
        end = self.ends.get(part) or self.ends.get("all")
        if end is not None:
            return end.status
        return "running" if part in self.progress or part in self.env else "pending"


@dataclass(slots=True)
class LogEntry:
    t: float
    level: str
    source: str
    message: str


@dataclass(slots=True)
class SessionState:
    host: str = ""
    connection: str = "unknown"
    connection_detail: str = ""
    clock: float = 0.0
    events_folded: int = 0
    """How many events the fold has taken (a replay's position)."""
    sample_seq: int = 0
    sample_t: float = 0.0
    sample_source: str = ""
    agent_pid: int | None = None
    gpus: dict[int, GpuSample] = field(default_factory=dict)
    mem_history: dict[int, deque[tuple[float, float | None]]] = field(default_factory=dict)
    procs: list[ProcSample] = field(default_factory=list)
    changes: SampleChanges = field(default_factory=SampleChanges, compare=False)
    """Which GPUs and processes the latest sample changed (``sample_changes``): the tables redraw those rows only.
    Bookkeeping for drawing, not what the run says: two folds of the same events are equal whatever their
    revisions (a seek's state is another fold's, numbered afresh)."""
    events_rev: int = field(default=0, compare=False)
    """The revision of the latest event folded that is no host sample (``changes.next_revision``): a view that
    reads no sample is drawn again when this moves."""
    phases: list[PhaseSpan] = field(default_factory=list)
    cleanups: list[CleanupState] = field(default_factory=list)
    macro_by_level: dict[int, MacroPoint] = field(default_factory=dict)
    """The latest point at each concurrency, over every sweep of the session (a later sweep's level
    replaces an earlier one's); levels by request rate are their sweep's alone (``Sweep.points``)."""
    sweeps: list[Sweep] = field(default_factory=list)
    boot_time: float | None = None
    """The host's boot time and clock ticks per second, from its samples (None: the agent did not say)."""
    clock_ticks: int | None = None
    macro_requests: dict[int, LevelRequests] = field(default_factory=dict)
    rate_requests: dict[float, LevelRequests] = field(default_factory=dict)
    """The per-request records of levels by request rate, by rate (``macro_requests``: by concurrency)."""
    gemm: list[GemmRow] = field(default_factory=list)
    allreduce: list[AllReduceRow] = field(default_factory=list)
    topology: Topology | None = None
    micro_runs: list[MicroRunState] = field(default_factory=list)
    log: deque[LogEntry] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    campaigns: CampaignRecords = field(default_factory=CampaignRecords)
    """The latest campaign (kimitui.core.campaign_state), its drain, budget and probe."""
    fleet: FleetState | None = None
    """A fleet session's hosts (``kimitui fleet``; kimitui.core.fleet_state); None in a one-host session."""

    @property
    def campaign(self) -> CampaignState | None:
        return self.campaigns.campaign

    @property
    def drain(self) -> DrainProgress | None:
        return self.campaigns.drain

    @property
    def budget(self) -> DecodeBudget | None:
        return self.campaigns.budget

    @property
    def probe(self) -> ProbeResult | None:
        return self.campaigns.probe

    @property
    def served_model(self) -> ServedModel | None:
        return self.campaigns.served

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
        return [self.macro_by_level[c] for c in sorted(self.macro_by_level)]

    @property
    def micro(self) -> MicroRunState | None:
        return self.micro_runs[-1] if self.micro_runs else None

    @property
    def sweep(self) -> Sweep | None:
        return self.sweeps[-1] if self.sweeps else None

    def single_stream_tok_s(self) -> float | None:
        return single_stream(self.macro_points).tok_s

    def started_at(self, start_ticks: int | None) -> float | None:
        """When a process started (unix seconds, the recording side's clock), from its start time in clock
        ticks after boot; None when the host did not say when it booted."""
        return start_wall_time(start_ticks, self.boot_time, self.clock_ticks)


def _log(state: SessionState, t: float, level: str, source: str, message: str) -> None:
    state.log.append(LogEntry(t, level, source, message))


def _fold_sample(state: SessionState, ev: HostSample) -> None:
    if state.sweeps and (meter := state.sweeps[-1].meter) is not None:
        meter.sample(ev)
    if ev.host:
        state.host = ev.host
    state.sample_seq = ev.seq
    state.sample_t = ev.t
    state.sample_source = ev.source
    state.agent_pid = ev.agent_pid
    if ev.boot_time is not None and ev.clock_ticks:
        state.boot_time, state.clock_ticks = ev.boot_time, ev.clock_ticks
    state.changes = sample_changes(state.changes, state.gpus, ev.gpus, state.procs, ev.procs)
    state.gpus = {g.index: g for g in ev.gpus}
    state.procs = ev.procs
    record_memory(state, ev.t, [(g.index, g.mem_used_mib) for g in ev.gpus])


def record_memory(state: SessionState, t: float, used: Iterable[tuple[int, float | None]]) -> None:
    """A sample's mark on the memory history: (GPU, MiB used) at ``t``, None where the GPU gave no reading
    (a gap, kept: every GPU of a sample gets a point, so the GPUs' histories stay on one time axis and
    hold the last ``HISTORY_POINTS`` samples however many readings failed). The one history function:
    the fold calls it for every sample, a replay's seek for the older samples it does not fold whole."""
    for index, mib in used:
        hist = state.mem_history.get(index)
        if hist is None:
            hist = state.mem_history[index] = deque(maxlen=HISTORY_POINTS)
        hist.append((t, mib))


def _step(state: SessionState, name: str) -> StepState | None:
    cleanup = state.cleanup
    if cleanup is None:
        return None
    step = cleanup.steps.get(name)
    if step is None:
        step = cleanup.steps[name] = StepState(name)
    return step


def _open_sweep(state: SessionState, t: float) -> Sweep:
    sweep = state.sweep
    if sweep is None or sweep.end is not None:
        sweep = Sweep(t)
        state.sweeps.append(sweep)
    return sweep


def _fold_step_result(state: SessionState, ev: StepResult) -> StepState | None:
    step = _step(state, ev.step)
    if step is None:
        return None
    step.status, step.reason, step.result = ev.status, ev.reason, ev
    cleanup = state.cleanup
    if step.consent is not None:
        step.elapsed_s = max(ev.t - step.consent.t, 0.0)
    elif ev.step == "verify" and cleanup is not None and cleanup.verification is not None:
        step.elapsed_s = cleanup.verification.elapsed_s
    else:
        step.elapsed_s = ev.elapsed_s
    if cleanup is not None and "verify" in cleanup.steps:
        # verify asks nothing, so no event precedes its result: it runs once every step before it is over
        names = list(cleanup.steps)
        verify = cleanup.steps["verify"]
        if verify.status == "pending" and cleanup.verification is None and all(
                cleanup.steps[n].status in FINAL for n in names[: names.index("verify")]):
            verify.status = "running"
    return step


def fold(state: SessionState, ev: Event) -> SessionState:
    state.events_folded += 1
    if ev.t > state.clock:
        state.clock = ev.t
    if isinstance(ev, HostSample):
        _fold_sample(state, ev)
        return state
    state.events_rev = next_revision()
    if isinstance(ev, FleetSample):
        if state.fleet is None:
            state.fleet = FleetState()
        state.fleet.fold(ev)
        return state
    if isinstance(ev, PhaseStart):
        state.phases.append(PhaseSpan(ev.phase, ev.title or ev.phase, ev.t))
        if ev.phase == "macro":
            sweep = state.sweep
            if sweep is None or sweep.end is not None or sweep.phase or sweep.points:
                sweep = Sweep(ev.t)  # a sweep recorded without progress events
                state.sweeps.append(sweep)
            sweep.phase, sweep.title = True, ev.title
        fold_campaign(state.campaigns, ev)
    elif isinstance(ev, PhaseEnd):
        if ev.phase == "macro" and ev.ok and state.sweep is not None and state.sweep.end is None:
            failure = state.sweep.failure  # recorded before the phase judged it: the same judgement here
            if failure is not None:
                ev = replace(ev, ok=False, note=failure)
        for span in reversed(state.phases):
            if span.phase == ev.phase and span.end is None:
                span.end, span.ok, span.note = ev.t, ev.ok, ev.note
                break
        if ev.phase == "macro" and state.sweep is not None and state.sweep.end is None:
            sweep = state.sweep
            sweep.end, sweep.ok, sweep.note = ev.t, ev.ok, ev.note
        fold_campaign(state.campaigns, ev)
    elif isinstance(ev, CAMPAIGN_EVENT_TYPES):
        fold_campaign(state.campaigns, ev)
    elif isinstance(ev, CleanupPlan):
        state.cleanups.append(CleanupState(ev, {s: StepState(s) for s in ev.steps}))
    elif isinstance(ev, StepPreview):
        step = _step(state, ev.step)
        if step is not None:
            step.preview, step.status = ev, "previewed"
    elif isinstance(ev, Consent):
        step = _step(state, ev.step)
        if step is not None:
            step.consent = ev
            step.status = "confirmed" if ev.accepted else "declined"
            step.started = ev.t
    elif isinstance(ev, SignalSent):
        step = _step(state, ev.step)
        if step is not None:
            step.signals.append(SignalRecord(ev))
            step.status = "running"
    elif isinstance(ev, SignalOutcome):
        step = _step(state, ev.step)
        if step is not None:
            step.outcomes.append(ev)
            record = next((r for r in step.signals if r.answers(ev)), None)
            if record is not None:
                record.outcome = ev
    elif isinstance(ev, StepResult):
        _fold_step_result(state, ev)
    elif isinstance(ev, Verification):
        if state.cleanup is not None:
            state.cleanup.verification = ev
            verify = state.cleanup.steps.get("verify")
            if verify is not None and verify.status == "running":
                verify.status = "pending"  # the verdict is in; its result follows
    elif isinstance(ev, MacroPoint):
        if ev.rate is None:  # the analysis and compare read concurrencies (a rate level's batch is not one)
            state.macro_by_level[ev.concurrency] = ev
        sweep = _open_sweep(state, ev.t)
        sweep.points[ev.key] = ev
        if sweep.meter is not None and sweep.meter.concurrency == ev.key:
            if (energy := sweep.meter.result()) is not None:
                sweep.energy[ev.key] = energy
            sweep.meter = None
    elif isinstance(ev, MacroVerdict):
        if state.sweep is not None:
            state.sweep.verdict = ev
    elif isinstance(ev, MacroProgress):
        sweep = state.sweep
        if ev.status == "starting" or sweep is None:
            sweep = Sweep(ev.t)
            state.sweeps.append(sweep)
        sweep.progress = ev
        if ev.status == "running" and ev.stage == "run" and (sweep.meter is None
                                                              or sweep.meter.concurrency != ev.key):
            sweep.meter = EnergyMeter(ev.key)  # the level runs: its power samples from here
        if ev.status in ("done", "cancelled", "failed") and sweep.end is None:
            sweep.end, sweep.ok = ev.t, ev.status == "done"
            sweep.note = sweep.note or ev.error
    elif isinstance(ev, MacroRequests):
        fold_requests(state.macro_requests if ev.rate is None else state.rate_requests, ev)
    elif isinstance(ev, ServerSample):
        _open_sweep(state, ev.t).server.append(ev)
    elif isinstance(ev, GemmRow):
        state.gemm.append(ev)
        return state
    elif isinstance(ev, AllReduceRow):
        state.allreduce.append(ev)
        return state
    elif isinstance(ev, Topology | MicroPlan | MicroEnv | MicroProgress | MicroEnd):
        _fold_micro(state, ev)
    elif isinstance(ev, ConnectionState):
        state.host = ev.host or state.host
        state.connection, state.connection_detail = ev.state, ev.detail
    text = describe(ev, state)
    if text is not None:
        _log(state, ev.t, level_of(ev), source_of(ev), text)
    return state


def _micro_run(state: SessionState, run_id: str) -> MicroRunState | None:
    for run in reversed(state.micro_runs):
        if run.plan.run_id == run_id:
            return run
    return None


def _fold_micro(state: SessionState, ev: Topology | MicroPlan | MicroEnv | MicroProgress | MicroEnd) -> None:
    if isinstance(ev, Topology):
        state.topology = ev
        return
    if isinstance(ev, MicroPlan):
        state.micro_runs.append(MicroRunState(ev))
        return
    run = _micro_run(state, ev.run_id)
    if run is None:
        return
    if isinstance(ev, MicroProgress):
        run.progress[ev.part] = ev
    elif isinstance(ev, MicroEnv):
        run.env[ev.part] = ev
    elif isinstance(ev, MicroEnd):
        run.ends[ev.part] = ev


def fold_all(events: list[Event] | tuple[Event, ...], state: SessionState | None = None) -> SessionState:
    state = SessionState() if state is None else state
    for ev in events:
        fold(state, ev)
    return state


def proc_mem_mib(proc: ProcSample) -> float:
    return float(sum(proc.gpu_mem_mib.values()))
