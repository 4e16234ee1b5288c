"""The campaign's events: its plan, the operator's pause / skip / abort, a resume, its end, the drain of
the server's requests before the graceful stop, the decode-step budget and its verdict (Phase 3), and the
post-restart probe. Declared to the registry (``kimitui.core.events.registry``) with the others.

Every campaign view and the report draw these from the fold (``kimitui.core.campaign_state``), so a
replay shows the same. An event is a value: built once, never changed (``dataclasses.replace`` makes a
changed copy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from kimitui.core.events.base import Event

CAMPAIGN_PHASES: tuple[str, ...] = ("macro", "cleanup", "micro", "analysis", "restart", "check")
"""The campaign's phases in order, by the names their PhaseStart / PhaseEnd events carry: Phase 1 macro,
the transition (the cleanup escalation), Phase 2 micro, Phase 3 analysis, the restart and the
post-restart check."""

CUT_OFF = "cut off"
"""How a resumed campaign's PhaseEnd note starts for a phase kimitui stopped in (a crash, a kill -9)."""


@dataclass(frozen=True, slots=True)
class CampaignPlan(Event):
    """A campaign starts: what it will do, as its file says."""

    type: ClassVar[str] = "campaign_plan"
    name: str = ""
    file: str = ""
    host: str = ""
    service: str = ""
    api_url: str = ""
    health_url: str = ""
    phases: list[str] = field(default_factory=list)
    """The phases it runs, in order (a subset of ``CAMPAIGN_PHASES``)."""
    consent: dict[str, str] = field(default_factory=dict)
    """Step -> ask, yes or no: the consent policy (the file's, with the command line's answers)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Each phase's settings, as plain values (for the record and the report)."""
    headless: bool = False
    operator: str = ""


@dataclass(frozen=True, slots=True)
class ServedModel(Event):
    """The model the campaign measures, known before Phase 1 (``kimitui.campaign.served_model``): from the
    campaign file's ``[model]``, else found from the server (``/v1/models``) and its ``config.json`` on the
    host. Phase 2 measures its shapes; Phase 3 counts only micro rows measured for it."""

    type: ClassVar[str] = "served_model"
    name: str = ""
    """What the micro plan calls it (``MicroPlan.model``); "" when it could not be identified."""
    source: str = ""
    """How it is known, in words: the file's preset or config, or the server's name and the file read."""
    family: str = ""
    tp: int = 0
    expert_parallel: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    """The model config Phase 2 measures (as read; a preset's as transcribed)."""
    params_total: int | None = None
    params_active: int | None = None
    server_names: list[str] = field(default_factory=list)
    """What the server called its model (``/v1/models``' root and id), looked for on the host."""
    note: str = ""
    """What did not agree or could not be read (the paths tried, a preset other than the server's model)."""

    @property
    def identified(self) -> bool:
        return bool(self.name)


@dataclass(frozen=True, slots=True)
class CampaignControl(Event):
    """The operator between phases: pause (the campaign stops before ``phase``), resume, skip ``phase``,
    or abort (the phase in hand is stopped the graceful way, then the service restart is offered)."""

    type: ClassVar[str] = "campaign_control"
    action: Literal["pause", "resume", "skip", "abort"] = "pause"
    phase: str = ""
    """The phase it applies to: the next one (pause, skip), the one in hand (abort)."""
    operator: str = ""
    note: str = ""


@dataclass(frozen=True, slots=True)
class CampaignResume(Event):
    """``kimitui campaign FILE --resume RUN``: kimitui stopped (a crash, a kill -9) and the campaign goes on
    in the same run file from its first unfinished phase."""

    type: ClassVar[str] = "campaign_resume"
    done: list[str] = field(default_factory=list)
    """Phases over before the stop (not run again)."""
    cut_off: list[str] = field(default_factory=list)
    """Phases kimitui stopped in (each closed by a PhaseEnd whose note starts with "cut off")."""
    todo: list[str] = field(default_factory=list)
    """Phases still to run, in order."""
    notes: dict[str, str] = field(default_factory=dict)
    """Per phase, what is kept and what is left (macro levels, micro rows)."""
    dropped_bytes: int = 0
    """A torn last line (the event in hand at the stop) removed before appending."""
    operator: str = ""


@dataclass(frozen=True, slots=True)
class CampaignEnd(Event):
    type: ClassVar[str] = "campaign_end"
    status: Literal["done", "aborted", "failed"] = "done"
    note: str = ""


@dataclass(frozen=True, slots=True)
class DrainProgress(Event):
    """The server's requests before the graceful stop, from its Prometheus ``/metrics``
    (``vllm:num_requests_running``, ``vllm:num_requests_waiting``): read at the preview, then while the
    drain waits (when the counts change), and at its end."""

    type: ClassVar[str] = "drain_progress"
    status: Literal["read", "waiting", "drained", "deadline", "unreadable", "stopped"] = "read"
    running: int | None = None
    waiting: int | None = None
    url: str = ""
    elapsed_s: float = 0.0
    deadline_s: float = 0.0
    detail: str = ""


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """Where one decode step's time goes at concurrency ``m`` (ms)."""

    m: int
    tpot_ms: float | None
    """The measured TPOT (median) at that concurrency: one decode step of a batch of ``m``."""
    tok_s: float | None
    allreduce_ms: float | None
    """122 x all-reduce(M) (the measured burst where there is one)."""
    int4_gemm_ms: float | None
    """The INT4 GEMMs (routed experts: Marlin, or its stand-in) x calls per token."""
    bf16_gemm_ms: float | None
    """The bf16 GEMMs (attention projections, shared expert, dense MLP, lm_head) x calls per token."""
    rest_ms: float | None
    """TPOT minus the measured parts: attention, routing, sampling, scheduling (not measured)."""
    notes: list[str] = field(default_factory=list)

    @property
    def gemm_ms(self) -> float | None:
        if self.int4_gemm_ms is None and self.bf16_gemm_ms is None:
            return None
        return (self.int4_gemm_ms or 0.0) + (self.bf16_gemm_ms or 0.0)


@dataclass(frozen=True, slots=True)
class DecodeBudget(Event):
    """Phase 3: the decode-step budget per measured concurrency and the verdict on what bounds
    throughput, with its assumptions (computed by ``kimitui.phases.analysis`` from the fold)."""

    type: ClassVar[str] = "decode_budget"
    rows: list[BudgetRow] = field(default_factory=list)
    bound: Literal["allreduce", "gemm", "rest", ""] = ""
    """What takes the largest share of a step at the level the verdict is about ("" when it could not be
    judged)."""
    plateau_m: int | None = None
    """The concurrency the verdict is about (``level`` names it; the field keeps its recorded name)."""
    plateau_tok_s: float | None = None
    level: str = ""
    """The word that names ``plateau_m``'s level (``kimitui.core.figures.verdict_level``): "knee", or "highest
    level measured" where the sweep found no knee; "" in a run recorded before: the plateau rule's level."""
    verdict: str = ""
    assumptions: list[str] = field(default_factory=list)
    stand_ins: list[str] = field(default_factory=list)
    """GEMMs measured with another kernel than production's (torch-int4 or bf16 for Marlin)."""
    link: str = ""
    """The interconnect and its limit, as the topology read gave them."""
    missing: list[str] = field(default_factory=list)
    """What the budget could not use (no macro point, no micro row at an M)."""
    model: str = ""
    """The model whose shapes the GEMM rows are (the micro plan's), "" in a run recorded before."""


@dataclass(frozen=True, slots=True)
class ProbeResult(Event):
    """The post-restart check: a short single-stream probe against Phase 1's single-stream figures."""

    type: ClassVar[str] = "probe_result"
    requests: int = 0
    failed: int = 0
    tok_s: float | None = None
    ttft_ms: float | None = None
    baseline_tok_s: float | None = None
    baseline_ttft_ms: float | None = None
    tok_s_change_pct: float | None = None
    ttft_change_pct: float | None = None
    margin_pct: float = 10.0
    ttft_margin_pct: float = 25.0
    drift: bool = False
    note: str = ""
    ttft_noise: str = ""
    """``kimitui.core.figures.noise`` of the TTFT records: "beyond noise", "within noise", "too few requests",
    "no records" ("" in a run from before the rule: judged by the margin alone)."""
    tok_s_noise: str = ""
    """The same for tok/s, judged on the TPOT records (as ``compare`` does)."""
    ttft_all_ms: list[float] = field(default_factory=list)
    """The probe's per-request TTFTs, and below its TPOTs, then Phase 1's single-stream ones (the baseline)."""
    tpot_all_ms: list[float] = field(default_factory=list)
    baseline_ttft_all_ms: list[float] = field(default_factory=list)
    baseline_tpot_all_ms: list[float] = field(default_factory=list)


CAMPAIGN_EVENT_TYPES: tuple[type[Event], ...] = (CampaignPlan, CampaignControl, CampaignResume, CampaignEnd,
                                                   DrainProgress, DecodeBudget, ProbeResult, ServedModel)
EVENTS = CAMPAIGN_EVENT_TYPES
"""The events this module declares (the registry reads them)."""
