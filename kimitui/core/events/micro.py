"""The micro benchmarks: the GEMM and all-reduce rows, the topology, the plan, the environment, progress and end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from kimitui.core.events.base import Event
from kimitui.core.events.host import ProcRef
from kimitui.core.typed import NON_FINITE


@dataclass(frozen=True, slots=True)
class GemmRow(Event):
    type: ClassVar[str] = "gemm_row"
    name: str = ""
    m: int = 0
    n: int = 0
    k: int = 0
    dtype: str = ""
    kernel: str = ""
    time_us: float = 0.0
    tflops: float = 0.0
    gbps: float = 0.0
    roofline_us: float | None = None
    rel_err: Annotated[float | None, NON_FINITE] = None
    """Mean |out - ref| / mean |ref|: NaN or infinite when the kernel's output is (a broken kernel), kept so."""
    # micro runner (kimitui.bench.micro): which backend, how many bytes the roofline counts, and why
    backend: str = ""
    """marlin, torch-int4 or bf16 (what the row measured; ``kernel`` names the op)."""
    note: str = ""
    run_id: str = ""
    bytes_moved: int = 0
    experts: int = 0
    """MoE rows: distinct experts the routing touched per call (their weights are the bytes moved)."""
    correct: bool | None = None
    """rel_err against the dequantized bf16 reference below the limit (None: not checked)."""
    simulated: bool = False
    throttle: list[str] = field(default_factory=list)
    """The clock caps NVML said were met while the row was measured (``power cap``, ``thermal``, ``sync boost``,
    ...; kimitui/hostside/clocks.py): a row measured under one is a different number. Empty: none, or unknown."""
    sm_clock_mhz: float | None = None
    """The SM clock at the row's end (None: not read)."""


@dataclass(frozen=True, slots=True)
class AllReduceRow(Event):
    type: ClassVar[str] = "allreduce_row"
    size_bytes: int = 0
    count: int = 0
    dtype: str = "bfloat16"
    ranks: int = 0
    time_us: float = 0.0
    algbw_gbps: float = 0.0
    busbw_gbps: float = 0.0
    burst: int = 1
    tokens: int | None = None
    # micro runner: eager or captured in a CUDA graph; nccl-tests' #wrong; the whole burst's time
    mode: str = "eager"
    wrong: int = 0
    backend: str = ""
    run_id: str = ""
    burst_us: float | None = None
    simulated: bool = False
    throttle: list[str] = field(default_factory=list)
    """The clock caps NVML said any rank's GPU met while the row was measured (as ``GemmRow.throttle``)."""
    sm_clock_mhz: float | None = None
    """The lowest of the ranks' SM clocks at the row's end (None: not read)."""


@dataclass(frozen=True, slots=True)
class TopoGpu:
    index: int
    name: str = ""
    bus_id: str = ""
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    """The link's maximum: the lower of the GPU's and the slot's (what NVML's ``MaxPcieLinkGeneration`` says)."""
    pcie_gen_gpu_max: int | None = None
    """The GPU's own maximum (``GpuMaxPcieLinkGeneration``): above ``pcie_gen_max``, the slot holds it back."""
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlinks: int = 0
    """Active NVLink links."""
    nvlink_gbps: float | None = None
    """All active links together, per direction."""
    numa_node: int | None = None
    cpu_affinity: str = ""


@dataclass(frozen=True, slots=True)
class Topology(Event):
    """The interconnect, as ``nvidia-smi topo -m`` shows it (read from NVML)."""

    type: ClassVar[str] = "topology"
    host: str = ""
    source: str = ""
    """nvml, nvidia-smi (PCIe only) or modelled (the simulated host)."""
    gpus: list[TopoGpu] = field(default_factory=list)
    links: list[list[str]] = field(default_factory=list)
    """GPU x GPU: X, NV# (# links), PIX, PXB, PHB, NODE, SYS (nvidia-smi topo -m's legend)."""
    p2p: list[list[str]] = field(default_factory=list)
    """GPU x GPU peer-to-peer read status: OK, NS (not supported), ... or X on the diagonal."""
    summary: str = ""
    link_kind: str = ""
    """NVLink or PCIe: what an all-reduce between the GPUs goes over."""
    link_gbps: float | None = None
    """That link's bandwidth per direction (GB/s): the limit drawn beside the measured busbw."""
    simulated: bool = False
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MicroPlan(Event):
    """A micro run starts: what it will measure."""

    type: ClassVar[str] = "micro_plan"
    run_id: str = ""
    host: str = ""
    model: str = ""
    tp: int = 0
    parts: list[str] = field(default_factory=list)
    gemms: list[dict[str, Any]] = field(default_factory=list)
    """The per-GPU GEMM shapes (kimitui.bench.micro.shapes.GemmShape as dicts)."""
    ms: list[int] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    """All-reduce message sizes, bytes."""
    ranks: int = 0
    gpus: list[int] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    """Items per part (gemm, allreduce), for the progress bars."""
    simulated: bool = False
    forced: bool = False
    """Started with the GPU-memory check overridden."""


@dataclass(frozen=True, slots=True)
class MicroEnv(Event):
    """What a worker found on the host: its torch, device, backends (used or why not), memory bandwidth."""

    type: ClassVar[str] = "micro_env"
    run_id: str = ""
    part: str = ""
    python: str = ""
    torch: str = ""
    device: str = ""
    backends: dict[str, str] = field(default_factory=dict)
    """Backend -> what is used ("fused_marlin_moe (vllm 0.x)") or why not ("not available: ...")."""
    mem_bw_gbps: float | None = None
    """Measured on the spot by a device copy (bytes read + written / time)."""
    datasheet_gbps: float | None = None
    l2_mb: float | None = None
    ranks: int = 0
    simulated: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MicroProgress(Event):
    type: ClassVar[str] = "micro_progress"
    run_id: str = ""
    part: str = ""
    item: str = ""
    done: int = 0
    total: int = 0


@dataclass(frozen=True, slots=True)
class MicroEnd(Event):
    type: ClassVar[str] = "micro_end"
    run_id: str = ""
    part: str = ""
    """gemm, allreduce, topology, or all (a refusal before any part started)."""
    status: Literal["done", "cancelled", "failed", "refused", "skipped"] = "done"
    detail: str = ""
    elapsed_s: float = 0.0
    rows: int = 0
    holders: list[ProcRef] = field(default_factory=list)
    """A refusal: the processes holding memory on the GPUs in scope."""


EVENTS: tuple[type[Event], ...] = (GemmRow, AllReduceRow, Topology, MicroPlan, MicroEnv, MicroProgress, MicroEnd)
"""The events this module declares (the registry reads them)."""
