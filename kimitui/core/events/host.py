"""What a host says: its samples (GPUs, processes), the connection to it, the log lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from kimitui.core.events.base import Event

ProcKind = Literal["cuda", "handle", "exiting", "exited", "unknown"]
"""How a process holds a GPU: a CUDA context (device files mapped), a handle only (open, not mapped,
like an NVML monitor), exiting (in exit, PF_EXITING, its device files not closed yet: mapped or not, it is
no monitor; the kernel unmaps before it closes the files), exited (NVML still lists memory for a pid that
has exited: processes it forked keep its device files open, ``held_by``), or unknown (NVML lists memory for
a PID that is not visible here: another PID namespace)."""


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    uuid: str
    name: str
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    mem_reserved_mib: float | None = None
    util_pct: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle: list[str] | None = None
    """The clock caps in force (``power cap``, ``thermal``, ...; kimitui/hostside/clocks.py's words); None: the
    source does not say."""
    pcie: list[int] | None = None
    """The PCIe link: [generation, width] now, then [generation, width] at most; None: the source does not say."""
    xid: int | None = None
    """The last XID error the driver reported for it since the agent started (NVML's events; 0: none); None: the
    source cannot say (nvidia-smi, a GPU the driver would not register for events)."""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ProcSample:
    pid: int
    start_time: int | None = None
    """Clock ticks after boot (/proc/PID/stat field 22): with the pid, the identity of a process."""
    user: str | None = None
    gpu_mem_mib: dict[int, float] = field(default_factory=dict)
    kind: ProcKind = "unknown"
    unit: str | None = None
    container: str | None = None
    cmdline: str = ""
    state: str | None = None
    ppid: int | None = None
    gpus: list[int] = field(default_factory=list)
    """GPUs whose device files the process holds (may differ from the GPUs NVML lists memory on)."""
    visible: bool = True
    flags: list[str] = field(default_factory=list)
    exe: str | None = None
    """The executable's path (/proc/PID/exe); None when it could not be read (or an older run)."""
    held_by: list[int] = field(default_factory=list)
    """Kind exited: the live processes that keep its memory through the descriptors they inherited from it."""
    inherits: list[int] = field(default_factory=list)
    """The exited pids whose memory this process keeps through inherited descriptors."""


@dataclass(frozen=True, slots=True)
class ProcRef:
    """A process as a preview lists it: who, and why it is (or is not) included."""

    pid: int
    start_time: int | None
    user: str | None = None
    gpus: list[int] = field(default_factory=list)
    mem_mib: float = 0.0
    unit: str | None = None
    cmdline: str = ""
    reason: str = ""
    kind: ProcKind = "unknown"
    exe: str | None = None
    dies_with: int | None = None
    """A process the kernel ends when this pid of the preview's targets ends (a terminal's hangup, a PID
    namespace's end): listed, with ``reason`` saying how, though no signal of ours goes to it."""


@dataclass(frozen=True, slots=True)
class HostSample(Event):
    type: ClassVar[str] = "sample"
    host: str = ""
    seq: int = 0
    gpus: list[GpuSample] = field(default_factory=list)
    procs: list[ProcSample] = field(default_factory=list)
    agent_pid: int | None = None
    source: str = "nvml"
    boot_time: float | None = None
    """When the host booted (unix seconds, /proc/stat btime), on the recording side's clock like ``t``:
    with ``clock_ticks`` it turns a process' start time (ticks after boot) into a time of day."""
    clock_ticks: int | None = None
    """The host's clock ticks per second (os.sysconf("SC_CLK_TCK"), 100 on Linux)."""


@dataclass(frozen=True, slots=True)
class ConnectionState(Event):
    type: ClassVar[str] = "connection"
    host: str = ""
    state: Literal["connecting", "connected", "lost", "reconnecting", "closed", "failed"] = "connected"
    detail: str = ""
    gap_s: float | None = None


@dataclass(frozen=True, slots=True)
class LogLine(Event):
    type: ClassVar[str] = "log"
    level: Literal["debug", "info", "warning", "error"] = "info"
    source: str = ""
    message: str = ""


EVENTS: tuple[type[Event], ...] = (HostSample, ConnectionState, LogLine)
"""The events this module declares (the registry reads them)."""
