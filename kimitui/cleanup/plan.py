"""What a cleanup is for: the service to stop, the GPUs in scope, what "clean" means, and its deadlines."""

from __future__ import annotations

from dataclasses import dataclass, field

from kimitui.cleanup.services import (
    DockerService,
    PidService,
    ServiceManager,
    SupervisorService,
    SystemdService,
)
from kimitui.core.events import GpuSample, HostSample, ProcSample

__all__ = [
    "STEPS",
    "CleanCriteria",
    "CleanupTarget",
    "Deadlines",
    "DockerService",
    "PidService",
    "ServiceManager",
    "SupervisorService",
    "SystemdService",
]

STEPS = ("drain", "graceful", "process", "others", "device", "verify", "reset")
"""The escalation, in order. ``drain`` runs only where the target names the server's metrics URL;
``restart`` is run on its own (after the micro phase)."""

OTHERS = "on the GPUs, not the service"
"""The others group: processes holding the GPUs in scope that are not the service's processes (as identified
when the cleanup began), asked for in a step of their own (consent ``others``)."""

OTHERS_NOT_CONSENTED = f"{OTHERS}: left alone (others not consented)"

V1_RESERVED_ALLOWANCE_MIB = 1024.0
"""Where the driver gives no reserved figure (NVML v1), 'used' includes the reserved memory (616 MiB on
an H200): without a baseline, that much more is still judged idle."""


@dataclass(slots=True)
class CleanCriteria:
    """A GPU is clean when its used memory is within ``threshold_mib`` of its idle baseline and no
    CUDA-context holder is left on it. The baseline is the per-GPU figure given, else 0 (telemetry reports
    used memory excluding the driver's reserved part, as nvidia-smi does), else, when the driver reports
    no reserved figure (its 'used' then includes it), ``V1_RESERVED_ALLOWANCE_MIB``."""

    threshold_mib: float = 64.0
    baselines: dict[int, float] = field(default_factory=dict)

    def baseline(self, gpu: GpuSample) -> float:
        if gpu.index in self.baselines:
            return self.baselines[gpu.index]
        return 0.0 if gpu.mem_reserved_mib is not None else V1_RESERVED_ALLOWANCE_MIB

    def gpu_clean(self, gpu: GpuSample) -> bool:
        return gpu.mem_used_mib is not None and gpu.mem_used_mib <= self.baseline(gpu) + self.threshold_mib


@dataclass(slots=True)
class Deadlines:
    """Seconds. Every wait polls at ``poll_s`` and gives up at its deadline, reporting the time it took."""

    graceful_s: float = 30.0
    term_grace_s: float = 5.0
    kill_s: float = 5.0
    verify_s: float = 10.0
    health_s: float = 120.0
    command_s: float = 90.0
    sample_s: float = 5.0
    poll_s: float = 0.02
    drain_s: float = 120.0
    """How long the drain step may wait for the server's running and waiting requests to finish."""
    reconnect_s: float = 30.0
    """After the channel dropped with signals in flight: how long a step waits for the host to be back
    to look again (re-scan) before it reports the outcome as unknown."""


@dataclass(slots=True)
class CleanupTarget:
    """One cleanup: which host, which service (optional), which GPUs (None = all), what clean means."""

    host: str = ""
    service: ServiceManager | None = None
    gpus: list[int] | None = None
    clean: CleanCriteria = field(default_factory=CleanCriteria)
    deadlines: Deadlines = field(default_factory=Deadlines)
    allow_other_users: bool = False
    operator: str = ""
    metrics_url: str | None = None
    """The server's Prometheus ``/metrics`` (vLLM's): where the drain step reads the requests in flight
    (None: no drain step)."""
    nvidia_smi: str = "nvidia-smi"
    """The GPU reset's tool, run on the host (step e); a path where it is not on the host's PATH."""
    systemctl: str = "systemctl"
    """What the reset stops and starts the DCGM unit with (step e)."""
    dry_run: bool = False
    """Previews only: nothing is signalled; each step previews what it would do were the earlier ones consented,
    and verify does not judge (nothing was done)."""

    def scope(self, sample: HostSample) -> list[int]:
        every = sorted(g.index for g in sample.gpus)
        return every if self.gpus is None else [i for i in self.gpus if i in every] or list(self.gpus)


def proc_gpus(proc: ProcSample) -> set[int]:
    """GPUs a process uses: those NVML lists memory for it on when it has any; else the GPUs whose device
    files it holds. A CUDA process maps the device files of GPUs it never allocates on (measured on a
    2 x H200 host: torch on cuda:0 opened and mapped /dev/nvidia1 too), so the files alone cannot scope it."""
    return set(proc.gpu_mem_mib) if proc.gpu_mem_mib else set(proc.gpus)


def gpus_in_scope(proc: ProcSample, scope: list[int] | set[int]) -> list[int]:
    """The GPUs in scope this process uses (``proc_gpus``)."""
    return sorted(proc_gpus(proc) & set(scope))


def _dev_files(gpus: list[int]) -> str:
    return ", ".join(f"/dev/nvidia{i}" for i in gpus)


def _mem_on(proc: ProcSample, gpus: list[int]) -> str:
    return " + ".join(f"{proc.gpu_mem_mib.get(i, 0.0):.0f} MiB on GPU {i}" for i in gpus)


def holder_reason(proc: ProcSample, scope: list[int] | set[int], sample: HostSample | None = None) -> str:
    """Why the process counts as a holder on the GPUs in scope, by what scoped it: its NVML memory
    ("holds 41570 MiB on GPU 0"), the memory of an exited process it keeps through the descriptors it inherited
    ("holds 6,662 MiB of exited pid 520 through inherited descriptors"), else the device files it maps ("maps
    /dev/nvidia1, no memory listed")."""
    on = gpus_in_scope(proc, scope)
    if proc.gpu_mem_mib:
        return f"holds {_mem_on(proc, on)}"
    if proc.inherits and sample is not None:
        kept = [p for p in sample.procs if p.pid in proc.inherits]
        if kept:
            return "holds " + " and ".join(f"{sum(p.gpu_mem_mib.values()):,.0f} MiB of exited pid {p.pid}"
                                           for p in kept) + " through inherited descriptors"
    verb = "maps" if proc.kind == "cuda" else "holds"
    return f"{verb} {_dev_files(on)}, no memory listed"


def out_of_scope_reason(proc: ProcSample, scope: list[int] | set[int]) -> str | None:
    """Why a process that touches a GPU in scope only through its device files is spared: its NVML memory
    is all on GPUs outside the scope (its handle on the scope's files is no context there). None when it
    is not such a process."""
    if not proc.gpu_mem_mib or gpus_in_scope(proc, scope):
        return None
    files = sorted(set(proc.gpus) & set(scope))
    if not files:
        return None
    outside = sorted(proc.gpu_mem_mib)
    return (f"holds {_mem_on(proc, outside)}, outside the scope; its {_dev_files(files)} handle is no "
            f"context there")


def cuda_holders(sample: HostSample, scope: list[int]) -> list[ProcSample]:
    """Processes holding a CUDA context on a GPU in scope (handle-only monitors excluded): those with NVML
    memory on a GPU in scope (an exited pid the driver still lists included), and, among those NVML lists no
    memory for, those mapping a device file of a GPU in scope (a stray holder), keeping an exited process's
    memory through inherited descriptors, or in exit with one still open (until its files are closed the GPU
    is not free). A process whose memory is all outside the scope is not one."""
    wanted = set(scope)
    out = []
    for p in sample.procs:
        if not (proc_gpus(p) & wanted):
            continue
        if p.gpu_mem_mib or p.kind in ("cuda", "exiting") or p.inherits:
            out.append(p)
    return out
