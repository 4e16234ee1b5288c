"""A campaign kimitui leaves before its end says how to go on with it: the dashboard quit with q in Phase 1
(a real terminal), a headless campaign stopped by a second Ctrl-C. Both name ``--resume RUN``."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.support import CLI_WAIT_S, ROOT, cli_env, write_campaign
from tests.terminal import on_a_terminal
from tests.waiting import wait_until

SLOW_PHASE_1 = {"[campaign]\n": '[campaign]\nphases = ["macro", "cleanup"]\n',
                "concurrency = [1, 4]": "concurrency = [1, 2, 4, 8, 16]", "max_tokens = 12": "max_tokens = 400"}
"""Phase 1 long enough to be in when the key or the signal comes."""


def the_run(tmp_path: Path) -> Path | None:
    runs = list((tmp_path / "data" / "kimitui" / "runs").glob("*.jsonl"))
    return runs[0] if runs and '"type":"macro_point"' in runs[0].read_text() else None


def test_quitting_the_dashboard_mid_campaign_names_the_resume(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, **SLOW_PHASE_1)
    rc, out = on_a_terminal([sys.executable, "-m", "kimitui", "campaign", str(path)], cwd=tmp_path,
                            env=cli_env(tmp_path), ready=lambda _out: the_run(tmp_path) is not None, keys=b"q")
    run = the_run(tmp_path)
    assert run is not None
    text = out.replace("\r\n", "\n")
    assert rc == 1, text[-2000:]
    assert "the campaign stopped before its end (in Phase 1 macro): go on with it: " \
           f"kimitui campaign {path} --resume {run}" in text, text[-2000:]
    assert "Traceback" not in text


def test_a_second_interrupt_stops_a_headless_campaign_and_names_the_resume(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, **SLOW_PHASE_1, **{'abort_restart = "yes"': 'abort_restart = "no"'})
    proc = subprocess.Popen([sys.executable, "-m", "kimitui", "campaign", str(path), "--headless"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=cli_env(tmp_path),
                            cwd=ROOT)
    try:
        run = wait_until(lambda: the_run(tmp_path), "a Phase 1 point in the run", CLI_WAIT_S)
        proc.send_signal(signal.SIGINT)  # aborts; then at once (a second SIGINT could merge with the first)
        proc.send_signal(signal.SIGTERM)  # the second interrupt: stop now
        assert proc.wait(timeout=CLI_WAIT_S) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read() if proc.stderr else ""
    assert f"go on with it: kimitui campaign {path} --resume {run}" in err, err
    assert "Traceback" not in err
