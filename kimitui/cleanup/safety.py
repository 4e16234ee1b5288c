"""Who must never be signalled, checked again right before every signal (not only at preview).

Never: PID 1, kernel threads (pid 2, children of kthreadd, no command line), the telemetry agent, kimitui
itself and its ancestors, the SSH session's processes and sshd (the scanning process's ancestors on the
host, plus whatever the host names as protected), other users' processes unless allowed, and anything
that is not in the confirmed preview, and the host's own GPU daemons (persistence, DCGM, fabric manager,
the display server, NVML monitors), recognised by executable path or systemd unit. Nothing is ever chosen
by a name pattern: a daemon's name only ever spares, and argv (which a process sets freely) is never read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from kimitui.hostside.daemons import (
    HOST_DAEMON_EXE_PREFIXES,
    HOST_DAEMON_EXES,
    HOST_DAEMON_UNITS,
    exe_basename,
    host_daemon,
)
from kimitui.hostside.procfs import ancestry

__all__ = ["HOST_DAEMON_EXES", "HOST_DAEMON_EXE_PREFIXES", "HOST_DAEMON_UNITS", "Candidate", "SafetyPolicy",
           "exe_basename", "host_daemon", "local_protected"]


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
    exe: str | None = None
    """The executable's path (/proc/PID/exe), None when unreadable: then only the unit can spare it."""
    dies_with: int | None = None
    """Listed because the kernel ends it when this pid (a target of the step) ends (cleanup/fate.py)."""
    held_by: list[int] = field(default_factory=list)
    """Kind exited: the processes that keep its memory through inherited descriptors."""


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
        if c.kind == "exited":
            return "exited: no process left to signal" + (
                f" (its memory is kept by pid {', '.join(map(str, c.held_by))}, listed apart)" if c.held_by else "")
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
        if (daemon := host_daemon(c.exe, c.unit)) is not None:
            return daemon
        if not self.allow_other_users and self.user is not None and c.user is not None and c.user != self.user:
            return f"belongs to user {c.user} (not {self.user}); other users are not allowed"
        return None
