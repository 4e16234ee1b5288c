"""Events in words: the one place an event becomes text, for the event log (the fold), the cleanup CLI's
and the micro benchmark's text output, the Cleanup tab's signals and the report.

``describe(event, state)`` is one line; ``details(event)`` the lines a terminal shows under it (a
preview's tables, a verification's GPUs, a micro worker's notes); ``signal_status(record)`` what became of
a signal (the fold pairs each with its outcome). Given the state the event was folded into, a step's result
reads with the step's one duration (the fold's ``StepState.elapsed_s``), so every place says the same.
"""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Callable, Mapping
from typing import Protocol

from kimitui.core.campaign_words import SOURCE as CAMPAIGN_SOURCE
from kimitui.core.campaign_words import campaign_level, campaign_line
from kimitui.core.events import (
    CAMPAIGN_EVENT_TYPES,
    CleanupPlan,
    ConnectionState,
    Consent,
    Event,
    HostCommand,
    LogLine,
    MacroPoint,
    MacroProgress,
    MacroVerdict,
    MicroEnd,
    MicroEnv,
    MicroPlan,
    PhaseEnd,
    PhaseStart,
    ProcRef,
    RequestFieldsDropped,
    ServerSample,
    SignalLate,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
    Topology,
    Verification,
    level_failed,
    phase_outcome,
)
from kimitui.core.events.macro import level_words
from kimitui.core.figures import (
    SingleStream,
)
from kimitui.core.printable import printable
from kimitui.core.procdisplay import DASH, clock_label, command_gist, gpu_list, unit_label


class StepView(Protocol):
    """What the words of a step's result read of the fold's step (``kimitui.core.state.StepState``)."""

    @property
    def result(self) -> StepResult | None: ...
    @property
    def elapsed_s(self) -> float | None: ...


class CleanupView(Protocol):
    @property
    def steps(self) -> Mapping[str, StepView]: ...


class StateView(Protocol):
    """What describe reads of the fold's state (``kimitui.core.state.SessionState``), named here so that the
    words do not import the fold that calls them."""

    @property
    def cleanup(self) -> CleanupView | None: ...
    @property
    def boot_time(self) -> float | None: ...
    @property
    def clock_ticks(self) -> int | None: ...
    @property
    def clock(self) -> float: ...
    def started_at(self, start_ticks: int | None) -> float | None: ...


class SignalView(Protocol):
    """A signal and its outcome as the fold pairs them (``kimitui.core.state.SignalRecord``)."""

    @property
    def sent(self) -> SignalSent: ...
    @property
    def outcome(self) -> SignalOutcome | None: ...

SOURCES: dict[type[Event], str] = {
    **dict.fromkeys(CAMPAIGN_EVENT_TYPES, CAMPAIGN_SOURCE),
    PhaseStart: "phase", PhaseEnd: "phase", CleanupPlan: "cleanup", StepPreview: "cleanup", Consent: "cleanup",
    SignalSent: "signal", SignalOutcome: "signal", SignalLate: "signal", StepResult: "cleanup", Verification: "verify",
    HostCommand: "cleanup",
    MacroPoint: "macro", MacroProgress: "macro", MacroVerdict: "macro", ServerSample: "macro",
    RequestFieldsDropped: "macro",
    ConnectionState: "connection",
    Topology: "topology", MicroPlan: "micro", MicroEnv: "micro", MicroEnd: "micro",
}


def source_of(ev: Event) -> str:
    return printable(ev.source) if isinstance(ev, LogLine) else SOURCES.get(type(ev), ev.type)


def level_of(ev: Event) -> str:
    """info, warning or error: how the event log colours the event."""
    if isinstance(ev, LogLine):
        return ev.level
    if isinstance(ev, PhaseEnd):
        return "info" if ev.ok else "error"
    if isinstance(ev, Consent):
        return "info" if ev.accepted else "warning"
    if isinstance(ev, SignalSent):
        return "info" if ev.outcome == "sent" else "warning"
    if isinstance(ev, SignalOutcome):
        return "info" if ev.outcome == "exited" else "warning"
    if isinstance(ev, SignalLate):
        return "warning"
    if isinstance(ev, HostCommand):
        return "info" if ev.ok else "error"
    if isinstance(ev, StepResult):
        return "error" if ev.status == "failed" else "info"
    if isinstance(ev, Verification):
        return "info" if ev.clean else "error"
    if isinstance(ev, MacroPoint):
        return "error" if level_failed(ev) else "info"
    if isinstance(ev, MacroProgress):
        return "error" if ev.status == "failed" else "info"
    if isinstance(ev, RequestFieldsDropped):
        return "warning"
    if isinstance(ev, ConnectionState):
        return "info" if ev.state in ("connecting", "connected", "closed") else "warning"
    if isinstance(ev, Topology):
        return "warning" if ev.errors else "info"
    if isinstance(ev, MicroEnd):
        return {"done": "info", "skipped": "info", "cancelled": "warning"}.get(ev.status, "error")
    return campaign_level(ev) or "info"


def step_seconds(ev: StepResult, state: StateView | None) -> float:
    """The step's one duration: the fold's when the event was folded into ``state``, else the event's."""
    if state is not None and state.cleanup is not None:
        step = state.cleanup.steps.get(ev.step)
        if step is not None and step.result is ev and step.elapsed_s is not None:
            return step.elapsed_s
    return ev.elapsed_s


def describe(ev: Event, state: StateView | None = None) -> str | None:
    """One line for the event (None: an event with no words, a sample), printable: what came from outside
    (a note, a reason, an error body, a host's name) has its control characters escaped."""
    line = _words(ev, state)
    return None if line is None else printable(line)


def _words(ev: Event, state: StateView | None) -> str | None:
    if isinstance(ev, PhaseStart):
        return f"phase {ev.phase} started" + (f": {ev.title}" if ev.title else "")
    if isinstance(ev, PhaseEnd):
        outcome = phase_outcome(ev.ok, ev.note)
        return f"phase {ev.phase} {'ended' if outcome == 'ok' else outcome}" + (f": {ev.note}" if ev.note else "")
    if isinstance(ev, CleanupPlan):
        what = (f"{ev.service} ({ev.manager})" if ev.service
                else "no service (none: free the GPUs of whatever holds them)")
        return (f"cleanup plan for {what}"
                + (f" on {ev.host}" if ev.host else "") + f", GPUs {gpu_list(ev.gpus) if ev.gpus else 'none'}: "
                f"{', '.join(ev.steps)}; clean within {ev.clean_threshold_mib:g} MiB")
    if isinstance(ev, StepPreview):
        return f"{ev.step}: preview, {len(ev.targets)} to signal, {len(ev.spared)} left alone: {ev.action}"
    if isinstance(ev, Consent):
        who = f" by {ev.operator}" if ev.operator else ""
        verdict = f"CONFIRMED{who}, pids {' '.join(map(str, ev.pids)) or 'none'}" if ev.accepted else f"declined{who}"
        return f"{ev.step}: {verdict}" + (f" ({ev.note})" if ev.note else "")
    if isinstance(ev, SignalSent):
        return f"{ev.step}: {ev.signal} -> pid {ev.pid}: {ev.outcome}" + (f" ({ev.detail})" if ev.detail else "")
    if isinstance(ev, SignalOutcome):
        return (f"{ev.step}: pid {ev.pid} {ev.outcome} {ev.elapsed_s:.2f}s after {ev.signal}"
                + (f" (state {ev.state})" if ev.state else ""))
    if isinstance(ev, SignalLate):
        return late_line(ev)
    if isinstance(ev, HostCommand):
        return (f"{ev.step}: {ev.purpose}: {shlex.join(ev.argv)}: "
                + ("done" if ev.ok else f"FAILED ({ev.detail})" if ev.detail else "FAILED"))
    if isinstance(ev, StepResult):
        return (f"{ev.step}: {ev.status} in {step_seconds(ev, state):.2f}s"
                + (f" ({ev.reason})" if ev.reason else ""))
    if isinstance(ev, Verification):
        return (f"verify: {'CLEAN' if ev.clean else 'NOT CLEAN'} after {ev.elapsed_s:.2f}s"
                + (f" ({ev.detail})" if ev.detail else ""))
    if isinstance(ev, MacroPoint):
        r = ev.result
        where = level_words(ev.concurrency, ev.rate)
        if r.all_failed:
            return (f"{where}: FAILED, {r.failed} of {r.num_prompts} requests "
                    f"failed (first: {r.first_error or 'no reason given'})")
        tok = r.output_throughput
        return (f"{where}: " + (f"{tok:.0f} tok/s" if tok is not None else "no throughput")
                + server_words(ev))
    if isinstance(ev, ServerSample):
        return None  # read every 200 ms: the Benchmarks tab plots them, the log would only repeat them
    if isinstance(ev, MacroVerdict):
        return "sweep verdict: " + verdict_line(ev)
    if isinstance(ev, MacroProgress):
        if ev.status == "failed":
            return f"sweep failed: {ev.error}"
        if ev.status in ("starting", "cancelling", "cancelled", "done"):
            return f"sweep {ev.status}: levels {','.join(map(str, ev.levels))}" + (
                f" ({ev.elapsed_s:.1f} s)" if ev.status in ("cancelled", "done") else "")
        return None  # progress within a level: the panel shows it, the log would only repeat it
    if isinstance(ev, RequestFieldsDropped):
        return fields_dropped_line(ev)
    if isinstance(ev, Topology):
        return (f"{ev.host or 'host'}: {ev.summary or 'topology read'}" + (f" ({ev.source})" if ev.source else "")
                + ("; " + "; ".join(ev.errors) if ev.errors else ""))
    if isinstance(ev, MicroPlan):
        what = ", ".join(f"{p} ({ev.totals.get(p, 0)} items)" for p in ev.parts)
        return (f"micro run {ev.run_id}" + (f" on {ev.host}" if ev.host else "") + f": {what}"
                + (f"; {ev.model} at TP={ev.tp}" if ev.model else "")
                + (" (SIMULATED: modelled figures)" if ev.simulated else "")
                + (", GPU memory check overridden" if ev.forced else ""))
    if isinstance(ev, MicroEnv):
        bw = f", copy {ev.mem_bw_gbps:.0f} GB/s measured" if ev.mem_bw_gbps else ""
        sheet = f", datasheet {ev.datasheet_gbps:.0f} GB/s" if ev.datasheet_gbps else ""
        return f"{ev.part} on {ev.device or '?'} (torch {ev.torch or '-'}{bw}{sheet})"
    if isinstance(ev, MicroEnd):
        holders = "; ".join(
            f"pid {h.pid} {command_gist(h.cmdline)[:40]} ({h.mem_mib:.0f} MiB on GPU {gpu_list(h.gpus)})"
            for h in ev.holders)
        return (f"{ev.part}: {ev.status} after {ev.elapsed_s:.1f}s, {ev.rows} rows"
                + (f" ({ev.detail})" if ev.detail else "") + (f"; holders: {holders}" if holders else ""))
    if isinstance(ev, ConnectionState):
        gap = f", gap {ev.gap_s:.1f}s" if ev.gap_s else ""
        return f"{ev.host}: {ev.state}{gap}" + (f" ({ev.detail})" if ev.detail else "")
    if isinstance(ev, LogLine):
        return ev.message
    return campaign_line(ev)


def server_words(point: MacroPoint) -> str:
    """The server's own mean TTFT and ITL of a level beside the client's overhead over them ("" if unread)."""
    parts = []
    server = point.result.server
    for key, name in (("ttft", "TTFT"), ("itl", "ITL")):
        mean, overhead = server.mean_ms.get(key), server.overhead_ms.get(key)
        if mean is not None:
            parts.append(f"{name} {mean:.1f} ms" + (f" (client {overhead:+.1f} ms)" if overhead is not None else ""))
    return f"; server {server.engine}: " + ", ".join(parts) if parts else ""


FIELD_CONSEQUENCES = {
    "ignore_eos": "outputs may end before max_tokens (at the model's end of sequence): output lengths come from "
                  "usage",
    "stream_options": "the server may send no usage: output tokens are then counted from content chunks "
                      "(a lower bound)",
    "max_completion_tokens": "max_tokens alone caps the output",
}
"""What going without each optional request field means for the figures."""


def fields_dropped_line(ev: RequestFieldsDropped) -> str:
    named = ", ".join(ev.fields) or "no field"
    what = "; ".join(FIELD_CONSEQUENCES.get(f, f"{f} is not sent") for f in ev.fields)
    return (f"the server refused {named} ({ev.reason}): the request was retried without "
            f"{'them' if len(ev.fields) > 1 else 'it'} and the rest of the run goes without; {what}")


def late_line(ev: SignalLate) -> str:
    """A signal's outcome learnt late, said as such: when (after the cleanup ended, or after its wait gave up)
    and how (the agent's late reply, or a look once the host was back)."""
    when = "after the cleanup ended" if ev.after_end else "after its wait had given up"
    head = f"{ev.step}: {ev.signal} -> pid {ev.pid}"
    if ev.how == "reply":
        what = ("DELIVERED LATE" if ev.outcome == "sent" else f"not delivered ({ev.outcome})")
        return (f"{head}: {what}: the agent's reply came {ev.after_s:.2f}s after the request, {when}"
                + (f" ({ev.detail})" if ev.detail else ""))
    if ev.outcome == "exited":
        return (f"{head}: outcome was unknown; the process was gone when the host was back, {when} "
                f"({ev.after_s:.2f}s after the request): delivered late, or it exited on its own")
    return (f"{head}: outcome was unknown; still alive with the same identity when the host was back, {when} "
            f"({ev.after_s:.2f}s after the request): not delivered or ignored; nothing more was sent")


def signal_status(record: SignalView) -> str:
    """What became of a signal (the fold's pairing of a signal with its outcome), in the words the Cleanup tab
    and the report share: 'exited after 0.04 s', 'survived after 2.00 s (state S)', 'sent, waiting' (its
    outcome not seen yet), 'refused: protected' (not sent: no outcome comes)."""
    s, o = record.sent, record.outcome
    if o is None:
        return "sent, waiting" if s.outcome == "sent" else printable(f"{s.outcome}: {s.detail}")
    what = f"{o.outcome} after {o.elapsed_s:.2f} s" + (f" (state {o.state})" if o.state else "")
    return printable(what if s.outcome == "sent" else f"{s.outcome}: {s.detail}; then {what}")


Started = Callable[[int | None], str]
"""A process's start (clock ticks after boot) in words: a wall-clock time on the recording side's clock (the
host's boot time as its samples carry it, like every event's ``t``)."""
COMMAND_WIDTH = 64


def unknown_start(_ticks: int | None) -> str:
    return DASH


def sample_started(state: StateView | None) -> Started:
    """Starts read with the boot time and tick rate of the host's latest sample, when it carries them."""
    if state is None or state.boot_time is None or not state.clock_ticks:
        return unknown_start
    return lambda ticks: clock_label(state.started_at(ticks), state.clock or None)


def _ref_row(r: ProcRef, started: Started, whole: bool = False) -> list[str]:
    command = command_gist(r.cmdline) if r.cmdline else "?"
    if len(command) > COMMAND_WIDTH and not whole:
        command = command[: COMMAND_WIDTH - 1] + "…"
    return [str(r.pid), started(r.start_time), printable(r.user or "?"), ",".join(map(str, r.gpus)) or DASH,
            f"{r.mem_mib:.0f}", unit_label(r.unit)[:24], command, printable(r.reason)]


def _narrow(text: str, width: int) -> str:
    """TEXT in WIDTH characters, its middle cut: a command's end (a worker's rank, a script) tells it apart."""
    if len(text) <= width:
        return text
    head = max(1, (width - 1) * 3 // 5)
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def preview_table(preview: StepPreview, started: Started = unknown_start, width: int | None = None) -> list[str]:
    """What would be signalled and what is spared, with why: the lines a terminal shows under a preview. With
    ``width`` (a terminal's columns) a row that would not fit keeps PID, start, user, GPUs, memory and unit,
    narrows its command, and puts its why on the lines under it, wrapped at words."""
    if not preview.targets and not preview.spared and preview.step == "graceful":
        return []  # no service: the action says it all
    head = ["PID", "STARTED", "USER", "GPUS", "MIB", "UNIT", "COMMAND", "WHY"]
    lines = []
    for title, refs in (("would signal", preview.targets), ("spared", preview.spared)):
        if not refs:
            lines.append(f"  {title}: none")
            continue
        rows = [head, *(_ref_row(r, started) for r in refs)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
        lines.append(f"  {title}:")
        whole = 4 + sum(w + 2 for w in widths) + max(len(row[-1]) for row in rows)
        if width is None or whole <= width:
            for row in rows:
                lines.append("    " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
            continue
        fixed = 4 + sum(w + 2 for w in widths[:-1])
        rows = [head, *(_ref_row(r, started, whole=True) for r in refs)]
        widths[-1] = min(max(len(row[-2]) for row in rows), max(12, width - fixed))
        for n, row in enumerate(rows):
            cells = [*row[:-2], _narrow(row[-2], widths[-1])]
            lines.append(("    " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))).rstrip())
            if n:  # the header's WHY is each row's "why:"
                lines += textwrap.wrap(row[-1], max(20, width - 2), initial_indent="      why: ",
                                       subsequent_indent="           ")
    return lines


def preview_text(preview: StepPreview, started: Started = unknown_start, width: int | None = None) -> str:
    """The preview as the operator reads it on a terminal: its action, then what would be signalled and what
    is spared and why (fitted to ``width`` columns when given)."""
    return "\n".join([printable(f"{preview.step}: {preview.action}"), *preview_table(preview, started, width)])


def details(ev: Event, started: Started = unknown_start, width: int | None = None) -> list[str]:
    """The lines a terminal shows under the event's line (none for most events); a preview's table fitted to
    ``width`` columns when given."""
    if isinstance(ev, StepPreview):
        return preview_table(ev, started, width)
    if isinstance(ev, MicroEnv):  # a backend a line (which kernel stands for which), then the worker's notes
        return [printable(f"  {k}: {v}") for k, v in ev.backends.items()] + [printable(f"  note: {note}")
                                                                            for note in ev.notes]
    if isinstance(ev, Verification):
        out = []
        for g in ev.gpus:
            used = "-" if g.used_mib is None else f"{g.used_mib:.0f}"
            out.append(f"    GPU {g.index}: {used} MiB used (idle {g.baseline_mib:.0f}) {'ok' if g.clean else 'HELD'}"
                       + (f" by {' '.join(map(str, g.holders))}" if g.holders else ""))
        return out
    return []


def verdict_line(ev: MacroVerdict) -> str:
    """A sweep's verdict in words: where the SLOs hold at p99, and the knee of tok/s."""
    parts = []
    if ev.slo:
        slos = ",".join(f"{k}:{v:g}" for k, v in ev.slo.items())
        parts.append(f"SLOs {slos} ms met at p99 up to {ev.label(ev.slo_concurrency)}"
                     if ev.slo_concurrency is not None else f"SLOs {slos} ms met at p99 at no level")
        if ev.searched:
            tried = ",".join(f"{x:g}" for x in ev.searched)
            parts[-1] += (f" (searched: {tried} req/s" if ev.axis == "rate" else f" (searched: c={tried}") + \
                f"; {len(ev.searched)} probes)"
    if ev.knee_concurrency is not None and ev.knee_tok_s is not None:
        parts.append(f"knee at {ev.label(ev.knee_concurrency)}, {ev.knee_tok_s:.0f} tok/s "
                     f"(under {ev.knee_growth:.0%} more per doubling past it)")
    elif ev.peak_tok_s is not None:
        parts.append(f"no knee: tok/s still grows at the last level ({ev.peak_tok_s:.0f} tok/s)")
    return "; ".join(parts) if parts else "no levels"


# -- derived figures in words (the figures are kimitui.core.figures'; every view, the CLI and the report) --


def single_stream_words(ss: SingleStream, digits: str = ".1f") -> str:
    """The single-stream headline's value: ``49.3 tok/s``, or why there is none (never 0.0 for a level
    where every request failed)."""
    if ss.tok_s is not None:
        return f"{ss.tok_s:{digits}} tok/s"
    return {"failed": "FAILED (every request at concurrency 1 failed)",
            "not run": "not measured (no concurrency 1 level)",
            "no figure": "no figure (concurrency 1 recorded no output tok/s)"}.get(ss.state, "not measured")


def single_stream_line(ss: SingleStream, digits: str = ".1f") -> str:
    return f"single stream {single_stream_words(ss, digits)}"
