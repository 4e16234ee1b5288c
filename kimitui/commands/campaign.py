"""``kimitui campaign FILE``: the whole campaign, in the dashboard or ``--headless``; ``--resume RUN`` after a
crash; ``--init [PATH]`` writes a commented example. ``kimitui demo --campaign`` runs the embedded default
on the simulated host.

Exit status: 0 when every phase ran and ended ok (the post-restart check found no drift), 1 when the
campaign failed, was aborted, a phase ended not ok or the check flagged a drift, 2 for a usage error (a bad
file, a consent a headless run would have to ask, a run that cannot be resumed), 130 when interrupted twice
(the second Ctrl-C stops at once: the campaign can be resumed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

from kimitui.campaign.config import CONSENT_STEPS, CampaignConfig, CampaignConfigError, load_config
from kimitui.campaign.examples import INIT_TEXT
from kimitui.core.printable import printable

PRINTED = frozenset({"phase_start", "phase_end", "campaign_plan", "campaign_control", "campaign_resume",
                     "campaign_end", "drain_progress", "decode_budget", "probe_result", "cleanup_plan",
                     "step_preview", "consent", "signal", "signal_outcome", "step_result", "verification",
                     "macro_point", "request_fields_dropped", "micro_end", "topology"})
"""What a headless campaign prints (samples, progress and per-request records go to the run file only)."""

STEPS_ASKED = {"cleanup": ("drain", "graceful", "process", "others", "device", "reset", "abort_restart"),
               "restart": ("restart",)}
"""The consents each phase may ask for."""


class CampaignUsageError(Exception):
    """One line, exit status 2."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "campaign", help="run a campaign file: macro, the transition, micro, the analysis, the restart, the check",
        description="The whole campaign from a TOML file, in the dashboard (or --headless). Exit status: 0 when "
                    "every phase ran and the post-restart check found no drift, 1 when not, 2 for a usage error.")
    p.add_argument("file", nargs="?", type=Path, help="the campaign file (kimitui campaign --init writes one)")
    p.add_argument("--init", nargs="?", const=Path("campaign.toml"), type=Path, metavar="PATH",
                   help="write a commented example campaign file (default campaign.toml) and stop")
    add_run_options(p)
    p.add_argument("--resume", type=Path, metavar="RUN",
                   help="go on with the campaign recorded in RUN (kimitui stopped: a crash, a kill -9) from its "
                        "first unfinished phase, appending to RUN")
    return p


def add_run_options(p: argparse.ArgumentParser, theme: bool = True) -> None:
    p.add_argument("--headless", action="store_true",
                   help="no dashboard: every consent comes from the file or --yes / --no (a consent left at "
                        "'ask' is a usage error); Ctrl-C aborts (the restart offered as the file says), twice "
                        "stops at once")
    p.add_argument("--yes", metavar="STEPS", help=f"consent to these steps ({', '.join(CONSENT_STEPS)}, or all)")
    p.add_argument("--no", metavar="STEPS", help="decline these steps")
    p.add_argument("--json", action="store_true", help="headless: the campaign's events as JSON lines")
    p.add_argument("--continue-after-failure", action="store_true",
                   help="go on to the transition (stopping the service) after a Phase 1 that failed; without it "
                        "a headless campaign ends failed there and the dashboard holds and asks")
    p.add_argument("--audit-log", type=Path, help="append-only audit log (default $XDG_DATA_HOME/kimitui/audit.log)")
    if theme:
        p.add_argument("--theme", default=None, help="dashboard theme")


def _steps(text: str | None, flag: str) -> list[str]:
    if not text:
        return []
    steps = [s.strip() for s in text.split(",") if s.strip()]
    if steps == ["all"]:
        return list(CONSENT_STEPS)
    unknown = [s for s in steps if s not in CONSENT_STEPS]
    if unknown:
        raise CampaignUsageError(f"--{flag}: unknown step {', '.join(unknown)} (steps: {', '.join(CONSENT_STEPS)}, "
                                 "or all)")
    return steps


def apply_answers(cfg: CampaignConfig, yes: str | None, no: str | None, headless: bool) -> None:
    """The command line's answers over the file's; headless, a consent left at ask is refused here, before
    anything runs (a headless campaign never waits on a prompt)."""
    y, n = _steps(yes, "yes"), _steps(no, "no")
    both = sorted(set(y) & set(n))
    if both:
        raise CampaignUsageError(f"--yes and --no both name {', '.join(both)}")
    for s in y:
        cfg.consent[s] = "yes"
    for s in n:
        cfg.consent[s] = "no"
    if headless:
        asked = [s for phase, steps in STEPS_ASKED.items() if phase in cfg.phases for s in steps
                 if cfg.consent.get(s, "ask") == "ask"]
        if asked:
            raise CampaignUsageError(
                f"{cfg.file}: consent {', '.join(asked)} is 'ask', and a headless campaign cannot ask: answer "
                f"with --yes {','.join(asked)} or --no {','.join(asked)}, or in the file's [consent]")


def printer(out: TextIO, as_json: bool, session: Any) -> Any:
    from kimitui.commands.cleanup import text_line
    from kimitui.core.events import DecodeBudget, Event
    from kimitui.report.budget_text import budget_lines

    t0: list[float] = []

    def show(ev: Event) -> None:
        if ev.type not in PRINTED:
            return
        if as_json:
            import json

            out.write(json.dumps(ev.to_dict(), separators=(",", ":")) + "\n")
        else:
            t0[:] = t0 or [ev.t]
            line = text_line(ev, t0[0], session.state)
            if line is None:
                return
            out.write(line + "\n")
            if isinstance(ev, DecodeBudget):
                out.write("\n".join("    " + printable(x) for x in budget_lines(ev)) + "\n")
        out.flush()

    return show


async def run_campaign(cfg: CampaignConfig, args: argparse.Namespace) -> int:
    from kimitui.campaign.machine import Campaign
    from kimitui.campaign.preflight import preflight
    from kimitui.campaign.resume import ResumeError, plan_resume
    from kimitui.campaign.setup import CampaignHost
    from kimitui.cleanup.audit import AuditLog
    from kimitui.cleanup.consent import current_operator
    from kimitui.cleanup.sample_feed import SampleFeed, ViewTimeout
    from kimitui.core.runfile import RunWriter
    from kimitui.core.session import Session
    from kimitui.hosts.telemetry import TelemetrySource
    from kimitui.live.targets import TargetError, host_gpus, open_target, record_session

    headless = bool(args.headless)
    apply_answers(cfg, args.yes, args.no, headless)
    resume = None
    if args.resume is not None:
        try:
            resume = plan_resume(args.resume, cfg.phases)
        except ResumeError as exc:
            raise CampaignUsageError(str(exc)) from None
    from kimitui.commands.demo_engine import demo_engine_args

    operator = cfg.operator or current_operator()
    gpus = getattr(args, "gpus", None) or 8
    async with open_target(cfg.host, accept_new_host_key=cfg.accept_new_host_key,
                           remote_python=cfg.remote_python or None, gpus=gpus,
                           **(demo_engine_args(args) if cfg.host == "demo" else {})) as opened:
        target = CampaignHost(opened.host, opened.label, simulated=opened.facts.simulated, sim_dir=opened.sim_dir,
                              api_url=opened.facts.api_url or "", nvidia_smi=opened.facts.nvidia_smi or "nvidia-smi")
        served = await preflight(cfg, target, list(resume.todo if resume is not None else cfg.phases),
                                 lambda: host_gpus(opened, cfg.sample_interval_s),
                                 resume.state if resume is not None else None)
        if resume is not None:
            writer, dropped = RunWriter.reopen(resume.path)
            session = Session(writer)
            session.state = resume.state
            print(f"resuming the campaign recorded in {resume.path} (appending to it)", file=sys.stderr)
            for w in resume.warnings:
                print(f"kimitui: {printable(w)}", file=sys.stderr)
        else:
            dropped = 0
            session = record_session(opened.host.name, {"command": "campaign", "campaign": cfg.name,
                                                        "campaign_file": cfg.file, **opened.facts.recorded()})
        assert session.recorder is not None
        path = session.recorder.path
        source = TelemetrySource(opened.host, cfg.sample_interval_s, scan_interval=cfg.sample_interval_s,
                                 **opened.telemetry_args)
        feed = SampleFeed()

        def audit() -> AuditLog:
            return AuditLog(args.audit_log)

        machine = Campaign(cfg, session, target, feed, operator=operator, headless=headless, audit_factory=audit,
                           resume=resume, dropped_bytes=dropped,
                           continue_after_failure=bool(getattr(args, "continue_after_failure", False)),
                           served=served)
        try:
            if headless:
                rc = await _headless(machine, session, source, feed, args)
            else:
                rc = await _dashboard(machine, session, source, feed, opened, args)
        except ViewTimeout as exc:
            raise TargetError(f"{opened.host.name}: no telemetry: {exc}") from None
        finally:
            source.stop()
            await feed.stop()
            session.close()
        print(f"campaign recorded to {path} (replay: kimitui replay {path}; report: kimitui report {path})",
              file=sys.stderr)
        stopped = resume_words(machine, cfg, path)
        if stopped:
            print(f"kimitui: {stopped}", file=sys.stderr)
    return rc


def resume_words(machine: Any, cfg: CampaignConfig, path: Path) -> str:
    """A campaign kimitui left before its end (the dashboard quit, Ctrl-C twice): where it stopped and the
    command that goes on with it; "" when it ended (or never began)."""
    import shlex

    from kimitui.core.campaign_state import PHASE_TITLES

    c = machine.state.campaign
    if c is None or c.end is not None:
        return ""
    last = getattr(machine, "last_started", "")
    where = PHASE_TITLES.get(last, last)
    built_in = cfg.file.startswith("(built in: ") and cfg.file.endswith(")")
    again = cfg.file[len("(built in: "):-1] if built_in else f"kimitui campaign {shlex.quote(cfg.file)}"
    return (f"the campaign stopped before its end{f' (in {where})' if where else ''}: go on with it: "
            f"{again} --resume {shlex.quote(str(path))}")


def _status(machine: Any) -> int:
    c = machine.state.campaign
    end = c.end if c is not None else None
    if end is None or end.status != "done":
        return 1
    probe = machine.state.probe
    failed = any(p.status == "failed" for p in c.phases.values()) if c is not None else True
    return 1 if failed or (probe is not None and probe.drift) else 0


async def _headless(machine: Any, session: Any, source: Any, feed: Any, args: argparse.Namespace) -> int:
    session.subscribe(printer(sys.stdout, args.json, session))
    feed.follow(source.events(), publish=session.publish)
    await machine.first_sample()
    task = asyncio.ensure_future(machine.run())
    loop = asyncio.get_running_loop()
    presses = [0]

    def interrupt() -> None:
        presses[0] += 1
        if presses[0] == 1:
            print("\nkimitui: aborting the campaign: the phase in hand stops the graceful way, then the service's "
                  "restart is offered unless it is running (Ctrl-C again stops at once)", file=sys.stderr)
            machine.abort("interrupted (Ctrl-C / SIGTERM)")
        else:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, interrupt)
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
        return 130
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    return _status(machine)


async def _dashboard(machine: Any, session: Any, source: Any, feed: Any, opened: Any,
                     args: argparse.Namespace) -> int:
    from kimitui.live.context import LiveContext
    from kimitui.tui.launch import run_live

    live = LiveContext.of(opened, default_service=machine.cfg.service, api_url=machine.api_url)
    unsubscribe = session.subscribe(feed.push)

    def give_campaign(app: Any) -> None:
        app.campaign.load(machine)  # the app's campaign controller runs it once the app is up

    try:
        rc = await run_live(session, [source], live, theme=args.theme, prepare=give_campaign)
    finally:
        unsubscribe()
    return rc or _status(machine)


def cmd_campaign(args: argparse.Namespace) -> int:
    if args.init is not None:
        return init(args.init)
    if args.file is None:
        print("kimitui campaign: give the campaign file (kimitui campaign --init writes an example)", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.file)
    except CampaignConfigError as exc:
        print(f"kimitui campaign: {printable(str(exc))}", file=sys.stderr)
        return 2
    return run(cfg, args)


def run(cfg: CampaignConfig, args: argparse.Namespace) -> int:
    from kimitui.cleanup.setup import UsageError
    from kimitui.live.targets import run_command

    async def main() -> int:
        try:
            return await run_campaign(cfg, args)
        except (CampaignUsageError, UsageError, CampaignConfigError) as exc:
            print(f"kimitui campaign: {printable(str(exc))}", file=sys.stderr)
            return 2

    return run_command(main)


def init(path: Path) -> int:
    if path.exists():
        print(f"kimitui campaign: {path} exists: not overwritten", file=sys.stderr)
        return 2
    try:
        path.write_text(INIT_TEXT, encoding="utf-8")
    except OSError as exc:
        print(printable(f"kimitui campaign: {path}: {exc.strerror or exc}"), file=sys.stderr)
        return 2
    print(f"wrote {path}: edit the host, the service and its URLs, then: kimitui campaign {path}", file=sys.stderr)
    return 0


def cmd_demo_campaign(args: argparse.Namespace) -> int:
    """``kimitui demo --campaign``: the embedded default campaign on the simulated host (a lighter one with a
    real vLLM: ``--engine vllm``)."""
    from kimitui.campaign.examples import demo_config
    from kimitui.commands.demo_engine import resolve_demo

    bad = resolve_demo(args)
    if bad is not None:
        return bad
    cfg = demo_config(getattr(args, "engine", "sim") or "sim")
    cfg.model.tp = args.gpus  # the simulated host serves its model over every GPU it has
    return run(cfg, args)

