"""/proc: the one parser of /proc/PID/stat, the other per-process files, and the process table.

Imported on both sides: by the agent on the host and, locally, by the simulator, the cleanup and the TUI
(start_time_of, ancestry, read_stat). Light on purpose: os, pwd and re only.
"""

from __future__ import annotations

import os
import pwd
import re
from collections import namedtuple

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    pass


ProcStat = namedtuple("ProcStat", "pid comm state ppid pgrp session start_time flags tty_nr tpgid task",
                      defaults=(0, 0, -1, 0))
"""/proc/PID/stat fields 1-6, 22 (start time: clock ticks after boot; with the pid, a process's identity), 9
(the kernel's PF_* flags of the task; 0 when built without them), 7 and 8 (the controlling terminal, 0 for
none, and its foreground process group, -1 for none). ``task``: 0, or, for a process whose thread-group leader
has exited while other threads run (``read_stat``), the thread whose state, flags and files stand for it."""

PF_EXITING = 0x4
"""Set in do_exit before exit_mm tears the process's mappings down and before exit_files closes its files:
from then on the process never runs its own code again, whatever it still holds."""


STAT_MAX_BYTES = 4096
"""/proc/PID/stat is one line of 52 numbers and a name of at most 15 bytes (64 for a kernel thread)."""
PROC_MAX_BYTES = 1 << 20
"""The most read of /proc/PID/status, cmdline, cgroup: a cmdline longer than this (ARG_MAX allows 2 MiB) is
cut, never waited on in full."""
MAPS_MAX_BYTES = 64 << 20


def wire_text(raw: bytes) -> str:
    """Bytes from /proc (a name, a command line, a path: whatever the process or the kernel put there) as
    text for the wire: UTF-8 where it is, each byte that is not shown as a visible ``\\xNN`` escape (the
    kernel cuts a name at 15 bytes, mid-character; argv can be any bytes)."""
    return raw.decode("utf-8", "backslashreplace")


def read_bounded(path: str, limit: int) -> bytes:
    """At most LIMIT bytes of a /proc file (or any regular file): OSError when it cannot be read."""
    with open(path, "rb") as fh:
        return fh.read(limit)


def parse_stat(data: bytes | str) -> ProcStat:
    """Parse /proc/PID/stat (bytes: the name is whatever the process set, cut at 15 bytes, so it need not
    be UTF-8); the name may hold spaces and ')', so split at the last ')'."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    head, _, rest = raw.rpartition(b")")
    pid_s, _, comm = head.partition(b" (")
    f = rest.split()
    return ProcStat(int(pid_s), wire_text(comm), f[0].decode("ascii", "replace"), int(f[1]), int(f[2]),
                    int(f[3]), int(f[19]), int(f[6]), int(f[4]), int(f[5]))


def in_exit(st: ProcStat) -> bool:
    """Whether the process is in do_exit (PF_EXITING): still listed, maybe still holding files, on its way out."""
    return bool(st.flags & PF_EXITING)


def _raw_stat(pid: int, proc_root: str) -> ProcStat | None:
    try:
        return parse_stat(read_bounded(f"{proc_root}/{pid}/stat", STAT_MAX_BYTES))
    except (OSError, ValueError, IndexError):
        return None


def read_stat(pid: int, proc_root: str = "/proc") -> ProcStat | None:
    """The process's stat, or None when it is gone (zombies are returned, state Z).

    A process whose thread-group leader called pthread_exit while its other threads run is alive: its
    /proc/PID/stat reads as a zombie (the leader's state; PF_EXITING set) and its cmdline, exe, fds and maps
    read empty (the leader let go of the shared mm and file table). It is returned with a live thread's state
    and flags and that thread as ``task`` (its files: ``task_dir``), the leader's pid and start time kept.
    So is one whose leader is still on its way out (PF_EXITING, not yet Z: its mm already gone) while another
    thread lives on; a whole process in exit_group has every thread exiting and is returned as it is."""
    st = _raw_stat(pid, proc_root)
    if st is None or (st.state != "Z" and not st.flags & PF_EXITING):
        return st
    tasks = f"{proc_root}/{pid}/task"
    try:
        tids = [int(t) for t in os.listdir(tasks) if t.isdigit() and int(t) != pid]
    except OSError:
        return st
    for tid in sorted(tids):
        t = _raw_stat(tid, tasks)
        if t is not None and t.state not in ("Z", "X") and not t.flags & PF_EXITING:
            return st._replace(state=t.state, flags=t.flags, task=tid)
    return st


def task_dir(pid: int, st: ProcStat | None, proc_root: str = "/proc") -> str:
    """Where the process's per-process files (cmdline, exe, fd, maps) are read: /proc/PID, or for one whose
    leader exited, the live thread's /proc/PID/task/TID."""
    if st is not None and st.task:
        return f"{proc_root}/{pid}/task/{st.task}"
    return f"{proc_root}/{pid}"


def start_time_of(pid: int, proc_root: str = "/proc") -> int | None:
    """The start time of a live process; None when it is gone or a zombie."""
    st = read_stat(pid, proc_root)
    return None if st is None or st.state in ("Z", "X") else st.start_time


def ancestry(pid: int, proc_root: str = "/proc") -> list[ProcStat]:
    """The ancestors of PID, its parent first, up to (not including) PID 1."""
    out: list[ProcStat] = []
    seen = {pid}
    st = read_stat(pid, proc_root)
    while st is not None and st.ppid > 1 and st.ppid not in seen:
        seen.add(st.ppid)
        st = read_stat(st.ppid, proc_root)
        if st is not None:
            out.append(st)
    return out


class StatReader:
    """/proc/PID/stat, read at most once per sample (tick() starts one): the sim driver's liveness check
    and the process details share the read."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.root = proc_root
        self.memo: dict[int, ProcStat | None] = {}

    def tick(self) -> None:
        self.memo = {}

    def get(self, pid: int) -> ProcStat | None:
        if pid not in self.memo:
            self.memo[pid] = read_stat(pid, self.root)
        return self.memo[pid]



# --- the other /proc files -----------------------------------------------------------------------

def parse_status_uid(data: bytes | str) -> int | None:
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    for line in raw.splitlines():
        if line.startswith(b"Uid:"):
            return int(line.split()[1])
    return None


Status = namedtuple("Status", "uid nspid sig_ign sig_cgt", defaults=(None, (), 0, 0))
"""From /proc/PID/status: the real uid, NSpid (the pid in each PID namespace from the reader's inwards: more
than one entry, the last 1, is the init of a namespace of its own), and the ignored and caught signal masks
(bit N-1 for signal N)."""


def parse_status(data: bytes | str) -> Status:
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    uid, nspid, ign, cgt = None, (), 0, 0
    for line in raw.splitlines():
        key, _, rest = line.partition(b":")
        if key == b"Uid":
            uid = int(rest.split()[0])
        elif key == b"NSpid":
            nspid = tuple(int(x) for x in rest.split())
        elif key == b"SigIgn":
            ign = int(rest.strip(), 16)
        elif key == b"SigCgt":
            cgt = int(rest.strip(), 16)
    return Status(uid, nspid, ign, cgt)


def read_status(pid: int, proc_root: str = "/proc") -> Status | None:
    try:
        return parse_status(read_bounded(f"{proc_root}/{pid}/status", PROC_MAX_BYTES))
    except (OSError, ValueError, IndexError):
        return None


def sig_bit(mask: int, sig: int) -> bool:
    return bool(mask >> (sig - 1) & 1)


def pidns_of(pid: int | str, proc_root: str = "/proc") -> int | None:
    """The inode of the PID namespace the process is in (its innermost), None when unreadable."""
    try:
        return os.stat(f"{proc_root}/{pid}/ns/pid").st_ino
    except OSError:
        return None


PROC_PID_INIT_INO = 0xEFFFFFFC
"""The inode of the initial PID namespace (the kernel's PROC_PID_INIT_INO): a process there sees every pid the
driver reports."""


_CONTAINER_RES = (
    re.compile(r"(?:docker|cri-containerd|crio|libpod)-([0-9a-f]{12,64})\.scope"),
    re.compile(r"/(?:docker|process_api|lxc|containerd|libpod)/([0-9A-Za-z][0-9A-Za-z_.-]*)"),
    re.compile(r"kubepods.*/([0-9a-f]{64})"),
)


def parse_cgroup(data: bytes | str) -> tuple[str | None, str | None]:
    """(systemd unit, container id) from /proc/PID/cgroup (v1 or v2; a path need not be UTF-8)."""
    text = wire_text(data) if isinstance(data, bytes) else data
    unit = container = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if unit is None:
            for part in reversed(path.split("/")):
                if part.endswith(".service"):
                    unit = part
                    break
        if container is None:
            for rx in _CONTAINER_RES:
                m = rx.search(path)
                if m:
                    container = m.group(1)
                    break
    return unit, container


def parse_cmdline(raw: bytes) -> str:
    return wire_text(raw.rstrip(b"\0").replace(b"\0", b" "))


_USERS: dict[int, str] = {}


def user_name(uid: int | None) -> str | None:
    if uid is None:
        return None
    if uid not in _USERS:
        try:
            _USERS[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _USERS[uid] = str(uid)
    return _USERS[uid]


def read_exe(pid: int, proc_root: str = "/proc", st: ProcStat | None = None) -> str | None:
    """The executable's path (readlink /proc/PID/exe): set by the kernel at exec, unlike argv. None when
    unreadable (another user's process without the right to look, a kernel thread, gone). Read as bytes: a
    path need not be UTF-8 (shown with escapes, as names are). ``st``: its stat, when its leader may have
    exited (then read from a live thread)."""
    try:
        return wire_text(os.readlink(os.fsencode(f"{task_dir(pid, st, proc_root)}/exe")))
    except OSError:
        return None


def read_cmdline(pid: int, proc_root: str, st: ProcStat | None = None) -> str:
    try:
        return parse_cmdline(read_bounded(f"{task_dir(pid, st, proc_root)}/cmdline", PROC_MAX_BYTES))
    except OSError:
        return ""


def boot_time(proc_root: str = "/proc") -> float | None:
    """When the host booted (unix seconds, ``btime`` of /proc/stat): with the clock tick rate it turns a
    process's start (ticks after boot) into a time of day."""
    try:
        with open(os.path.join(proc_root, "stat")) as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None

