"""The dashboard's exit status, on a real terminal: quitting is 0; an unhandled exception in a handler ends
it non-zero, with the cause said in one line."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.tui_runs import write_test_run

CRASHING_REPLAY = """
import sys
from kimitui.tui.app import KimituiApp

def to_end(self):
    raise RuntimeError("boom in a key handler")

if sys.argv[2] == "crash":
    KimituiApp.action_to_end = to_end
from kimitui.cli import main
sys.exit(main(["replay", sys.argv[1]]))
"""


def replay_on_a_terminal(run: Path, mode: str, key: bytes, tmp_path: Path) -> tuple[int, str]:
    """``kimitui replay RUN`` on a 120x40 pty; once the header is drawn, type ``key``; (status, output)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", XDG_DATA_HOME=str(tmp_path / "data"))
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_REPLAY, str(run), mode], cwd=ROOT, stdin=slave,
                            stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out = b""
    sent = False
    deadline = time.monotonic() + 60
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0, out.decode(errors="replace")[-2000:]
            ready, _, _ = select.select([master], [], [], min(left, 0.5))
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk and proc.poll() is not None:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
            if not sent and b" kimitui " in out:  # the header is drawn: the app takes keys
                os.write(master, key)
                sent = True
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return proc.returncode, out.decode(errors="replace")


def test_a_crash_in_a_handler_exits_non_zero_with_its_cause(tmp_path: Path) -> None:
    run = write_test_run(tmp_path / "run.jsonl")
    rc, out = replay_on_a_terminal(run, "crash", b"e", tmp_path)
    assert rc == 1, out[-2000:]
    assert "kimitui: the dashboard stopped on an error: RuntimeError: boom in a key handler" in out


def test_quitting_exits_zero(tmp_path: Path) -> None:
    run = write_test_run(tmp_path / "run.jsonl")
    rc, out = replay_on_a_terminal(run, "quit", b"q", tmp_path)
    assert rc == 0, out[-2000:]
    assert "stopped on an error" not in out
