"""Seconds since this process started, for the first-frame measurement (no psutil).

On Linux the start is read from /proc/self/stat (field 22, clock ticks after boot) against
/proc/uptime, so the time spent before Python imported anything counts too; elsewhere the clock
starts when this module is imported.
"""

from __future__ import annotations

import os
import time


def _start_perf() -> float:
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            stat = fh.read()
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        fields = stat[stat.rindex(")") + 2 :].split()
        start_ticks = int(fields[19])  # field 22 overall; fields after "(comm) " start at field 3
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        return now - max(age, 0.0)
    except (OSError, ValueError, IndexError):
        return now


PROCESS_START = _start_perf()


def since_process_start() -> float:
    return time.perf_counter() - PROCESS_START
