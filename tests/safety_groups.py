"""Groups of real processes for the safety tables (tests/safety_tables.py) where the kernel, not the cleanup,
decides more than one fate, or where /proc misleads (issue 32). Each group is started by the harness, its
processes' roles known because it started them, each one's wait status read (directly, or through a launcher
that dies of the signal its child died of):

- ``tty``: a GPU holder leading a session with a pty as its controlling terminal (as under screen -dm) and a
  helper it double-forked without setsid (re-parented to the harness, no descendant, in the terminal's
  foreground group): when the leader ends, the kernel's SIGHUP ends the helper.
- ``ns``: a GPU holder that is PID 1 of a PID namespace of its own, and a process entered into that namespace
  from outside (nsenter): when the init ends, the kernel SIGKILLs it. A SIGTERM the init has no handler for is
  dropped.
- ``pgrp``: a GPU holder leading a process group whose only link to its session is itself (the session's leader,
  its launcher, is its parent), with a child and a helper it double-forked without setsid (re-parented to the
  harness, no descendant, in its group), both stopped by the harness (SIGSTOP): when the holder ends, the group
  is orphaned with stopped members and the kernel sends it SIGHUP then SIGCONT, which ends the helper and the
  child (a running member would live on kernels that send the SIGHUP to stopped members only: docs/vllm.md).
- ``exec_daemon``: a GPU holder that execs into a host daemon's executable on SIGTERM (same pid, same start).
- ``lead_exit``: a GPU holder whose main thread called pthread_exit: /proc reads its leader as a zombie.
- ``orphans``: a GPU holder that forked two children, then was SIGKILLed (by the harness, before the cleanup):
  the driver keeps its memory under its dead pid while the children (inheritors) live.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field

GROUP_KINDS = ("tty", "ns", "pgrp", "exec_daemon", "lead_exit", "orphans")

LAUNCH = r"""
import ctypes, os, signal, sys
mode, argv = sys.argv[1], sys.argv[2:]
for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):  # as a shell's job has them (the suite may not)
    signal.signal(sig, signal.SIG_DFL)
if mode == "ns" and ctypes.CDLL(None, use_errno=True).unshare(0x20000000) != 0:  # CLONE_NEWPID
    raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")
if mode == "tty":
    master, slave = os.openpty()
if mode == "pgrp":
    os.setsid()
pid = os.fork()
if pid == 0:
    if mode == "tty":
        os.close(master)
        os.login_tty(slave)
    if mode == "pgrp":
        os.setpgid(0, 0)
    os.execv(argv[0], argv)
if mode == "tty":
    os.close(slave)
status = os.waitpid(pid, 0)[1]
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
os._exit(os.WEXITSTATUS(status))
"""
"""A launcher (``python -c LAUNCH MODE ARGV...``): runs ARGV as the leader of a new session with a pty as its
controlling terminal (tty; it holds the master, as screen does), as PID 1 of a new PID namespace (ns), or as the
leader of a process group of a new session whose leader it stays (pgrp: the group's one link), waits
for it, and dies of the signal it died of (so the harness reads the child's fate from the launcher's status)."""

EXEC_ON_TERM = ("import os, signal, sys\n"
                "signal.signal(signal.SIGTERM, lambda *a: os.execv(sys.argv[1], sys.argv[1:]))\n"
                "while True:\n    signal.pause()\n")
"""``python -c EXEC_ON_TERM EXE TOKEN``: on SIGTERM it becomes ``EXE TOKEN`` (a host daemon's executable)."""

LEAD_EXIT = ("import ctypes, signal, threading\n"
             "threading.Thread(target=lambda: [signal.pause() for _ in iter(int, 1)]).start()\n"
             "ctypes.CDLL(None).pthread_exit(None)\n")
"""``python -c LEAD_EXIT TOKEN``: its main thread exits, another one goes on."""

ROLES = {
    "tty": ("tty_leader", "hup_helper"),
    "ns": ("ns_init", "ns_guest"),
    "pgrp": ("pgrp_leader", "stopped_child", "pgrp_helper"),
    "exec_daemon": ("exec_daemon",),
    "lead_exit": ("lead_exited",),
    "orphans": ("dead_owner", "inheritor", "inheritor"),
}
"""Each group's processes by role, its holder first."""

OTHER_HOLDERS = frozenset({"tty_leader", "ns_init", "pgrp_leader", "exec_daemon", "lead_exited", "inheritor"})
"""Roles that are GPU holders not the service's: signalled only in the others step (or later, once consented)."""
TICK_ONLY = frozenset({"hup_helper", "ns_guest", "stopped_child", "pgrp_helper"})
"""Roles the cleanup may end only when the operator ticked them: they die with another (its preview lists them)."""


@dataclass(slots=True)
class GroupSpec:
    kind: str
    gpu: int
    mib: float
    tokens: list[int] = field(default_factory=list)


def generate_groups(seed: int, scope: list[int], tok: object) -> list[GroupSpec]:
    """Zero to two groups, from a stream of their own (the rest of a table is the same as without them)."""
    rng = random.Random(seed ^ 0x6A7E)
    out = []
    for _ in range(rng.choice((0, 0, 1, 1, 2))):
        kind = rng.choice(GROUP_KINDS)
        out.append(GroupSpec(kind, rng.choice(scope), float(rng.choice((300, 2048, 17_000))),
                             [tok() for _ in ROLES[kind]]))  # type: ignore[operator]
    return out


def python() -> str:
    return sys.executable
