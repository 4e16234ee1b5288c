"""A small deterministic campaign run for the TUI tests (and the screenshot script).

Phases: baseline (samples, 100 processes), cleanup (plan, graceful stop that leaves 2 stuck workers,
kill, verification clean), macro (sweep 1..128), micro (GEMM and all-reduce rows).
"""

from __future__ import annotations

from pathlib import Path

from kimitui.core.events import (
    AllReduceRow,
    CleanupPlan,
    Consent,
    Event,
    GemmRow,
    GpuSample,
    GpuVerdict,
    HostSample,
    LogLine,
    MacroPoint,
    PhaseEnd,
    PhaseStart,
    ProcRef,
    ProcSample,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
    Verification,
)
from kimitui.core.runfile import write_run

T0 = 1_750_000_000.0
HOST = "gpu-node-7"
TOTAL_MIB = 97887.0
HELD_MIB = 92412.0
IDLE_MIB = 616.0
GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
API_PID = 4100
WORKER_PIDS = [4101 + i for i in range(8)]
STUCK = (4104, 4107)
MONITOR_PID = 5200
FILLER_BASE = 7000
TOKS = {1: 71.5, 2: 140.2, 4: 270.9, 8: 510.0, 16: 880.4, 32: 1230.7, 64: 1466.0, 128: 1536.2}


def gpus(used: list[float], t_index: int) -> list[GpuSample]:
    out = []
    for i, u in enumerate(used):
        out.append(GpuSample(
            index=i, uuid=f"GPU-{i:08d}", name=GPU_NAME, mem_used_mib=u, mem_total_mib=TOTAL_MIB,
            mem_reserved_mib=IDLE_MIB,
            util_pct=None if i == 7 else float((40 + 7 * i + t_index) % 100),
            temp_c=None if i == 7 else 50.0 + i, power_w=None if i == 7 else 300.0 + 10 * i,
            sm_clock_mhz=None if i == 7 else 2400.0,
        ))
    return out


def procs(workers: list[int], fillers: int, api: bool = True) -> list[ProcSample]:
    out: list[ProcSample] = []
    if api:
        out.append(ProcSample(pid=API_PID, start_time=1000, user="vllm", kind="cuda", unit="vllm.service",
                              cmdline="python -m vllm.entrypoints.openai.api_server --model kimi-k2.5 "
                                      "--tensor-parallel-size 8", state="S", gpus=list(range(8))))
    for i, pid in enumerate(WORKER_PIDS):
        if pid in workers:
            out.append(ProcSample(pid=pid, start_time=1100 + i, user="vllm", gpu_mem_mib={i: HELD_MIB - IDLE_MIB},
                                  kind="cuda", unit="vllm.service", cmdline=f"VllmWorker rank={i}",
                                  state="S", gpus=[i]))
    out.append(ProcSample(pid=MONITOR_PID, start_time=900, user="root", kind="handle", unit="dcgm.service",
                          cmdline="nv-hostengine -n", state="S", gpus=list(range(8))))
    for j in range(fillers):
        out.append(ProcSample(pid=FILLER_BASE + j, start_time=2000 + j, user="ops", kind="unknown",
                              gpu_mem_mib={j % 8: 16.0}, cmdline=f"python probe_{j}.py [--quiet]",
                              state="S"))
    return out


def build_events(fillers: int = 90) -> list[Event]:
    ev: list[Event] = []
    t = T0
    seq = 0

    def sample(used: list[float], workers: list[int], n_fill: int, api: bool = True) -> None:
        nonlocal seq
        seq += 1
        ev.append(HostSample(t=t, host=HOST, seq=seq, gpus=gpus(used, seq), procs=procs(workers, n_fill, api)))

    ev.append(LogLine(t=t, source="campaign", message="campaign started on gpu-node-7"))
    ev.append(PhaseStart(t=t, phase="baseline", title="Baseline telemetry"))
    for _ in range(6):
        t += 1.0
        sample([HELD_MIB] * 8, WORKER_PIDS, fillers)
    t += 0.5
    ev.append(PhaseEnd(t=t, phase="baseline"))

    ev.append(PhaseStart(t=t, phase="cleanup", title="GPU cleanup"))
    ev.append(CleanupPlan(t=t, host=HOST, service="vllm.service", manager="systemd", gpus=list(range(8)),
                          steps=["graceful_stop", "kill_tree", "device_scan"], clean_threshold_mib=1024.0))
    targets = [ProcRef(pid=API_PID, start_time=1000, user="vllm", gpus=list(range(8)), unit="vllm.service",
                       cmdline="api_server", reason="service main process", kind="cuda")]
    spared = [ProcRef(pid=MONITOR_PID, start_time=900, user="root", reason="NVML handle only", kind="handle")]
    t += 0.5
    ev.append(StepPreview(t=t, step="graceful_stop", action="systemctl stop vllm.service",
                          targets=targets, spared=spared))
    t += 1.0
    ev.append(Consent(t=t, step="graceful_stop", accepted=True, operator="ops", pids=[API_PID]))
    ev.append(SignalSent(t=t, step="graceful_stop", pid=API_PID, start_time=1000, signal="SIGTERM"))
    t += 2.0
    ev.append(SignalOutcome(t=t, step="graceful_stop", pid=API_PID, start_time=1000, signal="SIGTERM",
                            outcome="exited", elapsed_s=2.0))
    ev.append(StepResult(t=t, step="graceful_stop", status="done", reason="2 workers left", elapsed_s=3.0))
    stuck_used = [HELD_MIB if WORKER_PIDS[i] in STUCK else IDLE_MIB for i in range(8)]
    t += 0.5
    sample(stuck_used, list(STUCK), 0, api=False)
    stuck_refs = [ProcRef(pid=p, start_time=1100 + WORKER_PIDS.index(p), user="vllm",
                          gpus=[WORKER_PIDS.index(p)], mem_mib=HELD_MIB, reason="stuck worker", kind="cuda")
                  for p in STUCK]
    ev.append(StepPreview(t=t, step="kill_tree", action="SIGKILL", targets=stuck_refs, spared=spared))
    t += 1.0
    ev.append(Consent(t=t, step="kill_tree", accepted=True, operator="ops", pids=list(STUCK)))
    for p in STUCK:
        ev.append(SignalSent(t=t, step="kill_tree", pid=p, signal="SIGKILL"))
    t += 0.3
    for p in STUCK:
        ev.append(SignalOutcome(t=t, step="kill_tree", pid=p, signal="SIGKILL", outcome="exited", elapsed_s=0.3))
    ev.append(StepResult(t=t, step="kill_tree", status="done", elapsed_s=1.3))
    ev.append(StepResult(t=t, step="device_scan", status="skipped", reason="no CUDA holders left"))
    t += 0.5
    sample([IDLE_MIB] * 8, [], 0, api=False)
    ev.append(Verification(t=t, clean=True, elapsed_s=0.21,
                           gpus=[GpuVerdict(index=i, used_mib=IDLE_MIB, baseline_mib=IDLE_MIB, clean=True)
                                 for i in range(8)]))
    ev.append(PhaseEnd(t=t, phase="cleanup"))

    ev.append(PhaseStart(t=t, phase="macro", title="Serving sweep"))
    for c, tok in TOKS.items():
        t += 2.0
        ev.append(MacroPoint(t=t, concurrency=c, metrics={
            "output_throughput": tok, "request_throughput": tok / 256, "mean_ttft_ms": 80.0 + c * 3,
            "p99_ttft_ms": 150.0 + c * 6, "mean_tpot_ms": 1000.0 * c / tok, "p99_tpot_ms": 1200.0 * c / tok,
        }))
    ev.append(PhaseEnd(t=t, phase="macro"))

    ev.append(PhaseStart(t=t, phase="micro", title="Micro benchmarks"))
    for name, m, n, k in (("qkv_proj", 128, 2560, 7168), ("o_proj", 128, 7168, 2048),
                          ("moe_up", 128, 512, 7168)):
        t += 0.5
        ev.append(GemmRow(t=t, name=name, m=m, n=n, k=k, dtype="bf16", kernel="cublasLt", time_us=25.0,
                          tflops=m * n * k * 2 / 25e-6 / 1e12, gbps=1500.0, roofline_us=20.0, rel_err=1e-3))
    for size, tokens in ((1_835_008, 128), (14_680_064, 1024)):
        t += 0.5
        ev.append(AllReduceRow(t=t, size_bytes=size, count=size // 2, ranks=8, time_us=27.8 if tokens == 128
                               else 70.0, algbw_gbps=66.0, busbw_gbps=115.5, tokens=tokens))
    ev.append(PhaseEnd(t=t, phase="micro"))
    ev.append(LogLine(t=t, level="warning", source="campaign", message="campaign finished [no report yet]"))
    return ev


def write_test_run(path: Path, fillers: int = 90) -> Path:
    return write_run(path, build_events(fillers), host=HOST)
