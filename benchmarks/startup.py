"""Start-up figures: python benchmarks/startup.py [--runs N]

Each command is started on a 120x40 pty with KIMITUI_EXIT_AFTER_FIRST_FRAME set; the app prints the seconds
from its process's start (the interpreter's own start counted) to the frame that shows the figure, then exits:
  demo    ``kimitui demo``: the first frame showing a sample of the simulated host (sample);
  replay  ``kimitui replay`` (the bundled run): the first frame (1), which already shows the run's first instant;
  local   ``kimitui``: the first frame showing this machine's GPUs (sample); only where there is an NVIDIA GPU.
For the live commands also the time the host's GPUs were first on the screen: the first look (written plainly
while Textual still imports, kimitui/tui/first_look.py) or the first frame, whichever came first.
Bytecode is written and used (as an installed package has it): the first run of each command is a warm-up.
Targets (issue 20): demo <= 1.5 s, replay <= 0.8 s, local <= 0.5 s (nvitop's 0.40-0.49 s on an H200 host).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS: dict[str, tuple[list[str], str, float]] = {
    "demo": (["demo"], "sample", 1.5),
    "replay": (["replay"], "1", 0.8),
    "local": ([], "sample", 0.5),
}


def first_frame(args: list[str], mode: str, timeout: float = 60.0) -> tuple[float, float] | str:
    """Seconds to the frame and to the GPUs on the screen (the first look, or the frame), or why there are
    none."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "", "KIMITUI_EXIT_AFTER_FIRST_FRAME": mode,
           "KIMITUI_STARTUP_TRACE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.Popen([sys.executable, "-m", "kimitui", *args], stdin=slave, stdout=slave, stderr=slave,
                            env=env, start_new_session=True, cwd=ROOT)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            if select.select([master], [], [], min(left, 0.5))[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    found = re.search(rb"first-frame ([0-9.]+)", out)
    look = re.search(rb"first-look ([0-9.]+)", out)
    trace = re.search(rb"startup-trace ([^\r\n]*)", out)
    if trace:
        TRACES.append(trace.group(1).decode())
    if found:
        frame = float(found.group(1))
        return frame, min(frame, float(look.group(1))) if look else frame
    tail = out.decode(errors="replace").strip().splitlines()[-1:] or ["(nothing written)"]
    return f"no first-frame line (exit {proc.returncode}): {tail[0][:160]}"


def has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return listed.returncode == 0 and "GPU" in listed.stdout


TRACES: list[str] = []
"""Each run's steps (kimitui/live/process_clock.py: mark), seconds from the process's start."""


def _spread(times: list[float]) -> str:
    return f"{min(times):.3f}-{max(times):.3f} s (median {sorted(times)[len(times) // 2]:.3f}, {len(times)} runs)"


def _verdict(times: list[float], target: float) -> str:
    return "ok" if max(times) <= target else "MISSED" if min(times) > target else "mixed"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="measured runs per command (after one warm-up)")
    ap.add_argument("--only", action="append", choices=sorted(COMMANDS))
    args = ap.parse_args(argv)
    for name in args.only or list(COMMANDS):
        argv_, mode, target = COMMANDS[name]
        if name == "local" and not has_gpu():
            print(f"  {name:<7} not measured: no NVIDIA GPU on this machine (target <= {target} s)")
            continue
        first_frame(argv_, mode)  # warm-up: bytecode written
        frames: list[float] = []
        shown: list[float] = []
        for _ in range(args.runs):
            got = first_frame(argv_, mode)
            if isinstance(got, str):
                print(f"  {name:<7} {got}")
                break
            frames.append(got[0])
            shown.append(got[1])
        if frames:
            print(f"  {name:<7} first frame {_spread(frames)}" + ("" if name == "replay" else
                  f"; GPUs on the screen {_spread(shown)}") + f"   target <= {target} s {_verdict(shown, target)}")
            if TRACES:
                print(f"          the last run's steps: {TRACES[-1]}")
            TRACES.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
