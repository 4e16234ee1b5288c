#!/usr/bin/env python3
"""Replay under load: a 1-hour run of 8 GPUs at 4 Hz with 64 processes per sample.

Builds the run in a temporary folder (lines written directly, a few seconds), then measures, each in a
fresh child process so the figures are not mixed with the building:

- open: ``RunReader(path)`` (read + index);
- seek: ``Player.seek_index(len // 2)`` (state at the middle), after the player's own setup;
- peak memory (ru_maxrss) of a process that imported kimitui, opened the run and sought;
- first frame: launch ``kimitui replay FILE`` with KIMITUI_EXIT_AFTER_FIRST_FRAME=1 and read the
  ``first-frame <seconds>`` line it prints to stderr (the app's own clock from process start), plus
  the wall time from launch to exit.

Usage: .venv/bin/python benchmarks/replay_load.py [--hours 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HZ = 4
GPUS = 8
PROCS = 64
TARGETS = {"open_s": 1.0, "seek_s": 0.050, "peak_mb": 300.0, "first_frame_s": 0.8}
START = 1796112000.0


def run_lines(hours: float = 1.0, seed: int = 0) -> Iterator[tuple[float, str, str]]:
    """The run's events as (time, type, line without its newline), generated line by line."""
    rng = random.Random(seed)
    n_samples = int(hours * 3600 * HZ)
    gpu_static = [(g, f"GPU-{rng.getrandbits(64):016x}-{g:04d}") for g in range(GPUS)]
    # 64 processes: 8 TP workers, an API server, monitors and assorted jobs; a few variants rotate so
    # lines differ without paying for a fresh encode per process per sample.
    procs = []
    for i in range(PROCS):
        g = i % GPUS
        procs.append({"pid": 10000 + i, "start_time": 2520000 + i * 37, "user": "vllm" if i < 9 else "ops",
                      "gpu_mem_mib": {str(g): 92411.0} if i < 8 else ({str(g): 512.0} if i % 3 else {}),
                      "kind": "cuda" if i < 8 or i % 3 else "handle",
                      "unit": "vllm.service" if i < 9 else None, "container": None,
                      "cmdline": f"VllmWorker TP{i}" if i < 8 else f"python3 job_{i}.py --device {g} --batch 32",
                      "state": "S", "ppid": 1, "gpus": [g], "visible": True, "flags": []})
    variants = []
    for v in range(16):
        for p in procs:
            p["state"] = "R" if (p["pid"] + v) % 4 == 0 else "S"
        variants.append(json.dumps(procs, separators=(",", ":")))
    for k in range(n_samples):
        t = START + k / HZ
        if k % (HZ * 600) == 0:
            phase = f"phase{k // (HZ * 600)}"
            if k:
                yield t, "phase_end", (f'{{"t":{t:.3f},"type":"phase_end","phase":"phase{k // (HZ * 600) - 1}",'
                                       '"ok":true,"note":""}')
            yield t, "phase_start", f'{{"t":{t:.3f},"type":"phase_start","phase":"{phase}","title":"load"}}'
        gpus = ",".join(
            f'{{"index":{g},"uuid":"{uuid}","name":"NVIDIA RTX PRO 6000 Blackwell Server Edition",'
            f'"mem_used_mib":{92985.0 + rng.randrange(0, 64)},"mem_total_mib":97887.0,'
            f'"mem_reserved_mib":574.0,"util_pct":{float(rng.randrange(0, 100))},'
            f'"temp_c":{float(rng.randrange(40, 70))},"power_w":{rng.uniform(80, 550):.1f},'
            f'"sm_clock_mhz":2400.0,"error":null}}'
            for g, uuid in gpu_static)
        yield t, "sample", (f'{{"t":{t:.3f},"type":"sample","host":"load-host","seq":{k + 1},"gpus":[{gpus}],'
                            f'"procs":{variants[k % 16]},"agent_pid":7781,"source":"nvml"}}')
        if k % (HZ * 30) == 0:
            yield t, "log", f'{{"t":{t:.3f},"type":"log","level":"info","source":"load","message":"tick {k}"}}'
    t = START + n_samples / HZ
    yield t, "phase_end", (f'{{"t":{t:.3f},"type":"phase_end","phase":"phase{(n_samples - 1) // (HZ * 600)}",'
                           '"ok":true,"note":""}')


def run_header(generator: str) -> str:
    from kimitui.core.runfile import FORMAT_VERSION, RunHeader

    return RunHeader(FORMAT_VERSION, START, "load-host", {"generator": generator}).to_json()


def build_run(path: Path, hours: float = 1.0, seed: int = 0) -> int:
    """Write the run line by line; returns the number of events."""
    count = 0
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as fh:
        fh.write(run_header("benchmarks/replay_load.py") + "\n")
        for _, _, line in run_lines(hours, seed):
            fh.write(line + "\n")
            count += 1
    return count


def measure(path: Path) -> dict[str, float]:
    """Run in a child: open and seek, with peak memory."""
    import resource

    t0 = time.perf_counter()
    from kimitui.core.replay import Player
    from kimitui.core.runfile import RunReader

    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    reader = RunReader(path)
    t_open = time.perf_counter() - t0
    t0 = time.perf_counter()
    player = Player(reader)
    t_player = time.perf_counter() - t0
    t0 = time.perf_counter()
    player.seek_index(len(reader) // 2)
    t_seek = time.perf_counter() - t0
    t0 = time.perf_counter()
    player.seek_index(len(reader) - 1)
    t_seek_end = time.perf_counter() - t0
    state = player.session.state
    assert len(state.gpus) == GPUS and len(state.procs) == PROCS, "seek did not rebuild the state"
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"import_s": t_import, "open_s": t_open, "player_s": t_player, "seek_s": t_seek,
            "seek_end_s": t_seek_end, "peak_mb": peak_kb / 1024, "events": float(len(reader)),
            "warnings": float(len(reader.warnings))}


def first_frame(path: Path, timeout: float = 60.0) -> dict[str, float | str]:
    exe = ROOT / ".venv" / "bin" / "kimitui"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "kimitui"]
    env = {**os.environ, "KIMITUI_EXIT_AFTER_FIRST_FRAME": "1", "TERM": os.environ.get("TERM", "xterm-256color"),
           "COLUMNS": "120", "LINES": "40"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([*cmd, "replay", str(path)], env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": f"no first frame within {timeout:.0f} s (KIMITUI_EXIT_AFTER_FIRST_FRAME not honoured?)"}
    wall = time.perf_counter() - t0
    # The line follows the terminal-restoring escapes on the same stderr line: search, don't anchor.
    found = re.search(r"first-frame ([0-9.]+)", proc.stderr)
    if found:
        return {"first_frame_s": float(found.group(1)), "launch_to_exit_s": wall}
    tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
    return {"error": f"exit {proc.returncode} without a first-frame line: {tail[:200]}"}


def _child(path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--measure", str(path)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def _row(label: str, value: float, unit: str, target: float | None) -> str:
    shown = f"{value * 1000:.1f} ms" if unit == "ms" else f"{value:.3f} s" if unit == "s" else f"{value:.0f} MB"
    if target is None:
        return f"  {label:<26}{shown:>12}"
    tshown = f"{target * 1000:.0f} ms" if unit == "ms" else f"{target:.1f} s" if unit == "s" else f"{target:.0f} MB"
    verdict = "ok" if value <= target else "MISSED"
    return f"  {label:<26}{shown:>12}   target <= {tshown:<8} {verdict}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="replay load benchmark")
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--keep", type=Path, help="build the run in this folder and keep it")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--no-tui", action="store_true", help="skip the first-frame measurement")
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "load-1h.jsonl"
        path.unlink(missing_ok=True)
        t0 = time.perf_counter()
        n = build_run(path, args.hours)
        built = time.perf_counter() - t0
        size = path.stat().st_size
        print(f"run: {n:,} events ({args.hours:g} h, {GPUS} GPUs at {HZ} Hz, {PROCS} processes a sample), "
              f"{size / 1e6:.0f} MB, built in {built:.1f} s")
        m = _child(path)
        print(_row("import replay+runfile", m["import_s"], "ms", None))
        print(_row("open (RunReader)", m["open_s"], "s", TARGETS["open_s"]))
        print(_row("Player setup", m["player_s"], "ms", None))
        print(_row("seek to middle", m["seek_s"], "ms", TARGETS["seek_s"]))
        print(_row("seek to end", m["seek_end_s"], "ms", None))
        print(_row("peak memory (open+seek)", m["peak_mb"], "MB", TARGETS["peak_mb"]))
        if m["warnings"]:
            print(f"  reader warnings: {m['warnings']:.0f}")
        if not args.no_tui:
            ff = first_frame(path)
            if "error" in ff:
                print(f"  first frame: {ff['error']}")
            else:
                print(_row("first frame (app clock)", float(ff["first_frame_s"]), "s", TARGETS["first_frame_s"]))
                print(_row("launch to exit (wall)", float(ff["launch_to_exit_s"]), "s", None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
