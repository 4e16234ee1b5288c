"""Entry points the CLI calls: replay a run file, or the dashboard on a live session. Textual is imported only
when one of them runs, so importing this module is cheap."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kimitui.core.printable import printable
from kimitui.core.session import EventSource, Session

if TYPE_CHECKING:
    from textual.app import App

    from kimitui.live.context import LiveContext
    from kimitui.tui.app import KimituiApp


def exit_status(app: App[object]) -> int:
    """The dashboard's exit status: 0 when it was quit, non-zero (Textual's return code) when it ended on an
    unhandled exception, whose cause is then said in one line after Textual's own report."""
    code = app.return_code or 0
    if code:
        error = getattr(app, "_exception", None)
        cause = f"{type(error).__name__}: {error}" if error is not None else f"exit status {code}"
        print(f"kimitui: the dashboard stopped on an error: {printable(cause)}", file=sys.stderr, flush=True)
    return code


def run_replay(path: Path, theme: str | None = None, speed: float = 1.0,
               themes_dir: Path | None = None, compare: Path | None = None) -> int:
    """Replay a run file in the dashboard at its recorded pace (``speed`` times faster); ``compare``: another
    run, folded whole, whose tok/s curve and budget bars the Benchmarks and Analysis tabs draw over this
    one's (``tui.compare_overlay``). Returns the exit status (``exit_status``).

    Raises ``kimitui.core.runfile.RunFileError`` (a one-line message) when the file cannot be opened.
    """
    from concurrent.futures import ThreadPoolExecutor

    from kimitui.core.replay import Player
    from kimitui.core.runfile import RunReader

    # Reading a large run is mostly I/O: let it overlap the import of Textual and the app.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="open-run") as pool:
        opening = pool.submit(RunReader, path)
        from kimitui.tui.app import KimituiApp, print_first_frame

        reader = opening.result()
    session = Session()
    player = Player(reader, session, speed=speed)
    player.set_speed(speed)
    app = KimituiApp(session, player=player, theme=theme, themes_dir=themes_dir, run_path=Path(path))
    if compare is not None:
        from kimitui.tui.views.compare_overlay import load_compare

        app.compare_run = load_compare(compare)  # type: ignore[attr-defined]
    app.run()
    print_first_frame(app)
    return exit_status(app)


async def run_live(session: Session, sources: list[EventSource], live: LiveContext, theme: str | None = None,
                   prepare: Callable[[KimituiApp], None] | None = None) -> int:
    """The dashboard on a live session (``kimitui``, ``demo``, ``connect``, ``campaign``): ``sources`` are
    pumped into ``session`` while it runs; ``prepare`` sees the app before it starts (the campaign gives it
    its runner). Returns the exit status (``exit_status``); the caller closes the session and its sources."""
    from kimitui.tui.app import KimituiApp, print_first_frame

    app = KimituiApp(session, theme=theme, host_label=live.label, sources=sources, run_path=session.recorder.path,
                     live=live)
    if prepare is not None:
        prepare(app)
    await app.run_async()
    print_first_frame(app)
    return exit_status(app)
