"""What dies along with a step's targets without a signal of ours: previewed, and consented before a target goes.

The agent's scan says, for each process, what the kernel ends when it ends (``ProcInfo.takes``: the foreground
process group of a terminal it leads gets SIGHUP; every process of a PID namespace it is init of gets SIGKILL;
each member of a process group its end orphans while a member is stopped gets SIGHUP and SIGCONT, as POSIX
says; some kernels send that SIGHUP to the stopped members only, e.g. 6.18.44 on an H200 host, and a running
member then lives: it is listed anyway, the safe side).
Each step lists those processes in its preview ("dies with pid N (terminal hangup)"), tickable. A target is
signalled only when every process that would die with it is the service's or was ticked; else it is refused
with one line saying which and how to go on. The agent checks it again, fresh, right before the signal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimitui.cleanup.consent import OPTIONAL
from kimitui.cleanup.hostprocs import ProcScan, Takes
from kimitui.cleanup.safety import Candidate
from kimitui.core.procdisplay import command_gist

if TYPE_CHECKING:
    from kimitui.cleanup.context import Confirmed, Key, StepContext
    from kimitui.core.events import HostSample

HOW_TO_PROCEED = "tick it in this step's preview (+PID at the prompt), or stop it first"


def takes(scan: ProcScan | None, c: Candidate) -> list[Takes]:
    """What the kernel ends with ``c`` (the same incarnation the scan saw), those that ignore it left out."""
    info = scan.procs.get(c.pid) if scan is not None else None
    if info is None or info.start_time != c.start_time:
        return []
    return [t for t in info.takes if not t.ignores]


def companion_rows(ex: StepContext, scan: ProcScan, sample: HostSample | None, targets: list[tuple[Candidate, str]],
                   spared: list[tuple[Candidate, str]]) -> list[tuple[Candidate, str]]:
    """The preview's rows for what dies with the targets (those not listed already): tickable, each with the
    pid it dies with (``Candidate.dies_with``) and how; one that ignores the signal is shown as surviving."""
    listed = {c.pid for c, _ in [*targets, *spared]}
    rows: list[tuple[Candidate, str]] = []
    for c, _ in targets:
        info = scan.procs.get(c.pid)
        if info is None or info.start_time != c.start_time:
            continue
        for t in info.takes:
            if t.pid in listed or t.pid not in scan.procs or scan.procs[t.pid].start_time != t.start_time:
                continue
            listed.add(t.pid)
            other = ex.from_scan(scan, t.pid, sample)
            other.dies_with = t.via
            if t.ignores:
                rows.append((other, f"gets SIGHUP when pid {t.via} ends ({t.why}); ignores it, so it survives"))
                continue
            whose = "the service's" if ex.is_member(other) else "not the service's: unticked, pid " \
                f"{c.pid} is not signalled"
            rows.append((other, f"{OPTIONAL}dies with pid {t.via} ({t.why}); {whose}"))
    return rows


def unconsented(ex: StepContext, c: Candidate, confirmed: Confirmed) -> list[Takes]:
    """What would die with ``c`` that is neither the service's nor confirmed in this step."""
    scan = ex.last_scan
    out = []
    for t in takes(scan, c):
        key: Key = (t.pid, t.start_time)
        if key in confirmed.procs:
            continue
        info = scan.procs.get(t.pid) if scan is not None else None
        other = Candidate(t.pid, t.start_time, cmdline=info.cmdline if info else "")
        if not ex.is_member(other):
            out.append(t)
    return out


def allowed(ex: StepContext, c: Candidate, confirmed: Confirmed) -> list[tuple[int, int]]:
    """The (pid, start time) of what may die with ``c``: sent with the signal for the agent's own check."""
    bad = {(t.pid, t.start_time) for t in unconsented(ex, c, confirmed)}
    return [(t.pid, t.start_time) for t in takes(ex.last_scan, c) if (t.pid, t.start_time) not in bad]


def refusal(ex: StepContext, c: Candidate, confirmed: Confirmed) -> str | None:
    """One line: why ``c`` is not signalled (something not consented would die with it) and how to go on."""
    missing = unconsented(ex, c, confirmed)
    if not missing:
        return None
    t = missing[0]
    info = ex.last_scan.procs.get(t.pid) if ex.last_scan is not None else None
    gist = command_gist(info.cmdline)[:50] if info is not None and info.cmdline else "?"
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return (f"would take pid {t.pid} ({gist}) with it ({t.why} when pid {t.via} ends){more}, not the service's "
            f"and not consented: {HOW_TO_PROCEED}")
