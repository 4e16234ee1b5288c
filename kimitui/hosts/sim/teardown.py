"""Finding and killing everything a simulated host started, by session and by (pid, start time).

Every process the sim starts leads its own session (the service: API server and workers; the monitor;
the stray holder), and orphans keep their session when re-parented, so a /proc scan by session id finds
them all. A session id is not reused while any member lives, and each kill goes through
``signal_local`` with the (pid, start time) read in the same scan.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterable

from kimitui.hosts.base import ProcId
from kimitui.hosts.local import signal_local
from kimitui.procfs import read_start_time


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def session_members(sessions: Iterable[int]) -> list[ProcId]:
    """Live (not zombie) processes whose session id is one of ``sessions``."""
    wanted = set(sessions)
    found: list[ProcId] = []
    if not wanted:
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is None or fields[0] == "Z":
            continue
        if int(fields[3]) in wanted:
            found.append(ProcId(int(entry), int(fields[19])))
    return found


def alive(proc: ProcId) -> bool:
    return read_start_time(proc.pid) == proc.start_time


async def kill_everything(sessions: Iterable[int], procs: Iterable[ProcId], *, timeout: float = 10.0,
                          poll_s: float = 0.01) -> list[ProcId]:
    """SIGKILL every member of ``sessions`` and every live one of ``procs`` until none is left or the
    deadline passes. Returns what is still alive (empty on success)."""
    sessions = set(sessions)
    procs = set(procs)
    deadline = time.monotonic() + timeout
    while True:
        targets = set(session_members(sessions)) | {p for p in procs if alive(p)}
        if not targets:
            return []
        if time.monotonic() >= deadline:
            return sorted(targets, key=lambda p: p.pid)
        for proc in targets:
            signal_local(proc, signal.SIGKILL)
        await asyncio.sleep(poll_s)
