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
from kimitui.events import GpuSample, HostSample, ProcSample

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

STEPS = ("graceful", "process", "device", "verify", "reset")
"""The escalation, in order. ``restart`` is run on its own (after the micro phase)."""

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

    def scope(self, sample: HostSample) -> list[int]:
        every = sorted(g.index for g in sample.gpus)
        return every if self.gpus is None else [i for i in self.gpus if i in every] or list(self.gpus)


def proc_gpus(proc: ProcSample) -> set[int]:
    """GPUs a process is on: device files it holds plus GPUs NVML lists memory for it on."""
    return set(proc.gpus) | set(proc.gpu_mem_mib)


def cuda_holders(sample: HostSample, scope: list[int]) -> list[ProcSample]:
    """Processes holding a CUDA context or memory on a GPU in scope (handle-only monitors excluded)."""
    wanted = set(scope)
    out = []
    for p in sample.procs:
        on = proc_gpus(p) & wanted
        if not on:
            continue
        if p.kind == "cuda" or any(p.gpu_mem_mib.get(i, 0) > 0 for i in wanted):
            out.append(p)
    return out
