"""What a simulated GPU holder process does to look like a real one from /proc and the sim driver.

A CUDA context opens ``/dev/nvidiaN``, ``/dev/nvidiactl`` and ``/dev/nvidia-uvm`` and maps them
(``rw-s`` lines in /proc/PID/maps); an NVML-only monitor opens them and maps nothing. Memory is
recorded in ``holders/<pid>.json`` with the holder's own (pid, start time), so the simulated driver
frees it the moment the process is gone, whatever is left on disk.

Stdlib only: holder processes import this module and nothing heavy.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import signal
from dataclasses import dataclass, field

from kimitui.hosts.agent import start_time_of
from kimitui.hosts.sim.layout import DEV_FILE_BYTES, SimLayout, write_atomic

_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1


def own_start_time() -> int:
    """This process's start time in clock ticks after boot (/proc/self/stat field 22)."""
    start = start_time_of(os.getpid())
    assert start is not None
    return start


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
    paths = [layout.ctl_dev, layout.uvm_dev] + [layout.gpu_dev(i) for i in gpus]
    handles = DeviceHandles()
    for path in paths:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        handles.fds.append(fd)
        if mapped:
            handles.maps.append(mmap.mmap(fd, DEV_FILE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))
    return handles


def write_holder_record(layout: SimLayout, mem_mib: dict[int, int], *, util: int | None = None) -> None:
    """Record the memory this process holds, as ``holders/<own pid>.json``."""
    pid = os.getpid()
    record: dict[str, object] = {
        "pid": pid,
        "start_time": own_start_time(),
        "mem_mib": {str(gpu): int(mib) for gpu, mib in mem_mib.items()},
    }
    if util is not None:
        record["util"] = util
    write_atomic(layout.holder_file(pid), json.dumps(record))


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


def set_comm(title: str) -> None:
    """Set /proc/self/comm (15 bytes at most), the name ``ps -o comm`` and ``top`` show."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)
