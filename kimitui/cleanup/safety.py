"""Who must never be signalled, checked again right before every signal (not only at preview).

Never: PID 1, kernel threads (pid 2, children of kthreadd, no command line), the telemetry agent, kimitui
itself and its ancestors, the SSH session's processes and sshd (the scanning process's ancestors on the
host, plus whatever the host names as protected), other users' processes unless allowed, and anything
that is not in the confirmed preview. Nothing is ever chosen by a name pattern.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from kimitui.hosts.agent import ancestry


@dataclass(slots=True)
class Candidate:
    """A process the cleanup may act on, with what safety and the preview need to know."""

    pid: int
    start_time: int | None
    ppid: int | None = None
    user: str | None = None
    cmdline: str = ""
    state: str | None = None
    gpus: list[int] = field(default_factory=list)
    mem_mib: float = 0.0
    unit: str | None = None
    kind: str = "unknown"
    visible: bool = True


def local_protected() -> set[int]:
    """This process and its ancestors on the machine kimitui runs on."""
    me = os.getpid()
    return {me, *(a.pid for a in ancestry(me))}


@dataclass(slots=True)
class SafetyPolicy:
    protected: dict[int, str] = field(default_factory=dict)
    """pid -> why it is protected."""
    user: str | None = None
    """The user the cleanup acts as on the host."""
    allow_other_users: bool = False
    agent_pid: int | None = None

    def protect(self, pids: set[int] | list[int], why: str) -> None:
        for pid in pids:
            self.protected.setdefault(int(pid), why)

    def refusal(self, c: Candidate) -> str | None:
        """Why this process must not be signalled, or None when it may be."""
        if c.pid <= 1:
            return "PID 1 (init)" if c.pid == 1 else "not a process id"
        if c.pid == 2 or c.ppid == 2:
            return "kernel thread"
        if not c.visible:
            return "not visible here (another PID namespace): cannot be identified or signalled"
        if c.start_time is None:
            return "no start time: its identity cannot be checked"
        if not c.cmdline and c.state != "Z":
            return "kernel thread (no command line)"
        if self.agent_pid is not None and c.pid == self.agent_pid:
            return "the telemetry agent"
        if c.pid in self.protected:
            return self.protected[c.pid]
        if not self.allow_other_users and self.user is not None and c.user is not None and c.user != self.user:
            return f"belongs to user {c.user} (not {self.user}); other users are not allowed"
        return None
