"""Who holds the device files (fd links; maps tell a CUDA context from a handle) and the process details
a sample carries."""

from __future__ import annotations

import os
import pwd

from .procfs import (
    MAPS_MAX_BYTES,
    PROC_MAX_BYTES,
    StatReader,
    in_exit,
    parse_cgroup,
    parse_cmdline,
    parse_status_uid,
    read_bounded,
    read_exe,
    read_stat,
    task_dir,
    wire_text,
)

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any

    from .gpu import ProcMem


def device_gpu_index(path: str, prefix: str) -> int | None:
    """3 for PREFIX3; None for PREFIXctl, PREFIX-uvm and anything else."""
    rest = path[len(prefix):] if path.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def maps_device_paths(text: str, prefix: str) -> set[str]:
    """Device files (under prefix) that a maps listing maps; libnvidia-*.so mappings are not devices."""
    found: set[str] = set()
    if prefix not in text:
        return found
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6:
            path = parts[5].strip()
            if path.endswith(" (deleted)"):
                path = path[:-10]
            if path.startswith(prefix):
                found.add(path)
    return found


def classify_holding(fd_targets: list[str], maps_text: str, prefix: str,
                     exiting: bool = False) -> tuple[str | None, list[int]]:
    """("cuda" | "handle" | "exiting" | None, GPU indices) from fd link targets and the maps text of one
    process, and whether it is in exit (PF_EXITING read after them). A process in exit that still holds
    device files is "exiting", mapped or not: the kernel tears its mappings down before it closes its
    files, so on its way out a CUDA context reads like a handle-only holder (an NVML monitor) for a while.
    It is neither: it holds the files until they are closed, and runs no code of its own again."""
    devs = {p for p in fd_targets if p.startswith(prefix)}
    mapped = maps_device_paths(maps_text, prefix) if (devs or maps_text) else set()
    devs |= mapped
    gpus = sorted({i for i in (device_gpu_index(p, prefix) for p in devs) if i is not None})
    if not devs:
        return None, gpus
    return ("exiting" if exiting else "cuda" if mapped else "handle"), gpus



class HolderScan:
    """Who holds the device files. A full scan (every pid's fd links; maps only of pids with device fds)
    runs at most every ``every`` seconds. Between full scans no /proc listing is made (it alone costs
    ~170 us with 300 pids): holders that exited are dropped, and a pid the driver names for the first
    time is scanned at once (a new CUDA process is classed in its first sample). A new handle-only
    opener waits for the next full scan. Measured on an H200 host with 300 pids: full scan ~2.5 ms."""

    def __init__(self, proc_root: str, prefix: str, skip: set[int], every: float,
                 stat: StatReader | None = None) -> None:
        self.root, self.prefix, self.skip, self.every = proc_root, prefix, skip, every
        self.stat = stat or StatReader(proc_root)
        self.holders: dict[int, tuple[str | None, list[int], bool]] = {}
        self.named: set[int] = set()
        self.known: set[int] = set()
        self.last_full: float | None = None

    def scan_pid(self, pid: int) -> tuple[str | None, list[int], bool]:
        """(kind or None, gpus, readable). For a device-file holder its stat is read last, fresh: PF_EXITING
        is set before exit_mm and exit_files, so maps read empty or fds read open in exit are known for what
        they are (a zombie, or a process gone by then, holds nothing)."""
        fd_dir = f"{self.root}/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
            if not names:  # a kernel thread, a zombie, or a live process whose leader thread exited
                st = read_stat(pid, self.root)
                if st is not None and st.task:
                    fd_dir = f"{task_dir(pid, st, self.root)}/fd"
                    names = os.listdir(fd_dir)
        except PermissionError:
            return None, [], False
        except OSError:
            return None, [], True
        targets = []
        for n in names:
            try:
                t = os.readlink(fd_dir + "/" + n)
            except OSError:
                continue
            if t.startswith(self.prefix):
                targets.append(t)
        maps = ""
        if targets:  # a CUDA process keeps its device fds open; maps is read only for fd holders
            try:
                maps = wire_text(read_bounded(f"{fd_dir[:-3]}/maps", MAPS_MAX_BYTES))
            except OSError:
                pass
        exiting = False
        if targets:
            st = read_stat(pid, self.root)
            if st is None or st.state in ("Z", "X"):
                return None, [], True
            exiting = in_exit(st)
        kind, gpus = classify_holding(targets, maps, self.prefix, exiting)
        return kind, gpus, True

    def _keep(self, pid: int, res: tuple[str | None, list[int], bool]) -> None:
        if res[0] is not None or not res[2]:
            self.holders[pid] = res
        else:
            self.holders.pop(pid, None)

    def update(self, now: float, named: set[int]) -> dict[int, tuple[str | None, list[int], bool]]:
        named = named - self.skip
        if self.last_full is None or now - self.last_full >= self.every:
            self.last_full = now
            try:
                pids = {int(n) for n in os.listdir(self.root) if n.isdigit()} - self.skip
            except OSError:
                pids = set()
            self.holders = {}
            for pid in pids:
                self._keep(pid, self.scan_pid(pid))
            self.known = pids
        else:
            for pid in list(self.holders):
                st = self.stat.get(pid)
                if st is None or st.state in ("Z", "X"):  # exited (a zombie holds no files)
                    del self.holders[pid]
                elif in_exit(st) and self.holders[pid][0] is not None:  # on its way out since the last scan
                    _, gpus, readable = self.holders[pid]
                    self.holders[pid] = ("exiting", gpus, readable)
            for pid in named - self.named:
                self._keep(pid, self.scan_pid(pid))
                self.known.add(pid)
        self.named = named
        return self.holders


class ProcDetails:
    """stat and exe each sample (state, ppid change: orphans are reparented; an exec changes the program, not
    the pid or start time: its cmdline is read again then); user and cgroup once per (pid, start time)."""

    def __init__(self, proc_root: str, stat: StatReader | None = None) -> None:
        self.root = proc_root
        self.stat = stat or StatReader(proc_root)
        self.static: dict[tuple[int, int], dict[str, Any]] = {}
        self.users: dict[int, str] = {}

    def _read(self, where: str, name: str) -> bytes:
        return read_bounded(f"{where}/{name}", PROC_MAX_BYTES)

    def get(self, pid: int) -> dict[str, Any] | None:
        st = self.stat.get(pid)
        if st is None:
            return None
        state, ppid, start = st.state, st.ppid, st.start_time
        key = (pid, start)
        info = self.static.get(key)
        if info is None:
            where = f"{self.root}/{pid}"
            info = {"user": None, "cmdline": "", "unit": None, "container": None, "first_ppid": ppid}
            try:
                uid = parse_status_uid(self._read(where, "status"))
                if uid is not None:
                    info["user"] = self._user(uid)
            except (OSError, ValueError):
                pass
            try:
                info["cmdline"] = parse_cmdline(self._read(task_dir(pid, st, self.root), "cmdline"))
            except OSError:
                pass
            try:
                info["unit"], info["container"] = parse_cgroup(self._read(where, "cgroup"))
            except OSError:
                pass
            info["exe"] = read_exe(pid, self.root, st)
            self.static[key] = info
        else:
            exe = read_exe(pid, self.root, st)
            if exe is not None and exe != info["exe"]:  # exec'd since (same pid and start time, another program),
                info["exe"] = exe  # or first read in a leader's exit, before its live thread was found
                try:
                    info["cmdline"] = parse_cmdline(self._read(task_dir(pid, st, self.root), "cmdline"))
                except OSError:
                    pass
        return dict(info, start_time=start, state=state, ppid=ppid, pgrp=st.pgrp, sid=st.session)

    def _user(self, uid: int) -> str:
        if uid not in self.users:
            try:
                self.users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self.users[uid] = str(uid)
        return self.users[uid]

    def forget_except(self, alive: set[int]) -> None:
        for key in [k for k in self.static if k[0] not in alive]:
            del self.static[key]


WIRE_DROP = ("first_ppid", "pgrp", "sid")
"""ProcDetails' own bookkeeping, not sent."""


def inheritors(pid: int, gpus: set[int], mem: ProcMem, holders: dict[int, tuple[str | None, list[int], bool]],
               details: ProcDetails) -> list[int]:
    """The live processes that keep an exited PID's driver memory through the device files they inherited: they
    hold a device file of a GPU it has memory on, NVML lists none of their own, and PID forked them (their
    parent when first seen, or their process group or session is PID's: a child keeps its parent's)."""
    out = []
    for h, (kind, hgpus, _) in holders.items():
        if kind is None or mem.get(h) or not (set(hgpus) & gpus):
            continue
        info = details.get(h)
        if info is not None and pid in (info["first_ppid"], info["pgrp"], info["sid"]):
            out.append(h)
    return sorted(out)


def build_procs(mem: ProcMem, holders: dict[int, tuple[str | None, list[int], bool]],
                details: ProcDetails, skip: set[int], pids_local: bool = False) -> list[dict[str, Any]]:
    """ProcSample-shaped dicts for every pid with driver memory or a device file. A pid the driver lists that
    is not in /proc has exited (kind "exited", ``held_by`` the processes that keep its memory through inherited
    descriptors) when the driver's pids are this PID namespace's (``pids_local``: the agent is in the initial
    namespace, or the driver is the simulated one) or such processes are found here; else it is in another
    namespace ("pid-not-visible"). That some of the driver's pids are live here proves nothing: in a container
    its own processes are, another container's are not."""
    out = []
    inherits: dict[int, list[int]] = {}
    for pid in sorted((set(mem) | set(holders)) - skip):
        kind, gpus, readable = holders.get(pid, (None, [], True))
        info = details.get(pid)
        flags = []
        p = {"pid": pid, "start_time": None, "user": None,
             "gpu_mem_mib": {str(k): round(v, 1) for k, v in sorted(mem.get(pid, {}).items())},
             "kind": kind or "unknown", "unit": None, "container": None, "cmdline": "", "state": None,
             "ppid": None, "gpus": gpus, "visible": info is not None, "flags": flags, "exe": None}
        zombie = info is not None and info["state"] in ("Z", "X") and bool(mem.get(pid))
        if info is None or zombie:  # a zombie holds no files: its memory too is kept by what it forked
            held_by = inheritors(pid, set(mem.get(pid, {})), mem, holders, details) if mem.get(pid) else []
            if zombie:
                p.update((k, v) for k, v in info.items() if k not in WIRE_DROP)
            if pids_local or held_by or zombie:
                p["kind"], p["held_by"] = "exited", held_by
                flags.append("exited")
                for h in held_by:
                    inherits.setdefault(h, []).append(pid)
            else:
                flags.append("pid-not-visible")  # a host PID seen from a container: never dropped
                p["kind"] = "unknown"
        else:
            p.update((k, v) for k, v in info.items() if k not in WIRE_DROP)
            if not readable:
                flags.append("no-access")
        if p["kind"] == "cuda" and not mem.get(pid):
            flags.append("no-nvml-memory")
        out.append(p)
    for p in out:
        if p["pid"] in inherits:
            p["inherits"] = inherits[p["pid"]]
    return out
