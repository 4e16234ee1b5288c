"""The host's process table, read from /proc: who runs, their parents, start times, states, users.

Self-contained (stdlib only): on the machine kimitui runs on it is called in-process; on a remote host its
own source is run by the host's python3 (``python3 -c SOURCE scan`` or ``... stat PID...``) and prints one
JSON object. The scan also names the scanning process and its ancestors: over SSH those are the session's
shell, its sshd and the listening sshd, which the cleanup must never signal.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) from /proc/PID/stat, or None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rpartition(")")[2].split()
        return int(rest[1]), rest[0], int(rest[19])
    except (OSError, ValueError, IndexError):
        return None


def _uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return ""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


_USERS: dict[int, str] = {}


def _user(uid: int | None) -> str | None:
    if uid is None:
        return None
    if uid not in _USERS:
        try:
            import pwd

            _USERS[uid] = pwd.getpwuid(uid).pw_name
        except (KeyError, ImportError):
            _USERS[uid] = str(uid)
    return _USERS[uid]


def ancestors(pid: int) -> list[int]:
    out: list[int] = []
    seen = {pid}
    while True:
        st = _stat(pid)
        if st is None or st[0] <= 0 or st[0] in seen:
            return out
        pid = st[0]
        seen.add(pid)
        out.append(pid)


def stat(pids: list[int]) -> dict[str, Any]:
    """{"procs": {pid: [start, state]}} for the pids still present (zombies included, state Z)."""
    out: dict[str, list[Any]] = {}
    for pid in pids:
        st = _stat(pid)
        if st is not None:
            out[str(pid)] = [st[2], st[1]]
    return {"procs": out}


def scan() -> dict[str, Any]:
    """Every process: pid, ppid, start, state, uid, user, cmdline; and who is scanning."""
    me = os.getpid()
    procs = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        st = _stat(pid)
        if st is None:
            continue
        uid = _uid(pid)
        procs.append({"pid": pid, "ppid": st[0], "state": st[1], "start": st[2], "uid": uid,
                      "user": _user(uid), "cmdline": _cmdline(pid)})
    return {"self_pid": me, "uid": os.getuid(), "user": _user(os.getuid()), "ancestors": ancestors(me),
            "procs": procs}


def main(argv: list[str]) -> int:
    if argv and argv[0] == "scan":
        print(json.dumps(scan()))
    elif argv and argv[0] == "stat":
        print(json.dumps(stat([int(a) for a in argv[1:]])))
    else:
        print(json.dumps({"error": "usage: scan | stat PID..."}))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
