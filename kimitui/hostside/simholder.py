"""What a process does to hold memory on the simulated driver (simdriver.py reads it): open and map the
device files the way a CUDA context does, and write its holder record with its own (pid, start time). The
micro workers do it on the simulated host; so do the simulator's holder processes (kimitui/hosts/sim)."""

from __future__ import annotations

import json
import os

from .procfs import start_time_of

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any

DEV_FILE_BYTES = 4096
"""Each simulated device file is one page (a holder maps it)."""


def device_paths(sim_dir: str, gpus: list[int]) -> list[str]:
    """nvidiactl, nvidia-uvm and each GPU's nvidiaN, the files a CUDA context opens."""
    dev = os.path.join(sim_dir, "dev", "nvidia")
    return [dev + "ctl", dev + "-uvm"] + [dev + str(g) for g in gpus]


def open_device_files(sim_dir: str, gpus: list[int], mapped: bool = True) -> tuple[list[int], list[Any]]:
    """(fds, maps): the device files open and, for a CUDA context (``mapped``), mapped shared (the maps'
    ``rw-s`` lines a real context shows); an NVML-only monitor opens them and maps nothing."""
    import mmap

    fds: list[int] = []
    maps: list[Any] = []
    for path in device_paths(sim_dir, gpus):
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        fds.append(fd)
        if mapped:
            maps.append(mmap.mmap(fd, DEV_FILE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))
    return fds, maps


def write_holder_record(sim_dir: str, mem_mib: dict[int, Any], util: int | None = None,
                        ctx: str | None = None) -> None:
    """``holders/<own pid>.json``: the memory this process holds, with its own (pid, start time), so the
    driver frees it the moment the process is gone whatever is left on disk. Written through a temporary
    file and renamed (a reader never sees half of it)."""
    import tempfile

    pid = os.getpid()
    record: dict[str, Any] = {"pid": pid, "start_time": start_time_of(pid),
                              "mem_mib": {str(gpu): mib for gpu, mib in mem_mib.items()}}
    if util is not None:
        record["util"] = util
    if ctx is not None:
        record["ctx"] = ctx
    folder = os.path.join(sim_dir, "holders")
    fd, tmp = tempfile.mkstemp(prefix=f".{pid}.json.", dir=folder)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(record))
        os.replace(tmp, os.path.join(folder, f"{pid}.json"))
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def open_context(sim_dir: str) -> tuple[str, int]:
    """(path, fd): a context file of this process's own, locked (flock, exclusive). A flock belongs to the open
    file description, as a real context's memory does: children forked since share it, and it is let go only
    when the last of their descriptors closes. The driver keeps a holder's memory while it is held
    (simdriver's ``context_held``), after the holder itself has exited."""
    import fcntl

    folder = os.path.join(sim_dir, "contexts")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{os.getpid()}.ctx")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return path, fd


def hold_simulated_memory(sim_dir: str, gpus: list[int], mib: int, util: int) -> list[Any]:
    """Hold MIB on each GPU the way the simulated driver counts it and map the device files the way a
    CUDA context does (the micro workers on the simulated host). Returns what to keep referenced."""
    fds, maps = open_device_files(sim_dir, gpus)
    write_holder_record(sim_dir, {g: mib for g in gpus}, util)
    return [*fds, *maps]
