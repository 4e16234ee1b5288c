"""The first look: the host's GPUs written plainly to the terminal while the dashboard still imports, from
the fold of the events read so far; on the alternate screen (the dashboard paints over it), withdrawn when
the dashboard does not start, never written where there is no terminal."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from kimitui.core.events import ConnectionState, GpuSample, HostSample, ProcSample
from kimitui.core.state import SessionState, fold
from kimitui.tui.first_look import ALT_SCREEN_OFF, ALT_SCREEN_ON, FirstLook, first_look_lines
from tests.waiting import Output

ROOT = Path(__file__).resolve().parent.parent


def sample() -> HostSample:
    gpus = [GpuSample(i, f"GPU-{i}", "NVIDIA H200", mem_used_mib=4915.0 * i, mem_total_mib=143771.0,
                      mem_reserved_mib=616.0, util_pct=float(10 * i), temp_c=32.0 + i, power_w=60.0 + i,
                      sm_clock_mhz=1980.0) for i in range(2)]
    procs = [ProcSample(pid=4242, start_time=100, user="vllm", gpu_mem_mib={1: 4300.0}, kind="cuda",
                        unit="vllm.service", cmdline="python3 -m vllm", state="S", gpus=[1])]
    return HostSample(t=1.0, host="h200", seq=1, gpus=gpus, procs=procs)


def read_until(fd: int, end: str) -> str:
    """What the terminal was sent, up to and including END (tests/waiting.py's Output)."""
    out = Output(fd)
    out.until(end.encode())
    return out.text()


def test_the_lines_say_each_gpus_memory_use_utilisation_temperature_and_power() -> None:
    state = SessionState()
    fold(state, sample())
    lines = first_look_lines(state, "local (h200)", 120)
    assert "local (h200)" in lines[0]
    gpu1 = next(line for line in lines if line.lstrip().startswith("1 "))
    assert gpu1.split() == ["1", "H200", "4.8/140.4", "GiB", "10%", "33C", "61W"]
    assert lines[-1].strip() == "1 processes on the GPUs"
    assert all(len(line) <= 40 for line in first_look_lines(state, "x" * 80, 40))


def test_on_a_terminal_it_draws_once_at_the_first_sample_and_withdraws_if_the_dashboard_never_starts() -> None:
    master, slave = pty.openpty()
    try:
        out = os.fdopen(slave, "w", closefd=False)
        look = FirstLook("local", out)
        assert look.enabled
        look.offer(ConnectionState(0.5, host="h200", state="connecting"))
        assert look.drawn_at is None  # nothing to show yet
        look.offer(sample())
        assert look.drawn_at is not None and look.drawn_at > 0
        look.offer(sample())  # drawn once
        look.withdraw()
        written = read_until(master, ALT_SCREEN_OFF)
        assert written.count(ALT_SCREEN_ON) == 1 and written.endswith(ALT_SCREEN_OFF)
        assert "4.8/140.4 GiB" in written
    finally:
        os.close(master)
        os.close(slave)


def test_handed_over_it_draws_nothing_more_and_without_a_terminal_nothing_at_all() -> None:
    master, slave = pty.openpty()
    try:
        look = FirstLook("local", os.fdopen(slave, "w", closefd=False))
        look.hand_over()
        look.offer(sample())
        assert look.drawn_at is None
    finally:
        os.close(master)
        os.close(slave)
    piped = io.StringIO()
    look = FirstLook("local", piped)
    look.offer(sample())
    look.withdraw()
    assert not look.enabled and piped.getvalue() == ""


def test_it_imports_no_textual() -> None:
    code = "import sys, kimitui.tui.first_look; print(sorted(m for m in sys.modules if m.startswith('textual')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]"
