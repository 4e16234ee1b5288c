"""Live commands: the dashboard on a host (default, demo, connect) and headless sampling (watch).

Every live session is recorded to a new run file whose path is printed when the session starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Callable

from kimitui.commands.demo_engine import demo_engine_args, resolve_demo
from kimitui.core.events import ConnectionState, HostSample, LogLine
from kimitui.core.gpu_words import gpu_state_words
from kimitui.core.printable import printable
from kimitui.core.session import Prefetched
from kimitui.live.context import LiveContext
from kimitui.live.process_clock import mark, print_marks
from kimitui.live.targets import ProbeFailed, TargetError, check_interval, new_session, open_target, run_command


async def _dashboard(target: str, args: argparse.Namespace, command: str) -> int:
    from kimitui.hosts.telemetry import TelemetrySource
    from kimitui.tui.first_look import FirstLook

    mark("dashboard")

    # The first frame waits on two things that need not wait on each other: Textual's import (CPU, this
    # process) and the host's first sample (the agent's start and the driver's, another process). The
    # import runs in a thread while the loop opens the target and reads the first sample, which is shown
    # plainly (the first look) if it comes before the dashboard can show it.
    importing = asyncio.get_running_loop().run_in_executor(None, importlib.import_module, "kimitui.tui.app")
    # While the import holds the GIL, the loop's turns (the agent's handshake, the first sample) wait up to
    # a switch interval each: a shorter one for the overlap.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    importing.add_done_callback(lambda _: sys.setswitchinterval(switch))
    look: FirstLook | None = None
    started = False
    try:
        async with open_target(target, accept_new_host_key=getattr(args, "accept_new_host_key", False),
                               gpus=getattr(args, "gpus", None) or 8,
                               remote_python=getattr(args, "remote_python", None),
                               **demo_engine_args(args)) as opened:
            mark("opened")
            session = new_session(opened, command)
            source = TelemetrySource(opened.host, check_interval(args.interval), **opened.telemetry_args)
            look = FirstLook(opened.label, sys.__stderr__)  # where Textual's driver writes
            prefetched = Prefetched(source, on_event=look.offer)
            live = LiveContext.of(opened)
            try:
                await importing
                mark("imported")
                from kimitui.tui.launch import run_live

                look.hand_over()
                for event in prefetched.take_ready():  # the first frame shows what the first look showed
                    session.publish(event)
                started = True
                rc = await run_live(session, [prefetched], live, theme=args.theme)
            finally:
                source.stop()
                prefetched.close()
                session.close()
    finally:
        if look is not None and not started:
            look.withdraw()
        with contextlib.suppress(Exception):  # a failed open waits for the thread, not leaving it mid-import
            await importing
    if look.drawn_at is not None and os.environ.get("KIMITUI_EXIT_AFTER_FIRST_FRAME"):
        print(f"first-look {look.drawn_at:.3f}", file=sys.stderr, flush=True)  # benchmarks/startup.py
    print_marks()
    print(f"session recorded to {session.recorder.path} (replay: kimitui replay {session.recorder.path})",
          file=sys.stderr)
    return rc


def _sample_line(ev: HostSample) -> str:
    """``demo seq 4: 0:92411MiB 1:92411MiB(power cap); 9 processes``: each GPU's memory, and its state in words
    where it has any (its XID, clock caps, a busy link below its maximum: ``gpu_words``)."""
    gpus = " ".join(
        f"{g.index}:{'-' if g.mem_used_mib is None else f'{g.mem_used_mib:.0f}'}MiB"
        + (f"({', '.join(words)})" if (words := gpu_state_words(g)) else "") for g in ev.gpus
    )
    return printable(f"{ev.host} seq {ev.seq}: {gpus}; {len(ev.procs)} processes")


async def _watch(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from kimitui.hosts.telemetry import TelemetrySource

    interval = check_interval(args.interval)
    if args.count < 0:
        raise TargetError("--count must be 0 (no limit) or more")
    async with open_target(args.host, accept_new_host_key=args.accept_new_host_key,
                           remote_python=args.remote_python) as opened:
        session = new_session(opened, "watch")
        source = TelemetrySource(opened.host, interval, **opened.telemetry_args)
        samples, rc = 0, 0
        try:
            async with contextlib.aclosing(source.events()) as events:
                async for ev in events:
                    session.publish(ev)
                    if isinstance(ev, HostSample):
                        samples += 1
                        out(json.dumps(ev.to_dict(), separators=(",", ":")) if args.json else _sample_line(ev))
                        if args.count and samples >= args.count:
                            break
                    elif isinstance(ev, ConnectionState):
                        if ev.state == "failed":
                            print(f"kimitui: {printable(ev.detail)}", file=sys.stderr)
                            rc = 1
                            break
                        if ev.state in ("lost", "reconnecting"):
                            print(printable(f"kimitui: {ev.host}: {ev.state}: {ev.detail}"), file=sys.stderr)
                    elif isinstance(ev, LogLine) and ev.level in ("warning", "error"):
                        print(f"kimitui: {printable(ev.message)}", file=sys.stderr)
        finally:
            session.close()
    return rc


def cmd_watch(args: argparse.Namespace) -> int:
    def out(line: str) -> None:
        print(line, flush=True)

    return run_command(lambda: _watch(args, out))


def cmd_demo(args: argparse.Namespace) -> int:
    bad = resolve_demo(args)
    if bad is not None:
        return bad
    return run_command(lambda: _dashboard("demo", args, "demo"))


def cmd_connect(args: argparse.Namespace) -> int:
    return run_command(lambda: _dashboard(args.target, args, "connect"))


def cmd_default(args: argparse.Namespace) -> int:
    """The dashboard on this machine's GPUs; without any, say so and offer the demo."""
    args.interval = getattr(args, "interval", 0.5)
    failed: list[str] = []

    async def dashboard() -> int:
        try:
            return await _dashboard("local", args, "local")
        except ProbeFailed as exc:  # one agent start probes and then streams: no second start to look first
            failed.append(str(exc))
            return 1

    rc = run_command(dashboard)
    if not failed:
        return rc
    mark("probe-failed")
    print_marks()
    problem = failed[0]
    print(f"kimitui: {printable(problem)}", file=sys.stderr)
    print("Try the simulated 8-GPU host with `kimitui demo`, or replay a recorded campaign with "
          "`kimitui replay`.", file=sys.stderr)
    if sys.stdin.isatty() and sys.stdout.isatty():
        answer = input("Start the demo now? [Y/n] ").strip().lower()
        if answer in ("", "y", "yes"):
            args.gpus = 8
            return cmd_demo(args)
    return 1
