"""A recorded run as a Markdown report: phases, the campaign (kimitui.campaign.report: its phases, GPU
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
from typing import Any

from kimitui.core.describe import describe
from kimitui.core.events import (
    AllReduceRow,
    ConnectionState,
    HostSample,
    MacroPoint,
    SignalOutcome,
    SignalSent,
    StepResult,
)
from kimitui.core.runfile import RunReader
from kimitui.core.state import CleanupState, SessionState, StepState, Sweep, first_error, fold, level_failed
from kimitui.core.typed import finite
from kimitui.report_format import fmt_duration, table, writable


def percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on sorted values."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    rank = (n - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)

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
    others = [i for i, ty in enumerate(reader.types) if ty != "sample"]
    for i in others:
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


def fmt_time(t: float) -> str:
    try:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):  # beyond the years datetime holds
        return f"{t:g} (not a date)"


def fmt_offset(t: float, origin: float) -> str:
    offset = max(0.0, t - origin)
    if not math.isfinite(offset):
        return "+?"
    m, s = divmod(offset, 60)
    return f"+{int(m):d}:{s:04.1f}"


def fmt_mib(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def fmt_bytes(n: int) -> str:
    for unit, scale in (("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n < 100 * scale else f"{n / scale:.0f} {unit}"
    return f"{n} B"


def _num(v: Any, spec: str = ".1f") -> str:
    """A number of plain JSON (a level's metrics) or an optional field, as ``spec`` says; "n/a" for anything
    else (None, NaN, a string, a count that is no integer)."""
    if spec.endswith("d"):
        return format(v, spec) if type(v) is int else "n/a"
    x = finite(v)
    return "n/a" if x is None else format(x, spec)


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


def _memory_table(d: RunDigest, before_t: float, after_t: float, label: str) -> list[str]:
    before = d.sample_at_or_before(before_t)
    after = d.sample_at_or_after(after_t)
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
    note = (f"Samples at {fmt_offset(before.t, origin)} ({label}) and "
            f"{fmt_offset(after.t, origin)} (after the step's result); MiB.")
    return [note, "", *table(["GPU", "before", "after", "change", "total"], rows)]


def _cleanup(d: RunDigest) -> list[str]:
    lines = ["## GPU cleanup", ""]
    if not d.state.cleanups:
        return [*lines, "No cleanup in this run."]
    for n, c in enumerate(d.state.cleanups):
        plan = c.plan
        if len(d.state.cleanups) > 1:
            lines += [f"### Cleanup {n + 1}", ""]
        lines.append(f"Plan: {plan.service or 'GPUs'} via {plan.manager or 'no service manager'} on GPUs "
                     f"{', '.join(map(str, plan.gpus)) or 'none'}; steps {', '.join(plan.steps)}; "
                     f"clean threshold {plan.clean_threshold_mib:.0f} MiB above baseline.")
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
        if p.action:
            lines.append(f"Action: `{p.action}`")
        for ref in p.targets:
            lines.append(f"- target pid {ref.pid} ({ref.user or '?'}, {ref.kind}, GPUs {ref.gpus}, "
                         f"{ref.mem_mib:,.0f} MiB) `{short(ref.cmdline)}`: {ref.reason}")
        for ref in p.spared:
            lines.append(f"- spared pid {ref.pid} ({ref.user or '?'}, {ref.kind}) `{short(ref.cmdline)}`: "
                         f"{ref.reason}")
        lines.append("")
    if step.consent is not None:
        lines += [f"Consent: {describe(step.consent)}", ""]
    before, done, label = _step_window(d, n, step)
    if before is None or done is None:
        lines += ["No result recorded for this step, so no memory comparison.", ""]
    elif not d.sample_idx:
        lines += ["No samples in this run, so no memory comparison.", ""]
    else:
        lines += [*_memory_table(d, before, done, label), ""]
    return lines


def _match(sig: SignalSent, outcomes: list[SignalOutcome], used: set[int]) -> SignalOutcome | None:
    for k, o in enumerate(outcomes):
        if k not in used and o.pid == sig.pid and o.signal == sig.signal and o.t >= sig.t:
            used.add(k)
            return o
    return None


def _signals(d: RunDigest, c: CleanupState) -> list[str]:
    lines = ["### Signals", ""]
    rows = []
    origin = d.reader.start_time
    for step in c.steps.values():
        used: set[int] = set()
        for s in step.signals:
            o = _match(s, step.outcomes, used)
            rows.append([fmt_offset(s.t, origin), step.step, s.signal, str(s.pid),
                         "n/a" if s.start_time is None else str(s.start_time), short(s.cmdline, 48), s.outcome,
                         "n/a" if o is None else o.outcome + (f" ({o.state})" if o.state else ""),
                         "n/a" if o is None else f"{o.elapsed_s:.2f}"])
    if not rows:
        return [*lines, "No signals were sent.", ""]
    return lines + table(["time", "step", "signal", "pid", "start", "command", "sent", "outcome", "after s"],
                         rows, "llllrlllr") + [""]


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


def peak_point(points: list[MacroPoint]) -> MacroPoint | None:
    """The level of the highest output tok/s (a failed level, or one without the figure, is none)."""
    scored = [(tok, p) for p in points if (tok := p.metric("output_throughput")) is not None and not level_failed(p)]
    return max(scored, key=lambda s: s[0])[1] if scored else None


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _top_percentile(p: MacroPoint) -> str:
    """The highest percentile a level reports, as its key spells it (vLLM's "p99", "p99.9")."""
    ps = [v for v in map(finite, _listed(p.metrics.get("percentiles"))) if v is not None and 0 < v <= 100]
    top = max(ps, default=99.0)
    return f"p{int(top) if int(top) == top else top}"


def _input_cell(p: MacroPoint) -> str:
    mean, std, asked = p.metric("mean_input_tokens"), p.metric("std_input_tokens"), p.metric("requested_input_len")
    if mean is None:
        return "n/a"
    text = f"{mean:.1f} ±{std:.1f}" if std is not None else f"{mean:.1f}"
    return text + (f" ({asked:.0f})" if asked is not None else "")


def _macro(d: RunDigest) -> list[str]:
    lines = ["## Serving sweep (macro)", ""]
    sweeps = [s for s in d.state.sweeps if s.points]
    if not sweeps:
        return [*lines, "No macro benchmark points in this run."]
    from kimitui.campaign.report import throughput_plot

    for n, sweep in enumerate(sweeps):
        if len(sweeps) > 1:
            lines += [f"### Sweep {n + 1}" + (f": {sweep.title}" if sweep.title else ""), ""]
        lines += _sweep(sweep)
    return lines + throughput_plot(d.state.macro_points) + _distributions(d)


def _sweep(sweep: Sweep) -> list[str]:
    points = sweep.point_list
    single = points[0] if points and points[0].concurrency == 1 and not level_failed(points[0]) else None
    peak = peak_point(points)
    head = []
    single_tok = single.metric("output_throughput") if single is not None else None
    if single is not None and single_tok is not None:
        tpot = single.metric("mean_tpot_ms")
        head.append(f"Single stream: **{single_tok:.1f} output tok/s**"
                    + (f" (TPOT {tpot:.1f} ms)" if tpot is not None else ""))
    else:
        head.append("Single stream: not measured (no concurrency 1 point with a completed request)")
    if peak is not None:
        head.append(f"peak **{_num(peak.metrics['output_throughput'], '.0f')} tok/s** at concurrency "
                    f"{peak.concurrency}")
    failed = sweep.failed_levels
    if failed:
        head.append(f"{len(failed)} level(s) FAILED: every request failed")
    pk = _top_percentile(points[0])
    lines = ["; ".join(head) + ".", "",
             "Latencies in ms, as vLLM's `bench serve` defines them (ITL per chunk, TPOT per output token); "
             "input tokens: achieved mean ± spread (asked).", ""]
    rows = []
    for p in points:
        m = p.metrics
        counts = f"{_num(m.get('completed'), 'd')}/{_num(m.get('failed'), 'd')}"
        if level_failed(p):
            rows.append([str(p.concurrency), counts, f"FAILED: {first_error(p) or 'no reason given'}",
                         *(["n/a"] * 7), _num(m.get("duration"))])
            continue
        rows.append([str(p.concurrency), counts,
                     _num(m.get("output_throughput")), _num(m.get("mean_ttft_ms")), _num(m.get(f"{pk}_ttft_ms")),
                     _num(m.get("mean_tpot_ms")), _num(m.get(f"{pk}_tpot_ms")), _num(m.get("mean_itl_ms")),
                     _num(m.get("mean_e2el_ms"), ".0f"), _input_cell(p), _num(m.get("duration"))])
    lines += table(["concurrency", "ok/failed", "output tok/s", "TTFT", f"TTFT {pk}", "TPOT", f"TPOT {pk}", "ITL",
                    "E2EL", "input tok", "duration s"], rows)
    methods = sorted({str(p.metrics["input_len_method"]) for p in points if "input_len_method" in p.metrics})
    if methods:
        lines += ["", "Input lengths: " + ", ".join(_METHODS.get(x, x) for x in methods) + "."]
    client = [f"- concurrency {p.concurrency}: {w}" for p in points for w in _listed(p.metrics.get("client_warnings"))]
    if client:
        lines += ["", "The load generator may have distorted these figures:", "", *client]
    return lines


_METHODS = {"tokenize": "exact, counted by the server's /tokenize",
            "usage": "exact, calibrated from the server's usage.prompt_tokens",
            "estimated": "estimated (the server did not count them)", "dataset": "from the dataset"}
BOX_WIDTH = 48


def _box(values: list[float], lo: float, hi: float, log: bool) -> str:
    """One text box plot on [lo, hi]: ``-`` from min to p25 and p75 to max, ``=`` p25 to p75, ``|`` median."""
    def col(v: float) -> int:
        if log:
            v, a, b = math.log10(max(v, lo)), math.log10(lo), math.log10(hi)
        else:
            a, b = lo, hi
        return min(BOX_WIDTH - 1, max(0, round((v - a) / (b - a) * (BOX_WIDTH - 1)))) if b > a else 0

    s = sorted(values)
    q = [col(percentile(s, p)) for p in (0, 25, 50, 75, 100)]
    cells = [" "] * BOX_WIDTH
    for i in range(q[0], q[4] + 1):
        cells[i] = "-"
    for i in range(q[1], q[3] + 1):
        cells[i] = "="
    cells[q[2]] = "|"
    return "".join(cells)


def _distributions(d: RunDigest) -> list[str]:
    levels = d.state.macro_requests
    if not levels:
        return ["", "No per-request records in this run (distributions need them)."]
    out: list[str] = []
    for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms")):
        series = {c: getattr(levels[c], key) for c in sorted(levels) if getattr(levels[c], key)}
        if not series:
            continue
        lo = min(min(v) for v in series.values())
        hi = max(max(v) for v in series.values())
        log = lo > 0 and hi / lo >= 20
        lo = lo if log else 0.0
        scale = f"{'log scale, ' if log else ''}{lo:.3g} to {hi:.4g} ms"
        out += ["", f"{name} per request at each level ({scale}; `-` min to max, `=` p25 to p75, `|` median):",
                "", "```text"]
        for c, values in series.items():
            s = sorted(values)
            out.append(f"c={c:<5}{_box(values, lo, hi, log)}  p50 {percentile(s, 50):.4g}  "
                       f"p99 {percentile(s, 99):.4g}  max {s[-1]:.4g}  (n={len(s)})")
        out.append("```")
    return out


def _micro_env(state: SessionState, part: str) -> list[str]:
    """What the run's workers found (device, torch, backends, bandwidth), one line each; simulated runs say so."""
    lines = []
    for run in state.micro_runs:
        env = run.env.get(part)
        if env is None:
            continue
        bw = ""
        if env.mem_bw_gbps:
            bw = f"; copy bandwidth {env.mem_bw_gbps:,.0f} GB/s measured" + (
                f" (datasheet {env.datasheet_gbps:,.0f} GB/s)" if env.datasheet_gbps else "")
        elif env.datasheet_gbps:
            bw = f"; bandwidth {env.datasheet_gbps:,.0f} GB/s (datasheet)"
        sim = "**Simulated: modelled figures, not measured.** " if env.simulated else ""
        lines.append(f"- {sim}Run {run.plan.run_id} on {run.plan.host or '?'}: {env.device or '?'}"
                     + (f", torch {env.torch}" if env.torch else "") + bw)
        lines += [f"  - {name}: {what}" for name, what in env.backends.items()]
    return [*lines, ""] if lines else []


def _gemm(state: SessionState) -> list[str]:
    from kimitui.bench.micro.tables import INT4_NOTE

    lines = ["## GEMM (micro)", ""]
    rows_in = state.gemm
    if not rows_in:
        return [*lines, "No GEMM rows in this run."]
    rows = []
    for r in rows_in:
        roof = f"{r.roofline_us:.2f}" if r.roofline_us is not None else "n/a"
        pct = f"{r.roofline_us / r.time_us:.0%}" if r.roofline_us is not None and r.time_us > 0 else "n/a"
        err = "-" if r.rel_err is None else f"{r.rel_err:.4f}" + (" FAIL" if r.correct is False else "")
        rows.append([r.name, str(r.m), f"{r.n} x {r.k}", r.dtype, r.backend or "-", r.kernel, f"{r.time_us:.2f}", roof,
                     pct, f"{r.tflops:.2f}", f"{r.gbps:.0f}", err])
    checked = [r for r in rows_in if r.correct is not None]
    head = [*lines, *_micro_env(state, "gemm"),
            "Times in us; roofline = bytes moved / memory bandwidth (the copy measured on the host); "
            "% roof = roofline / time.", ""]
    if checked:
        ok = sum(1 for r in checked if r.correct)
        head += [f"Correctness against the dequantized bf16 reference: {ok} of {len(checked)} rows within the "
                 "relative error limit (0.04).", ""]
    if any(r.backend == "torch-int4" for r in rows_in):
        head += [f"> {INT4_NOTE}.", ""]
    return head + table(["GEMM", "M", "N x K", "dtype", "backend", "kernel", "time", "roofline", "% roof",
                         "TFLOP/s", "GB/s", "rel err"], rows, "lrllllrrrrrr")


def _allreduce(state: SessionState) -> list[str]:
    from kimitui.bench.micro.tables import NCCL_HEAD, burst_line, nccl_line

    lines = ["## All-reduce (micro)", ""]
    rows_in = state.allreduce
    if not rows_in:
        return [*lines, "No all-reduce rows in this run."]
    topo = state.topology
    limit = topo.link_gbps if topo is not None else None
    if topo is not None:
        lines += [f"Interconnect ({topo.source}): {topo.summary}" + (
            f"; link limit {limit:.0f} GB/s per direction ({topo.link_kind})" if limit else ""), ""]
    lines += _micro_env(state, "allreduce")
    rows = [[_num(r.tokens, "d"), fmt_bytes(r.size_bytes), str(r.ranks), r.dtype, str(r.burst), r.mode,
             f"{r.time_us:.1f}", f"{r.algbw_gbps:.2f}", f"{r.busbw_gbps:.2f}",
             f"{r.busbw_gbps / limit:.0%}" if limit else "n/a", str(r.wrong)] for r in rows_in]
    lines += ["Time per all-reduce in us (a burst row: captured in one CUDA graph, total / burst); "
              "busbw = algbw x 2(n-1)/n; % link = busbw / the link's bandwidth per direction.", "",
              *table(["tokens", "size", "ranks", "dtype", "burst", "mode", "time", "algbw GB/s", "busbw GB/s",
                      "% link", "#wrong"], rows, "rrrlrlrrrrr")]
    singles: dict[tuple[str, int], dict[str, AllReduceRow]] = {}
    for r in rows_in:
        if r.burst == 1:
            singles.setdefault((r.run_id, r.size_bytes), {})[r.mode] = r
    singles = {key: m for key, m in singles.items() if "eager" in m or "graph" in m}  # nccl-tests' two groups
    if singles:
        lines += ["", "In nccl-tests' columns (torch.distributed works in place: the two groups are eager and CUDA "
                  "graph):", "", "```", NCCL_HEAD,
                  *[nccl_line(m.get("eager"), m.get("graph")) for m in singles.values()], "```"]
    bursts = [r for r in rows_in if r.burst > 1]
    if bursts:
        lines += ["", *[f"- {burst_line(r)}" for r in bursts]]
    return lines


def _warnings(reader: RunReader) -> list[str]:
    lines = ["## Warnings", ""]
    if not reader.warnings:
        return [*lines, "None: every line of the run was read."]
    return lines + [f"- {w}" for w in reader.warnings]


def render_report(reader: RunReader) -> str:
    """The whole run as Markdown."""
    from kimitui.campaign import report as campaign

    d = digest(reader)

    def sample_at(t: float, after: bool) -> HostSample | None:
        return d.sample_at_or_after(t) if after else d.sample_at_or_before(t)

    sections = [_header(d), _phases(d), campaign.campaign_section(d.state, reader.end_time),
                campaign.transition_memory(d.state, sample_at), campaign.drain_section(d.state), _cleanup(d),
                _macro(d), _gemm(d.state), _allreduce(d.state), campaign.budget_section(d.state),
                campaign.check_section(d.state)]
    body = [line for s in sections for line in ([*s, ""])]
    body += _warnings(reader)
    out: list[str] = []
    for line in body:
        if line or (out and out[-1]):
            out.append(line)
    return writable("\n".join(out).rstrip() + "\n")
