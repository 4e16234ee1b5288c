"""Entry points the CLI calls: replay a run file, or watch a live session. Textual is imported only
when one of them runs, so importing this module is cheap."""

from __future__ import annotations

from pathlib import Path

from kimitui.core.session import EventSource, Session


def run_replay(path: Path, theme: str | None = None, speed: float = 1.0,
               themes_dir: Path | None = None) -> None:
    """Replay a run file in the dashboard at its recorded pace (``speed`` times faster).

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
    app.run()
    print_first_frame(app)


def run_live(session: Session, sources: list[EventSource], host_label: str = "", theme: str | None = None,
             themes_dir: Path | None = None, run_path: Path | None = None) -> None:
    """Show a live session: ``sources`` are pumped into ``session`` while the app runs; the session
    (and its recorder) is closed when the app exits."""
    from kimitui.tui.app import KimituiApp, print_first_frame

    app = KimituiApp(session, theme=theme, themes_dir=themes_dir, host_label=host_label, sources=sources,
                     run_path=run_path)
    try:
        app.run()
    finally:
        session.close()
    print_first_frame(app)
