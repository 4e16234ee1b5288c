"""The host's own GPU daemons (persistence, DCGM, fabric manager, the display server, NVML monitors), known by
executable or systemd unit: never signalled. Checked by the cleanup when it builds a preview and again by the
agent right before each signal (a process may exec into one between two signals: same pid, same start time).
A name here only ever spares. Imported by the agent (py3.8)."""

from __future__ import annotations

HOST_DAEMON_EXES = {
    "nvidia-persistenced": "the NVIDIA persistence daemon",
    "nv-hostengine": "the DCGM host engine",
    "dcgm-exporter": "the DCGM exporter",
    "dcgmi": "a DCGM client",
    "nv-fabricmanager": "the NVIDIA fabric manager",
    "nvidia-fabricmanager": "the NVIDIA fabric manager",
    "Xorg": "the X server",
    "X": "the X server",
    "Xwayland": "the X server (Xwayland)",
    "nvidia-smi": "an NVML monitor",
    "nvtop": "an NVML monitor",
}
"""Executable basenames of the host's own GPU daemons -> what they are."""
HOST_DAEMON_EXE_PREFIXES = {"gdm": "the display manager (GDM)"}
HOST_DAEMON_UNITS = {
    "nvidia-persistenced.service": "the NVIDIA persistence daemon",
    "nvidia-dcgm.service": "the DCGM host engine",
    "dcgm.service": "the DCGM host engine",
    "dcgm-exporter.service": "the DCGM exporter",
    "nvidia-dcgm-exporter.service": "the DCGM exporter",
    "nvidia-fabricmanager.service": "the NVIDIA fabric manager",
    "gdm.service": "the display manager (GDM)",
    "gdm3.service": "the display manager (GDM)",
    "display-manager.service": "the display manager",
}
"""systemd units of the host's own GPU daemons -> what they are."""


def exe_basename(exe: str) -> str:
    """The executable's file name; a binary replaced on disk reads 'PATH (deleted)' and still counts."""
    if exe.endswith(" (deleted)"):
        exe = exe[:-len(" (deleted)")]
    return exe.rsplit("/", 1)[-1]


def host_daemon(exe: str | None, unit: str | None) -> str | None:
    """Why this process is one of the host's own daemons (never signalled), or None.

    The executable is matched by its file name, not its full path: the same daemon lives in /usr/bin,
    /usr/sbin, /usr/lib/xorg, /usr/libexec, /opt/... or a container's root, and a match only ever spares
    (shown in the preview with this reason), so a false match costs a process left alone, never a signal.
    The name comes from /proc/PID/exe, which the kernel sets at exec; argv[0] is never read (any process
    can call itself nvidia-persistenced)."""
    if exe:
        name = exe_basename(exe)
        what = HOST_DAEMON_EXES.get(name) or next(
            (w for prefix, w in HOST_DAEMON_EXE_PREFIXES.items() if name.startswith(prefix)), None)
        if what is not None:
            return f"the host's own daemon: {what} (executable {exe})"
    if unit and unit in HOST_DAEMON_UNITS:
        return f"the host's own daemon: {HOST_DAEMON_UNITS[unit]} (unit {unit})"
    return None
