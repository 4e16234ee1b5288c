"""The GPU sample's shape (``new_gpu``, the GpuSample fields) and what a source raises when it cannot run
here. Each source (nvml, smi, simdriver) gives ``(gpus, {pid: {gpu index: MiB}})`` per sample."""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any


    ProcMem = dict[int, dict[int, float]]

MIB = 1048576.0


def new_gpu(index: int, uuid: str, name: str) -> dict[str, Any]:
    return {"index": index, "uuid": uuid, "name": name, "mem_used_mib": None, "mem_total_mib": None,
            "mem_reserved_mib": None, "util_pct": None, "temp_c": None, "power_w": None,
            "sm_clock_mhz": None, "throttle": None, "pcie": None, "xid": None, "error": None}


class NoDriver(Exception):
    """This source cannot run here (the message says why)."""


def text(v: Any) -> str | None:
    """NVML's strings: bytes in older pynvml, str in newer."""
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v
