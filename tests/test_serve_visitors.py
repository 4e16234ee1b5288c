"""``kimitui serve`` ends every visitor's dashboard with the server, however the server ends: a visitor stuck
(deaf to textual-serve's quit, ignoring SIGTERM, with a child of its own) is gone once a script stops the
server with SIGINT or SIGTERM sent to the server alone. Real processes: the server, a real websocket visitor,
the visitor's python made stuck by a sitecustomize on its PYTHONPATH."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from kimitui.resources import bundled_sample_run
from tests.sshd import alive, free_port
from tests.support import ROOT
from tests.waiting import until, wait_until

STUCK = """
import os, signal, subprocess, sys

if sys.orig_argv[3:4] == ["replay"] and os.environ.get("KIMITUI_TEST_STUCK_DIR"):
    # a visitor's dashboard that will not end: SIGTERM and SIGINT ignored (and so by its child: a disposition
    # of SIG_IGN goes through exec), the quit on its input never read
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "3600"])
    sys.stdout.write("__GANGLION__\\n")
    sys.stdout.flush()
    open(os.path.join(os.environ["KIMITUI_TEST_STUCK_DIR"], f"{os.getpid()} {child.pid}"), "w").close()
    while True:
        signal.pause()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_stuck_visitor_ends_with_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    hook, stuck = tmp_path / "hook", tmp_path / "stuck"
    hook.mkdir()
    stuck.mkdir()
    (hook / "sitecustomize.py").write_text(STUCK)
    port = free_port()
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), PYTHONPATH=f"{hook}{os.pathsep}{ROOT}",
               KIMITUI_TEST_STUCK_DIR=str(stuck))
    proc = subprocess.Popen([sys.executable, "-m", "kimitui", "serve", "--port", str(port), "--replay",
                             str(bundled_sample_run())], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
    pids: list[int] = []
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # said as it starts (aiohttp's on_startup: just before it listens)
        assert first.startswith("kimitui serve: http://127.0.0.1:"), first
        async with aiohttp.ClientSession() as http:

            async def connect() -> aiohttp.ClientWebSocketResponse | None:
                try:
                    return await http.ws_connect(f"ws://127.0.0.1:{port}/ws?width=80&height=24")
                except aiohttp.ClientConnectorError:
                    return None

            ws = await until(connect, "the server to listen")
            marks = wait_until(lambda: list(stuck.iterdir()), "the visitor's dashboard to start")
            pids = [int(p) for p in marks[0].name.split()]
            assert all(alive(p) for p in pids)
            proc.send_signal(sig)  # to the server alone, as a script does (not a terminal's whole group)
            assert proc.wait(timeout=60) == 0, proc.stdout.read()
            await ws.close()
        wait_until(lambda: not any(alive(p) for p in pids), "the stuck visitor and its child to end")
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for p in pids:  # what this test started, by its own pids
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
