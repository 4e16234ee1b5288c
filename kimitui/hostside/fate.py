"""What the kernel ends along with a process, without a signal of ours to those it takes.

- A session leader with a controlling terminal: when it exits, the kernel sends SIGHUP to the terminal's
  foreground process group (disassociate_ctty). A helper that double-forked without setsid is in that group,
  re-parented away: no descendant of the leader, yet it dies of the hangup (unless it ignores SIGHUP).
- The init of a PID namespace (NSpid ends in 1): when it exits, the kernel SIGKILLs every process of the
  namespace and of the namespaces below it (zap_pid_ns_processes), a process entered from outside
  (nsenter, docker exec) included.
- Any process whose exit orphans a process group that has a stopped member (its own group, when it was the
  group's last link to its session outside the group; a child's group in the same session, once the child is
  re-parented away): the kernel sends every process of that group SIGHUP, then SIGCONT (kill_orphaned_pgrp).
  A member that does not handle SIGHUP dies of it, a helper that double-forked away included; a stopped one
  continues and takes a pending SIGTERM. Who the children are re-parented to (a subreaper) is not in /proc:
  read as outside the session, so a group that a subreaper would keep linked is listed all the same.

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
ORPHANED = "its process group is orphaned, a member stopped"
NS_GET_PARENT = 0xB702
"""ioctl on a namespace file: the parent namespace's file (EPERM past the caller's own namespace)."""

Row = namedtuple("Row", "pid start state pgrp session tty_nr tpgid nspid sig_ign ns ppid", defaults=(0,))
"""What fate needs of one process: its stat, NSpid, ignored signals, PID namespace inode and parent."""

Companion = namedtuple("Companion", "pid start why via ignores")
"""A process the kernel signals when ``via`` ends: ``why`` (HANGUP | PIDNS); ``ignores``: it ignores that
signal (SIGHUP: it survives; SIGKILL cannot be ignored)."""
STOPPED = "T"
"""A stopped process's state (a job-control stop; 't', stopped by a tracer, is no stopped job)."""


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
               tuple(status.nspid) if status else (), status.sig_ign if status else 0, ns, st.ppid)


def _pids(proc_root: str) -> list[int]:
    try:
        return [int(name) for name in os.listdir(proc_root) if name.isdigit()]
    except OSError:
        return []


def read_rows(proc_root: str = "/proc") -> dict[int, Row]:
    rows = {}
    for pid in _pids(proc_root):
        row = read_row(pid, proc_root)
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
    """Whether its exit hangs up a terminal or ends a namespace (an orphaned group: ``orphan_risks``)."""
    return leads_terminal(row) or is_ns_init(row)


def orphan_risks(rows: dict[int, Row]) -> set[int]:
    """The pids whose exit could orphan a process group with a stopped member: the members of such a group
    and their parents. Empty when nothing is stopped (the common case: no orphaned-group fate to work out)."""
    stopped = {r.pgrp for r in rows.values() if r.state == STOPPED}
    if not stopped:
        return set()
    return {p for r in rows.values() if r.pgrp in stopped for p in (r.pid, r.ppid)}


def _linked(members: list[Row], group: int, rows: dict[int, Row], gone: set[int]) -> bool:
    """Whether a member's parent, in another group of the member's session, keeps GROUP from being orphaned
    (will_become_orphaned_pgrp); a parent that is gone or pid 1 (the reaper of what re-parents) links none."""
    for m in members:
        parent = rows.get(m.ppid) if m.ppid not in gone and m.ppid != 1 else None
        if parent is not None and parent.pgrp != group and parent.session == m.session:
            return True
    return False


def orphaned_by(dying: Row, rows: dict[int, Row], gone: set[int],
                groups: dict[int, list[Row]]) -> list[Row]:
    """The processes of each group DYING's exit orphans while a member is stopped (GONE: dying already)."""
    candidates = []
    if dying.ppid not in gone:
        parent = rows.get(dying.ppid)
        if parent is not None and parent.pgrp != dying.pgrp and parent.session == dying.session:
            candidates.append(dying.pgrp)
    candidates += [r.pgrp for r in rows.values() if r.ppid == dying.pid and r.pid not in gone
                   and r.pgrp != dying.pgrp and r.session == dying.session]
    out: list[Row] = []
    for group in dict.fromkeys(candidates):
        members = [r for r in groups.get(group, []) if r.pid not in gone and r.state not in ("Z", "X")]
        if any(m.state == STOPPED for m in members) and not _linked(members, group, rows, gone):
            out += members
    return out


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
    risks = orphan_risks(rows)
    if target is None or not (may_take_others(target) or pid in risks):
        return []
    if chains is None:
        chains = ns_chains(rows, proc_root) if any(is_ns_init(r) for r in rows.values()) else {}
    groups: dict[int, list[Row]] = {}
    if risks:
        for r in rows.values():
            groups.setdefault(r.pgrp, []).append(r)
    out: list[Companion] = []
    seen = {pid}
    gone = {pid}
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
        if risks:  # last: a process the hangup or the namespace's end takes is listed for that
            found += [(r, ORPHANED, sig_bit(r.sig_ign, signal.SIGHUP)) for r in orphaned_by(dying, rows, gone, groups)]
        for r, why, ignores in found:
            if r.pid in seen or r.state in ("Z", "X"):
                continue
            seen.add(r.pid)
            out.append(Companion(r.pid, r.start, why, dying.pid, ignores))
            if not ignores:
                gone.add(r.pid)
                queue.append(r)
    return out


def fate_now(pid: int, proc_root: str = "/proc") -> list[Companion]:
    """``fate`` read fresh: a whole /proc pass only when PID leads a terminal, is a namespace init, or some
    process is stopped (its group may be orphaned)."""
    row = read_row(pid, proc_root)
    if row is None or not (may_take_others(row) or any_stopped(proc_root)):
        return []
    rows = read_rows(proc_root)
    rows[pid] = row
    return fate(pid, rows, proc_root=proc_root)


def any_stopped(proc_root: str = "/proc") -> bool:
    for pid in _pids(proc_root):
        st = read_stat(pid, proc_root)
        if st is not None and st.state == STOPPED:
            return True
    return False


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
