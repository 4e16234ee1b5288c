"""The sim's safety net: every sim process exits when the process that owns the simulated host is gone.

The owner (the SimHost's process) is passed as ``KIMITUI_SIM_OWNER=PID:START_TIME`` in the environment, so a
test runner killed hard leaves nothing behind. It is invisible to the cleanup code: a stuck worker still
ignores SIGTERM, and an orphan still outlives its API server while the owner lives.
"""

from __future__ import annotations

import os

from kimitui.hostside.procfs import start_time_of

OWNER_ENV = "KIMITUI_SIM_OWNER"


def owner_from_env() -> tuple[int, int] | None:
    raw = os.environ.get(OWNER_ENV, "")
    pid_s, _, start_s = raw.partition(":")
    if not (pid_s.isdigit() and start_s.isdigit()):
        return None
    return int(pid_s), int(start_s)


def owner_alive(owner: tuple[int, int] | None) -> bool:
    """True when there is no owner to watch, or it still runs with the recorded start time."""
    return owner is None or start_time_of(owner[0]) == owner[1]
