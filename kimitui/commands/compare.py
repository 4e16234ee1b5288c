"""``kimitui compare RUN_A RUN_B [RUN_C ...]``: runs side by side, and ``kimitui report RUN``; both with
``--figures DIR`` (PNG and SVG plots, linked from the Markdown) and ``-o OUT`` (Markdown, or one HTML file
when OUT ends in .html: the figures inline where matplotlib is installed, the plain page where it is not)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from kimitui.commands.extras import importable, install_command
from kimitui.commands.output import CliError, check_writable, write_whole


def add_figure_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("-o", "--output", type=Path,
                   help=f"write the {what} to this file instead of standard output (OUT.html: one HTML file, "
                        "with the figures inline where matplotlib is installed)")
    p.add_argument("--figures", type=Path, metavar="DIR",
                   help="also write the figures as PNG and SVG into DIR, linked from the report (needs matplotlib, "
                        "the 'figures' extra)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare runs side by side: the change per level against the runs' own "
                                       "spread, micro rows, budgets, what differs between them")
    p.add_argument("files", nargs="+", type=Path, metavar="RUN",
                   help="two or more run files (.jsonl or .jsonl.gz) or bundled runs' names; the first is the baseline")
    add_figure_options(p, "comparison")


def _html(output: Path | None) -> bool:
    return output is not None and output.suffix.lower() in (".html", ".htm")


def figures_missing() -> str:
    """The one line for --figures without matplotlib: the command that installs it for this kimitui."""
    return f"--figures needs matplotlib, which is not installed: {install_command('figures')}"


def _figure_dir(args: argparse.Namespace) -> tuple[Path | None, tempfile.TemporaryDirectory[str] | None]:
    """Where the figures go: --figures DIR, or a temporary folder for an HTML report's inline figures (none
    without matplotlib: the page is the report's plain HTML)."""
    if args.figures is not None:
        if args.figures.exists() and not args.figures.is_dir():
            raise CliError(f"--figures {args.figures}: not a directory")
        if not importable("matplotlib"):
            raise CliError(figures_missing())
        return args.figures, None
    if _html(args.output) and importable("matplotlib"):
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
            except FiguresUnavailable:
                raise CliError(figures_missing()) from None
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
            print(f"{option} written to {args.output}" + _written_note(args, folder, tmp), file=sys.stderr)
        else:
            sys.stdout.write(text)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


def _written_note(args: argparse.Namespace, folder: Path | None,
                  tmp: tempfile.TemporaryDirectory[str] | None) -> str:
    """What the line saying where the report went adds: where the figures went, or why a page has none."""
    if folder is not None and tmp is None:
        return f"; figures in {folder}"
    if folder is None and _html(args.output):
        return f"; without figures (they need matplotlib: {install_command('figures')})"
    return ""


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
