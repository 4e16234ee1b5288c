"""Seconds since this process started, for the first-frame measurement (no psutil).

On Linux the start is this process's start time (clock ticks after boot, read by the agent's helper) against
/proc/uptime, so the time spent before Python imported anything counts too; elsewhere the clock
starts when this module is imported.
"""

from __future__ import annotations

import os
import time


def _start_perf() -> float:
    from kimitui.hostside.procfs import start_time_of  # the one /proc/PID/stat parser

    now = time.perf_counter()
    try:
        start_ticks = start_time_of(os.getpid())
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        if start_ticks is None:
            return now
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        return now - max(age, 0.0)
    except (OSError, ValueError, IndexError):
        return now


PROCESS_START = _start_perf()


def since_process_start() -> float:
    return time.perf_counter() - PROCESS_START


TRACE_ENV = "KIMITUI_STARTUP_TRACE"
_marks: list[tuple[str, float]] = []


def mark(what: str) -> None:
    """Note when a step of the start was reached (kept only with $KIMITUI_STARTUP_TRACE set)."""
    if os.environ.get(TRACE_ENV):
        _marks.append((what, since_process_start()))


def print_marks() -> None:
    """The start's steps, one line, on stderr (benchmarks/startup.py prints them)."""
    if _marks:
        import sys

        print("startup-trace " + " ".join(f"{what}={at:.3f}" for what, at in _marks), file=sys.stderr, flush=True)
