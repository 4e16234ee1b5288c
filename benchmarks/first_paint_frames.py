"""Where the first paint's bytes go: python benchmarks/first_paint_frames.py [--seconds 5] [-- COMMAND...]

Runs COMMAND (default ``python -m kimitui demo``) on a 120x40 pty and prints each write to the terminal: when
(seconds from the spawn), how many bytes, and which rows of the screen it changed, read off a terminal
emulator (pyte) fed the writes; then the screen as it stands at the end. benchmarks/telemetry.py
--only first-paint gives the totals; this says what each write was.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--dump", help="write the writes here (JSON lines: seconds, the bytes as latin-1)")
    ap.add_argument("command", nargs="*")
    args = ap.parse_args()
    import pyte
    from telemetry import quit_on_pty  # this folder's (run as a script, it is on sys.path)

    command = args.command or [sys.executable, "-m", "kimitui", "demo"]
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "", "XDG_DATA_HOME": tempfile.mkdtemp()}
    for var in ("PYTHONDONTWRITEBYTECODE", "COLUMNS", "LINES"):  # the pty's size, not the caller's
        env.pop(var, None)
    t0 = time.monotonic()
    proc = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT,
                            start_new_session=True)
    os.close(slave)
    screen = pyte.Screen(120, 40)
    stream = pyte.ByteStream(screen)
    before = list(screen.display)
    total = 0
    dump = open(args.dump, "w") if args.dump else None  # noqa: SIM115 (closed below)
    try:
        while (left := t0 + args.seconds - time.monotonic()) > 0:
            if not select.select([master], [], [], min(left, 0.1))[0]:
                continue
            chunk = os.read(master, 65536)
            total += len(chunk)
            if dump is not None:
                dump.write(json.dumps([time.monotonic() - t0, chunk.decode("latin-1")]) + "\n")
            stream.feed(chunk)
            now = list(screen.display)
            rows = [i for i, (a, b) in enumerate(zip(before, now, strict=True)) if a != b]
            print(f"{time.monotonic() - t0:6.2f} s {len(chunk):6d} B  rows {rows if len(rows) < 40 else 'all'}")
            before = now
    finally:
        quit_on_pty(proc, master, 20.0)
        if dump is not None:
            dump.close()
    print(f"{total / 1000:.1f} KB in {args.seconds:g} s")
    print("\n".join(screen.display))
    return 0


if __name__ == "__main__":
    sys.exit(main())
