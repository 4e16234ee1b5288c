"""The campaign's sections of ``kimitui report``: the campaign (plan, consent policy, phases, controls,
resumes, end), GPU memory through the transition, the drain, tok/s against concurrency as a text plot, the
decode-step budget and its verdict, and the post-restart check. All from the fold (the same the dashboard
shows); memory from the samples the caller reads (``sample_at``)."""

from __future__ import annotations

from collections.abc import Callable

from kimitui.core.budget_words import budget_level, budget_row_note, budget_verdict
from kimitui.core.campaign_state import PHASE_TITLES
from kimitui.core.campaign_words import drain_words, phase_title, probe_words, served_words
from kimitui.core.events import HostSample, MacroPoint, level_failed
from kimitui.core.figures import NOISE_RULE, TPOT_STATISTIC, budget_impossible, spread
from kimitui.core.printable import printable
from kimitui.core.state import CleanupState, SessionState, StepState
from kimitui.report.budget_text import BUDGET_HEAD, SEGMENTS, bar_text, budget_cells
from kimitui.report.format import fmt_duration, table

SampleAt = Callable[[float, bool], HostSample | None]
"""(t, after) -> the sample at or before t (after=False) or at or after t (after=True)."""
AfterStep = Callable[[CleanupState, StepState], HostSample | None]
"""The sample that shows a step's memory after it (``kimitui.report.markdown.step_after_sample``)."""
PLOT_WIDTH = 50


def campaign_section(state: SessionState, end_time: float) -> list[str]:
    c = state.campaign
    if c is None:
        return []
    p = c.plan
    lines = ["## Campaign", "", f"**{p.name or 'campaign'}**" + (f" (`{p.file}`)" if p.file else "")
             + f" on {p.host or 'the host'}; service {p.service or 'none'}"
             + (f", API {p.api_url}" if p.api_url else "") + (" (headless)" if p.headless else "") + ".", ""]
    if c.end is not None:
        lines += [f"Result: **{c.end.status.upper()}**" + (f": {c.end.note}" if c.end.note else "") + ".", ""]
    else:
        lines += ["Result: **not ended** (kimitui stopped during the campaign: `kimitui campaign FILE --resume RUN` "
                  "goes on from its first unfinished phase).", ""]
    rows = []
    for name, ph in c.phases.items():
        dur = "n/a" if ph.start is None else fmt_duration((ph.end if ph.end is not None else end_time) - ph.start)
        rows.append([phase_title(name), c.shown_status(name), dur, str(ph.runs), ph.note or "-"])
    lines += [*table(["phase", "status", "duration", "runs", "note"], rows, "llrrl"), ""]
    policy = ", ".join(f"{k} {v}" for k, v in p.consent.items())
    lines += [f"Consent policy: {policy or 'none given'}.", ""]
    for ctl in c.controls:
        who = f" by {ctl.operator}" if ctl.operator else ""
        lines.append(f"- {ctl.action} {phase_title(ctl.phase) if ctl.phase else ''}{who}"
                     + (f": {ctl.note}" if ctl.note else ""))
    for r in c.resumes:
        notes = "; ".join(f"{phase_title(k)}: {v}" for k, v in r.notes.items())
        lines.append(f"- resumed: cut off {', '.join(map(phase_title, r.cut_off)) or 'nothing'}; ran again "
                     f"{', '.join(map(phase_title, r.todo)) or 'nothing'}" + (f" ({notes})" if notes else "")
                     + (f"; a torn last line of {r.dropped_bytes} bytes was cut off" if r.dropped_bytes else ""))
    if c.controls or c.resumes:
        lines.append("")
    return lines


def transition_memory(state: SessionState, sample_at: SampleAt, after_step: AfterStep) -> list[str]:
    """Per GPU: its used memory at the transition's start, after each step (the last sample before the next
    step or phase began: ``after_step``), and at its end (MiB, as the rest of the report)."""
    span = next((s for s in state.phases if s.phase == "cleanup"), None)
    if state.campaign is not None:
        span = next((s for s in state.phases if s.phase == "cleanup" and s.start >= state.campaign.plan.t), span)
    if span is None:
        return []
    cleanup = next((c for c in state.cleanups if c.plan.t >= span.start), None)
    samples = [("start", sample_at(span.start, False))]
    if cleanup is not None:
        samples += [(s.step, after_step(cleanup, s)) for s in cleanup.steps.values() if s.result is not None
                    and (span.end is None or s.result.t <= span.end)]
    if span.end is not None:
        samples.append(("end", sample_at(span.end, False)))
    samples = [(label, s) for label, s in samples if s is not None]
    if not samples:
        return ["## GPU memory through the transition", "", "No samples in this run."]
    gpus = sorted({g.index for _, s in samples if s is not None for g in s.gpus})
    rows = []
    for i in gpus:
        row = [str(i)]
        for _, s in samples:
            g = next((g for g in s.gpus if g.index == i), None) if s is not None else None
            row.append("n/a" if g is None or g.mem_used_mib is None else f"{g.mem_used_mib:,.0f}")
        rows.append(row)
    return ["## GPU memory through the transition", "",
            "Used memory per GPU in MiB: at the transition's start, after each step (the last sample before the next "
            "step or phase began), at its end (the last sample before it).", "",
            *table(["GPU", *[label for label, _ in samples]], rows), ""]


def drain_section(state: SessionState) -> list[str]:
    d = state.drain
    if d is None:
        return []
    return ["## Drain before the graceful stop", "", drain_words(d).removeprefix("drain: ").capitalize() + ".", ""]


def throughput_plot(points: list[MacroPoint]) -> list[str]:
    """Output tok/s against concurrency as a text bar chart (one bar a level, scaled to the highest)."""
    scored = [(p.concurrency, v) for p in points if not level_failed(p)
              and (v := p.result.output_throughput) is not None and v >= 0]
    if not scored:
        return []
    top = max(v for _, v in scored) or 1.0
    lines = ["", "Output tok/s against concurrency:", "", "```text"]
    for c, v in scored:
        n = round(v / top * PLOT_WIDTH)
        lines.append(f"c={c:<5}{'█' * n}{' ' * (PLOT_WIDTH - n)} {v:7.0f}")
    return [*lines, "```"]


def budget_section(state: SessionState) -> list[str]:
    lines = ["## Phase 3: where a decode step's time goes", ""]
    budget = state.budget
    computed = ""
    if budget is None:
        if not state.macro_by_level or not state.gemm:
            return [*lines, "No budget: the run has no analysis phase, and not both the macro points and the GEMM "
                            "rows to compute one."]
        from kimitui.phases.analysis import decode_budget

        budget = decode_budget(state)
        computed = " (computed by the report: the run has no analysis phase)"
    lines += [f"**Verdict{computed}:** {budget_verdict(budget)}", ""]
    if state.served_model is not None:
        lines += [f"**Model:** {printable(served_words(state.served_model))}", ""]
    if budget.rows:
        rows = []
        for r in budget.rows:
            cells = budget_cells(r)
            rows.append([cells[0] + (f" ({budget_level(budget)})" if r.m == budget.plateau_m else ""), *cells[1:]])
        lines += [f"ms per decode step at concurrency M (share of the TPOT, the {TPOT_STATISTIC} of the level's "
                  "requests); the rest is attention, routing, sampling, scheduling (not measured). A part above the "
                  "TPOT is flagged `!`: no share of a step can exceed the step.", "",
                  *table(list(BUDGET_HEAD), rows), "",
                  "```text",
                  *[f"M={r.m:<5}{bar_text(r, PLOT_WIDTH)}" + ("  ! the parts exceed the TPOT" if budget_impossible(r)
                                                             else "") for r in budget.rows],
                  "",
                  *[f"{char} {what}" for _, char, what in SEGMENTS], "```", ""]
    if budget.assumptions:
        lines += ["Assumptions:", "", *[f"- {a}" for a in budget.assumptions], ""]
    if budget.stand_ins:
        lines += ["Stand-ins (not the production kernel):", "", *[f"- {s}" for s in budget.stand_ins], ""]
    if budget.missing:
        lines += ["Not in the budget:", "", *[f"- {m}" for m in budget.missing], ""]
    if budget.rows:
        lines += ["Per M:", "", *[f"- {budget_row_note(r)}" for r in budget.rows]]
    return lines


def check_section(state: SessionState) -> list[str]:
    p = state.probe
    if p is None:
        c = state.campaign
        if c is not None and "check" in c.phases:
            return ["## Post-restart check", "", f"Not run ({c.phases['check'].status})."]
        return []
    verdict = "**DRIFT**" if p.drift else "within the margin" if p.baseline_tok_s is not None else \
        "not judged (no Phase 1 single-stream figure to compare with)"
    lines = ["## Post-restart check", "", f"{probe_words(p).removeprefix('post-restart probe: ')}.", "",
             f"Verdict: {verdict} (drift: tok/s moved more than ±{p.margin_pct:g}% or TTFT rose more than "
             f"+{p.ttft_margin_pct:g}% from Phase 1's single stream, and beyond the requests' own spread; "
             f"{p.requests} requests, {p.failed} failed).", ""]
    rows = [(name, base, probe) for name, base, probe in (
        ("TTFT ms", p.baseline_ttft_all_ms, p.ttft_all_ms), ("TPOT ms", p.baseline_tpot_all_ms, p.tpot_all_ms))
        if base or probe]
    if rows:
        lines += [f"Per request (n, p25 / p50 / p75); {NOISE_RULE}:", "",
                  "| | Phase 1, concurrency 1 | post-restart probe |", "|---|---|---|",
                  *[f"| {name} | {_spread(base)} | {_spread(probe)} |" for name, base, probe in rows], ""]
    return lines


def _spread(values: list[float]) -> str:
    if not values:
        return "no records"
    s = spread(values)
    return f"{s.n}: {s.p25:.3g} / {s.p50:.3g} / {s.p75:.3g}"


def titles() -> dict[str, str]:
    return dict(PHASE_TITLES)
