"""A recorded run as a Markdown report: phases, the campaign (kimitui.report.campaign: its phases, GPU
memory through the transition, the drain, the decode-step budget and verdict, the post-restart check), GPU
memory around each cleanup step, signals, the verification verdict and the benchmark tables.

Only the non-sample events are decoded in full (folded with the same ``fold`` the dashboard uses); of
the samples, only the few nearest each cleanup step are decoded, so a long run reports quickly. Every
section says so when the run has nothing for it (a telemetry-only run, a cleanup-only run, ...).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kimitui.core.describe import Started, describe, preview_table, signal_status, unknown_start
from kimitui.core.events import ConnectionState, HostSample, StepResult
from kimitui.core.procdisplay import clock_label, command_gist, start_wall_time
from kimitui.core.runfile import RunReader
from kimitui.core.state import CleanupState, SessionState, StepState, fold
from kimitui.report.bench import allreduce_section, gemm_section, macro_section
from kimitui.report.format import document, fmt_duration, table

# -- reading a run once -----------------------------------------------------------------------------------


@dataclass(slots=True)
class RunDigest:
    """What the report and the summary need from a run, read once."""

    reader: RunReader
    state: SessionState
    """The fold of every non-sample event."""
    counts: Counter[str]
    sample_idx: list[int]
    sample_times: list[float]
    step_done_at: dict[tuple[int, str], float] = field(default_factory=dict)
    """(cleanup number, step) -> time of its StepResult."""
    gaps: list[ConnectionState] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return self.reader.end_time - self.reader.start_time if len(self.reader) else 0.0

    def sample_at_or_before(self, t: float) -> HostSample | None:
        k = bisect.bisect_right(self.sample_times, t) - 1
        return self._sample(k) if k >= 0 else self.sample_at_or_after(t)

    def sample_at_or_after(self, t: float) -> HostSample | None:
        k = bisect.bisect_left(self.sample_times, t)
        if k >= len(self.sample_idx):
            k = len(self.sample_idx) - 1
        return self._sample(k) if k >= 0 else None

    def _sample(self, k: int) -> HostSample | None:
        ev = self.reader.decoded(self.sample_idx[k])
        return ev if isinstance(ev, HostSample) else None


def digest(reader: RunReader) -> RunDigest:
    state = SessionState()
    sample_idx = [i for i, ty in enumerate(reader.types) if ty == "sample"]
    d = RunDigest(reader, state, Counter(reader.types), sample_idx, [reader.times[i] for i in sample_idx])
    for i, ty in enumerate(reader.types):
        if ty == "sample":  # read on demand, but metered in order where a level runs (its GPU energy)
            meter = state.sweeps[-1].meter if state.sweeps else None
            sample = reader.decoded(i) if meter is not None else None
            if meter is not None and isinstance(sample, HostSample):
                meter.sample(sample)
            continue
        ev = reader.decoded(i)
        if ev is None:
            continue
        fold(state, ev)
        if isinstance(ev, StepResult) and state.cleanups:
            d.step_done_at[(len(state.cleanups) - 1, ev.step)] = ev.t
        elif isinstance(ev, ConnectionState) and ev.state in ("lost", "failed"):
            d.gaps.append(ev)
    if sample_idx:
        last = d._sample(len(sample_idx) - 1)
        if last is not None and last.host:
            state.host = state.host or last.host
    return d


# -- formatting -----------------------------------------------------------------------------------------


def _utc(t: float, fmt: str) -> str | None:
    """``t`` as a UTC date in ``fmt``; None for a time beyond the years datetime holds (1e20, NaN)."""
    try:
        return datetime.fromtimestamp(t, UTC).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return None


def fmt_time(t: float) -> str:
    return _utc(t, "%Y-%m-%d %H:%M:%S UTC") or f"{t:g} (not a date)"


def fmt_offset(t: float, origin: float) -> str:
    offset = max(0.0, t - origin)
    if not math.isfinite(offset):
        return "+?"
    m, s = divmod(offset, 60)
    return f"+{int(m):d}:{s:04.1f}"


def _started(sample: HostSample | None) -> Started:
    """A process's start as the report writes it: ``procdisplay.clock_label`` in UTC (the screen's words), from
    the boot time of the sample before (the STARTED column of the preview; '-' when the sample does not
    carry it)."""
    if sample is None or sample.boot_time is None or not sample.clock_ticks:
        return unknown_start
    boot, ticks, now = sample.boot_time, sample.clock_ticks, sample.t
    return lambda start: clock_label(start_wall_time(start, boot, ticks), now, utc=True)


def fmt_mib(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# -- sections ---------------------------------------------------------------------------------------------


def _header(d: RunDigest) -> list[str]:
    r = d.reader
    h = r.header
    lines = [f"# kimitui run report: {r.path.name}", ""]
    lines.append(f"- Host: {h.host or d.state.host or 'unknown'}")
    lines.append(f"- Created: {fmt_time(h.created)}")
    if len(r):
        lines.append(f"- Duration: {fmt_duration(d.duration)} ({fmt_time(r.start_time)} to "
                     f"{fmt_time(r.end_time)})")
    else:
        lines.append("- Duration: no events in this run")
    lines.append(f"- Events: {len(r):,} (" + ", ".join(f"{ty} {n:,}" for ty, n in d.counts.most_common())
                 + ")" if len(r) else "- Events: none")
    lines.append(f"- Samples: {len(d.sample_idx):,}" if d.sample_idx else "- Samples: none (no telemetry)")
    if d.gaps:
        lines.append(f"- Connection: {len(d.gaps)} interruption(s): " + "; ".join(
            f"{g.state} at {fmt_offset(g.t, r.start_time)}" + (f" ({g.detail})" if g.detail else "")
            for g in d.gaps))
    for key, value in h.meta.items():
        lines.append(f"- {key}: {value}")
    return lines


def _phases(d: RunDigest) -> list[str]:
    lines = ["## Phases", ""]
    if not d.state.phases:
        return [*lines, "No phases in this run (telemetry only, or an older recording)."]
    origin = d.reader.start_time
    rows = []
    for p in d.state.phases:
        if p.end is None:
            dur, result = f"{fmt_duration(d.reader.end_time - p.start)} (unfinished)", "unfinished"
        else:
            dur, result = fmt_duration(p.end - p.start), "ok" if p.ok else "FAILED"
        rows.append([p.phase, p.title, fmt_offset(p.start, origin), dur, result, p.note])
    return lines + table(["phase", "title", "start", "duration", "result", "note"], rows, "llrrll")


def _step_window(d: RunDigest, n: int, step: StepState) -> tuple[float | None, float | None, str]:
    """When to read memory before the step (its consent, else its preview, else its start) and after."""
    done = d.step_done_at.get((n, step.step))
    if step.consent is not None:
        return step.consent.t, done, "before consent"
    if step.preview is not None:
        return step.preview.t, done, "at the preview"
    if done is not None:
        return done - (step.elapsed_s or 0.0), done, "at the step's start"
    return None, done, ""


def _step_begin(d: RunDigest, n: int, step: StepState) -> float | None:
    """When the step began: its preview, its consent or its start (its result less its duration), the earliest."""
    done = d.step_done_at.get((n, step.step))
    times = [e.t for e in (step.preview, step.consent) if e is not None]
    if done is not None:
        times.append(done - (step.elapsed_s or 0.0))
    return min(times) if times else None


def _next_begin(d: RunDigest, n: int, step: StepState) -> float | None:
    """When the next thing after the step began: a later step of its cleanup, a phase, a later cleanup (a
    phase's end too: what follows it starts there); None when nothing followed."""
    begin = _step_begin(d, n, step)
    if begin is None:
        return None
    c = d.state.cleanups[n]
    times = [t for other in c.steps.values() if other is not step and (t := _step_begin(d, n, other)) is not None]
    times += [p.start for p in d.state.phases] + [p.end for p in d.state.phases if p.end is not None]
    times += [later.plan.t for later in d.state.cleanups[n + 1:]]
    later = [t for t in times if t > begin]
    return min(later) if later else None


def step_after_sample(d: RunDigest, n: int, step: StepState) -> HostSample | None:
    """The sample that shows memory after the step: the last one before the next step or phase began (a
    sample after that is the next one's, not this step's); the first after its result when nothing followed."""
    done = d.step_done_at.get((n, step.step))
    if done is None:
        return None
    nxt = _next_begin(d, n, step)
    if nxt is None:
        return d.sample_at_or_after(done)
    if nxt <= done:  # the next began before this one's result: the last sample at the result
        return d.sample_at_or_before(done)
    k = bisect.bisect_left(d.sample_times, nxt) - 1
    return d._sample(k) if k >= 0 else None


def _earlier_result(d: RunDigest, n: int, step: StepState, since: float, until: float) -> str:
    """The step of cleanup ``n`` whose result came in (since, until]: a sample before it cannot show it."""
    for other in d.state.cleanups[n].steps.values():
        done = d.step_done_at.get((n, other.step))
        if other is not step and done is not None and since < done <= until:
            return other.step
    return ""


def _memory_table(d: RunDigest, n: int, step: StepState, before_t: float, after: HostSample | None, done: float,
                  label: str) -> list[str]:
    before = d.sample_at_or_before(before_t)
    if before is None or after is None:
        return ["No samples around this step."]
    b = {g.index: g for g in before.gpus}
    a = {g.index: g for g in after.gpus}
    rows = []
    for i in sorted(set(b) | set(a)):
        ub = b[i].mem_used_mib if i in b else None
        ua = a[i].mem_used_mib if i in a else None
        total = (a.get(i) or b.get(i))
        change = f"{ua - ub:+,.0f}" if ub is not None and ua is not None else "n/a"
        rows.append([str(i), fmt_mib(ub), fmt_mib(ua), change,
                     fmt_mib(total.mem_total_mib if total is not None else None)])
    origin = d.reader.start_time
    when = "the last before the next step or phase began"
    if after.t < done:
        when += f"; taken before this step's result at {fmt_offset(done, origin)}"
    earlier = _earlier_result(d, n, step, before.t, before_t)
    if earlier:
        label += f"; taken before step {earlier}'s result: a change may be that step's"
    note = f"Samples at {fmt_offset(before.t, origin)} ({label}) and {fmt_offset(after.t, origin)} ({when}); MiB."
    return [note, "", *table(["GPU", "before", "after", "change", "total"], rows)]


def _cleanup(d: RunDigest) -> list[str]:
    lines = ["## GPU cleanup", ""]
    if not d.state.cleanups:
        return [*lines, "No cleanup in this run."]
    for n, c in enumerate(d.state.cleanups):
        plan = c.plan
        if len(d.state.cleanups) > 1:
            lines += [f"### Cleanup {n + 1}", ""]
        lines.append(f"Plan: {describe(plan)}.")
        lines.append("")
        for step in c.steps.values():
            lines += _step_section(d, n, step)
        lines += _signals(d, c)
        lines += _verification(c)
    return lines


def _step_section(d: RunDigest, n: int, step: StepState) -> list[str]:
    head = f"### Step {step.step}: {step.status}"
    if step.elapsed_s is not None and step.status not in ("pending", "previewed"):
        head += f" in {step.elapsed_s:.2f} s"
    lines = [head, ""]
    if step.reason:
        lines += [f"Result: {step.reason}", ""]
    if step.preview is not None:
        p = step.preview
        lines += [f"Preview: {describe(p)}", ""]
        table_lines = preview_table(p, _started(d.sample_at_or_before(p.t)))
        if table_lines:
            lines += ["```", *table_lines, "```", ""]
    if step.consent is not None:
        lines += [f"Consent: {describe(step.consent)}", ""]
    before, done, label = _step_window(d, n, step)
    if before is None or done is None:
        lines += ["No result recorded for this step, so no memory comparison.", ""]
    elif not d.sample_idx:
        lines += ["No samples in this run, so no memory comparison.", ""]
    else:
        lines += [*_memory_table(d, n, step, before, step_after_sample(d, n, step), done, label), ""]
    return lines


def _signals(d: RunDigest, c: CleanupState) -> list[str]:
    lines = ["### Signals", ""]
    rows = []
    origin = d.reader.start_time
    for step in c.steps.values():
        for r in step.signals:
            s = r.sent
            started = _started(d.sample_at_or_before(s.t))
            rows.append([fmt_offset(s.t, origin), step.step, s.signal, str(s.pid), started(s.start_time),
                         short(command_gist(s.cmdline), 48), signal_status(r)])
    if not rows:
        return [*lines, "No signals were sent.", ""]
    return lines + table(["time", "step", "signal", "pid", "start", "command", "outcome"], rows,
                         "llllrll") + [""]


def _verification(c: CleanupState) -> list[str]:
    lines = ["### Verification", ""]
    v = c.verification
    if v is None:
        return [*lines, "No verification recorded: the GPUs were not checked after this cleanup.", ""]
    verdict = "CLEAN" if v.clean else "NOT CLEAN"
    lines += [f"**{verdict}**: {describe(v)}", ""]
    if v.gpus:
        rows = [[str(g.index), fmt_mib(g.used_mib), fmt_mib(g.baseline_mib), "yes" if g.clean else "NO",
                 ", ".join(map(str, g.holders)) or "-"] for g in v.gpus]
        lines += [*table(["GPU", "used MiB", "baseline MiB", "clean", "holders"], rows, "lrrll"), ""]
    for ref in v.holders_left:
        lines.append(f"- still holding: pid {ref.pid} ({ref.user or '?'}, GPUs {ref.gpus}, {ref.mem_mib:,.0f} MiB) "
                     f"`{short(ref.cmdline)}`" + (f": {ref.reason}" if ref.reason else ""))
    if v.holders_left:
        lines.append("")
    return lines


def _warnings(reader: RunReader) -> list[str]:
    lines = ["## Warnings", ""]
    if not reader.warnings:
        return [*lines, "None: every line of the run was read."]
    return lines + [f"- {w}" for w in reader.warnings]


def render_report(reader: RunReader, figures: list[tuple[str, str]] | None = None) -> str:
    """The whole run as Markdown; ``figures``: (title, path) of the images written for it, linked."""
    from kimitui.report import campaign

    d = digest(reader)

    def sample_at(t: float, after: bool) -> HostSample | None:
        return d.sample_at_or_after(t) if after else d.sample_at_or_before(t)

    def after_step(cleanup: CleanupState, step: StepState) -> HostSample | None:
        return step_after_sample(d, d.state.cleanups.index(cleanup), step)

    sections = [_header(d), _phases(d), campaign.campaign_section(d.state, reader.end_time),
                campaign.transition_memory(d.state, sample_at, after_step), campaign.drain_section(d.state),
                _cleanup(d),
                macro_section(d.state), gemm_section(d.state), allreduce_section(d.state),
                campaign.budget_section(d.state),
                campaign.check_section(d.state)]
    if figures:
        sections.append(["## Figures", "", *[f"![{title}]({path})" for title, path in figures]])
    body = [line for s in sections for line in ([*s, ""])]
    body += _warnings(reader)
    out: list[str] = []
    for line in body:
        if line or (out and out[-1]):
            out.append(line)
    return document(out).rstrip() + "\n"
