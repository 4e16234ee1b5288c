#!/usr/bin/env python3
"""A day's recording: 24 hours of 8 GPUs at 4 Hz (64 processes a sample), as ``kimitui record`` writes it: a
chunked gzip run with its index beside it (kimitui/core/runchunks.py).

The run is generated once (the lines of benchmarks/replay_load.py, written through the recorder's own
writer; a few minutes) into ``--dir`` (default /tmp/kimitui-bench-24h) and reused while it is there. Then,
in a fresh child process:

- open: ``RunReader(path)`` (the index read, nothing decompressed but the header);
- seek: ``Player.seek_index`` to the middle (the first seek: it takes the fold's checkpoints up to there),
  then to 20 random positions and to the end; the slowest is the figure;
- peak memory (ru_maxrss) of that process, after opening and every seek;
- the dashboard's first frame on it (``kimitui replay``, as benchmarks/replay_load.py measures it; no target).

Usage: .venv/bin/python benchmarks/replay_24h.py [--hours 24] [--dir DIR] [--rebuild]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.replay_load import GPUS, HZ, PROCS, first_frame, run_header, run_lines  # noqa: E402

TARGETS = {"open_s": 1.0, "seek_s": 0.050, "peak_mb": 300.0}


def build(path: Path, hours: float) -> int:
    from kimitui.core.runchunks import ChunkedWriter, index_path

    path.unlink(missing_ok=True)
    index_path(path).unlink(missing_ok=True)
    writer = ChunkedWriter(path, run_header(f"benchmarks/replay_24h.py --hours {hours:g}"))
    n = 0
    try:
        for t, ty, line in run_lines(hours):
            writer.append_line((line + "\n").encode(), t, ty)
            n += 1
    finally:
        writer.close()
    return n


def measure(path: Path) -> dict[str, float]:
    import resource

    from kimitui.core.replay import Player
    from kimitui.core.runfile import RunReader

    t0 = time.perf_counter()
    reader = RunReader(path)
    t_open = time.perf_counter() - t0
    t0 = time.perf_counter()
    player = Player(reader)
    t_player = time.perf_counter() - t0
    seeks: list[float] = []
    rng = random.Random(1)
    n = len(reader)
    for position in [n // 2, *(rng.randrange(n) for _ in range(20)), n - 1, n]:
        t0 = time.perf_counter()
        player.seek_index(position)
        seeks.append(time.perf_counter() - t0)
    state = player.session.state
    assert len(state.gpus) == GPUS and len(state.procs) == PROCS, "seek did not rebuild the state"
    return {"open_s": t_open, "player_s": t_player, "first_seek_s": seeks[0], "seek_s": max(seeks),
            "median_seek_s": sorted(seeks)[len(seeks) // 2],
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "events": float(n),
            "warnings": float(len(reader.warnings))}


def _row(label: str, value: float, unit: str, target: float | None = None) -> str:
    shown = f"{value * 1000:.1f} ms" if unit == "ms" else f"{value:.3f} s" if unit == "s" else f"{value:.0f} MB"
    if target is None:
        return f"  {label:<30}{shown:>12}"
    tshown = f"{target * 1000:.0f} ms" if unit == "ms" else f"{target:.1f} s" if unit == "s" else f"{target:.0f} MB"
    return f"  {label:<30}{shown:>12}   target <= {tshown:<8} {'ok' if value <= target else 'MISSED'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="24-hour replay benchmark (chunked, indexed, compressed)")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kimitui-bench-24h"))
    parser.add_argument("--rebuild", action="store_true", help="generate the run again")
    parser.add_argument("--no-tui", action="store_true", help="skip the first-frame measurement")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / f"load-{args.hours:g}h.jsonl.gz"
    done = path.with_name(path.name + ".done")
    if args.rebuild or not done.exists():
        done.unlink(missing_ok=True)
        t0 = time.perf_counter()
        n = build(path, args.hours)
        done.write_text(str(n))
        print(f"generated {n:,} events in {time.perf_counter() - t0:.0f} s")
    from kimitui.core.runchunks import index_path

    print(f"run: {path} ({args.hours:g} h, {GPUS} GPUs at {HZ} Hz, {PROCS} processes a sample): "
          f"{path.stat().st_size / 1e6:.0f} MB compressed, index {index_path(path).stat().st_size / 1e6:.1f} MB")
    out = subprocess.run([sys.executable, __file__, "--measure", str(path)], capture_output=True, text=True,
                         check=True)
    m = json.loads(out.stdout)
    print(f"  {m['events']:,.0f} events")
    print(_row("open (RunReader)", m["open_s"], "s", TARGETS["open_s"]))
    print(_row("Player setup", m["player_s"], "ms"))
    print(_row("first seek (middle)", m["first_seek_s"], "ms"))
    print(_row("median seek", m["median_seek_s"], "ms"))
    print(_row("seek anywhere (slowest)", m["seek_s"], "ms", TARGETS["seek_s"]))
    print(_row("peak memory (open+seeks)", m["peak_mb"], "MB", TARGETS["peak_mb"]))
    if m["warnings"]:
        print(f"  reader warnings: {m['warnings']:.0f}")
    if not args.no_tui:
        ff = first_frame(path)
        print(f"  first frame: {ff['error']}" if "error" in ff else _row("first frame (app clock)",
                                                                          float(ff["first_frame_s"]), "s"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
