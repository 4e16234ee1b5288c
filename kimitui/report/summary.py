"""A short plain-text summary of a recorded run (``kimitui replay --summary FILE``)."""

from __future__ import annotations

from kimitui.core.describe import single_stream_line
from kimitui.core.figures import single_stream
from kimitui.core.fleet_state import attention
from kimitui.core.printable import printable
from kimitui.core.runfile import RunReader
from kimitui.report.bench import peak_point
from kimitui.report.format import document
from kimitui.report.markdown import digest, fmt_duration, fmt_time

_W = 10


def _line(label: str, text: str) -> str:
    return f"{label:<{_W}}{text}"


def summarize(reader: RunReader) -> str:
    """Host, duration, events by type, phases, cleanup verdict, peak throughput, warnings."""
    d = digest(reader)
    s = d.state
    out = [f"kimitui run {reader.path.name}"]
    out.append(_line("host", reader.header.host or s.host or "unknown"))
    out.append(_line("created", fmt_time(reader.header.created)))
    out.append(_line("duration", fmt_duration(d.duration) if len(reader) else "no events"))
    counts = ", ".join(f"{ty} {n}" for ty, n in d.counts.most_common())
    out.append(_line("events", f"{len(reader)}" + (f" ({counts})" if counts else "")))

    if s.fleet is not None:
        c = s.fleet.counts()
        states = ", ".join(f"{n} {st}" for st, n in sorted(c.items()) if st not in ("hosts", "gpus"))
        needs = [f"{h.name}: {'; '.join(attention(h)[1])}" for h in s.fleet.ordered() if attention(h)[1]]
        out.append(_line("fleet", f"{c['hosts']} hosts ({states}), {c['gpus']} GPUs, {s.fleet.rounds} rounds from "
                                  f"{printable(s.fleet.source)} ({printable(s.fleet.where)})"))
        out += [_line("", printable(line)) for line in needs[:12]]
    if s.phases:
        parts = []
        for p in s.phases:
            if p.end is None:
                parts.append(f"{p.phase} {fmt_duration(reader.end_time - p.start)} unfinished")
            else:
                parts.append(f"{p.phase} {fmt_duration(p.end - p.start)} {p.outcome}")
        out.append(_line("phases", "; ".join(parts)))
    else:
        out.append(_line("phases", "none recorded"))

    if s.cleanups:
        for c in s.cleanups:
            steps = ", ".join(f"{st.step} {st.status}" for st in c.steps.values())
            v = c.verification
            if v is None:
                verdict = "not verified"
            else:
                verdict = ("CLEAN" if v.clean else "NOT CLEAN") + f" (verified in {v.elapsed_s:.2f} s)"
            signals = sum(len(st.signals) for st in c.steps.values())
            out.append(_line("cleanup", f"{verdict}; {steps}; {signals} signals"))
    else:
        out.append(_line("cleanup", "none in this run"))

    peak = peak_point(s.macro_points)
    if peak is not None:
        single = single_stream(s.macro_points)
        tail = f"; {single_stream_line(single, '.0f')}" if single.state != "not run" else ""
        out.append(_line("macro", f"peak {peak.result.output_throughput or 0.0:.0f} tok/s at concurrency "
                          f"{peak.concurrency}{tail} ({len(s.macro_by_level)} points)"))
    else:
        out.append(_line("macro", "no benchmark points in this run"))
    if s.gemm or s.allreduce:
        out.append(_line("micro", f"{len(s.gemm)} GEMM rows, {len(s.allreduce)} all-reduce rows"))
    else:
        out.append(_line("micro", "no GEMM or all-reduce rows in this run"))
    if s.budget is not None:
        b = s.budget
        where = f" at concurrency {b.plateau_m}" if b.plateau_m is not None else ""
        out.append(_line("budget", f"bound by {b.bound}{where}" if b.bound else "no verdict"))
    if s.campaign is not None:
        c = s.campaign
        end = f"{c.end.status}: {c.end.note}" if c.end is not None else "not ended (resumable)"
        probe = s.probe
        drift = "" if probe is None else "; post-restart DRIFT" if probe.drift else \
            "; post-restart within the margin" if probe.baseline_tok_s is not None else "; post-restart not judged"
        out.append(_line("campaign", f"{c.plan.name or 'campaign'}: {end}{drift}"))

    if reader.warnings:
        out.append(_line("warnings", f"{len(reader.warnings)}"))
        out += [f"  - {w}" for w in reader.warnings]
    else:
        out.append(_line("warnings", "none"))
    return document(out) + "\n"
