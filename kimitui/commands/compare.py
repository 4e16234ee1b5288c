"""``kimitui compare RUN_A RUN_B [RUN_C ...]``: runs side by side, and ``kimitui report RUN``; both with
``--figures DIR`` (PNG and SVG plots, linked from the Markdown) and ``-o OUT`` (Markdown, or one HTML file
with the figures inline when OUT ends in .html)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from kimitui.commands.output import CliError, check_writable, write_whole


def add_figure_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("-o", "--output", type=Path,
                   help=f"write the {what} to this file instead of standard output (OUT.html: one HTML file with "
                        "the figures inline)")
    p.add_argument("--figures", type=Path, metavar="DIR",
                   help="also write the figures as PNG and SVG into DIR, linked from the report (needs matplotlib: "
                        "pip install 'kimitui[figures]')")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare runs side by side: the change per level against the runs' own "
                                       "spread, micro rows, budgets, what differs between them")
    p.add_argument("files", nargs="+", type=Path, metavar="RUN",
                   help="two or more run files (.jsonl or .jsonl.gz) or bundled runs' names; the first is the baseline")
    add_figure_options(p, "comparison")


def _html(output: Path | None) -> bool:
    return output is not None and output.suffix.lower() in (".html", ".htm")


def _figure_dir(args: argparse.Namespace) -> tuple[Path | None, tempfile.TemporaryDirectory[str] | None]:
    """Where the figures go: --figures DIR, or a temporary folder for an HTML report's inline figures."""
    if args.figures is not None:
        if args.figures.exists() and not args.figures.is_dir():
            raise CliError(f"--figures {args.figures}: not a directory")
        return args.figures, None
    if _html(args.output):
        tmp = tempfile.TemporaryDirectory(prefix="kimitui-figures-")
        return Path(tmp.name), tmp
    return None, None


Render = Callable[[list[tuple[str, str]]], str]
"""(title, link) of each figure -> the report's Markdown."""
Plots = Callable[[Path], list[tuple[str, Path]]]
"""A folder -> (title, PNG path) of each figure written into it (an SVG beside each PNG)."""


def emit(args: argparse.Namespace, render: Render, plots: Plots, option: str) -> int:
    """Render (with the figures when asked) and write: the shared tail of ``report`` and ``compare``. The
    Markdown links each figure relative to the report's folder; an HTML report has them inline."""
    from kimitui.report.figures import FiguresUnavailable

    if args.output:
        check_writable(args.output, f"{option} -o")  # before the work: a typo costs no rendering
    folder, tmp = _figure_dir(args)
    try:
        written: list[tuple[str, Path]] = []
        if folder is not None:
            try:
                written = plots(folder)
            except FiguresUnavailable as exc:
                raise CliError(str(exc)) from None
            except OSError as exc:
                raise CliError(f"--figures {folder}: {exc.strerror or exc}") from None
        base = args.output.parent if args.output is not None else Path.cwd()
        links = [(title, os.path.relpath(path, base) if tmp is None else str(path)) for title, path in written]
        text = render(links)
        if _html(args.output):
            from kimitui.report.html import to_html

            text = to_html(text, {link: path for (_, link), (_, path) in zip(links, written, strict=True)})
        if args.output:
            write_whole(args.output, text, f"{option} -o")
            print(f"{option} written to {args.output}" + (f"; figures in {folder}" if tmp is None and folder else ""),
                  file=sys.stderr)
        else:
            sys.stdout.write(text)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from kimitui.core.runfile import RunReader
    from kimitui.report.compare import load_runs, render_compare
    from kimitui.report.figures import compare_figures
    from kimitui.resources import find_run

    if len(args.files) < 2:
        raise CliError("compare: give two runs or more (the first is the baseline)")
    if len(args.files) > 26:
        raise CliError("compare: at most 26 runs (A to Z)")
    runs = load_runs([RunReader(find_run(f)) for f in args.files])
    return emit(args, lambda figs: render_compare(runs, figs), lambda folder: compare_figures(runs, folder),
                "compare")


def cmd_report(args: argparse.Namespace) -> int:
    from kimitui.core.runfile import RunReader
    from kimitui.report.markdown import render_report
    from kimitui.resources import find_run

    reader = RunReader(find_run(args.file))
    if args.figures is None and not _html(args.output):  # the plain report: no figures, byte for byte as before
        return emit(args, lambda _figs: render_report(reader), lambda _folder: [], "report")
    from kimitui.report.compare import load_runs
    from kimitui.report.figures import compare_figures

    runs = load_runs([reader])
    return emit(args, lambda figs: render_report(reader, figs), lambda folder: compare_figures(runs, folder),
                "report")
