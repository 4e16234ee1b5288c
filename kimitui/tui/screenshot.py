"""Save an SVG (and, where rsvg-convert is installed, a PNG) of the dashboard replaying a run.

    python -m kimitui.tui.screenshot docs/dashboard.svg [--run FILE] [--at EVENT] [--view dashboard]

With no ``--at`` the replay is positioned in the middle of the cleanup phase (or of the run).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.resources import bundled_sample_run
from kimitui.tui.app import KimituiApp
from kimitui.tui.keys import VIEWS
from kimitui.tui.widgets.event_log import EventLog
from kimitui.tui.widgets.gpu_table import GpuTable

DRAW_WAIT_S = 10.0


def dashboard_drawn(app: KimituiApp) -> bool:
    """The dashboard's GPU table and event log hold what the replay position has (mounted at start, so
    they are filled whichever view is shown)."""
    return bool(app.query_one(GpuTable).row_keys) and bool(app.query_one(EventLog).shown)


def default_position(reader: RunReader) -> int:
    """Halfway through the cleanup phase when the run has one, else halfway through the run."""
    starts = [i for i in reader.indices_of("phase_start") if b'"cleanup"' in reader.raw(i)]
    ends = [i for i in reader.indices_of("phase_end") if b'"cleanup"' in reader.raw(i)]
    if starts and ends and ends[0] > starts[0]:
        return (starts[0] + ends[0]) // 2
    return len(reader) // 2


async def save(run: Path, out: Path, at: int | None, view: str, theme: str | None,
               size: tuple[int, int]) -> None:
    reader = RunReader(run)
    session = Session()
    player = Player(reader, session, clock=lambda: 0.0)
    app = KimituiApp(session, player=player, theme=theme)
    async with app.run_test(size=size) as pilot:
        player.paused = True
        player.seek_index(default_position(reader) if at is None else at)
        app.action_show_view(view)
        app.redraw()
        deadline = time.monotonic() + DRAW_WAIT_S
        while not dashboard_drawn(app) and time.monotonic() < deadline:  # the tables hold the position's rows
            await pilot.pause()
        app.clear_notifications()
        await pilot.pause()
        out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(filename=out.name, path=str(out.parent))


def svg_to_png(svg: Path, png: Path, width: int = 1600) -> bool:
    """Convert with rsvg-convert; spaces are marked to be preserved (rsvg drops leading ones)."""
    tool = shutil.which("rsvg-convert")
    if tool is None:
        return False
    text = svg.read_text(encoding="utf-8").replace("<svg ", '<svg xml:space="preserve" ', 1)
    with tempfile.NamedTemporaryFile("w", suffix=".svg", delete=False, encoding="utf-8") as tmp:
        tmp.write(text)
    try:
        subprocess.run([tool, "-w", str(width), tmp.name, "-o", str(png)], check=True)
    finally:
        Path(tmp.name).unlink(missing_ok=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="SVG file to write")
    parser.add_argument("--run", type=Path, default=None, help="run file (default: the bundled sample)")
    parser.add_argument("--at", type=int, default=None, help="event position to show")
    parser.add_argument("--view", choices=VIEWS, default="dashboard")
    parser.add_argument("--theme", default=None)
    parser.add_argument("--size", default="120x40", help="COLSxROWS")
    parser.add_argument("--png", action="store_true", help="also write a PNG next to the SVG")
    args = parser.parse_args(argv)
    cols, rows = (int(v) for v in args.size.lower().split("x"))
    asyncio.run(save(args.run or bundled_sample_run(), args.out, args.at, args.view, args.theme, (cols, rows)))
    print(args.out)
    if args.png:
        png = args.out.with_suffix(".png")
        print(png if svg_to_png(args.out, png) else "rsvg-convert not found: no PNG written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
