"""What the kernel ends along with a process, without a signal of ours to those it takes.

- A session leader with a controlling terminal: when it exits, the kernel sends SIGHUP to the terminal's
  foreground process group (disassociate_ctty). A helper that double-forked without setsid is in that group,
  re-parented away: no descendant of the leader, yet it dies of the hangup (unless it ignores SIGHUP).
- The init of a PID namespace (NSpid ends in 1): when it exits, the kernel SIGKILLs every process of the
  namespace and of the namespaces below it (zap_pid_ns_processes), a process entered from outside
  (nsenter, docker exec) included.

``fate`` follows it through: whatever dies with a process may take others with it in turn. And a signal the
kernel drops says so (``ignored``): a namespace init gets no signal from outside it for which it has no
handler (SIGKILL and SIGSTOP aside), and an ignored signal does nothing. Imported by the agent (py3.8), light.
"""

from __future__ import annotations

import os
import signal
from collections import namedtuple

from .procfs import read_stat, read_status, sig_bit

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any

HANGUP = "terminal hangup"
PIDNS = "its PID namespace ends"
NS_GET_PARENT = 0xB702
"""ioctl on a namespace file: the parent namespace's file (EPERM past the caller's own namespace)."""

Row = namedtuple("Row", "pid start state pgrp session tty_nr tpgid nspid sig_ign ns")
"""What fate needs of one process: its stat, NSpid, ignored signals and PID namespace inode."""

Companion = namedtuple("Companion", "pid start why via ignores")
"""A process the kernel signals when ``via`` ends: ``why`` (HANGUP | PIDNS); ``ignores``: it ignores that
signal (SIGHUP: it survives; SIGKILL cannot be ignored)."""


def read_row(pid: int, proc_root: str = "/proc") -> Row | None:
    st = read_stat(pid, proc_root)
    if st is None:
        return None
    status = read_status(pid, proc_root)
    try:
        ns = os.stat(f"{proc_root}/{pid}/ns/pid").st_ino
    except OSError:
        ns = None
    return Row(pid, st.start_time, st.state, st.pgrp, st.session, st.tty_nr, st.tpgid,
               tuple(status.nspid) if status else (), status.sig_ign if status else 0, ns)


def read_rows(proc_root: str = "/proc") -> dict[int, Row]:
    rows = {}
    try:
        names = os.listdir(proc_root)
    except OSError:
        return rows
    for name in names:
        if name.isdigit():
            row = read_row(int(name), proc_root)
            if row is not None:
                rows[row.pid] = row
    return rows


def leads_terminal(row: Row) -> bool:
    """A session leader with a controlling terminal that has a foreground process group."""
    return row.session == row.pid and row.tty_nr != 0 and row.tpgid > 0


def is_ns_init(row: Row) -> bool:
    """PID 1 of a namespace below the reader's."""
    return len(row.nspid) >= 2 and row.nspid[-1] == 1


def may_take_others(row: Row) -> bool:
    return leads_terminal(row) or is_ns_init(row)


def ns_chains(rows: dict[int, Row], proc_root: str = "/proc") -> dict[int, set[int]]:
    """Namespace inode -> it and every namespace above it, up to (not including) the reader's own."""
    import fcntl

    own = None
    try:
        own = os.stat(f"{proc_root}/self/ns/pid").st_ino
    except OSError:
        pass
    chains: dict[int, set[int]] = {}
    for row in rows.values():
        if row.ns is None or row.ns in chains or row.ns == own:
            continue
        chain = {row.ns}
        try:
            fd = os.open(f"{proc_root}/{row.pid}/ns/pid", os.O_RDONLY)
        except OSError:
            chains[row.ns] = chain
            continue
        try:
            while True:
                try:
                    parent = fcntl.ioctl(fd, NS_GET_PARENT)
                except OSError:  # EPERM: the reader's own namespace is next; ENOTTY: a kernel before 4.9
                    break
                os.close(fd)
                fd = parent
                ino = os.fstat(fd).st_ino
                if ino == own or ino in chain:
                    break
                chain.add(ino)
        finally:
            os.close(fd)
        chains[row.ns] = chain
    return chains


def fate(pid: int, rows: dict[int, Row], chains: dict[int, set[int]] | None = None,
         proc_root: str = "/proc") -> list[Companion]:
    """Every process the kernel ends (or signals) when PID ends, and in turn what those take, each once."""
    target = rows.get(pid)
    if target is None or not may_take_others(target):
        return []
    if chains is None:
        chains = ns_chains(rows, proc_root) if any(is_ns_init(r) for r in rows.values()) else {}
    out: list[Companion] = []
    seen = {pid}
    queue = [target]
    while queue:
        dying = queue.pop(0)
        found: list[tuple[Row, str, bool]] = []
        if leads_terminal(dying):
            found += [(r, HANGUP, sig_bit(r.sig_ign, signal.SIGHUP)) for r in rows.values()
                      if r.pgrp == dying.tpgid]
        if is_ns_init(dying) and dying.ns is not None:
            found += [(r, PIDNS, False) for r in rows.values()
                      if r.ns is not None and dying.ns in chains.get(r.ns, {r.ns})]
        for r, why, ignores in found:
            if r.pid in seen or r.state in ("Z", "X"):
                continue
            seen.add(r.pid)
            out.append(Companion(r.pid, r.start, why, dying.pid, ignores))
            if not ignores:
                queue.append(r)
    return out


def fate_now(pid: int, proc_root: str = "/proc") -> list[Companion]:
    """``fate`` read fresh: a whole /proc pass only when PID leads a terminal or is a namespace init."""
    row = read_row(pid, proc_root)
    if row is None or not may_take_others(row):
        return []
    rows = read_rows(proc_root)
    rows[pid] = row
    return fate(pid, rows, proc_root=proc_root)


def dropped(pid: int, sig: int, proc_root: str = "/proc") -> str | None:
    """Why SIG sent to PID now does nothing (said with the 'sent' outcome), or None."""
    if sig in (signal.SIGKILL, signal.SIGSTOP) or sig == 0:
        return None
    status = read_status(pid, proc_root)
    if status is None:
        return None
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    if sig_bit(status.sig_ign, sig):
        return f"ignored: the process ignores {name}"
    if len(status.nspid) >= 2 and status.nspid[-1] == 1 and not sig_bit(status.sig_cgt, sig):
        return (f"ignored: pid {pid} is the init of its own PID namespace and has no {name} handler, so the kernel "
                f"drops it")
    return None


def wire(companions: list[Companion]) -> list[dict[str, Any]]:
    return [{"pid": c.pid, "start": c.start, "why": c.why, "via": c.via, "ignores": c.ignores} for c in companions]
