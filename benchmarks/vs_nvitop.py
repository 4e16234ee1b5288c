"""kimitui's local dashboard beside nvitop on the same GPU host, measured the same way from outside:

  start  seconds from the spawn to the first screen that shows a GPU's memory figure (nvitop: ``4960MiB``,
         kimitui: ``4.8/139.8 GiB``), read off a terminal emulator (pyte) fed what the command wrote: curses
         sends only the cells that change, between cursor moves, so the bytes alone do not say what is shown
  bytes  bytes written to the terminal over the next ``--seconds`` (30 by default), per 30 s, counted from
         ``SETTLE`` seconds after the start (both tools' first frames and layout, not what a watch costs)
  CPU    the CPU time of the command's whole process tree over that time, in % of one core

Both at 2 Hz (nvitop ``--interval 0.5``, kimitui's default 0.5 s), each on a 120x40 pty, ``--runs`` times.
Needs an NVIDIA GPU, nvitop importable (``python3 -m nvitop``) and pyte (both carried as wheels to the device).
Issue 20's targets: kimitui's start no later than nvitop's (<= 0.5 s), its bytes <= nvitop's, its CPU <= 1 % of a core.
Run: ``python3 benchmarks/vs_nvitop.py [--runs 3] [--seconds 30]``.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTLE = 5.0
TICKS = os.sysconf("SC_CLK_TCK")
MEMORY = {"nvitop": re.compile(r"\d+(?:\.\d+)? ?[MG]iB"), "kimitui": re.compile(r"\d+(?:\.\d+)?/\d+(?:\.\d+)? ?[GM]iB")}
"""A GPU's memory figure on the screen."""
COMMANDS = {"nvitop": [sys.executable, "-m", "nvitop", "--interval", "0.5"],
            "kimitui": [sys.executable, "-m", "kimitui"]}


def tree_cpu_s(root: int) -> float:
    """utime + stime of ROOT and every descendant alive now, in seconds."""
    children: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2:].split()
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        stats[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def _shown(screen: object) -> str:
    lines = [line.rstrip() for line in screen.display if line.strip()]  # type: ignore[attr-defined]
    return " | ".join(lines)[-300:] or "(a blank screen)"


def measure(name: str, seconds: float) -> tuple[float, int, float] | str:
    """(start s, bytes over SECONDS, CPU % of a core) of one run, or why there is none."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "",  # 256 colours for both, as TERM says
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    began = time.monotonic()
    proc = subprocess.Popen(COMMANDS[name], stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True, cwd=ROOT)
    os.close(slave)
    import pyte

    screen = pyte.Screen(120, 40)
    stream = pyte.ByteStream(screen)
    start_s: float | None = None
    counted = 0
    cpu0: float | None = None
    t0 = 0.0
    try:
        deadline = began + 60
        while time.monotonic() < deadline:
            if start_s is not None and time.monotonic() >= t0 + seconds:
                break
            if start_s is not None and cpu0 is None and time.monotonic() >= t0:
                cpu0, t0 = tree_cpu_s(proc.pid), time.monotonic()  # the measured window starts
            if not select.select([master], [], [], 0.1)[0]:
                if proc.poll() is not None:
                    return f"exited with {proc.returncode}: {_shown(screen)}"
                continue
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:
                break
            if start_s is None:
                stream.feed(chunk)
                if MEMORY[name].search("\n".join(screen.display)):
                    start_s = time.monotonic() - began
                    t0 = time.monotonic() + SETTLE
                    deadline = t0 + seconds + 5
            elif cpu0 is not None:
                counted += len(chunk)
        if start_s is None:
            return f"no memory figure in 60 s: {_shown(screen)}"
        if cpu0 is None:
            return f"exited {SETTLE:g} s after its start: {_shown(screen)}"
        elapsed = time.monotonic() - t0
        cpu = (tree_cpu_s(proc.pid) - cpu0) / elapsed * 100
        return start_s, int(counted * 30 / elapsed), cpu
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        os.close(master)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args(argv)
    results: dict[str, list[tuple[float, int, float]]] = {}
    for name in COMMANDS:
        measure(name, 2.0)  # warm-up: bytecode written, the driver's files in the page cache
        for _ in range(args.runs):
            got = measure(name, args.seconds)
            if isinstance(got, str):
                print(f"  {name:8} {got}")
                break
            results.setdefault(name, []).append(got)
            print(f"  {name:8} start {got[0]:.3f} s, {got[1] / 1000:.1f} KB per 30 s, CPU {got[2]:.2f} % of a core",
                  flush=True)
    print()
    for name, runs in results.items():
        starts, sizes, cpus = zip(*runs, strict=True)
        print(f"{name:8} start {min(starts):.3f}-{max(starts):.3f} s   {min(sizes) / 1000:.1f}-{max(sizes) / 1000:.1f} "
              f"KB per 30 s   CPU {min(cpus):.2f}-{max(cpus):.2f} %   ({len(runs)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
