"""What a simulated GPU holder process does to look like a real one from /proc and the sim driver.

A CUDA context opens ``/dev/nvidiaN``, ``/dev/nvidiactl`` and ``/dev/nvidia-uvm`` and maps them
(``rw-s`` lines in /proc/PID/maps); an NVML-only monitor opens them and maps nothing. Memory is
recorded in ``holders/<pid>.json`` with the holder's own (pid, start time), so the simulated driver
frees it the moment the process is gone, whatever is left on disk.

Stdlib only: holder processes import this module and nothing heavy.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
from dataclasses import dataclass, field

from kimitui.hosts.sim.layout import SimLayout
from kimitui.hostside import simholder

_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1


@dataclass
class DeviceHandles:
    """Open device files and, for a CUDA context, their shared mappings (kept referenced)."""

    fds: list[int] = field(default_factory=list)
    maps: list[mmap.mmap] = field(default_factory=list)

    def close(self) -> None:
        for m in self.maps:
            m.close()
        for fd in self.fds:
            os.close(fd)
        self.maps.clear()
        self.fds.clear()


def open_devices(layout: SimLayout, gpus: list[int], *, mapped: bool) -> DeviceHandles:
    """Open nvidiactl, nvidia-uvm and each ``nvidia<gpu>``; map them all when ``mapped``."""
    fds, maps = simholder.open_device_files(str(layout.root), gpus, mapped)
    return DeviceHandles(fds, maps)


def write_holder_record(layout: SimLayout, mem_mib: dict[int, int], *, util: int | None = None) -> None:
    """Record the memory this process holds, as ``holders/<own pid>.json``."""
    simholder.write_holder_record(str(layout.root), {gpu: int(mib) for gpu, mib in mem_mib.items()}, util)


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        pass
    from ctypes import util  # slow to import (it pulls in subprocess): only where libc.so.6 is not the name

    try:
        return ctypes.CDLL(util.find_library("c"), use_errno=True)
    except OSError:
        return None


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` when the parent exits (prctl PR_SET_PDEATHSIG). False if unavailable."""
    libc = _libc()
    if libc is None:
        return False
    return int(libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0


def set_title(title: str) -> None:
    """What setproctitle does for a vLLM worker: the name (comm) and the command line both read TITLE. The
    command line is the argv block on this process's stack (arg_start..arg_end in /proc/self/stat, fields 48
    and 49), overwritten in place and padded with NULs; Python keeps its own copy of its arguments."""
    set_comm(title)
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rpartition(b")")[2].split()
        start, end = int(fields[45]), int(fields[46])
    except (OSError, ValueError, IndexError):
        return
    if not start or end <= start:
        return
    raw = title.encode()[: end - start - 1]
    ctypes.memmove(start, raw + b"\0" * (end - start - len(raw)), end - start)


def set_comm(title: str) -> None:
    """Set /proc/self/comm (15 bytes at most), the name ``ps -o comm`` and ``top`` show."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)
