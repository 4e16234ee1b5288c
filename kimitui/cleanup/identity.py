"""Who the cleanup's processes are: the process scan (the first one also fixes what is never signalled: kimitui,
its ancestors, the host connection's own processes, the telemetry agent), a candidate from a scan or a sample,
and the service's processes, identified once as (pid, start time) when the cleanup begins (what its manager
names and their descendants), then what is left of them and the children they forked since; a pid that became
another process is shown, never targeted. A part of ``CleanupExecutor`` (its first base)."""

from __future__ import annotations

import inspect
from typing import Any

from kimitui.cleanup.context import Key, key
from kimitui.cleanup.hostprocs import HostProcs, ProcScan, is_local
from kimitui.cleanup.plan import CleanupTarget, proc_gpus
from kimitui.cleanup.safety import Candidate, SafetyPolicy, local_protected
from kimitui.cleanup.services import ServiceProcs
from kimitui.core.events import HostSample, ProcSample
from kimitui.hosts.base import Host, HostError

REUSED = "pid reused by another process: left alone"
"""How a later incarnation of a pid of the service's identified processes is shown (never a target)."""


class ProcessIdentity:
    """The executor's identification of processes (the attributes below are set by ``CleanupExecutor``)."""

    host: Host
    target: CleanupTarget
    procs: HostProcs
    safety: SafetyPolicy
    last_scan: ProcScan | None
    tree: dict[int, Candidate]
    tree_why: dict[int, str]
    main: Key | None
    identified: bool
    service_now: ServiceProcs | None
    _protected_loaded: bool

    async def scan(self) -> ProcScan:
        scan = await self.procs.scan()
        self.last_scan = scan
        if not self._protected_loaded:
            await self._load_protected(scan)
        return scan

    async def _load_protected(self, scan: ProcScan) -> None:
        self._protected_loaded = True
        self.safety.user = scan.user
        where = "kimitui itself" if is_local(self.host) else "the cleanup's own session on the host"
        self.safety.protect({scan.self_pid}, where)
        self.safety.protect(scan.ancestors, "an ancestor of kimitui's session (shell, sshd, init)"
                            if not is_local(self.host) else "an ancestor of kimitui")
        if is_local(self.host):
            self.safety.protect(local_protected(), "kimitui itself or an ancestor")
        for attr in ("protected_pids", "ancestor_pids"):
            extra: Any = getattr(self.host, attr, None)
            if callable(extra):
                try:
                    extra = extra()
                    if inspect.isawaitable(extra):
                        extra = await extra
                except HostError:
                    extra = None
            if extra:
                pids = {int(getattr(p, "pid", p)) for p in extra}
                self.safety.protect(pids, "the host connection's own processes (SSH session / sshd)")

    def protect_agent(self, scan: ProcScan, sample: HostSample) -> None:
        if sample.agent_pid:
            self.safety.protect({sample.agent_pid}, "the telemetry agent")
            pid = sample.agent_pid
            seen = {pid}
            while (info := scan.procs.get(pid)) is not None and info.ppid > 1 and info.ppid not in seen:
                pid = info.ppid
                seen.add(pid)
                self.safety.protect({pid}, "an ancestor of the telemetry agent")

    def from_scan(self, scan: ProcScan, pid: int, sample: HostSample | None, unit: str | None = None) -> Candidate:
        info = scan.procs[pid]
        c = Candidate(pid, info.start_time, info.ppid, info.user, info.cmdline, info.state, unit=unit, exe=info.exe)
        if sample is not None:
            for p in sample.procs:
                if p.pid == pid:
                    self._enrich(c, p)
        return c

    def _enrich(self, c: Candidate, p: ProcSample) -> None:
        c.held_by = list(p.held_by)
        c.gpus = sorted(proc_gpus(p))
        c.mem_mib = float(sum(p.gpu_mem_mib.values()))
        c.kind = p.kind
        c.unit = c.unit or p.unit or (f"docker:{p.container}" if p.container else None)
        c.exe = c.exe or p.exe

    def from_sample(self, p: ProcSample) -> Candidate:
        c = Candidate(p.pid, p.start_time, p.ppid, p.user, p.cmdline, p.state, visible=p.visible)
        self._enrich(c, p)
        # a sample without executables (another source, an older agent) must not hide a host daemon: the
        # step's own scan read it, for the same incarnation
        info = self.last_scan.procs.get(p.pid) if self.last_scan is not None else None
        if c.exe is None and info is not None and info.start_time == p.start_time:
            c.exe = info.exe
        return c

    async def identify(self, scan: ProcScan, sample: HostSample | None) -> None:
        """The service's processes as (pid, start time), once, when the cleanup begins: what its manager
        names now and their live descendants. Later steps target only these identities (and the children
        they fork), never what a pid becomes after."""
        svc = self.target.service
        self.identified = True
        if svc is None:
            return
        found = await self._ask_manager()
        why: dict[int, str] = {}
        if found is not None:
            for pid in found.pids:
                if pid in scan.procs:
                    why[pid] = found.why or svc.label
        for pid in scan.descendants(list(why)):
            why.setdefault(pid, f"descendant of pid {scan.procs[pid].ppid} ({svc.label})")
        unit = self._unit(found)
        for pid, reason in why.items():
            info = scan.procs[pid]
            if info.state in ("Z", "X"):
                continue
            self.tree[pid] = self.from_scan(scan, pid, sample, unit=unit)
            self.tree_why[pid] = reason
        if found is not None and found.main_pid in self.tree:
            self.main = key(self.tree[found.main_pid])

    async def _ask_manager(self) -> ServiceProcs | None:
        svc = self.target.service
        assert svc is not None
        try:
            found = await svc.processes(self.host)
        except HostError:
            found = None
        self.service_now = found
        return found

    @staticmethod
    def _unit(found: ServiceProcs | None) -> str | None:
        if found is None:
            return None
        return found.unit or (f"docker:{found.container}" if found.container else None)

    def is_member(self, c: Candidate) -> bool:
        """One of the service's processes as identified (same pid and start time)."""
        known = self.tree.get(c.pid)
        return known is not None and known.start_time == c.start_time

    async def service_left(self, scan: ProcScan, sample: HostSample | None) -> list[tuple[Candidate, str]]:
        """What is left of the service's processes identified when the cleanup began (same start time), and
        the live children they forked since, each with why it belongs. The manager is asked again only to
        say how the service is now (``service_now``) and to show a pid it names that is no longer the
        process identified (``service_reused``)."""
        svc = self.target.service
        if svc is None:
            return []
        if not self.identified:
            await self.identify(scan, sample)
        else:
            await self._ask_manager()
        live = [pid for pid, c in self.tree.items()
                if pid in scan.procs and scan.procs[pid].start_time == c.start_time
                and scan.procs[pid].state not in ("Z", "X")]
        out: list[tuple[Candidate, str]] = []
        for pid in live:
            c = self.from_scan(scan, pid, sample, unit=self.tree[pid].unit)
            out.append((c, self.tree_why[pid]))
        for pid in scan.descendants(live):
            info = scan.procs[pid]
            if pid in self.tree or info.state in ("Z", "X"):
                continue  # a pid of the tree seen again with another start time: not the process identified
            c = self.from_scan(scan, pid, sample, unit=self._unit(self.service_now))
            self.tree[pid] = c
            self.tree_why[pid] = f"descendant of pid {info.ppid} (forked by the service since the cleanup began)"
            out.append((c, self.tree_why[pid]))
        order = {pid: i for i, pid in enumerate(self.tree)}  # as identified; the main process first
        out.sort(key=lambda m: (key(m[0]) != self.main, order[m[0].pid]))
        return out

    def service_reused(self, scan: ProcScan, sample: HostSample | None) -> list[tuple[Candidate, str]]:
        """Pids of the service's identified processes that now belong to another process, and pids its
        manager names now that it did not name when the cleanup began: shown, never targeted."""
        out: list[tuple[Candidate, str]] = []
        seen: set[int] = set()
        for pid, c in self.tree.items():
            info = scan.procs.get(pid)
            if info is not None and info.start_time != c.start_time and info.state not in ("Z", "X"):
                seen.add(pid)
                out.append((self.from_scan(scan, pid, sample), REUSED))
        named = self.service_now.pids if self.service_now is not None else []
        for pid in named:
            info = scan.procs.get(pid)
            if pid in seen or pid in self.tree or info is None or info.state in ("Z", "X"):
                continue
            seen.add(pid)
            label = self.target.service.label if self.target.service else "the service"
            out.append((self.from_scan(scan, pid, sample),
                        f"named by {label} now, not when the cleanup began: left alone"))
        return out

    @staticmethod
    def not_live(scan: ProcScan, p: ProcSample) -> str | None:
        """Why a process the sample lists is no longer there to signal, or None when it is."""
        if p.kind == "exited":
            if p.held_by:
                return (f"exited: its {sum(p.gpu_mem_mib.values()):,.0f} MiB are kept by pid "
                        f"{', '.join(map(str, p.held_by))} through the descriptors they inherited from it")
            return "exited: the driver is still releasing its memory (verify waits for it)"
        if not p.visible:
            return None
        info = scan.procs.get(p.pid)
        if info is None or info.state in ("Z", "X"):
            return "exited: the driver is still releasing its memory (verify waits for it)"
        if p.start_time is not None and info.start_time != p.start_time:
            return "exited: its pid now belongs to another process (start time changed)"
        if p.kind == "exiting":  # in do_exit: a signal changes nothing, its files close on their own
            return "exiting: the kernel is closing its files and releasing its memory (verify waits for it)"
        return None
