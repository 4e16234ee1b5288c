"""The dashboard's GPU rows on a real driver: a run recorded by ``kimitui record --host local`` under a GEMM load,
replayed headless at its busiest sample; prints each GPU's sampled caps, link and XID, the words the core makes
of them, and the GPU table's lines as the terminal shows them, and saves the screen as an SVG.

    python3 scripts/device_gpu_state.py RUN OUT_DIR
"""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

from rich.console import Console

from kimitui.core.events import HostSample
from kimitui.core.gpu_words import gpu_state_words
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.tui.app import KimituiApp
from kimitui.tui.widgets.gpu_table import GpuTable


def screen_text(app: KimituiApp) -> str:
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True,
                      color_system=None)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text(styles=False)


async def main(run: Path, out: Path) -> int:
    reader = RunReader(run)
    samples = [(i, e) for i in range(len(reader)) if isinstance(e := reader.decoded(i), HostSample) and e.gpus]
    if not samples:
        print("gpu-state: no sample in the run")
        return 1
    at, busiest = max(samples, key=lambda s: max(g.util_pct or 0.0 for g in s[1].gpus))
    print(f"gpu-state: {len(samples)} samples; the busiest is event {at}")
    for g in busiest.gpus:
        print(f"gpu-state: GPU {g.index} {g.name}: util {g.util_pct} % SM {g.sm_clock_mhz} MHz throttle {g.throttle} "
              f"pcie {g.pcie} xid {g.xid} -> {gpu_state_words(g)}")
    idle = min(samples, key=lambda s: max(g.util_pct or 0.0 for g in s[1].gpus))[1]
    for g in idle.gpus:
        print(f"gpu-state: idle GPU {g.index}: util {g.util_pct} % throttle {g.throttle} pcie {g.pcie} xid {g.xid} "
              f"-> {gpu_state_words(g)}")
    session = Session()
    player = Player(reader, session, clock=lambda: 0.0)
    app = KimituiApp(session, player=player)
    async with app.run_test(size=(120, 40)) as pilot:
        player.paused = True
        player.seek_index(at + 1)
        app.redraw()
        for _ in range(200):
            if app.query_one(GpuTable).row_keys:
                break
            await pilot.pause()
        await pilot.pause()
        text = screen_text(app)
        for line in text.splitlines():
            if ("GiB" in line and line.lstrip("│ ")[:1].isdigit()) or ("Name" in line and "Memory" in line):
                print("gpu-state: | " + line.rstrip())
        out.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(str(out / "gpu-state.svg"))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1].startswith("-"):
        sys.exit("usage: python3 scripts/device_gpu_state.py RUN OUT_DIR")
    sys.exit(asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]))))
