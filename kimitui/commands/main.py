"""Command-line entry points. Headless commands print text or JSON; the TUI is imported only when used."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from pathlib import Path

from kimitui.commands.output import CliError
from kimitui.core.printable import printable


def _add_theme(p: argparse.ArgumentParser, default: object = argparse.SUPPRESS) -> None:
    p.add_argument("--theme", default=default,
                   help="dashboard theme: a built-in one or one of ~/.config/kimitui/themes/*.toml (the "
                        "command palette lists them)")


def _add_remote_python(p: argparse.ArgumentParser) -> None:
    p.add_argument("--remote-python", metavar="PATH",
                   help="the python (3.8 or newer) that runs kimitui's agent on an SSH host (default python3)")


def build_parser(full: bool = True) -> argparse.ArgumentParser:
    """The command line's parser; not ``full``: the top level alone (``kimitui`` with no argument but its theme,
    the local dashboard, whose start waits on it: no command's module is imported to build the others)."""
    parser = argparse.ArgumentParser(
        prog="kimitui",
        description="Terminal dashboard for a GPU profiling campaign: telemetry, safe cleanup, benchmarks, replay.",
    )
    from kimitui._version import __version__

    parser.add_argument("--version", action="version", version=f"kimitui {__version__}")
    sub = parser.add_subparsers(dest="command")
    if not full:
        _add_theme(parser, default=None)
        return parser

    p = sub.add_parser("replay", help="play a recorded run in the dashboard (the bundled sample run by default)")
    p.add_argument("file", nargs="?", type=Path, help="run file (.jsonl or .jsonl.gz), or a bundled run's name")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed, 0.5 to 64 (default 1)")
    p.add_argument("--summary", action="store_true", help="print a short text summary instead of the dashboard")
    p.add_argument("--compare", type=Path, metavar="RUN_B",
                   help="draw another run's tok/s-vs-concurrency curve and budget bars over this one's (the "
                        "Benchmarks and Analysis tabs)")
    _add_theme(p)

    p = sub.add_parser("report", help="write a Markdown report of a run (the bundled sample run by default)")
    p.add_argument("file", nargs="?", type=Path, help="run file, or a bundled run's name")
    from kimitui.commands import compare as compare_cli

    compare_cli.add_figure_options(p, "report")
    compare_cli.add_parser(sub)

    p = sub.add_parser("demo", help="start the simulated 8-GPU host and open the dashboard on it")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="how many GPUs the simulated host has (default 8, the demo's RTX PRO 6000s; 2 with "
                        "--engine vllm)")
    p.add_argument("--interval", type=float, default=0.5, help="sampling interval in seconds (0.1 to 10)")
    p.add_argument("--campaign", action="store_true",
                   help="run the whole built-in campaign on the simulated host (macro, the transition, micro, the "
                        "analysis, the restart, the check), in the dashboard or --headless")
    p.add_argument("--resume", type=Path, metavar="RUN", help="with --campaign: go on with the campaign in RUN")
    from kimitui.commands.demo_engine import add_engine_options

    add_engine_options(p)
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
    from kimitui.commands import serve as serve_cli

    serve_cli.add_parser(sub)
    from kimitui.commands import fleet as fleet_cli

    fleet_cli.add_parser(sub)
    _add_theme(parser, default=None)
    return parser


def cmd_replay(args: argparse.Namespace) -> int:
    from kimitui.core.runfile import RunReader
    from kimitui.resources import find_run

    path = find_run(args.file)
    compare = find_run(args.compare) if args.compare is not None else None
    if compare is not None and args.summary:
        raise CliError("replay --compare draws in the dashboard: not with --summary (kimitui compare A B is the text)")
    if args.summary:
        from kimitui.report.summary import summarize

        print(summarize(RunReader(path)))
        return 0
    if not 0.5 <= args.speed <= 64:
        raise CliError(f"--speed {args.speed} is out of range (0.5 to 64)")
    from kimitui.commands.fleet import is_fleet_run, replay_fleet

    reader = RunReader(path)
    if is_fleet_run(reader):
        if compare is not None:
            raise CliError("replay --compare draws a benchmark's curves: not for a fleet run")
        return replay_fleet(reader, args.speed, args.theme)
    from kimitui.tui.launch import run_replay

    return run_replay(path, theme=args.theme, speed=args.speed, compare=compare)


HANDLERS: dict[str, tuple[str, str]] = {
    "default": ("live", "cmd_default"), "demo": ("live", "cmd_demo"), "connect": ("live", "cmd_connect"),
    "watch": ("live", "cmd_watch"), "replay": ("main", "cmd_replay"), "report": ("compare", "cmd_report"),
    "compare": ("compare", "cmd_compare"), "bench": ("bench", "cmd_bench"), "cleanup": ("cleanup", "cmd_cleanup"),
    "shapes": ("micro", "cmd_shapes"), "campaign": ("campaign", "cmd_campaign"),
    "demo-campaign": ("campaign", "cmd_demo_campaign"), "serve": ("serve", "cmd_serve"),
    "record": ("record", "cmd_record"), "fleet": ("fleet", "cmd_fleet"),
}
"""Each command's handler, as (module of kimitui.commands, function): imported when its command runs."""


def _is_the_local_dashboard(argv: list[str]) -> bool:
    """No subcommand named (an option's value never is one: `--theme demo` would only start an agent that
    ends with this process), and not only asking for help or the version."""
    return not any(a in HANDLERS for a in argv) and not {"-h", "--help", "--version"} & set(argv)


def main(argv: list[str] | None = None) -> int:
    try:  # Ctrl-C while the command line is read and the command's module imported: one line, 130
        args = _read(argv)
        import kimitui.core.runfile  # noqa: F401  (the command's errors: imported where a Ctrl-C is caught)
    except KeyboardInterrupt:
        from kimitui.commands.interrupted import interrupted

        return interrupted()
    return _dispatch(args)


def _read(argv: list[str] | None) -> argparse.Namespace:
    from kimitui.live.process_clock import mark

    mark("main")
    if _is_the_local_dashboard(sys.argv[1:] if argv is None else argv):
        # its agent (python, the host program, NVML) starts now, beside building the command line's parser
        # and the imports that follow, rather than after them
        from kimitui.hosts.prestart import prestart_agent

        prestart_agent()
        mark("agent-prestarted")
    return parse(build_parser(full=not _only_a_theme(sys.argv[1:] if argv is None else argv)), argv)


def _only_a_theme(argv: list[str]) -> bool:
    """No argument but ``--theme NAME`` (or ``--theme=NAME``): the local dashboard, nothing else to parse."""
    if len(argv) == 2 and argv[0] == "--theme" and not argv[1].startswith("-"):
        return True
    return not argv or (len(argv) == 1 and argv[0].startswith("--theme="))


def _dispatch(args: argparse.Namespace) -> int:
    from kimitui.core.runfile import RunFileError

    try:
        command = args.command or "default"
        if command == "demo" and args.campaign:
            command = "demo-campaign"
        where = HANDLERS.get(command)
        if where is None:
            build_parser().print_help()
            return 2
        handler = cmd_replay if where == ("main", "cmd_replay") else getattr(
            importlib.import_module(f"kimitui.commands.{where[0]}"), where[1])  # only the command's own module
        return handler(args)
    except (CliError, RunFileError, FileNotFoundError) as exc:
        print(f"kimitui: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parse_args``, except that an argument no parser knows is refused by the (sub)command it was given
    to, with that command's usage (``kimitui demo --bogus`` shows demo's, not the list of commands)."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost parser of the command ARGS names (``bench macro``'s for ``kimitui bench macro ...``)."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs and subs[0].dest != argparse.SUPPRESS else None
        if chosen is None or chosen not in subs[0].choices:
            return parser
        parser = subs[0].choices[chosen]


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
