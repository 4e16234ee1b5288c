"""Issue 39: ``kimitui fleet --demo 8`` and ``--demo 8 --prometheus auto`` on a real terminal (a pty): the fleet
view shows the 8 hosts x 8 GPUs (its status line counts them, up), then quits on q, leaving nothing running."""

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

    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    rc, out = on_a_terminal(argv, cwd=ROOT, env=env, ready=ready, keys=b"q", size=(140, 40))
    assert rc == 0, out[-2000:]
    out = plain(out)
    assert ("through Prometheus" in out) == prometheus
    assert "held with no service" in out and "Traceback" not in out
    pids = [int(word) for word in out.split("(pid ")[1:2][0].split(")")[:1]] if prometheus else []
    assert all(start_time_of(pid) is None for pid in pids), pids  # Prometheus ended with the command
