"""Live commands: the dashboard on a host (default, demo, connect) and headless sampling (watch).

Every live session is recorded to a new run file whose path is printed when the session starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from kimitui.events import ConnectionState, HostSample, LogLine
from kimitui.hosts.base import Host, HostError
from kimitui.live_context import LiveContext


class TargetError(Exception):
    """A target that cannot be used: printed as one line."""


@dataclass(slots=True)
class OpenedHost:
    host: Host
    label: str
    telemetry_args: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def _interval(value: float) -> float:
    if not 0.1 <= value <= 10:
        raise TargetError(f"--interval {value} is out of range (0.1 to 10 seconds)")
    return value


@contextlib.asynccontextmanager
async def open_target(target: str, *, accept_new_host_key: bool = False, gpus: int = 8,
                      check: bool = True) -> AsyncIterator[OpenedHost]:
    """A host for ``local``, ``demo`` or an SSH target; ``check`` makes sure it has a driver first."""
    from kimitui.telemetry import probe_host

    if target == "demo":
        from kimitui.hosts.sim.host import SimHost

        print(f"starting the simulated {gpus}-GPU host ...", file=sys.stderr)
        async with SimHost(gpus=gpus, name="demo") as sim:
            print(f"simulated host ready: {sim.sim_dir}, OpenAI API at {sim.api_url}", file=sys.stderr)
            yield OpenedHost(sim, f"demo ({gpus} simulated GPUs)",
                             {"sim_dir": sim.sim_dir, "dev_prefix": sim.dev_prefix},
                             {"target": "demo", "api_url": sim.api_url, "simulated": True,
                              "service": "sim:vllm"})
        return
    host: Host
    if target == "local":
        from kimitui.hosts.local import LocalHost

        host = LocalHost(name=socket.gethostname())
    else:
        from kimitui.hosts.ssh import SshHost

        try:
            host = SshHost(target, accept_new_host_key=accept_new_host_key)
        except ValueError as exc:
            raise TargetError(str(exc)) from None
    try:
        if check:
            problem = await probe_host(host)
            if problem is not None:
                raise TargetError(problem)
        yield OpenedHost(host, host.name, {}, {"target": target})
    except HostError as exc:
        raise TargetError(str(exc)) from None
    finally:
        await host.close()


def _new_session(opened: OpenedHost, command: str) -> Any:
    from kimitui.session import recorded_session

    session = recorded_session(opened.host.name, meta={"command": command, **opened.meta})
    assert session.recorder is not None
    print(f"recording this session to {session.recorder.path}", file=sys.stderr)
    return session


async def _dashboard(target: str, args: argparse.Namespace, command: str) -> int:
    from kimitui.telemetry import TelemetrySource
    from kimitui.tui.app import KimituiApp

    async with open_target(target, accept_new_host_key=getattr(args, "accept_new_host_key", False),
                           gpus=getattr(args, "gpus", 8)) as opened:
        session = _new_session(opened, command)
        source = TelemetrySource(opened.host, _interval(args.interval), **opened.telemetry_args)
        live = LiveContext(opened.host, opened.label, default_service=opened.meta.get("service"),
                           api_url=opened.meta.get("api_url"), simulated=bool(opened.meta.get("simulated")))
        app = KimituiApp(session, theme=args.theme, host_label=opened.label, sources=[source],
                         run_path=session.recorder.path, live=live)
        try:
            await app.run_async()
        finally:
            source.stop()
            session.close()
        print(f"session recorded to {session.recorder.path} (replay: kimitui replay {session.recorder.path})",
              file=sys.stderr)
    return 0


def _sample_line(ev: HostSample) -> str:
    gpus = " ".join(
        f"{g.index}:{'-' if g.mem_used_mib is None else f'{g.mem_used_mib:.0f}'}MiB" for g in ev.gpus
    )
    return f"{ev.host} seq {ev.seq}: {gpus}; {len(ev.procs)} processes"


async def _watch(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from kimitui.telemetry import TelemetrySource

    interval = _interval(args.interval)
    if args.count < 0:
        raise TargetError("--count must be 0 (no limit) or more")
    async with open_target(args.host, accept_new_host_key=args.accept_new_host_key) as opened:
        session = _new_session(opened, "watch")
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
                            print(f"kimitui: {ev.detail}", file=sys.stderr)
                            rc = 1
                            break
                        if ev.state in ("lost", "reconnecting"):
                            print(f"kimitui: {ev.host}: {ev.state}: {ev.detail}", file=sys.stderr)
                    elif isinstance(ev, LogLine) and ev.level in ("warning", "error"):
                        print(f"kimitui: {ev.message}", file=sys.stderr)
        finally:
            session.close()
    return rc


def _run(coro_factory: Callable[[], Any]) -> int:
    """Run a command's coroutine; SIGTERM ends it like Ctrl-C, tearing down what it started."""

    async def main() -> int:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await coro_factory()
        except TargetError as exc:
            print(f"kimitui: {exc}", file=sys.stderr)
            return 2
        except asyncio.CancelledError:
            return 130

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130


def cmd_watch(args: argparse.Namespace) -> int:
    def out(line: str) -> None:
        print(line, flush=True)

    return _run(lambda: _watch(args, out))


def cmd_demo(args: argparse.Namespace) -> int:
    if not 1 <= args.gpus <= 64:
        print("kimitui: --gpus must be between 1 and 64", file=sys.stderr)
        return 2
    return _run(lambda: _dashboard("demo", args, "demo"))


def cmd_connect(args: argparse.Namespace) -> int:
    return _run(lambda: _dashboard(args.target, args, "connect"))


def cmd_default(args: argparse.Namespace) -> int:
    """The dashboard on this machine's GPUs; without any, say so and offer the demo."""
    from kimitui.hosts.local import LocalHost
    from kimitui.telemetry import probe_host

    problem = asyncio.run(probe_host(LocalHost(name=socket.gethostname())))
    args.interval = getattr(args, "interval", 0.5)
    if problem is None:
        return _run(lambda: _dashboard("local", args, "local"))
    print(f"kimitui: {problem}", file=sys.stderr)
    print("Try the simulated 8-GPU host with `kimitui demo`, or replay a recorded campaign with "
          "`kimitui replay`.", file=sys.stderr)
    if sys.stdin.isatty() and sys.stdout.isatty():
        answer = input("Start the demo now? [Y/n] ").strip().lower()
        if answer in ("", "y", "yes"):
            args.gpus = 8
            return cmd_demo(args)
    return 1


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "default": cmd_default,
    "demo": cmd_demo,
    "connect": cmd_connect,
    "watch": cmd_watch,
}

run_live = _run
"""Run a live command's coroutine (SIGTERM ends it like Ctrl-C; a TargetError is one line, exit 2)."""
new_session = _new_session
"""A recorded session for an opened host (its run file's path printed on stderr)."""

__all__ = ["HANDLERS", "OpenedHost", "TargetError", "new_session", "open_target", "run_live"]
