"""Command-line entry points. Headless commands print text or JSON; the TUI is imported only when used."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

from kimitui.core.printable import printable


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _add_theme(p: argparse.ArgumentParser, default: object = argparse.SUPPRESS) -> None:
    p.add_argument("--theme", default=default,
                   help="dashboard theme: a built-in one or one of ~/.config/kimitui/themes/*.toml (the "
                        "command palette lists them)")


def _add_remote_python(p: argparse.ArgumentParser) -> None:
    p.add_argument("--remote-python", metavar="PATH",
                   help="the python (3.8 or newer) that runs kimitui's agent on an SSH host (default python3)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kimitui",
        description="Terminal dashboard for a GPU profiling campaign: telemetry, safe cleanup, benchmarks, replay.",
    )
    from kimitui._version import __version__

    parser.add_argument("--version", action="version", version=f"kimitui {__version__}")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("replay", help="play a recorded run in the dashboard (the bundled sample run by default)")
    p.add_argument("file", nargs="?", type=Path, help="run file (.jsonl or .jsonl.gz), or a bundled run's name")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed, 0.5 to 64 (default 1)")
    p.add_argument("--summary", action="store_true", help="print a short text summary instead of the dashboard")
    _add_theme(p)

    p = sub.add_parser("report", help="write a Markdown report of a run (the bundled sample run by default)")
    p.add_argument("file", nargs="?", type=Path, help="run file, or a bundled run's name")
    p.add_argument("-o", "--output", type=Path, help="write to this file instead of standard output")

    p = sub.add_parser("demo", help="start the simulated 8-GPU host and open the dashboard on it")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--interval", type=float, default=0.5, help="sampling interval in seconds (0.1 to 10)")
    p.add_argument("--campaign", action="store_true",
                   help="run the whole built-in campaign on the simulated host (macro, the transition, micro, the "
                        "analysis, the restart, the check), in the dashboard or --headless")
    p.add_argument("--resume", type=Path, metavar="RUN", help="with --campaign: go on with the campaign in RUN")
    _add_theme(p)
    from kimitui.commands import campaign as campaign_cli

    campaign_cli.add_run_options(p, theme=False)
    campaign_cli.add_parser(sub)

    p = sub.add_parser("connect", help="open the dashboard on a GPU host over SSH")
    p.add_argument("target", help="[user@]host[:port] or an alias from ~/.ssh/config")
    p.add_argument("--accept-new-host-key", action="store_true",
                   help="accept and remember the host key of a host not yet in known_hosts")
    p.add_argument("--interval", type=float, default=0.5)
    _add_remote_python(p)
    _add_theme(p)

    p = sub.add_parser("watch", help="print live samples (headless)")
    p.add_argument("--host", default="local", help="local, demo, or ssh://[user@]host[:port] (default local)")
    p.add_argument("--count", type=int, default=0, help="stop after N samples (default: until interrupted)")
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--json", action="store_true", help="one JSON sample a line")
    p.add_argument("--accept-new-host-key", action="store_true")
    _add_remote_python(p)

    from kimitui.commands import record as record_cli

    record_cli.add_parser(sub)
    from kimitui.commands import bench as bench_cli

    bench_cli.add_parser(sub)
    from kimitui.commands import cleanup as cleanup_cli

    cleanup_cli.add_parser(sub)
    from kimitui.commands import micro as micro_cli

    micro_cli.add_shapes_parser(sub)
    _add_theme(parser, default=None)
    return parser


def cmd_replay(args: argparse.Namespace) -> int:
    from kimitui.core.runfile import RunReader
    from kimitui.resources import find_run

    path = find_run(args.file)
    if args.summary:
        from kimitui.report.summary import summarize

        print(summarize(RunReader(path)))
        return 0
    if not 0.5 <= args.speed <= 64:
        raise CliError(f"--speed {args.speed} is out of range (0.5 to 64)")
    from kimitui.tui.launch import run_replay

    return run_replay(path, theme=args.theme, speed=args.speed)


def cmd_report(args: argparse.Namespace) -> int:
    from kimitui.core.runfile import RunReader
    from kimitui.report.markdown import render_report
    from kimitui.resources import find_run

    if args.output:
        _check_writable(args.output, "report -o")  # before the work: a typo costs no rendering
    text = render_report(RunReader(find_run(args.file)))
    if args.output:
        write_whole(args.output, text, "report -o")
        print(f"report written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _check_writable(path: Path, option: str) -> None:
    """CliError (one line) when ``path`` cannot be a file written: a directory, a folder that is missing."""
    if path.is_dir():
        raise CliError(f"{option} {path}: is a directory; give the file to write")
    if not path.parent.is_dir():
        raise CliError(f"{option} {path}: no such directory {path.parent}")


def write_whole(path: Path, text: str, option: str) -> None:
    """``text`` into ``path`` whole or not at all (a temporary file beside it, renamed over it); CliError (one
    line) when it cannot be written, with nothing left behind."""
    _check_writable(path, option)
    if path.exists() and not path.is_file():  # /dev/stdout, a FIFO: written to, never replaced
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise CliError(f"{option} {path}: {exc.strerror or exc}") from None
        return
    path = Path(os.path.realpath(path))  # a symlink to the report keeps pointing at it
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would have made it, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise CliError(f"{option} {path}: {exc.strerror or exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from kimitui.commands import bench as bench_cli
    from kimitui.commands import campaign as campaign_cli
    from kimitui.commands import cleanup as cleanup_cli
    from kimitui.commands import micro as micro_cli
    from kimitui.core.runfile import RunFileError

    handlers = {"replay": cmd_replay, "report": cmd_report, "bench": bench_cli.cmd_bench,
                "cleanup": cleanup_cli.cmd_cleanup, "shapes": micro_cli.cmd_shapes,
                "campaign": campaign_cli.cmd_campaign}
    try:
        from kimitui.commands import live as live_commands

        handlers.update(live_commands.HANDLERS)
        from kimitui.commands import record as record_cli

        handlers["record"] = record_cli.cmd_record
        if args.command == "demo" and args.campaign:
            handlers["demo"] = campaign_cli.cmd_demo_campaign
        command = args.command or "default"
        handler = handlers.get(command)
        if handler is None:
            parser.print_help()
            return 2
        return handler(args)
    except (CliError, RunFileError, FileNotFoundError) as exc:
        print(f"kimitui: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()


SIGPIPE_STATUS = 141
"""The exit status when whoever read the output went away (``| head``): that of a program ended by SIGPIPE."""


def _reader_gone() -> int:
    """Stop quietly once the command has unwound (a live command tore its host down on the way out): what is
    still buffered for standard output goes nowhere instead of failing again at exit."""
    import os

    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return SIGPIPE_STATUS


if __name__ == "__main__":
    sys.exit(main())
