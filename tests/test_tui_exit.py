"""The dashboard's exit status, on a real terminal: quitting is 0; an unhandled exception in a handler ends
it non-zero, with the cause said in one line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support import ROOT
from tests.terminal import on_a_terminal
from tests.tui_runs import write_test_run

CRASHING_REPLAY = """
import sys
from kimitui.tui.app import KimituiApp

def to_end(self):
    raise RuntimeError("boom in a key handler")

if sys.argv[2] == "crash":
    KimituiApp.action_to_end = to_end
from kimitui.commands.main import main
sys.exit(main(["replay", sys.argv[1]]))
"""


def replay_on_a_terminal(run: Path, mode: str, key: bytes, tmp_path: Path) -> tuple[int, str]:
    """``kimitui replay RUN`` on a 120x40 pty; once the header is drawn, type ``key``; (status, output)."""
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    # the header drawn: the app takes keys
    return on_a_terminal([sys.executable, "-c", CRASHING_REPLAY, str(run), mode], cwd=ROOT, env=env,
                         ready=lambda out: b" kimitui " in out, keys=key)


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
