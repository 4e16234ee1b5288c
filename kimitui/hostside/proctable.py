"""The process table the agent's ``scan`` answers with: every process, who is scanning, and what the kernel
ends along with each one that may take others with it (fate.py)."""

from __future__ import annotations

import os

from .fate import Row, fate, is_ns_init, may_take_others, ns_chains, orphan_risks, wire
from .procfs import ancestry, pidns_of, read_cmdline, read_exe, read_stat, read_status, user_name

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any


def process_table(proc_root: str = "/proc") -> dict[str, Any]:
    """Every process (pid, ppid, start, state, uid, user, cmdline, exe, process group, session, terminal and
    its foreground group, NSpid, and ``takes``: what the kernel ends with it, see fate.py), and who is
    scanning: this process and its ancestors (over SSH: the session's sshd processes and the listening sshd)."""
    me = os.getpid()
    procs = []
    rows = {}
    for name in os.listdir(proc_root):
        if not name.isdigit():
            continue
        pid = int(name)
        st = read_stat(pid, proc_root)
        if st is None:
            continue
        status = read_status(pid, proc_root)
        uid = status.uid if status is not None else None
        ns = pidns_of(pid, proc_root)
        rows[pid] = Row(pid, st.start_time, st.state, st.pgrp, st.session, st.tty_nr, st.tpgid,
                        tuple(status.nspid) if status else (), status.sig_ign if status else 0, ns, st.ppid)
        procs.append({"pid": pid, "ppid": st.ppid, "state": st.state, "start": st.start_time, "uid": uid,
                      "user": user_name(uid), "cmdline": read_cmdline(pid, proc_root, st),
                      "exe": read_exe(pid, proc_root, st), "pgrp": st.pgrp, "sid": st.session,
                      "tty": st.tty_nr, "tpgid": st.tpgid, "nspid": list(rows[pid].nspid),
                      "leader_exited": bool(st.task)})
    risks = orphan_risks(rows)
    if risks or any(may_take_others(r) for r in rows.values()):
        chains = ns_chains(rows, proc_root) if any(is_ns_init(r) for r in rows.values()) else {}
        for p in procs:
            if p["pid"] in risks or may_take_others(rows[p["pid"]]):
                takes = fate(p["pid"], rows, chains, proc_root)
                if takes:
                    p["takes"] = wire(takes)
    return {"self_pid": me, "uid": os.getuid(), "user": user_name(os.getuid()),
            "ancestors": [a.pid for a in ancestry(me, proc_root)], "procs": procs}
