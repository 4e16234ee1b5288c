"""A command on a real terminal (a pty): wait until its output says it is ready, type keys, collect what it
wrote and its exit status. No fixed sleeps: the output is read as it comes, with one deadline."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def on_a_terminal(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], ready: Callable[[bytes], bool],
                  keys: bytes, size: tuple[int, int] = (120, 40), timeout: float = 60.0) -> tuple[int, str]:
    """Run ``argv`` on a ``size`` (cols, rows) pty; once ``ready(output so far)``, type ``keys``; wait for its
    exit. (status, everything it wrote). Fails with the output's tail when the deadline passes."""
    cols, rows = size
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(list(argv), cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                            env={"TERM": "xterm-256color", **env}, start_new_session=True)
    os.close(slave)
    out = b""
    sent = False
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"{argv[0]}: no exit within {timeout:.0f} s:\n" + out.decode(errors="replace")[-2000:]
            readable, _, _ = select.select([master], [], [], min(left, 0.5))
            if readable:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk and proc.poll() is not None:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
            if not sent and ready(out):
                os.write(master, keys)
                sent = True
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return proc.returncode, out.decode(errors="replace")
