"""How a process is shown: its command cut to what tells it apart (the CLI's previews and the dashboard's
tables share it), and its start as a wall-clock time read from the host (locally and over real SSH)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kimitui.core.describe import Started, sample_started
from kimitui.core.describe import preview_text as preview_table
from kimitui.core.events import HostSample, ProcRef, StepPreview
from kimitui.core.procdisplay import clock_label, command_gist, unit_label
from kimitui.core.runfile import RunReader
from kimitui.core.state import SessionState, fold
from kimitui.hosts.local import LocalHost
from kimitui.hosts.telemetry import TelemetrySource
from kimitui.hostside import procfs
from kimitui.resources import find_run
from kimitui.tui import fmt
from tests.agent_helpers import make_sim_dir
from tests.sshd import SshServer, start_sshd


def test_command_gist_keeps_the_module_script_and_arguments() -> None:
    venv = "/work/wt/h1/.venv/bin/python"
    assert command_gist(f"{venv} -S -m kimitui.hosts.sim.worker tp-worker --title VllmWorker-TP0 --gpu 0") == \
        "kimitui.hosts.sim.worker tp-worker --title VllmWorker-TP0 --gpu 0"
    assert command_gist("/usr/bin/python3.11 -u -X dev -W ignore /opt/app/serve.py --port 8000") == \
        "serve.py --port 8000"
    assert command_gist("/usr/bin/python3 -c import time; time.sleep(5)") == "python3 -c import time; time.sleep(5)"
    assert command_gist("/usr/bin/nv-hostengine -n --service-account nvidia-dcgm") == \
        "nv-hostengine -n --service-account nvidia-dcgm"
    assert command_gist("/bin/bash /opt/run.sh --gpu 1") == "run.sh --gpu 1"
    assert command_gist("VLLM::Worker_TP0") == "VLLM::Worker_TP0"
    assert command_gist("") == "?"
    assert fmt.command_gist is command_gist  # the dashboard uses the same words
    assert unit_label("docker:5d6c468c0123") == unit_label(None, "5d6c468c0123") == "docker:5d6c468c"
    assert unit_label(None) == "-"


def test_the_real_h200_commands_read_by_their_script_and_role() -> None:
    reader = RunReader(find_run(Path("real-cleanup-2x-h200")))
    preview = next(e for e in reader.events() if isinstance(e, StepPreview))
    shown = {command_gist(r.cmdline) for r in preview.targets}
    assert "device_cleanup_demo.py --role service 2 40.0 /tmp/kimitui-cleanup-demo-q3hg478m" in shown
    assert all(s.startswith("device_cleanup_demo.py --role ") for s in shown)
    table = preview_table(preview)
    assert "/opt/torch/.venv" not in table and "device_cleanup_demo.py --role worker 0" in table


def test_clock_label() -> None:
    now = time.mktime((2026, 12, 1, 14, 2, 7, 0, 0, -1))
    assert clock_label(now - 3600, now) == "13:02:07"
    assert clock_label(now - 3 * 86400, now) == "Nov 28 14:02"
    assert clock_label(None, now) == "-"


@pytest.mark.parametrize("t", [1e20, -1e20, 1e308, float("nan")])
def test_a_time_no_calendar_holds_reads_na_in_every_clock(t: float) -> None:
    """A hand-edited run's 1e20 (as a process start or an event's time) is shown, not raised."""
    assert clock_label(t, 0.0) == "n/a" and clock_label(t, 2e308) == "n/a"
    assert fmt.clock(t) == fmt.time_of_day(t) == fmt.started(t, 0.0) == fmt.started(t, 2e308) == "n/a"


def seconds_of_day(label: str) -> int:
    h, m, s = map(int, label.split(":"))
    return h * 3600 + m * 60 + s


async def started_from_a_sample(host: Any, tmp_path: Path) -> tuple[Started, int, float]:
    """A real process started now, and the start clock of one telemetry sample of ``host`` (the agent's
    boot time and tick rate): (clock, the process's start ticks, when it was started)."""
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        st = procfs.read_stat(child.pid)
        assert st is not None
        src = TelemetrySource(host, interval=0.1, sim_dir=str(make_sim_dir(tmp_path / "sim")))
        sample = None
        async with contextlib.aclosing(src.events()) as events:
            async for ev in events:
                if isinstance(ev, HostSample):
                    sample = ev
                    break
        assert sample is not None and sample.boot_time is not None and sample.clock_ticks
        state = SessionState()
        fold(state, sample)
        return sample_started(state), st.start_time, before
    finally:
        child.kill()
        child.wait()


def check_label(started: Started, ticks: int, before: float) -> None:
    label = started(ticks)
    expected = time.localtime(before)
    want = expected.tm_hour * 3600 + expected.tm_min * 60 + expected.tm_sec
    assert abs(seconds_of_day(label) - want) % 86400 <= 2, (label, time.strftime("%H:%M:%S", expected))
    ref = ProcRef(1234, ticks, "me", [0], 1.0, None, "/usr/bin/python3 -c x", "why")
    assert f"  {label}  " in preview_table(StepPreview(0.0, step="device", action="SIGTERM", targets=[ref]),
                                           started)
    assert started(None) == "-"


async def test_started_on_this_host(tmp_path: Path) -> None:
    async with LocalHost("box") as host:
        check_label(*await started_from_a_sample(host, tmp_path))


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    server = start_sshd(tmp_path)
    try:
        yield server
    finally:
        server.stop()


async def test_started_over_ssh(sshd: SshServer, tmp_path: Path) -> None:
    from kimitui.hosts.ssh import SshHost

    host = SshHost(sshd.target, known_hosts=str(sshd.known_hosts), client_keys=[str(sshd.client_key)])
    try:  # the boot time and tick rate come from the agent on the far side of the connection
        check_label(*await started_from_a_sample(host, tmp_path))
    finally:
        await host.close()
