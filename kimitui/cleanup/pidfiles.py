"""What a service manager's tools say on the host (``_query``: the tool run, or why it could not be), and a
pidfile read and judged there: ``_read_pidfile`` (capped: a pidfile holds one number) and ``stale_pidfile``
(its pid now another process's, started after the file was written: proven with the host's own clocks)."""

from __future__ import annotations

import time

from kimitui.hosts.base import CommandResult, Host, HostError


def _first_line(*texts: str) -> str:
    for text in texts:
        for line in text.splitlines():
            if line.strip():
                return line.strip()[:200]
    return ""


async def _query(host: Host, argv: list[str]) -> tuple[CommandResult | None, str]:
    """The manager's own query; (None, why) when it could not run (the tool missing, the host down)."""
    try:
        res = await host.run(argv, timeout=30.0)
    except HostError as exc:
        return None, str(exc)
    if res.rc in (126, 127):  # the remote shell's "command not found" / "not executable"
        return None, f"{host.name}: {argv[0]}: {_first_line(res.stderr) or 'command not found'}"
    return res, ""


PIDFILE_MAX_BYTES = 64 * 1024
"""A pidfile holds one number: a larger file is not a pidfile and is not read in full."""


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


async def _host_number(host: Host, argv: list[str]) -> int | None:
    res, _ = await _query(host, argv)
    if res is None or not res.ok or not res.stdout.strip().isdigit():
        return None
    return int(res.stdout.strip())


async def _boot_time(host: Host) -> int | None:
    try:
        text = (await host.read_file("/proc/stat")).decode(errors="replace")
    except (OSError, HostError):
        return None
    for line in text.splitlines():
        if line.startswith("btime ") and line.split()[1].isdigit():
            return int(line.split()[1])
    return None


CLOCKS_SCRIPT = 'date +%s.%N && stat -L -c %.9Y -- "$1" && cat /proc/uptime && date +%s.%N'
"""The host's clocks in one command (the pidfile's path as $1, never pasted into the script): the wall
clock, the file's mtime to the nanosecond, the time since boot (the clock /proc/PID/stat's start times count
on, to the centisecond), the wall clock again (the two readings bound when the uptime was read)."""

STALE_MARGIN_S = 0.02
"""Beyond the readings' own bounds: an earliest start this much past the mtime is a process started after."""


async def stale_pidfile(host: Host, path: str, pid: int, start_ticks: int) -> str | None:
    """The one line refusing a pidfile whose pid now belongs to a process started after the file was
    written (the service exited, another process took its pid); None when it is not proven stale (a file
    or clock that cannot be read is not). The host's own clocks throughout, and a bound, not an estimate:
    the process's earliest possible start (its boot-relative start in clock ticks, on the earliest boot time
    the readings allow) must be past the file's mtime. To the centisecond where the host's ``stat`` and
    ``date`` give nanoseconds, else to the second (``stat -c %Y`` against ``btime``)."""
    ticks = await _host_number(host, ["getconf", "CLK_TCK"])
    if not ticks:
        return None
    fine = await _fine_clocks(host, path)
    if fine is not None:
        written, boot_earliest = fine
        started = boot_earliest + start_ticks / ticks
        if started <= written + STALE_MARGIN_S:
            return None
    else:
        whole = await _host_number(host, ["stat", "-L", "-c", "%Y", "--", path])
        boot = await _boot_time(host)
        if whole is None or boot is None:
            return None
        written, started = float(whole), boot + start_ticks / ticks  # btime is rounded down: at most 1 s early
        if started < written + 1:
            return None
    return (f"pidfile {path} on {host.name} is stale: written {_utc(written)}, but pid {pid} is a process started "
            f"{_utc(started)}, after it (the pid was reused): refused, nothing is signalled")


CLOCK_READINGS = 4
"""The clocks are read up to this many times: each reading bounds the boot time from below by the wall clock
read before the uptime, so a reading the host was slow to make (a loaded host, the shell descheduled between
``date`` and ``cat``) bounds it loosely, and a stale pidfile goes unproven; the tightest bound is kept."""
TIGHT_READING_S = 0.005
"""A reading whose two wall-clock readings are this close bounds the boot time well enough: no more are made."""


async def _fine_clocks(host: Host, path: str) -> tuple[float, float] | None:
    """(the file's mtime, the earliest boot time the readings allow), both wall-clock seconds; None when the
    host's tools do not give nanoseconds (busybox) or a reading fails. The boot time is fixed: each reading's
    lower bound holds, and the highest of them is the tightest (``CLOCK_READINGS``)."""
    best: tuple[float, float] | None = None
    for _ in range(CLOCK_READINGS):
        reading = await _clock_reading(host, path)
        if reading is None:
            return best
        mtime, earliest_boot, window = reading
        best = (mtime, earliest_boot if best is None else max(best[1], earliest_boot))
        if window <= TIGHT_READING_S:
            break
    return best


async def _clock_reading(host: Host, path: str) -> tuple[float, float, float] | None:
    """One reading: (the file's mtime, the earliest boot time it allows, the time between its two wall-clock
    readings); None when it fails."""
    res, _ = await _query(host, ["sh", "-c", CLOCKS_SCRIPT, "sh", path])
    if res is None or not res.ok:
        return None
    lines = res.stdout.split()
    try:
        before, mtime, uptime, _idle, after = (float(x) for x in lines[:5])
    except ValueError:
        return None
    if len(lines) != 5 or "." not in lines[1] or after < before:
        return None
    # the uptime was read between the two wall-clock readings and is cut to the centisecond: the boot was
    # no earlier than the first reading minus the uptime read, minus that centisecond
    return mtime, before - uptime - 0.01, after - before


async def _read_pidfile(host: Host, path: str, what: str) -> tuple[int | None, str | None]:
    try:
        text = (await host.read_file(path, max_bytes=PIDFILE_MAX_BYTES)).decode(errors="replace").strip()
    except FileNotFoundError:
        return None, f"{what} not found on {host.name}"
    except (OSError, HostError) as exc:
        return None, f"{what} cannot be read on {host.name}: {exc}"
    if not text.isdigit() or int(text) <= 1:
        return None, f"{what} on {host.name} holds no pid ({text[:40]!r})"
    return int(text), None
