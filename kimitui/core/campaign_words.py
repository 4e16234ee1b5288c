"""The campaign's events in words (``kimitui.core.describe.describe`` calls ``campaign_line``)."""

from __future__ import annotations

from kimitui.core.campaign_state import PHASE_TITLES
from kimitui.core.events import (
    CampaignControl,
    CampaignEnd,
    CampaignPlan,
    CampaignResume,
    DecodeBudget,
    DrainProgress,
    Event,
    ProbeResult,
    ServedModel,
)

SOURCE = "campaign"


def phase_title(name: str) -> str:
    return PHASE_TITLES.get(name, name)


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


def drain_words(ev: DrainProgress) -> str:
    counts = f"{_count(ev.running)} running, {_count(ev.waiting)} waiting"
    if ev.status == "read":
        return f"drain: {counts} on the server ({ev.url})"
    if ev.status == "waiting":
        return f"drain: {counts} after {ev.elapsed_s:.1f} s of {ev.deadline_s:g} s"
    if ev.status == "drained":
        return f"drain: drained in {ev.elapsed_s:.1f} s"
    if ev.status == "deadline":
        return f"drain: deadline of {ev.deadline_s:g} s passed with {counts}"
    if ev.status == "stopped":
        return f"drain: stopped after {ev.elapsed_s:.1f} s with {counts}" + (f" ({ev.detail})" if ev.detail else "")
    return f"drain: server metrics unreadable ({ev.detail or ev.url})"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.1f}%"


def probe_words(ev: ProbeResult) -> str:
    if ev.tok_s is None:
        return f"post-restart probe: no figure ({ev.note or 'every request failed'})"
    base = (f"; Phase 1 {ev.baseline_tok_s:.1f} tok/s" if ev.baseline_tok_s is not None else "; no Phase 1 figure")
    ttft = f", TTFT {ev.ttft_ms:.1f} ms" if ev.ttft_ms is not None else ""
    verdict = (f"DRIFT beyond {ev.margin_pct:g}% (tok/s) / {ev.ttft_margin_pct:g}% (TTFT)" if ev.drift
               else "within the margin" if ev.baseline_tok_s is not None else "not judged")
    return (f"post-restart probe: {ev.tok_s:.1f} tok/s{ttft}{base} (tok/s {_pct(ev.tok_s_change_pct)}"
            f"{_judged(ev.tok_s_noise)}, TTFT {_pct(ev.ttft_change_pct)}{_judged(ev.ttft_noise)}): {verdict}")


def _params(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def served_words(ev: ServedModel) -> str:
    """The model the campaign measures, how it is known, and what did not agree."""
    if not ev.identified:
        return f"not identified: {ev.note or ev.source}"
    size = f"{_params(ev.params_total)} parameters, {_params(ev.params_active)} active"
    ep = ", expert parallel" if ev.expert_parallel else ""
    return (f"{ev.name} ({ev.family}, {size}) at TP={ev.tp}{ep}, from {ev.source}"
            + (f"; {ev.note}" if ev.note else ""))


def _judged(noise: str) -> str:
    """How a change compares with the spread of the requests (nothing where the run has no records)."""
    return f" {noise}" if noise in ("beyond noise", "within noise") else ""


def campaign_line(ev: Event) -> str | None:
    if isinstance(ev, CampaignPlan):
        return (f"campaign {ev.name or ev.file}: " + " -> ".join(phase_title(p) for p in ev.phases)
                + (f" on {ev.host}" if ev.host else "") + (" (headless)" if ev.headless else ""))
    if isinstance(ev, CampaignControl):
        who = f" by {ev.operator}" if ev.operator else ""
        what = {"pause": f"paused before {phase_title(ev.phase)}", "resume": "resumed",
                "skip": f"{phase_title(ev.phase)} skipped", "abort": f"ABORTED during {phase_title(ev.phase)}"
                if ev.phase else "ABORTED"}[ev.action]
        return f"campaign {what}{who}" + (f" ({ev.note})" if ev.note else "")
    if isinstance(ev, CampaignResume):
        notes = "; ".join(f"{phase_title(k)}: {v}" for k, v in ev.notes.items())
        return (f"campaign resumed: done {', '.join(map(phase_title, ev.done)) or 'nothing'}; cut off "
                f"{', '.join(map(phase_title, ev.cut_off)) or 'nothing'}; to run "
                f"{', '.join(map(phase_title, ev.todo)) or 'nothing'}" + (f" ({notes})" if notes else ""))
    if isinstance(ev, CampaignEnd):
        return f"campaign {ev.status.upper() if ev.status != 'done' else 'done'}" + (f": {ev.note}" if ev.note else "")
    if isinstance(ev, DrainProgress):
        return drain_words(ev)
    if isinstance(ev, DecodeBudget):
        return f"decode-step budget: {ev.verdict}" if ev.verdict else "decode-step budget: no verdict"
    if isinstance(ev, ProbeResult):
        return probe_words(ev)
    if isinstance(ev, ServedModel):
        return f"the model measured: {served_words(ev)}"
    return None


def campaign_level(ev: Event) -> str | None:
    """info, warning or error for the campaign's events (None: not one of them)."""
    if isinstance(ev, CampaignControl):
        return "warning" if ev.action in ("abort", "skip") else "info"
    if isinstance(ev, CampaignEnd):
        return {"done": "info", "aborted": "warning"}.get(ev.status, "error")
    if isinstance(ev, DrainProgress):
        return "warning" if ev.status in ("deadline", "unreadable", "stopped") else "info"
    if isinstance(ev, ProbeResult):
        return "warning" if ev.drift or ev.tok_s is None else "info"
    if isinstance(ev, ServedModel):
        return "warning" if ev.note or not ev.identified else "info"
    if isinstance(ev, CampaignPlan | CampaignResume | DecodeBudget):
        return "info"
    return None
