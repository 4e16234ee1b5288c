"""``kimitui record``: record a host headless until stopped, for an overnight watch.

No UI: the telemetry goes to a chunked, compressed run with its index (kimitui/core/runchunks.py), rotated
into segments by size when asked; a line a minute on stderr says how it goes. SIGINT or SIGTERM ends it: the
run is closed (its last member and the index written) and the command exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from pathlib import Path

from kimitui.core.events import ConnectionState, HostSample, LogLine
from kimitui.core.printable import printable
from kimitui.core.runchunks import SegmentedWriter
from kimitui.core.runfile import FORMAT_VERSION, RunHeader
from kimitui.core.session import Session, new_run_path
from kimitui.live.targets import TargetError, check_interval, open_target

STATUS_EVERY_S = 60.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="record a host headless until stopped (SIGINT/SIGTERM): a compressed, "
                                      "indexed run, rotated by size if asked")
    p.add_argument("--host", default="demo",
                   help="demo (the simulated 8-GPU host, default), local, or ssh://[user@]host[:port]")
    p.add_argument("-o", "--output", type=Path, metavar="RUN",
                   help="the run to write, NAME.jsonl.gz (default: a new one in the runs folder)")
    p.add_argument("--rotate-mb", type=float, metavar="N",
                   help="start a new segment (NAME.1.jsonl.gz, ...) once one holds N MB; replay opens them as one")
    p.add_argument("--interval", type=float, default=0.25, help="sampling interval in seconds (default 0.25)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs of the simulated host (demo)")
    p.add_argument("--accept-new-host-key", action="store_true")
    p.add_argument("--remote-python", metavar="PATH",
                   help="the python (3.8 or newer) that runs kimitui's agent on an SSH host (default python3)")
    p.add_argument("--status-every", type=float, default=STATUS_EVERY_S, help=argparse.SUPPRESS)


def _output(args: argparse.Namespace, host: str) -> Path:
    if args.output is None:
        plain = new_run_path(host)
        return plain.with_name(plain.name + ".gz")
    if not args.output.name.endswith(".jsonl.gz"):
        raise TargetError(f"-o {args.output}: a recording is compressed; name it NAME.jsonl.gz")
    if args.output.exists():
        raise TargetError(f"-o {args.output}: already exists (a recording never overwrites a run)")
    return args.output


def _size(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def _elapsed(s: float) -> str:
    return f"{int(s // 3600)}:{int(s % 3600 // 60):02d}:{int(s % 60):02d}"


class _Progress:
    def __init__(self, writer: SegmentedWriter, label: str, every: float) -> None:
        self.writer, self.label, self.every = writer, label, every
        self.samples = 0
        self.start = time.monotonic()
        self.next = self.start + every

    def line(self) -> str:
        w = self.writer
        written = w.total_size
        segments = f", segment {w.segment + 1}" if w.rotate_bytes is not None else ""
        return (f"{time.strftime('%H:%M:%S')} recording {self.label}: {self.samples:,} samples in "
                f"{_elapsed(time.monotonic() - self.start)}, {w.count:,} events, {_size(written)}{segments} "
                f"-> {w.segment_path}")

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self.next:
            self.next = now + self.every
            print(printable(self.line()), file=sys.stderr, flush=True)


async def _record(args: argparse.Namespace) -> int:
    from kimitui.hosts.telemetry import TelemetrySource

    interval = check_interval(args.interval)
    if args.rotate_mb is not None and not args.rotate_mb > 0:
        raise TargetError("--rotate-mb must be more than 0")
    if args.output is not None:
        _output(args, "")  # refused before the host is started
    async with open_target(args.host, accept_new_host_key=args.accept_new_host_key, gpus=args.gpus,
                           remote_python=args.remote_python) as opened:
        path = _output(args, opened.host.name)
        meta = {"command": "record", **opened.facts.recorded()}
        header = RunHeader(FORMAT_VERSION, time.time(), opened.host.name, meta)
        rotate = None if args.rotate_mb is None else int(args.rotate_mb * 1e6)
        try:
            writer = SegmentedWriter(path, header, rotate_bytes=rotate)
        except OSError as exc:
            raise TargetError(f"{path}: {exc.strerror or exc}") from None
        session = Session(writer)
        progress = _Progress(writer, opened.label, args.status_every)
        print(f"recording {opened.label} to {path} until SIGINT/SIGTERM", file=sys.stderr, flush=True)
        source = TelemetrySource(opened.host, interval, **opened.telemetry_args)
        rc = 0
        try:
            async with contextlib.aclosing(source.events()) as events:
                async for ev in events:
                    session.publish(ev)
                    if isinstance(ev, HostSample):
                        progress.samples += 1
                    elif isinstance(ev, ConnectionState) and ev.state in ("failed", "lost", "reconnecting"):
                        print(printable(f"kimitui: {ev.host}: {ev.state}: {ev.detail}"), file=sys.stderr)
                        if ev.state == "failed":
                            rc = 1
                            break
                    elif isinstance(ev, LogLine) and ev.level in ("warning", "error"):
                        print(f"kimitui: {printable(ev.message)}", file=sys.stderr)
                    progress.tick()
        except asyncio.CancelledError:
            pass  # stopped: what was published is on disk; the run is closed below
        finally:
            source.stop()
            session.close()
            print(printable(f"recorded {progress.samples:,} samples, {writer.count:,} events to {path}"
                            f"{f' ({writer.segment + 1} segments)' if writer.segment else ''}; "
                            f"replay: kimitui replay {path}"), file=sys.stderr, flush=True)
        return rc


def cmd_record(args: argparse.Namespace) -> int:
    async def main() -> int:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, task.cancel)
        try:
            return await _record(args)
        except TargetError as exc:
            print(f"kimitui: {printable(str(exc))}", file=sys.stderr)
            return 2
        except asyncio.CancelledError:
            return 0  # stopped while the target was being opened

    return asyncio.run(main())
