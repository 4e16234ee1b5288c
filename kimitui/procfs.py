"""Reading /proc on the machine kimitui runs on (the agent carries its own copy for remote hosts)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    comm: str
    state: str
    ppid: int
    start_time: int


def parse_stat(text: str) -> ProcStat:
    """Parse /proc/PID/stat; the command name may hold spaces and parentheses, so split at the last ')'."""
    head, _, rest = text.rpartition(")")
    pid_s, _, comm = head.partition(" (")
    fields = rest.split()
    return ProcStat(int(pid_s), comm, fields[0], int(fields[1]), int(fields[19]))


def read_stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return parse_stat(fh.read())
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None


def read_start_time(pid: int) -> int | None:
    stat = read_stat(pid)
    return None if stat is None or stat.state == "Z" else stat.start_time
