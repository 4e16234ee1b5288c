"""The process table of a host, through its agent (``scan`` and ``stat`` requests on the one channel)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kimitui.hosts.base import Host


@dataclass(frozen=True, slots=True)
class Takes:
    """A process the kernel ends (or signals) when ``via`` ends (the agent's hostside/fate.py)."""

    pid: int
    start_time: int
    why: str
    """"terminal hangup" (SIGHUP to the terminal's foreground group), "its PID namespace ends" (SIGKILL) or
    "its process group is orphaned, a member stopped" (SIGHUP, SIGCONT)."""
    via: int
    ignores: bool = False
    """It ignores that signal (SIGHUP): it survives."""


@dataclass(slots=True)
class ProcInfo:
    pid: int
    ppid: int
    state: str
    start_time: int
    uid: int | None
    user: str | None
    cmdline: str
    exe: str | None = None
    takes: list[Takes] = field(default_factory=list)
    """What the kernel ends with this process, as the agent found it when it scanned."""


@dataclass(slots=True)
class ProcScan:
    """Every process of the host at one moment, and who scanned (the agent's pid and its ancestors)."""

    procs: dict[int, ProcInfo]
    self_pid: int
    user: str | None
    uid: int | None
    ancestors: list[int] = field(default_factory=list)

    def children(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for p in self.procs.values():
            out.setdefault(p.ppid, []).append(p.pid)
        return out

    def descendants(self, roots: list[int]) -> list[int]:
        """Every live descendant of the roots (by ppid), roots excluded, breadth first."""
        kids = self.children()
        out: list[int] = []
        seen = set(roots)
        queue = list(roots)
        while queue:
            pid = queue.pop(0)
            for child in kids.get(pid, []):
                if child not in seen:
                    seen.add(child)
                    out.append(child)
                    queue.append(child)
        return out


def is_local(host: Host) -> bool:
    return bool(getattr(host, "is_local", False))


class HostProcs:
    """Scan and stat processes on one host."""

    def __init__(self, host: Host) -> None:
        self.host = host

    async def scan(self) -> ProcScan:
        data = await self.host.scan_processes()
        procs = {
            int(p["pid"]): ProcInfo(int(p["pid"]), int(p["ppid"]), str(p["state"]), int(p["start"]),
                                    p.get("uid"), p.get("user"), str(p.get("cmdline") or ""),
                                    p.get("exe") if isinstance(p.get("exe"), str) else None,
                                    [Takes(int(t["pid"]), int(t["start"]), str(t["why"]), int(t["via"]),
                                           bool(t.get("ignores"))) for t in p.get("takes") or []])
            for p in data.get("procs", [])
        }
        return ProcScan(procs, int(data.get("self_pid", 0)), data.get("user"), data.get("uid"),
                        [int(a) for a in data.get("ancestors", [])])

    async def stat(self, pids: list[int]) -> dict[int, tuple[int, str]]:
        """{pid: (start time, state)} for those still present; zombies are reported with state Z."""
        return await self.host.stat(pids)
