"""``kimitui cleanup``: the cleanup escalation, headless.

    kimitui cleanup --host TARGET [--service SPEC] [--gpus 0,1] [--dry-run] [--yes graceful,process,device]
                    [--json] [--threshold-mib N] [--allow-other-users] [--reset] [--restart]

TARGET as for ``kimitui watch`` (local, demo, ssh://[user@]host[:port]). SPEC is ``systemd:UNIT``,
``docker:NAME``, ``supervisor:PROGRAM[@CONF]``, ``pidfile:PATH``, ``pid:N`` or ``sim:NAME``; on
``--host demo`` it defaults to ``sim:vllm``, the simulated host's (restartable) service. Consent is per
step and explicit: a step not named in ``--yes`` (``--reset`` and ``--restart`` name theirs) is declined;
with no ``--yes`` on a terminal each step's preview is shown and asked about (y/N, then pids to untick).
``--dry-run`` previews only. ``--restart`` starts the service again only once the GPUs are verified clean.
The session is recorded and every preview, consent, signal and outcome goes to the audit log. Exit
status: 0 when every GPU in scope ended clean (and, with --restart, the service answered), 1 when not,
2 for a usage or target error (one line).

Wiring into kimitui/cli.py, like bench: ``cleanup_cli.add_parser(sub)`` in ``build_parser`` and
``"cleanup": cleanup_cli.cmd_cleanup`` among the handlers. Imports only the standard library (and the
stdlib-only cleanup core) at load time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from kimitui.cleanup.consent import ConsentCallback, ConsentDecision, auto_consent, current_operator, is_optional
from kimitui.cleanup.executor import CleanupExecutor, CleanupReport
from kimitui.cleanup.plan import Deadlines
from kimitui.cleanup.services import SimService
from kimitui.cleanup.setup import (
    UsageError,
    build_target,
    default_deadlines,
    parse_gpus,
    parse_service,
)
from kimitui.core.events import (
    CleanupPlan,
    Consent,
    Event,
    HostSample,
    PhaseEnd,
    PhaseStart,
    ProcRef,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
    Verification,
)

CONSENT_STEPS = ("graceful", "process", "device", "verify", "reset", "restart")
"""Names --yes takes. ``verify`` only reads (it always runs); naming it is allowed for clarity."""

EVENT_TYPES = frozenset({"phase_start", "phase_end", "cleanup_plan", "step_preview", "consent", "signal",
                         "signal_outcome", "step_result", "verification"})
"""What --json prints (samples, connection states and log lines go to the run file only)."""

# --- parsing -------------------------------------------------------------------------------------------

def parse_yes(text: str | None) -> list[str] | None:
    if text is None:
        return None
    steps = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in steps if s not in CONSENT_STEPS]
    if unknown:
        raise UsageError(f"--yes: unknown step {', '.join(unknown)} (steps: {', '.join(CONSENT_STEPS)})")
    return steps


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "cleanup", help="free the GPUs: graceful stop, process kill, device kill, verify (headless)",
        description="The cleanup escalation with a preview and an explicit consent per step. Exit status: 0 when "
                    "every GPU in scope ended clean, 1 when not, 2 for a usage or target error.")
    p.add_argument("--host", default="local", help="local, demo, or ssh://[user@]host[:port] (default local)")
    p.add_argument("--accept-new-host-key", action="store_true",
                   help="accept and remember the host key of a host not yet in known_hosts")
    p.add_argument("--service", metavar="SPEC",
                   help="systemd:UNIT, docker:NAME, supervisor:PROGRAM[@CONF], pidfile:PATH, pid:N or sim:NAME "
                        "(default on demo: sim:vllm, the simulated service; else none: GPU holders only)")
    p.add_argument("--gpus", metavar="LIST", help="GPUs in scope, e.g. 0,1 (default all)")
    p.add_argument("--dry-run", action="store_true", help="previews only: every step declined, nothing signalled")
    p.add_argument("--yes", metavar="STEPS",
                   help="consent to these steps, e.g. graceful,process,device (others are declined)")
    p.add_argument("--json", action="store_true",
                   help="the cleanup's events as JSON lines (previews, consents, signals, results, verification)")
    p.add_argument("--threshold-mib", type=float, default=64.0,
                   help="a GPU is clean within this much of its idle memory (default 64)")
    p.add_argument("--allow-other-users", action="store_true", help="other users' processes may be signalled")
    p.add_argument("--reset", action="store_true",
                   help="consent to the GPU reset (nvidia-smi --gpu-reset -i N), offered only when verify fails "
                        "with no process left holding the GPU (same as naming reset in --yes)")
    p.add_argument("--nvidia-smi", default="nvidia-smi", metavar="PATH",
                   help="the nvidia-smi the reset runs on the host (default: nvidia-smi from its PATH)")
    p.add_argument("--restart", action="store_true",
                   help="once the GPUs are verified clean, start the service again and wait for its health")
    p.add_argument("--health-url", help="the service's health endpoint, polled after --restart")
    p.add_argument("--graceful-s", type=float, help="graceful stop deadline, s (default 30; 3 on demo)")
    p.add_argument("--term-grace-s", type=float, help="SIGTERM to SIGKILL grace, s (default 5; 2 on demo)")
    p.add_argument("--verify-s", type=float, help="how long verify polls for clean GPUs, s (default 10)")
    p.add_argument("--interval", type=float, default=0.25, help="telemetry sampling interval, s (default 0.25)")
    p.add_argument("--audit-log", type=Path, help="append-only audit log (default $XDG_DATA_HOME/kimitui/audit.log)")
    p.add_argument("--operator", help="who consents, for the audit log (default the current user)")
    p.add_argument("--remote-python", metavar="PATH",
                   help="the python (3.8 or newer) that runs kimitui's agent on an SSH host (default python3)")
    return p


# --- output --------------------------------------------------------------------------------------------

def _ref_row(r: ProcRef) -> list[str]:
    gpus = ",".join(map(str, r.gpus)) or "-"
    return [str(r.pid), "-" if r.start_time is None else str(r.start_time), r.user or "?", gpus,
            f"{r.mem_mib:.0f}", (r.unit or "-")[:24], r.cmdline[:48] or "?", r.reason]


def preview_table(preview: StepPreview) -> str:
    """The preview as the operator reads it: what would be signalled, and what is spared and why."""
    head = ["PID", "START", "USER", "GPUS", "MIB", "UNIT", "COMMAND", "WHY"]
    lines = [f"{preview.step}: {preview.action}"]
    for title, refs in (("would signal", preview.targets), ("spared", preview.spared)):
        if not refs:
            lines.append(f"  {title}: none")
            continue
        rows = [head, *(_ref_row(r) for r in refs)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
        lines.append(f"  {title}:")
        for row in rows:
            lines.append("    " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    return "\n".join(lines)


def text_line(ev: Event, t0: float) -> str | None:
    at = f"[{ev.t - t0:7.3f}s]"
    if isinstance(ev, PhaseStart):
        return f"{at} phase {ev.phase}: {ev.title}"
    if isinstance(ev, PhaseEnd):
        return f"{at} phase {ev.phase} ended: {'ok' if ev.ok else 'NOT ok'}" + (f" ({ev.note})" if ev.note else "")
    if isinstance(ev, CleanupPlan):
        return (f"{at} plan: {ev.service or 'no service'} ({ev.manager}) on {ev.host}, GPUs "
                f"{','.join(map(str, ev.gpus))}, steps {', '.join(ev.steps)}, clean within "
                f"{ev.clean_threshold_mib:g} MiB")
    if isinstance(ev, StepPreview):
        return f"{at} " + preview_table(ev)
    if isinstance(ev, Consent):
        return (f"{at} {ev.step}: {'CONFIRMED' if ev.accepted else 'declined'} by {ev.operator}"
                + (f", pids {' '.join(map(str, ev.pids))}" if ev.accepted else "")
                + (f" ({ev.note})" if ev.note else ""))
    if isinstance(ev, SignalSent):
        return f"{at} {ev.step}: {ev.signal} -> pid {ev.pid}: {ev.outcome}" + (f" ({ev.detail})" if ev.detail else "")
    if isinstance(ev, SignalOutcome):
        return (f"{at} {ev.step}: pid {ev.pid} {ev.outcome} {ev.elapsed_s:.3f}s after {ev.signal}"
                + (f" (state {ev.state})" if ev.state else ""))
    if isinstance(ev, StepResult):
        return f"{at} {ev.step}: {ev.status.upper()} in {ev.elapsed_s:.3f}s: {ev.reason}"
    if isinstance(ev, Verification):
        lines = [f"{at} verify: {'CLEAN' if ev.clean else 'NOT CLEAN'} after {ev.elapsed_s:.3f}s"
                 + (f": {ev.detail}" if ev.detail else "")]
        for g in ev.gpus:
            used = "-" if g.used_mib is None else f"{g.used_mib:.0f}"
            lines.append(f"    GPU {g.index}: {used} MiB used (idle {g.baseline_mib:.0f}) {'ok' if g.clean else 'HELD'}"
                         + (f" by {' '.join(map(str, g.holders))}" if g.holders else ""))
        return "\n".join(lines)
    return None


def untouched(sample: HostSample | None, scope: list[int], signalled: set[int]) -> list[dict[str, Any]]:
    """Handle-only holders (NVML monitors) on the GPUs in scope that the cleanup left alone."""
    if sample is None:
        return []
    wanted = set(scope)
    return [{"pid": p.pid, "start_time": p.start_time, "user": p.user, "kind": p.kind,
             "gpus": sorted(set(p.gpus) & wanted), "cmdline": p.cmdline}
            for p in sample.procs
            if p.kind == "handle" and set(p.gpus) & wanted and p.pid not in signalled]


def summary(report: CleanupReport | None, clean: bool, kept: list[dict[str, Any]], run_file: Path,
            audit_log: Path) -> dict[str, Any]:
    """The last --json line (type ``cleanup_summary``; not a run-file event)."""
    return {"type": "cleanup_summary", "t": time.time(), "clean": clean,
            "consent_to_clean_s": report.consent_to_clean_s if report else None,
            "signal_to_clean_s": report.signal_to_clean_s if report else None,
            "signalled": sorted({s.pid for s in report.signals if s.outcome == "sent"}) if report else [],
            "left_alone": kept, "run_file": str(run_file), "audit_log": str(audit_log)}


def summary_text(s: dict[str, Any]) -> str:
    lines = [f"GPUs {'CLEAN' if s['clean'] else 'NOT CLEAN'}"
             + (f"; last consent -> clean {s['consent_to_clean_s']:.3f}s" if s["consent_to_clean_s"] is not None
                else "")
             + (f"; last signal -> clean {s['signal_to_clean_s']:.3f}s" if s["signal_to_clean_s"] is not None
                else "")]
    for k in s["left_alone"]:
        lines.append(f"left alone: pid {k['pid']} (handle only, an NVML monitor) on GPUs "
                     f"{','.join(map(str, k['gpus']))}: {k['cmdline'][:60]}")
    return "\n".join(lines)


def printer(as_json: bool, out: TextIO) -> Callable[[Event], None]:
    t0: list[float] = []

    def show(ev: Event) -> None:
        if ev.type not in EVENT_TYPES:
            return
        if as_json:
            out.write(json.dumps(ev.to_dict(), separators=(",", ":"), ensure_ascii=False) + "\n")
        else:
            if not t0:
                t0.append(ev.t)
            line = text_line(ev, t0[0])
            if line is None:
                return
            out.write(line + "\n")
        out.flush()

    return show


# --- consent on a terminal -----------------------------------------------------------------------------

def parse_ticks(answer: str, preview: StepPreview) -> list[int]:
    """The pids kept after an untick answer: ``123 456`` (or ``-123``) unticks targets, ``+789`` ticks in an
    optional spared process (an NVML monitor). Raises ValueError on anything else."""
    keep = [r.pid for r in preview.targets]
    optional = {r.pid for r in preview.spared if is_optional(r)}
    for token in answer.replace(",", " ").split():
        add = token.startswith("+")
        pid = int(token.lstrip("+-"))
        if add:
            if pid not in optional:
                raise ValueError(f"{pid} is not an optional process of this preview")
            if pid not in keep:
                keep.append(pid)
        elif pid in keep:
            keep.remove(pid)
        else:
            raise ValueError(f"{pid} is not in this preview")
    return keep


def terminal_consent(operator: str, show_table: bool, stdin: TextIO, stderr: TextIO) -> ConsentCallback:
    """Ask per step on the terminal: y/N, then pids to untick (the telemetry keeps flowing meanwhile)."""

    async def ask(prompt: str) -> str:
        stderr.write(prompt)
        stderr.flush()
        line = await asyncio.to_thread(stdin.readline)
        return line.strip()

    async def decide(preview: StepPreview) -> ConsentDecision:
        if show_table:
            stderr.write(preview_table(preview) + "\n")
        answer = (await ask(f"{preview.step}: proceed? [y/N] ")).lower()
        if answer not in ("y", "yes"):
            return ConsentDecision(False, None, operator, "declined on the terminal")
        if not preview.targets and not any(is_optional(r) for r in preview.spared):
            return ConsentDecision(True, None, operator, "confirmed on the terminal")
        while True:
            ticks = await ask("pids to untick (+PID ticks in an optional one; Enter keeps the preview): ")
            try:
                pids = parse_ticks(ticks, preview)
            except ValueError as exc:
                stderr.write(f"  {exc}\n")
                continue
            if not ticks:
                return ConsentDecision(True, None, operator, "confirmed on the terminal")
            return ConsentDecision(True, pids, operator, f"confirmed on the terminal, edited: {ticks}")

    return decide


# --- the command ---------------------------------------------------------------------------------------

def _deadlines(args: argparse.Namespace, demo: bool) -> Deadlines:
    d = default_deadlines(demo)
    for opt, attr in (("graceful_s", "graceful_s"), ("term_grace_s", "term_grace_s"), ("verify_s", "verify_s")):
        value = getattr(args, opt)
        if value is not None:
            if not 0 <= value <= 3600:
                raise UsageError(f"--{opt.replace('_', '-')} {value} is out of range (0 to 3600 seconds)")
            setattr(d, attr, value)
    if args.dry_run:
        d.verify_s = 0.0  # nothing was done: one look is the answer
    return d


def _consent(args: argparse.Namespace, operator: str) -> tuple[ConsentCallback, str]:
    steps = parse_yes(args.yes)
    if args.dry_run:
        return auto_consent((), operator), "dry run: previews only, every step declined, nothing is signalled"
    if steps is not None:
        for flag in ("reset", "restart"):
            if getattr(args, flag) and flag not in steps:
                steps.append(flag)
        return auto_consent(steps, operator), f"consent given for: {', '.join(steps) or 'no step'}"
    if sys.stdin.isatty():
        return terminal_consent(operator, args.json, sys.stdin, sys.stderr), "asking per step on the terminal"
    return auto_consent((), operator), "no --yes and no terminal to ask on: every step declined"


async def _cleanup(args: argparse.Namespace) -> int:
    from kimitui.cleanup.audit import AuditLog
    from kimitui.cleanup.view import SampleFeed, ViewTimeout
    from kimitui.targets import TargetError, new_session, open_target
    from kimitui.telemetry import TelemetrySource

    if not 0.1 <= args.interval <= 10:
        raise UsageError(f"--interval {args.interval} is out of range (0.1 to 10 seconds)")
    service = parse_service(args.service, args.health_url) if args.service else None
    gpus = parse_gpus(args.gpus)
    demo = args.host == "demo"
    deadlines = _deadlines(args, demo)
    operator = args.operator or current_operator()
    if args.dry_run and args.yes:
        raise UsageError("--dry-run and --yes together: a dry run consents to nothing")
    consent, how = _consent(args, operator)

    async with open_target(args.host, accept_new_host_key=args.accept_new_host_key,
                           remote_python=args.remote_python) as opened:
        host = opened.host
        if service is None and demo:
            service = SimService(health_url=f"{host.api_url}/health")  # type: ignore[attr-defined]
        session = new_session(opened, "cleanup")
        session.subscribe(printer(args.json, sys.stdout))
        print(f"kimitui cleanup on {opened.label}: {how}", file=sys.stderr)
        source = TelemetrySource(host, args.interval, scan_interval=args.interval, **opened.telemetry_args)
        feed = SampleFeed()
        audit = AuditLog(args.audit_log)
        clean = False
        try:
            feed.follow(source.events(), publish=session.publish)
            try:
                await feed.latest(timeout=30.0)
            except ViewTimeout as exc:
                raise TargetError(f"{host.name}: no telemetry: {exc}") from None
            target = build_target(host.name, service, gpus, args.threshold_mib, deadlines,
                                  args.allow_other_users, operator)
            target.nvidia_smi = args.nvidia_smi
            ex = CleanupExecutor(host, target, feed, consent, publish=session.publish, audit=audit)
            title = f"{service.label if service else 'GPU holders'} on {host.name}" + (" (dry run)" if args.dry_run
                                                                                         else "")
            session.publish(PhaseStart(time.time(), phase="cleanup", title=title))
            note = ""
            report: CleanupReport | None = None
            try:
                report = await ex.run()
                clean = report.clean
                if clean and report.consent_to_clean_s is not None:
                    note = f"last consent -> clean {report.consent_to_clean_s:.3f}s"
                if args.restart and clean:
                    res = await ex.restart()
                    clean = res.status in ("done", "skipped")
                    note = (f"{note}; " if note else "") + f"restart {res.status}: {res.reason}"
                elif args.restart:
                    print("kimitui: restart not run: the GPUs are not clean", file=sys.stderr)
            except ViewTimeout as exc:
                note = f"telemetry stalled: {exc}"
                print(f"kimitui: {host.name}: {note}; the GPUs were not verified clean", file=sys.stderr)
            session.publish(PhaseEnd(time.time(), phase="cleanup", ok=clean,
                                     note=("clean" if clean else "not clean") + (f"; {note}" if note else "")))
            signalled = {s.pid for s in report.signals if s.outcome == "sent"} if report else set()
            final = summary(report, clean, untouched(feed.current, ex.scope, signalled), session.recorder.path,
                            audit.path)
        finally:
            source.stop()
            await feed.stop()
            audit.close()
            session.close()
        if args.json:
            print(json.dumps(final, separators=(",", ":"), ensure_ascii=False), flush=True)
        else:
            print(summary_text(final), flush=True)
        print(f"kimitui: GPUs {'clean' if clean else 'NOT clean'}; session recorded to {session.recorder.path} "
              f"(replay: kimitui replay {session.recorder.path}); audit log {audit.path}", file=sys.stderr)
    return 0 if clean else 1


def cmd_cleanup(args: argparse.Namespace) -> int:
    from kimitui.targets import run_command

    try:
        parse_yes(args.yes)
        parse_gpus(args.gpus)
        if args.service:
            parse_service(args.service)
    except UsageError as exc:  # before any host is opened
        print(f"kimitui: {exc}", file=sys.stderr)
        return 2

    async def main() -> int:
        try:
            return await _cleanup(args)
        except UsageError as exc:
            print(f"kimitui: {exc}", file=sys.stderr)
            return 2

    return run_command(main)
