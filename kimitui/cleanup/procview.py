"""A stand-in ProcessView for the machine kimitui runs on, read straight from /proc on every call.

Used where no telemetry agent streams samples (the real-GPU demo script without the agent, and tests
written before the agent existed). It builds the same HostSample the agent does: GPU memory from a
``MemorySource`` (NVML through pynvml, or a simulated host's directory), device holders from
/proc/*/fd and /proc/*/maps (mapped = CUDA context, open only = handle), identity from /proc/PID/stat.
Stdlib only, unless NvmlMemory is used.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Protocol

from kimitui.cleanup import proctable
from kimitui.core.events import GpuSample, HostSample, ProcSample

ProcMem = dict[int, dict[int, float]]


class MemorySource(Protocol):
    def read(self) -> tuple[list[GpuSample], ProcMem]:
        """The GPUs (memory used EXCLUDING the driver's reserved memory) and memory per pid per GPU."""
        ...


class SimDirMemory:
    """A simulated driver directory: gpus.json and holders/<pid>.json (kimitui.hosts.sim's layout).
    A holder's memory counts only while its (pid, start time) is alive."""

    def __init__(self, sim_dir: str | Path) -> None:
        self.dir = Path(sim_dir)

    def read(self) -> tuple[list[GpuSample], ProcMem]:
        spec = json.loads((self.dir / "gpus.json").read_text())["gpus"]
        procs: ProcMem = {}
        used: dict[int, float] = {}
        for path in (self.dir / "holders").glob("*.json"):
            try:
                h = json.loads(path.read_text())
                pid = int(h["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            st = proctable._stat(pid)
            if st is None or st[1] in ("Z", "X") or st[2] != h.get("start_time"):
                continue
            for k, mib in (h.get("mem_mib") or {}).items():
                procs.setdefault(pid, {})[int(k)] = float(mib)
                used[int(k)] = used.get(int(k), 0.0) + float(mib)
        gpus = [GpuSample(int(s["index"]), s.get("uuid", ""), s.get("name", ""),
                          mem_used_mib=used.get(int(s["index"]), 0.0), mem_total_mib=float(s["total_mib"]),
                          mem_reserved_mib=float(s.get("reserved_mib", 0)))
                for s in spec]
        return gpus, procs


class NvmlMemory:
    """Real GPUs through pynvml (used excluding reserved where the v2 memory info exists)."""

    def __init__(self) -> None:
        import pynvml

        self.nv: Any = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def read(self) -> tuple[list[GpuSample], ProcMem]:
        nv, mib = self.nv, 1048576.0
        gpus: list[GpuSample] = []
        procs: ProcMem = {}
        for i, h in enumerate(self.handles):
            g = GpuSample(i, _text(nv.nvmlDeviceGetUUID(h)), _text(nv.nvmlDeviceGetName(h)))
            try:
                m = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
                g.mem_used_mib, g.mem_total_mib, g.mem_reserved_mib = m.used / mib, m.total / mib, m.reserved / mib
            except Exception:
                m = nv.nvmlDeviceGetMemoryInfo(h)
                g.mem_used_mib, g.mem_total_mib = m.used / mib, m.total / mib
            for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                used = (p.usedGpuMemory or 0) / mib
                procs.setdefault(int(p.pid), {})[i] = procs.get(int(p.pid), {}).get(i, 0.0) + used
            gpus.append(g)
        return gpus, procs


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def device_holders(dev_prefix: str) -> dict[int, tuple[str, list[int]]]:
    """{pid: (kind, gpu indices)} for every process with a device file under the prefix open or mapped."""
    out: dict[int, tuple[str, list[int]]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            targets = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        devs = {t for t in targets if t.startswith(dev_prefix)}
        if not devs:
            continue
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            maps = ""
        mapped = {line.split(None, 5)[5].strip() for line in maps.splitlines()
                  if len(line.split(None, 5)) == 6 and line.split(None, 5)[5].startswith(dev_prefix)}
        gpus = sorted({int(p[len(dev_prefix):]) for p in devs | mapped if p[len(dev_prefix):].isdigit()})
        out[pid] = ("cuda" if mapped else "handle", gpus)
    return out


class LocalProcView:
    """ProcessView that samples now, on every call (each call returns a fresh sample)."""

    def __init__(self, memory: MemorySource, dev_prefix: str = "/dev/nvidia", host: str = "local",
                 agent_pid: int | None = None) -> None:
        self.memory, self.dev_prefix, self.host, self.agent_pid = memory, dev_prefix, host, agent_pid
        self.seq = 0

    def sample_now(self) -> HostSample:
        gpus, mem = self.memory.read()
        holders = device_holders(self.dev_prefix)
        procs: list[ProcSample] = []
        for pid in sorted(set(mem) | set(holders)):
            st = proctable._stat(pid)
            kind, gpus_held = holders.get(pid, ("unknown", []))
            p = ProcSample(pid, gpu_mem_mib=mem.get(pid, {}), kind=kind,  # type: ignore[arg-type]
                           gpus=gpus_held or sorted(mem.get(pid, {})))
            if st is None:
                p.visible, p.flags = False, ["not-visible"]
            else:
                p.ppid, p.state, p.start_time = st
                p.user = proctable._user(proctable._uid(pid))
                p.cmdline = proctable._cmdline(pid)
            procs.append(p)
        self.seq += 1
        return HostSample(t=time.time(), host=self.host, seq=self.seq, gpus=gpus, procs=procs,
                          agent_pid=self.agent_pid, source="procfs")

    async def latest(self, after: float | None = None, timeout: float = 5.0) -> HostSample:
        return await asyncio.to_thread(self.sample_now)
