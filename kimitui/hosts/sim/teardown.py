"""Finding and killing everything a simulated host started, by POSIX session and by (pid, start time).

Every process the sim starts leads its own session (the service: API server and workers; the monitor;
the stray holder), and orphans keep their session when re-parented, so a /proc scan by session id finds
them all. A session id is not reused while any member lives, and each kill goes through
the agent's ``guarded_signal`` with the (pid, start time) read in the same scan.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterable

from kimitui.hosts.base import ProcId
from kimitui.hostside.procfs import read_stat, start_time_of
from kimitui.hostside.signals import guarded_signal


def posix_session_members(session_ids: Iterable[int]) -> list[ProcId]:
    """Live (not zombie) processes whose POSIX session id (/proc/PID/stat field 6) is one of
    ``session_ids``."""
    wanted = set(session_ids)
    found: list[ProcId] = []
    if not wanted:
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = read_stat(int(entry))
        if st is None or st.state in ("Z", "X"):
            continue
        if st.session in wanted:
            found.append(ProcId(st.pid, st.start_time))
    return found


def alive(proc: ProcId) -> bool:
    return start_time_of(proc.pid) == proc.start_time


async def kill_everything(session_ids: Iterable[int], procs: Iterable[ProcId], *, timeout: float = 10.0,
                          poll_s: float = 0.01) -> list[ProcId]:
    """SIGKILL every member of the POSIX sessions ``session_ids`` and every live one of ``procs`` until none
    is left or the deadline passes. Returns what is still alive (empty on success)."""
    session_ids = set(session_ids)
    procs = set(procs)
    deadline = time.monotonic() + timeout
    while True:
        targets = set(posix_session_members(session_ids)) | {p for p in procs if alive(p)}
        if not targets:
            return []
        if time.monotonic() >= deadline:
            return sorted(targets, key=lambda p: p.pid)
        for proc in targets:
            guarded_signal(proc.pid, proc.start_time, signal.SIGKILL)
        await asyncio.sleep(poll_s)
