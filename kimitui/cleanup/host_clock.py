"""The host's clock for process starts: its boot time and clock tick rate, read from the host, so a
preview can show when each process started as a wall-clock time."""

from __future__ import annotations

import os
from pathlib import Path

from kimitui.cleanup.hostprocs import is_local
from kimitui.core.describe import Started, unknown_start
from kimitui.core.procdisplay import clock_label, start_wall_time
from kimitui.hosts.base import Host, HostError


async def host_started(host: Host) -> Started:
    """The host's boot time and clock tick rate as a ``Started``: ``14:02:07`` (``Nov 30 14:02`` when more
    than a day ago); ``-`` for every process when the host does not say when it booted."""
    try:
        if is_local(host):
            stat = Path("/proc/stat").read_bytes()
            hz = os.sysconf("SC_CLK_TCK")
        else:
            stat = await host.read_file("/proc/stat")
            res = await host.run(["getconf", "CLK_TCK"], timeout=10.0)
            hz = int(res.stdout.strip()) if res.ok and res.stdout.strip().isdigit() else 100  # USER_HZ
        boot = next(float(line.split()[1]) for line in stat.decode(errors="replace").splitlines()
                    if line.startswith("btime "))
    except (OSError, HostError, StopIteration, ValueError, IndexError):
        return unknown_start
    return lambda ticks: clock_label(start_wall_time(ticks, boot, hz))
