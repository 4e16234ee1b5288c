"""Issue 39: ``kimitui fleet --demo 8`` and ``--demo 8 --prometheus auto`` on a real terminal (a pty): the fleet
view shows the 8 hosts x 8 GPUs (its status line counts them, up), then quits on q, leaving nothing running.

The output is read as text, so the apps draw on Textual's own path (``KIMITUI_PLAIN_DRAW=1``): kimitui's path
sends only the cells that changed, moving the cursor over the rest, which no text search can read
(tests/test_screen_diff.py checks that path)."""

from __future__ import annotations

import os
import re
import sys

import pytest

from kimitui.hostside.procfs import start_time_of
from tests.support import ROOT
from tests.terminal import on_a_terminal


def plain(text: str) -> str:
    """The text without its escape sequences (colours, cursor moves)."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


@pytest.mark.parametrize("prometheus", [False, True])
def test_the_fleet_demo_on_a_terminal(tmp_path: object, prometheus: bool) -> None:
    argv = [sys.executable, "-m", "kimitui", "fleet", "--demo", "8"] + (["--prometheus", "auto"] if prometheus else [])

    def ready(seen: bytes) -> bool:
        text = plain(seen.decode(errors="replace"))
        return "8: 8 up" in text and "GPUs 64" in text and all(f"demo-0{i}" in text for i in range(1, 9))

    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path), "KIMITUI_PLAIN_DRAW": "1"}
    rc, out = on_a_terminal(argv, cwd=ROOT, env=env, ready=ready, keys=b"q", size=(140, 40))
    assert rc == 0, out[-2000:]
    out = plain(out)
    assert ("through Prometheus" in out) == prometheus
    assert "held with no service" in out and "Traceback" not in out
    pids = [int(word) for word in out.split("(pid ")[1:2][0].split(")")[:1]] if prometheus else []
    assert all(start_time_of(pid) is None for pid in pids), pids  # Prometheus ended with the command


def test_enter_opens_a_hosts_dashboard_and_escape_comes_back(tmp_path: object) -> None:
    """On the fleet of the demo, Enter on the top host runs its dashboard in the same terminal (the fleet
    suspended); Escape there ends it and the fleet is back; q quits."""
    import fcntl
    import pty
    import select
    import struct
    import subprocess
    import termios

    from tests.waiting import wait_until

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "kimitui", "fleet", "--demo", "4"], cwd=ROOT, stdin=slave,
                            stdout=slave, stderr=slave, start_new_session=True,
                            env={**os.environ, "TERM": "xterm-256color", "XDG_DATA_HOME": str(tmp_path),
                                 "KIMITUI_PLAIN_DRAW": "1"})
    os.close(slave)
    out = bytearray()

    def seen_since(mark: int, text: str) -> bool:
        if select.select([master], [], [], 0.05)[0]:
            try:
                out.extend(os.read(master, 65536))
            except OSError:
                pass
        return text in plain(out[mark:].decode(errors="replace"))

    try:
        wait_until(lambda: seen_since(0, "Space/→/← GPUs") and seen_since(0, "demo-04"), "the fleet", interval=0)
        mark = len(out)
        os.write(master, b"\r")
        wait_until(lambda: seen_since(mark, "connected (agent pid"), "the host's dashboard", interval=0)
        mark = len(out)
        os.write(master, b"\x1b")
        wait_until(lambda: seen_since(mark, "Space/→/← GPUs"), "the fleet again", interval=0)
        os.write(master, b"q")
        wait_until(lambda: (seen_since(len(out), "\0") or proc.poll() is not None), "the fleet's exit", interval=0)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
