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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tests.waiting import DEADLINE_S, wait_until


def on_a_terminal(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], ready: Callable[[bytes], bool],
                  keys: bytes, size: tuple[int, int] = (120, 40), timeout: float = DEADLINE_S) -> tuple[int, str]:
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

    def exited() -> bool:
        """Read what came (a short select is the poll's interval); type KEYS once ready; True at its exit."""
        nonlocal out, sent
        if select.select([master], [], [], 0.05)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            if not chunk and proc.poll() is not None:
                return True
            out += chunk
        elif proc.poll() is not None:
            return True
        if not sent and ready(out):
            os.write(master, keys)
            sent = True
        return False

    try:
        try:
            wait_until(exited, f"{argv[0]} to exit", timeout, interval=0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{out.decode(errors='replace')[-2000:]}") from None
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return proc.returncode, out.decode(errors="replace")
