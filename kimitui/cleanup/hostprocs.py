"""The process table of a host, through the Host interface: in-process for the local machine, one
``python3 -c`` of proctable's own source for any other host (so one exec per scan, never per process)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimitui.cleanup import proctable
from kimitui.hosts.base import Host, HostError

_SOURCE = Path(proctable.__file__).read_text()


@dataclass(slots=True)
class ProcInfo:
    pid: int
    ppid: int
    state: str
    start_time: int
    uid: int | None
    user: str | None
    cmdline: str


@dataclass(slots=True)
class ProcScan:
    """Every process of the host at one moment, and who scanned (its pid and ancestors)."""

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
    from kimitui.hosts.local import LocalHost

    return isinstance(host, LocalHost) or bool(getattr(host, "is_local", False))


class HostProcs:
    """Scan and stat processes on one host."""

    def __init__(self, host: Host, python: str | None = None) -> None:
        self.host = host
        self.local = is_local(host)
        self.python = python or getattr(host, "python", None) or "python3"

    async def _remote(self, args: list[str]) -> dict[str, Any]:
        res = await self.host.run([self.python, "-c", _SOURCE, *args], timeout=30.0)
        if not res.ok:
            raise HostError(f"{self.host.name}: process scan failed (rc {res.rc}): {res.stderr.strip()[:200]}")
        try:
            data = json.loads(res.stdout)
        except json.JSONDecodeError as exc:
            raise HostError(f"{self.host.name}: process scan printed no JSON: {res.stdout[:120]!r}") from exc
        if not isinstance(data, dict):
            raise HostError(f"{self.host.name}: process scan printed {type(data).__name__}")
        return data

    async def scan(self) -> ProcScan:
        data = await (asyncio.to_thread(proctable.scan) if self.local else self._remote(["scan"]))
        procs = {
            int(p["pid"]): ProcInfo(int(p["pid"]), int(p["ppid"]), str(p["state"]), int(p["start"]),
                                    p.get("uid"), p.get("user"), str(p.get("cmdline") or ""))
            for p in data.get("procs", [])
        }
        return ProcScan(procs, int(data.get("self_pid", 0)), data.get("user"), data.get("uid"),
                        [int(a) for a in data.get("ancestors", [])])

    async def stat(self, pids: list[int]) -> dict[int, tuple[int, str]]:
        """{pid: (start time, state)} for those still present; zombies are reported with state Z."""
        if not pids:
            return {}
        if self.local:
            data = proctable.stat(pids)
        else:
            data = await self._remote(["stat", *map(str, pids)])
        return {int(k): (int(v[0]), str(v[1])) for k, v in data.get("procs", {}).items()}
