"""``kimitui cleanup``: the cleanup escalation, headless.

    kimitui cleanup --host TARGET [--service SPEC] [--gpus 0,1] [--yes graceful,process,others,device | --dry-run]
                    [--json] [--threshold-mib N] [--allow-other-users] [--reset] [--restart]

TARGET as for ``kimitui watch`` (local, demo, ssh://[user@]host[:port]). SPEC is ``systemd:UNIT``,
``docker:NAME``, ``supervisor:PROGRAM[@CONF]``, ``pidfile:PATH``, ``pid:N``, ``sim:NAME`` or ``none``
(no service: free the GPUs of whatever holds them); on ``--host demo`` it defaults to ``sim:vllm``, the
simulated host's (restartable) service, elsewhere it is required. The service is looked up on the host
before any step: one it does not have is a usage error naming what was looked for. Consent is per
step and explicit: a step not named in ``--yes`` (``--reset`` and ``--restart`` name theirs) is declined;
with no ``--yes`` on a terminal each step's preview is shown and asked about, one question at a time.
``--dry-run`` previews only: each step as it would be were the earlier ones consented; nothing is
signalled, nothing verified, and it ends with exit 0 ("dry run: nothing signalled"). ``--restart``
starts the service again only once the GPUs are verified clean. The session is recorded and every
preview, consent, signal and outcome goes to the audit log. Exit status: 0 when every GPU in scope
ended clean (and, with --restart, the service answered) and for a dry run, 1 when not, 2 for a usage or
target error (one line), 130 when interrupted (Ctrl-C, SIGTERM: the phase is closed and recorded, the
host torn down).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from kimitui.cleanup.consent import ConsentCallback, auto_consent, current_operator
from kimitui.cleanup.plan import OTHERS_NOT_CONSENTED, Deadlines
from kimitui.cleanup.prompt import terminal_consent
from kimitui.cleanup.services import ServiceManager, ServiceNotFound
from kimitui.cleanup.setup import (
    CHOOSE_SERVICE,
    UsageError,
    build_target,
    default_deadlines,
    parse_gpus,
    parse_service,
)
from kimitui.core.describe import COMMAND_WIDTH, Started, describe, details, sample_started, unknown_start
from kimitui.core.events import Event, HostSample, LogLine, MacroProgress
from kimitui.core.printable import printable
from kimitui.core.procdisplay import command_gist
from kimitui.core.session import Session
from kimitui.core.state import CleanupState, SessionState
from kimitui.live.targets import TargetFacts
from kimitui.phases.transition import DRY_RUN_NOTE, cleanup_phase

CONSENT_STEPS = ("drain", "graceful", "process", "others", "device", "verify", "reset", "restart")
"""Names --yes takes. ``verify`` only reads (it always runs); naming it is allowed for clarity."""

PRINTED_TYPES = frozenset({"phase_start", "phase_end", "cleanup_plan", "step_preview", "consent", "signal",
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
        "cleanup", help="free the GPUs: graceful stop, process kill, the others, device kill, verify (headless)",
        description="The cleanup escalation with a preview and an explicit consent per step. Exit status: 0 when "
                    "every GPU in scope ended clean (and for a dry run), 1 when not, 2 for a usage or target error "
                    "(a service the host does not have included), 130 when interrupted.")
    p.add_argument("--host", default="local", help="local, demo, or ssh://[user@]host[:port] (default local)")
    p.add_argument("--accept-new-host-key", action="store_true",
                   help="accept and remember the host key of a host not yet in known_hosts")
    p.add_argument("--service", metavar="SPEC",
                   help="systemd:UNIT, docker:NAME, supervisor:PROGRAM[@CONF], pidfile:PATH, pid:N, sim:NAME, or "
                        "none (no service: free the GPUs of whatever holds them); looked up on the host first, "
                        "an error when not found (default on demo: sim:vllm, the simulated service; required "
                        "elsewhere)")
    p.add_argument("--gpus", metavar="LIST", help="GPUs in scope, e.g. 0,1 (default all)")
    p.add_argument("--dry-run", action="store_true",
                   help="previews only: each step as it would be were the earlier ones consented; nothing is "
                        "signalled or verified (exit 0); not with --yes")
    p.add_argument("--yes", metavar="STEPS",
                   help="consent to these steps, e.g. graceful,process,device (steps not named are declined); "
                        "'others' consents to stopping what holds the GPUs and is not the service")
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
    p.add_argument("--metrics-url",
                   help="the server's Prometheus /metrics (vLLM's): before the graceful stop the requests running and "
                        "waiting there are previewed and, with consent (drain), waited for (default on demo: the "
                        "simulated server's; elsewhere no drain step)")
    p.add_argument("--drain-s", type=float, help="how long the drain waits for the requests to finish, s (default 120)")
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

def text_line(ev: Event, t0: float, state: SessionState | None = None, started: Started | None = None,
              width: int | None = None) -> str | None:
    """The event in words (``describe``, the event log's words), its time since the first event, and the
    lines a terminal shows under it (a preview's tables fitted to ``width``, a verification's GPUs). Process
    starts read as wall-clock times with ``started`` (else the host clock the samples carry)."""
    text = describe(ev, state)
    if text is None or isinstance(ev, LogLine | MacroProgress):
        return None
    return "\n".join([f"[{ev.t - t0:7.3f}s] {text}", *details(ev, started or sample_started(state), width)])


def terminal_width(out: TextIO) -> int | None:
    """The columns of the terminal OUT writes to; None for a pipe or a file (lines are kept whole there)."""
    try:
        if not out.isatty():
            return None
        return os.get_terminal_size(out.fileno()).columns
    except (AttributeError, ValueError, OSError):
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


def others_left(cleanup: CleanupState | None) -> list[dict[str, Any]]:
    """The holders the last verification found that are not the service and were not consented to
    (``others``): what keeps the GPUs from clean, named."""
    v = cleanup.verification if cleanup else None
    if v is None:
        return []
    return [{"pid": h.pid, "start_time": h.start_time, "user": h.user, "gpus": list(h.gpus), "mem_mib": h.mem_mib,
             "cmdline": h.cmdline} for h in v.holders_left if OTHERS_NOT_CONSENTED in h.reason]


def summary(cleanup: CleanupState | None, clean: bool, kept: list[dict[str, Any]], run_file: Path,
            audit_log: Path) -> dict[str, Any]:
    """The last --json line (type ``cleanup_summary``; not a run-file event), from the fold of the run."""
    return {"type": "cleanup_summary", "t": time.time(), "clean": clean,
            "consent_to_clean_s": cleanup.consent_to_clean_s if cleanup else None,
            "signal_to_clean_s": cleanup.signal_to_clean_s if cleanup else None,
            "signalled": sorted(cleanup.signalled) if cleanup else [],
            "left_alone": kept, "others_left": others_left(cleanup), "run_file": str(run_file),
            "audit_log": str(audit_log)}


def summary_text(s: dict[str, Any]) -> str:
    verdict = f"DRY RUN: {DRY_RUN_NOTE}" if s.get("dry_run") else f"GPUs {'CLEAN' if s['clean'] else 'NOT CLEAN'}"
    lines = [verdict
             + (f"; last consent -> clean {s['consent_to_clean_s']:.3f}s" if s["consent_to_clean_s"] is not None
                else "")
             + (f"; last signal -> clean {s['signal_to_clean_s']:.3f}s" if s["signal_to_clean_s"] is not None
                else "")]
    for k in s["left_alone"]:
        lines.append(f"left alone: pid {k['pid']} (handle only, an NVML monitor) on GPUs "
                     f"{','.join(map(str, k['gpus']))}: {command_gist(k['cmdline'])[:COMMAND_WIDTH]}")
    for k in s.get("others_left", []):
        lines.append(f"left alone: pid {k['pid']} ({OTHERS_NOT_CONSENTED}; --yes others frees it) holds GPUs "
                     f"{','.join(map(str, k['gpus']))}: {command_gist(k['cmdline'])[:COMMAND_WIDTH]}")
    return "\n".join(lines)


def printer(as_json: bool, out: TextIO, session: Session | None = None,
            started: Started | None = None) -> Callable[[Event], None]:
    """A session sink printing each event (subscribed after the fold: ``session.state`` holds the event)."""
    t0: list[float] = []

    def show(ev: Event) -> None:
        if ev.type not in PRINTED_TYPES:
            return
        if as_json:
            out.write(json.dumps(ev.to_dict(), separators=(",", ":")) + "\n")
        else:
            if not t0:
                t0.append(ev.t)
            line = text_line(ev, t0[0], session.state if session is not None else None, started,
                             terminal_width(out))
            if line is None:
                return
            out.write(line + "\n")
        out.flush()

    return show


# --- the command ---------------------------------------------------------------------------------------

def _deadlines(args: argparse.Namespace, simulated: bool) -> Deadlines:
    d = default_deadlines(simulated)
    for opt, attr in (("graceful_s", "graceful_s"), ("term_grace_s", "term_grace_s"), ("verify_s", "verify_s"),
                      ("drain_s", "drain_s")):
        value = getattr(args, opt)
        if value is not None:
            if not 0 <= value <= 3600:
                raise UsageError(f"--{opt.replace('_', '-')} {value} is out of range (0 to 3600 seconds)")
            setattr(d, attr, value)
    if args.dry_run:
        d.verify_s = 0.0  # nothing was done: one look is the answer
    return d


def _consent(args: argparse.Namespace, operator: str, started: Started = unknown_start) -> tuple[ConsentCallback,
                                                                                                   str]:
    steps = parse_yes(args.yes)
    if args.dry_run:
        return auto_consent((), operator), ("dry run: previews only (each step as it would be were the earlier "
                                            "ones consented), nothing is signalled")
    if steps is not None:
        for flag in ("reset", "restart"):
            if getattr(args, flag) and flag not in steps:
                steps.append(flag)
        return auto_consent(steps, operator), f"consent given for: {', '.join(steps) or 'no step'}"
    if sys.stdin.isatty():
        return (terminal_consent(operator, args.json, sys.stdin, sys.stderr, started, terminal_width(sys.stderr)),
                "asking per step on the terminal")
    return auto_consent((), operator), "no --yes and no terminal to ask on: every step declined"


def _service(args: argparse.Namespace, facts: TargetFacts) -> ServiceManager | None:
    """The service the operator named; else the one the target names for itself (the simulated host's);
    else a choice is required (``none`` included), so no cleanup frees every GPU process by omission.
    ``facts``: what the target says (``target_facts`` before it is opened, the opened target's after)."""
    if args.service is not None:
        return parse_service(args.service, args.health_url)
    if facts.service:
        return parse_service(facts.service, args.health_url)
    raise UsageError(f"--service is required on {args.host}: {CHOOSE_SERVICE}")


async def _cleanup(args: argparse.Namespace) -> int:
    from kimitui.cleanup.audit import AuditLog
    from kimitui.cleanup.sample_feed import SampleFeed, ViewTimeout
    from kimitui.cleanup.setup import check_gpus
    from kimitui.hosts.telemetry import TelemetrySource
    from kimitui.live.targets import TargetError, host_gpus, new_session, open_target

    if not 0.1 <= args.interval <= 10:
        raise UsageError(f"--interval {args.interval} is out of range (0.1 to 10 seconds)")
    _deadlines(args, False)  # usage errors before any host is opened (the service's: cmd_cleanup)
    gpus = parse_gpus(args.gpus)
    operator = args.operator or current_operator()
    if args.dry_run and args.yes:
        raise UsageError("--dry-run and --yes together: a dry run consents to nothing")

    async with open_target(args.host, accept_new_host_key=args.accept_new_host_key,
                           remote_python=args.remote_python) as opened:
        host = opened.host
        simulated = opened.facts.simulated  # what the opened target says of itself
        service = _service(args, opened.facts)
        deadlines = _deadlines(args, simulated)
        if service is not None:
            try:  # before any step, before the session: a service the host does not have is an error
                found = await service.locate(host)
            except ServiceNotFound as exc:
                raise UsageError(str(exc)) from None
        if gpus is not None:  # a GPU the host does not have: a usage error, before the session
            check_gpus(gpus, await host_gpus(opened, args.interval), host.name)
        session = new_session(opened, "cleanup")

        def started(ticks: int | None) -> str:  # on the host's clock, as its latest sample gives it
            return sample_started(session.state)(ticks)

        consent, how = _consent(args, operator, started)
        session.subscribe(printer(args.json, sys.stdout, session, started))
        print(printable(f"kimitui cleanup on {opened.label}: {how}"), file=sys.stderr)
        if service is None:
            print("kimitui: no service (none): the GPUs in scope are freed of whatever holds them, previewed as "
                  "not the service (the others step, consent: others)", file=sys.stderr)
        elif not found.pids:
            print(printable(f"kimitui: {service.label} found, not running ({found.why}): nothing to stop gracefully"),
                  file=sys.stderr)
        source = TelemetrySource(host, args.interval, scan_interval=args.interval, **opened.telemetry_args)
        feed = SampleFeed()
        audit = AuditLog(args.audit_log)
        clean = interrupted = False
        final: dict[str, Any] = {}
        try:
            feed.follow(source.events(), publish=session.publish)
            try:
                await feed.latest(timeout=30.0)
            except ViewTimeout as exc:
                raise TargetError(f"{host.name}: no telemetry: {exc}") from None
            target = build_target(host.name, service, gpus, args.threshold_mib, deadlines,
                                  args.allow_other_users, operator)
            target.dry_run = args.dry_run
            # the simulated host brings its own (kimitui.hosts.sim.tools) unless one is named
            target.nvidia_smi = args.nvidia_smi if args.nvidia_smi != "nvidia-smi" else \
                opened.facts.nvidia_smi or args.nvidia_smi
            target.systemctl = opened.facts.systemctl or target.systemctl
            api_url = opened.facts.api_url  # the simulated host's server
            if service is not None:
                target.metrics_url = args.metrics_url or (f"{api_url}/metrics" if api_url else None)
            title = f"{service.label if service else 'no service (none)'} on {host.name}" + (
                " (dry run)" if args.dry_run else "")
            try:  # the campaign's transition phase: its start, each step, its end
                out = await cleanup_phase(host, target, feed, consent, session.publish, title, audit=audit,
                                          restart=args.restart)
                ex, clean = out.executor, out.clean
                if args.restart and out.restart is None and not out.clean:
                    print("kimitui: restart not run: the GPUs are not clean", file=sys.stderr)
                if out.note.startswith("not clean; telemetry stalled"):
                    print(printable(f"kimitui: {host.name}: {out.note.partition('; ')[2]}; the GPUs were not verified "
                                    "clean"), file=sys.stderr)
            except asyncio.CancelledError:  # Ctrl-C (or SIGTERM): the phase is closed, then the host torn down
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()  # handled here: the teardown's own waits and deadlines run as usual
                interrupted, clean = True, False
                ex = None
            signalled = set(session.state.cleanup.signalled) if session.state.cleanup else set()
            scope = ex.scope if ex is not None else []
            final = summary(session.state.cleanup, clean, untouched(feed.current, scope, signalled),
                            session.recorder.path, audit.path)
        finally:
            source.stop()
            await feed.stop()
            audit.close()
            session.close()
        where = (f"session recorded to {session.recorder.path} (replay: kimitui replay {session.recorder.path}); "
                 f"audit log {audit.path}")
        if interrupted:
            print(f"\nkimitui: interrupted: the GPUs were not verified clean; {where}", file=sys.stderr)
            return 130
        final["dry_run"] = bool(args.dry_run)
        if args.json:
            print(json.dumps(final, separators=(",", ":")), flush=True)
        else:
            print(summary_text(final), flush=True)
        if args.dry_run:  # previews only: no verdict, and not a failure
            print(f"kimitui: {DRY_RUN_NOTE}; {where}", file=sys.stderr)
            return 0
        print(f"kimitui: GPUs {'clean' if clean else 'NOT clean'}; {where}", file=sys.stderr)
    return 0 if clean else 1


def cmd_cleanup(args: argparse.Namespace) -> int:
    from kimitui.live.targets import run_command, target_facts

    try:
        parse_yes(args.yes)
        parse_gpus(args.gpus)
        _service(args, target_facts(args.host))
    except UsageError as exc:  # before any host is opened
        print(f"kimitui: {printable(str(exc))}", file=sys.stderr)
        return 2

    async def main() -> int:
        try:
            return await _cleanup(args)
        except UsageError as exc:
            print(f"kimitui: {printable(str(exc))}", file=sys.stderr)
            return 2

    return run_command(main)
