"""A cleanup step's preview as text, for the CLI and the terminal prompt: a table of what would be signalled
and what is spared (pid, start as a wall-clock time, user, GPUs, memory, unit, command, why)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from kimitui.cleanup.hostprocs import is_local
from kimitui.core.events import ProcRef, StepPreview
from kimitui.hosts.base import Host, HostError
from kimitui.procdisplay import clock_label, short_command, start_wall_time

Started = Callable[[int | None], str]
"""A process's start (clock ticks after boot) in words: a wall-clock time on the host's clock."""

COMMAND_WIDTH = 64


def unknown_start(_ticks: int | None) -> str:
    return "-"


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


def _ref_row(r: ProcRef, started: Started) -> list[str]:
    gpus = ",".join(map(str, r.gpus)) or "-"
    command = short_command(r.cmdline) if r.cmdline else "?"
    if len(command) > COMMAND_WIDTH:
        command = command[: COMMAND_WIDTH - 1] + "…"
    return [str(r.pid), started(r.start_time), r.user or "?", gpus,
            f"{r.mem_mib:.0f}", (r.unit or "-")[:24], command, r.reason]


def preview_table(preview: StepPreview, started: Started = unknown_start) -> str:
    """The preview as the operator reads it: what would be signalled, and what is spared and why."""
    head = ["PID", "STARTED", "USER", "GPUS", "MIB", "UNIT", "COMMAND", "WHY"]
    lines = [f"{preview.step}: {preview.action}"]
    if not preview.targets and not preview.spared and preview.step == "graceful":
        return lines[0]  # no service: the action says it all
    for title, refs in (("would signal", preview.targets), ("spared", preview.spared)):
        if not refs:
            lines.append(f"  {title}: none")
            continue
        rows = [head, *(_ref_row(r, started) for r in refs)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
        lines.append(f"  {title}:")
        for row in rows:
            lines.append("    " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    return "\n".join(lines)
