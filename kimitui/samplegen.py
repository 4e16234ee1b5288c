"""A synthetic but realistic whole campaign on 8 x RTX PRO 6000 Blackwell, for the bundled sample run.

``campaign_events(seed)`` is deterministic: one ``random.Random(seed)``, a fixed start epoch, no wall
clock, so regenerating the sample run gives byte-identical output. The numbers follow
../shared/REFERENCE.md: 96.9 GB held by each of 8 vLLM TP workers, a sweep plateauing near 1536 output
tok/s at concurrency 128, GEMM times against a 1792 GB/s roofline, PCIe all-reduce latency of about
24 us up to 64 KB. The figures are modelled, not measured; the run's header says so.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from kimitui.core.events import (
    AllReduceRow,
    CleanupPlan,
    ConnectionState,
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
    ProcKind,
    ProcRef,
    ProcSample,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
    Verification,
)

START = 1796112000.0
"""2026-12-01 08:00:00 UTC: the sample run's fixed start."""
HOST = "kimi-node-01"
GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
N_GPUS = 8
MEM_TOTAL_MIB = 97887.0
MEM_RESERVED_MIB = 574.0
VLLM_HELD_MIB = round(96.9e9 / 2**20, 1)
"""96.9 GB per GPU held by each vLLM TP worker: 92,411.0 MiB."""
PROBE_MIB = 1146.0
SAMPLE_HZ = 2.0
RELEASE_S = 0.2
"""The driver gives a dead process's memory back about 0.2 s after it exits."""
CLK_TCK = 100
BOOT_AGE_S = 3 * 86400.0
SERVICE = "vllm.service"
OPERATOR = "ana"
MODEL = "moonshotai/Kimi-K2.5"
API_CMD = (
    "python3 -m vllm.entrypoints.openai.api_server --model moonshotai/Kimi-K2.5 --tensor-parallel-size 8 "
    "--max-model-len 32768 --gpu-memory-utilization 0.94 --trust-remote-code --port 8000"
)
MONITOR_CMD = "/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv"
PROBE_CMD = "python3 probe.py --device 3"
STUCK_RANKS = (5, 6)

PEAK_TOK_S = 1560.0
PER_STREAM_TOK_S = 50.0
IN_LEN, OUT_LEN = 1024, 256
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128)
MEM_BW = 1792e9
BF16_PEAK_FLOPS = 250e12
LAUNCH_US = 2.6
HIDDEN = 7168
AR_LATENCY_US = 24.0
AR_ALGBW = 22.0e9

GEMM_SHAPES: tuple[tuple[str, int, int, str], ...] = (
    ("fused_qkv_a", 2112, 7168, "bf16"),
    ("q_b_proj", 1536, 1536, "bf16"),
    ("kv_b_proj", 2048, 512, "bf16"),
    ("o_proj", 7168, 1024, "bf16"),
    ("dense_gate_up", 4608, 7168, "bf16"),
    ("dense_down", 7168, 2304, "bf16"),
    ("shared_gate_up", 512, 7168, "bf16"),
    ("shared_down", 7168, 256, "bf16"),
    ("moe_w13", 512, 7168, "int4-g32"),
    ("moe_w2", 7168, 256, "int4-g32"),
    ("lm_head", 20480, 7168, "bf16"),
)
"""Per-GPU decode GEMMs of Kimi-K2.5 at TP=8 (N x K); the moe rows are one routed expert."""
GEMM_M = (1, 8, 32, 128)


# -- the simulated host -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Proc:
    pid: int
    born: float
    user: str
    cmdline: str
    kind: ProcKind
    unit: str | None
    ppid: int
    gpus: list[int]
    mem: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    """Per GPU, (time, MiB) keyframes, linear in between, constant after the last."""
    exit_t: float = math.inf
    busy: bool = False

    @property
    def start_ticks(self) -> int:
        return int((self.born + BOOT_AGE_S) * CLK_TCK)

    def mem_at(self, t: float) -> dict[int, float]:
        return {g: _interp(frames, t) for g, frames in self.mem.items()}

    def ref(self, t: float, reason: str) -> ProcRef:
        return ProcRef(self.pid, self.start_ticks, self.user, list(self.gpus),
                       round(sum(self.mem_at(t).values()), 1), self.unit, self.cmdline, reason, self.kind)


def _interp(frames: list[tuple[float, float]], t: float) -> float:
    if not frames or t < frames[0][0]:
        return 0.0
    for (t0, v0), (t1, v1) in pairwise(frames):
        if t < t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1
    return frames[-1][1]


class _Host:
    """Processes, per-GPU load, and a 2 Hz sampler that reads them."""

    def __init__(self, rng: random.Random, start: float) -> None:
        self.rng = rng
        self.start = start
        self.procs: list[_Proc] = []
        self.load: dict[int, float] = dict.fromkeys(range(N_GPUS), 0.0)
        self.temp = {g: 33.0 + g * 0.7 for g in range(N_GPUS)}
        self.uuids = [f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-"
                      f"{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}" for _ in range(N_GPUS)]
        self.next_tick = 0.5
        self.seq = 0
        self.silent_from = self.silent_until = -1.0
        self.out: list[Event] = []

    def spawn(self, proc: _Proc) -> _Proc:
        self.procs.append(proc)
        return proc

    def set_load(self, level: float, gpus: range | list[int] | None = None) -> None:
        for g in gpus if gpus is not None else range(N_GPUS):
            self.load[g] = level

    def advance(self, t: float) -> None:
        """Emit every sample due at or before ``t`` (relative seconds)."""
        while self.next_tick <= t:
            tick = self.next_tick
            self.next_tick = round(self.next_tick + 1.0 / SAMPLE_HZ, 6)
            if self.silent_from <= tick < self.silent_until:
                continue
            self.out.append(self._sample(tick + self.rng.uniform(0.0, 0.004)))

    def _sample(self, t: float) -> HostSample:
        rng = self.rng
        used = dict.fromkeys(range(N_GPUS), MEM_RESERVED_MIB)
        for p in self.procs:
            if p.born <= t < p.exit_t + RELEASE_S:
                for g, mib in p.mem_at(t).items():
                    used[g] += mib
        gpus = []
        for g in range(N_GPUS):
            load = self.load[g]
            target = 32.0 + g * 0.7 + 40.0 * load
            self.temp[g] += (target - self.temp[g]) * (1.0 - math.exp(-0.5 / 25.0))
            busy = load > 0.0
            gpus.append(GpuSample(
                index=g, uuid=self.uuids[g], name=GPU_NAME,
                mem_used_mib=round(used[g], 1), mem_total_mib=MEM_TOTAL_MIB, mem_reserved_mib=MEM_RESERVED_MIB,
                util_pct=float(min(100, max(0, round(100 * load + rng.uniform(-3, 3))))) if busy else 0.0,
                temp_c=float(round(self.temp[g] + rng.uniform(-0.4, 0.4))),
                power_w=round(48.0 + (30.0 if used[g] > 4096 else 0.0) + 470.0 * load ** 0.9
                              + rng.uniform(-4, 4), 1),
                sm_clock_mhz=float(min(2617, 2385 + rng.randrange(0, 240, 15))) if busy else 390.0,
            ))
        procs = [self._proc_sample(p, t) for p in self.procs if p.born <= t < p.exit_t]
        self.seq += 1
        return HostSample(t=round(self.start + t, 3), host=HOST, seq=self.seq, gpus=gpus, procs=procs, agent_pid=7781)

    def _proc_sample(self, p: _Proc, t: float) -> ProcSample:
        parent = next((q for q in self.procs if q.pid == p.ppid), None)
        ppid = 1 if parent is not None and parent.exit_t <= t else p.ppid
        loaded = any(self.load[g] > 0.3 for g in p.gpus)
        mem = {g: round(v, 1) for g, v in p.mem_at(t).items() if v > 0}
        return ProcSample(pid=p.pid, start_time=p.start_ticks, user=p.user, gpu_mem_mib=mem, kind=p.kind,
                          unit=p.unit, cmdline=p.cmdline, state="R" if p.busy and loaded else "S",
                          ppid=ppid, gpus=list(p.gpus))


# -- the campaign -----------------------------------------------------------------------------------------


class _Campaign:
    def __init__(self, seed: int, start: float) -> None:
        self.rng = random.Random(seed)
        self.start = start
        self.t = 0.0
        self.host = _Host(self.rng, start)
        self.events = self.host.out
        self.api, self.workers = self._service(born=-7200.0, api_pid=2211, first_worker=2304)
        self.monitor = self.host.spawn(_Proc(1187, -BOOT_AGE_S + 41.0, "root", MONITOR_CMD, "handle",
                                             "dcgm-exporter.service", 1, list(range(N_GPUS))))
        self.probe = self.host.spawn(_Proc(48213, -1500.0, OPERATOR, PROBE_CMD, "cuda", None, 47990, [3],
                                           {3: [(-1500.0, PROBE_MIB)]}))

    # time and emission

    def wait(self, dt: float) -> None:
        self.t = round(self.t + dt, 4)
        self.host.advance(self.t)

    def emit(self, cls: type[Event], **fields: Any) -> Any:
        self.host.advance(self.t)
        ev = cls(t=round(self.start + self.t, 3), **fields)
        self.events.append(ev)
        return ev

    def log(self, source: str, message: str, level: str = "info") -> None:
        self.emit(LogLine, level=level, source=source, message=message)

    def _service(self, born: float, api_pid: int, first_worker: int,
                 load_frames: list[tuple[float, float]] | None = None) -> tuple[_Proc, list[_Proc]]:
        api = self.host.spawn(_Proc(api_pid, born, "vllm", API_CMD, "handle", SERVICE, 1, list(range(N_GPUS))))
        frames = load_frames or [(born, VLLM_HELD_MIB)]
        workers = [
            self.host.spawn(_Proc(first_worker + r, born + 6.0 + 0.05 * r, "vllm", f"VllmWorker TP{r}", "cuda",
                                  SERVICE, api_pid, [r], {r: frames}, busy=True))
            for r in range(N_GPUS)
        ]
        return api, workers

    def run(self) -> list[Event]:
        self.emit(ConnectionState, host=HOST, state="connecting", detail="ssh ana@kimi-node-01")
        self.wait(0.4)
        self.emit(ConnectionState, host=HOST, state="connected",
                  detail="agent pid 7781, NVML 580.95.05, 8 GPUs, sampling at 2 Hz")
        self.log("agent", "8 x NVIDIA RTX PRO 6000 Blackwell (97,887 MiB, PCIe Gen5 x16), no NVLink")
        self.wait(5.0)
        self.macro()
        self.wait(3.0)
        self.cleanup()
        self.wait(2.0)
        self.micro()
        self.wait(1.0)
        self.analysis()
        self.wait(1.0)
        self.restore()
        self.wait(3.0)
        self.emit(ConnectionState, host=HOST, state="closed", detail="campaign finished")
        self.events.sort(key=lambda e: e.t)
        return self.events

    # macro

    def macro(self) -> None:
        self.emit(PhaseStart, phase="macro",
                  title=f"Serving sweep: concurrency 1..128, random {IN_LEN} in / {OUT_LEN} out")
        self.log("macro", "warm-up: 4 requests at concurrency 1 (not counted)")
        self.host.set_load(0.3)
        self.wait(6.0)
        self.host.set_load(0.0)
        self.wait(1.5)
        best = (0.0, 0)
        for c in SWEEP:
            metrics = _macro_metrics(c, self.rng)
            tok = metrics["output_throughput"]
            self.host.set_load(0.33 + 0.64 * tok / PEAK_TOK_S)
            self.wait(metrics["duration"])
            self.emit(MacroPoint, concurrency=c, metrics=metrics)
            best = max(best, (tok, c))
            self.host.set_load(0.0)
            self.wait(2.0)
        self.emit(PhaseEnd, phase="macro", ok=True,
                  note=f"{len(SWEEP)} points, peak {best[0]:.0f} tok/s at concurrency {best[1]}")

    # cleanup

    def cleanup(self) -> None:
        rng = self.rng
        phase_t = self.t
        self.emit(PhaseStart, phase="cleanup", title="Free the GPUs: graceful stop, process kill, device scan")
        self.emit(CleanupPlan, host=HOST, service=SERVICE, manager="systemd", gpus=list(range(N_GPUS)),
                  steps=["graceful", "process", "device", "verify"], clean_threshold_mib=256.0)
        stuck = [self.workers[r] for r in STUCK_RANKS]
        service = [self.api, *self.workers]

        # graceful stop: systemd SIGTERMs the unit's cgroup; the API server and 6 workers exit
        self.wait(0.3)
        self.emit(StepPreview, step="graceful", action=f"systemctl stop {SERVICE}",
                  targets=[p.ref(self.t, f"in {SERVICE}") for p in service],
                  spared=[self.monitor.ref(self.t, f"not in {SERVICE}"),
                          self.probe.ref(self.t, f"not in {SERVICE}")])
        self.wait(4.2)
        self.emit(Consent, step="graceful", accepted=True, operator=OPERATOR, pids=[p.pid for p in service])
        self.wait(0.1)
        sent = self.t
        for p in service:
            self.emit(SignalSent, step="graceful", pid=p.pid, start_time=p.start_ticks, signal="SIGTERM",
                      detail=f"systemctl stop --no-block {SERVICE}", cmdline=p.cmdline)
        exits = [(1.6, self.api)] + [(2.0 + 0.2 * i + rng.uniform(0, 0.15), w)
                                     for i, w in enumerate(w for w in self.workers if w not in stuck)]
        for delay, p in sorted(exits, key=lambda x: x[0]):
            self.t = round(sent + delay, 4)
            p.exit_t = self.t
            self.emit(SignalOutcome, step="graceful", pid=p.pid, start_time=p.start_ticks, signal="SIGTERM",
                      outcome="exited", elapsed_s=round(delay, 3))
        self.wait(sent + 10.0 - self.t)
        for p in stuck:
            self.emit(SignalOutcome, step="graceful", pid=p.pid, start_time=p.start_ticks, signal="SIGTERM",
                      outcome="survived", elapsed_s=10.0, state="S")
        self.wait(0.1)
        self.emit(StepResult, step="graceful", status="done", elapsed_s=round(self.t - sent, 2),
                  reason=f"7 of 9 exited; 2 workers survived SIGTERM (pids {stuck[0].pid}, {stuck[1].pid}, "
                         f"GPUs {STUCK_RANKS[0]} and {STUCK_RANKS[1]})")
        self.log("cleanup", f"{SERVICE} is deactivating (stop-sigterm); port 8000 is free but GPUs 5 and 6 "
                 "are still held by orphaned workers", level="warning")

        # process kill: SIGTERM, 5 s, SIGKILL
        self.wait(0.5)
        self.emit(StepPreview, step="process", action="SIGTERM, then SIGKILL after 5 s",
                  targets=[p.ref(self.t, f"survived the graceful stop; in {SERVICE}; holds "
                                 f"{VLLM_HELD_MIB:,.0f} MiB on GPU {p.gpus[0]}") for p in stuck],
                  spared=[self.monitor.ref(self.t, f"not in {SERVICE}"),
                          self.probe.ref(self.t, f"not in {SERVICE}; left to the device step")])
        self.wait(3.1)
        self.emit(Consent, step="process", accepted=True, operator=OPERATOR, pids=[p.pid for p in stuck])
        self.wait(0.1)
        sent = self.t
        for p in stuck:
            self.emit(SignalSent, step="process", pid=p.pid, start_time=p.start_ticks, signal="SIGTERM",
                      cmdline=p.cmdline)
        self.wait(5.0)
        for p in stuck:
            self.emit(SignalOutcome, step="process", pid=p.pid, start_time=p.start_ticks, signal="SIGTERM",
                      outcome="survived", elapsed_s=5.0, state="S")
        killed = self.t
        for p in stuck:
            self.emit(SignalSent, step="process", pid=p.pid, start_time=p.start_ticks, signal="SIGKILL",
                      cmdline=p.cmdline)
        for i, p in enumerate(stuck):
            delay = 0.03 + 0.02 * i
            self.t = round(killed + delay, 4)
            p.exit_t = self.t
            self.emit(SignalOutcome, step="process", pid=p.pid, start_time=p.start_ticks, signal="SIGKILL",
                      outcome="exited", elapsed_s=delay)
        self.wait(0.45)
        self.emit(StepResult, step="process", status="done", elapsed_s=round(self.t - sent, 2),
                  reason="2 workers needed SIGKILL; their memory was back 0.2 s later")

        # device scan: the operator's forgotten probe holds a CUDA context; the NVML monitor is left alone
        self.wait(0.4)
        self.emit(StepPreview, step="device", action="scan /proc/*/fd and /proc/*/maps for /dev/nvidia*; "
                  "SIGTERM processes with a CUDA context",
                  targets=[self.probe.ref(self.t, f"CUDA context: /dev/nvidia3 mapped (rw-s), "
                                          f"{PROBE_MIB:,.0f} MiB on GPU 3")],
                  spared=[self.monitor.ref(self.t, "handle only (NVML monitor), not ticked")])
        self.wait(6.3)
        self.emit(Consent, step="device", accepted=True, operator=OPERATOR, pids=[self.probe.pid],
                  note="my probe.py from this morning")
        self.wait(0.1)
        sent = self.t
        self.emit(SignalSent, step="device", pid=self.probe.pid, start_time=self.probe.start_ticks,
                  signal="SIGTERM", cmdline=self.probe.cmdline)
        self.t = round(sent + 0.21, 4)
        self.probe.exit_t = self.t
        self.emit(SignalOutcome, step="device", pid=self.probe.pid, start_time=self.probe.start_ticks,
                  signal="SIGTERM", outcome="exited", elapsed_s=0.21)
        self.wait(0.4)
        self.emit(StepResult, step="device", status="done", elapsed_s=round(self.t - sent, 2),
                  reason="1 CUDA holder stopped; 1 NVML-only monitor left alone")

        # verify against the reserved baseline
        self.wait(0.5)
        verdicts = [GpuVerdict(g, MEM_RESERVED_MIB, MEM_RESERVED_MIB, True) for g in range(N_GPUS)]
        self.emit(Verification, clean=True, gpus=verdicts, elapsed_s=0.5,
                  detail=f"8/8 GPUs at their reserved baseline ({MEM_RESERVED_MIB:.0f} MiB, threshold 256 MiB); "
                         "dcgm-exporter still has the device files open (handle only)")
        self.emit(StepResult, step="verify", status="done", elapsed_s=0.5)
        self.wait(0.2)
        self.emit(PhaseEnd, phase="cleanup", ok=True, note=f"GPUs 0-7 clean in {self.t - phase_t:.1f} s")

    # micro

    def micro(self) -> None:
        rng = self.rng
        self.emit(PhaseStart, phase="micro",
                  title="GEMM at Kimi-K2.5 TP=8 decode shapes; NCCL all-reduce at hidden 7168")
        self.log("micro", "GEMM: 200 calls per CUDA graph, weights rotated over 512 MB, timed with CUDA events")
        gemm = self.host.spawn(_Proc(52011, self.t, OPERATOR, "python3 -m kimitui_micro gemm --device 0", "cuda",
                                     None, 7781, [0], {0: [(self.t, 0.0), (self.t + 1.5, 2860.0)]}, busy=True))
        self.wait(2.0)
        self.host.set_load(0.92, [0])
        self.gemm_rows: list[GemmRow] = []
        for name, n, k, dtype in GEMM_SHAPES:
            for m in GEMM_M:
                self.wait(0.35 + rng.uniform(0, 0.1))
                self.gemm_rows.append(self.emit(GemmRow, **_gemm_fields(name, m, n, k, dtype, rng)))
        gemm.exit_t = self.t
        self.host.set_load(0.0, [0])
        self.wait(1.0)
        self.log("micro", "all-reduce: torch.distributed NCCL, 8 ranks over PCIe, eager, 50 iterations per size")
        ranks = [self.host.spawn(_Proc(52100 + r, self.t, OPERATOR,
                                       f"python3 -m kimitui_micro allreduce --rank {r} --world-size 8", "cuda",
                                       None, 7781, [r], {r: [(self.t, 0.0), (self.t + 2.0, 1090.0)]}, busy=True))
                 for r in range(N_GPUS)]
        self.wait(3.0)
        self.host.set_load(0.35)
        self.ar_rows: list[AllReduceRow] = []
        for tokens in (1, 2, 4, 8, 16, 32, 64, 128):
            self.wait(0.7 + rng.uniform(0, 0.2))
            size = tokens * HIDDEN * 2
            t_us = _allreduce_us(size) * rng.uniform(0.985, 1.03)
            self.ar_rows.append(self.emit(AllReduceRow, **_ar_fields(size, t_us, tokens, 1)))
        self.wait(1.5)
        self.log("micro", "burst: 122 one-token all-reduces captured in one CUDA graph (one decode step's worth)")
        self.ar_rows.append(self.emit(AllReduceRow, **_ar_fields(HIDDEN * 2, 19.4 * rng.uniform(0.99, 1.01), 1, 122)))
        for p in ranks:
            p.exit_t = self.t + 0.3
        self.host.set_load(0.0)
        self.wait(1.0)
        self.emit(PhaseEnd, phase="micro", ok=True,
                  note=f"{len(self.gemm_rows)} GEMM rows, {len(self.ar_rows)} all-reduce rows")

    # analysis

    def analysis(self) -> None:
        self.emit(PhaseStart, phase="analysis", title="Where a decode step's time goes")
        rows = {(r.name, r.m): r.time_us for r in self.gemm_rows}
        attn = sum(rows[(n, 1)] for n in ("fused_qkv_a", "q_b_proj", "kv_b_proj", "o_proj"))
        moe = rows[("shared_gate_up", 1)] + rows[("shared_down", 1)] + 8 * (rows[("moe_w13", 1)]
                                                                          + rows[("moe_w2", 1)])
        dense = rows[("dense_gate_up", 1)] + rows[("dense_down", 1)]
        lm = rows[("lm_head", 1)]
        gemm_ms = (61 * attn + 60 * moe + dense + lm) / 1000
        ar1 = next(r for r in self.ar_rows if r.tokens == 1 and r.burst == 1)
        burst = next(r for r in self.ar_rows if r.burst > 1)
        ar_ms = 122 * ar1.time_us / 1000
        tpot = self.tpot1
        rest = tpot - gemm_ms - ar_ms
        self.wait(0.5)
        self.log("analysis", f"decode step at concurrency 1: TPOT {tpot:.1f} ms (vLLM mean_tpot_ms)")
        self.wait(0.2)
        self.log("analysis", f"GEMMs at M=1: {gemm_ms:.2f} ms ({gemm_ms / tpot:.0%}): attention projections "
                 f"61 x {attn:.1f} us, MoE (shared + 8 routed experts) 60 x {moe:.1f} us, dense layer 0 "
                 f"{dense:.1f} us, lm_head {lm:.1f} us")
        self.wait(0.2)
        self.log("analysis", f"all-reduce: 122 x {ar1.time_us:.1f} us = {ar_ms:.2f} ms ({ar_ms / tpot:.0%}) eager; "
                 f"{burst.time_us:.1f} us each when captured in one CUDA graph")
        self.wait(0.2)
        self.log("analysis", f"rest (MLA attention kernels, norms, router, sampling, scheduling): {rest:.2f} ms "
                 f"({rest / tpot:.0%})")
        self.wait(0.3)
        self.host.silent_from, self.host.silent_until = self.t, self.t + 2.6
        self.wait(1.5)
        self.emit(ConnectionState, host=HOST, state="lost", detail="no sample for 1.5 s")
        self.wait(0.3)
        self.emit(ConnectionState, host=HOST, state="reconnecting", detail="ssh keepalive timed out")
        self.wait(0.8)
        self.emit(ConnectionState, host=HOST, state="connected", detail="agent resumed", gap_s=2.6)
        self.wait(0.5)
        ar128 = next(r for r in self.ar_rows if r.tokens == 128)
        self.log("analysis", f"at concurrency 128 a step carries 128 tokens: all-reduce 122 x {ar128.time_us:.0f} us"
                 f" = {122 * ar128.time_us / 1000:.1f} ms per step; PCIe all-reduce is latency-bound below 64 KB",
                 level="warning")
        self.wait(0.5)
        self.emit(PhaseEnd, phase="analysis", ok=True, note="GEMM, all-reduce and the rest of a decode step")

    # restore

    def restore(self) -> None:
        self.emit(PhaseStart, phase="restore", title=f"Bring {SERVICE} back")
        self.log("restore", f"systemctl start {SERVICE}")
        self.wait(0.5)
        born = self.t
        weights = 70620.0
        frames = [(born + 9.0, 0.0), (born + 9.5, 610.0), (born + 52.0, weights), (born + 57.0, weights),
                  (born + 58.0, VLLM_HELD_MIB)]
        self.api, self.workers = self._service(born=born, api_pid=53320, first_worker=53391, load_frames=frames)
        self.host.set_load(0.08)
        self.wait(30.0)
        self.log("restore", "vLLM: loading safetensors shards (INT4 experts, bf16 attention) on 8 ranks")
        self.wait(28.0)
        self.log("restore", f"vLLM: KV cache reserved, {VLLM_HELD_MIB:,.0f} MiB per GPU; capturing CUDA graphs")
        self.host.set_load(0.25)
        self.wait(17.0)
        self.host.set_load(0.0)
        self.log("restore", f"GET /health 200 after {self.t - born:.1f} s; {MODEL} served again")
        self.wait(2.0)
        self.emit(PhaseEnd, phase="restore", ok=True, note=f"{SERVICE} active, 96.9 GB per GPU")

    @property
    def tpot1(self) -> float:
        point = next(e for e in self.events if isinstance(e, MacroPoint) and e.concurrency == 1)
        return float(point.metrics["mean_tpot_ms"])


# -- models of the figures ------------------------------------------------------------------------------


def output_tok_s(concurrency: int) -> float:
    """The sweep's throughput curve: about 50 tok/s per stream, saturating near 1536 at 128."""
    return PEAK_TOK_S * (1.0 - math.exp(-concurrency * PER_STREAM_TOK_S / PEAK_TOK_S))


def _macro_metrics(c: int, rng: random.Random) -> dict[str, Any]:
    n = max(4, 2 * c)
    tok_s = output_tok_s(c) * rng.uniform(0.993, 1.007)
    out_tokens, in_tokens = n * OUT_LEN, n * IN_LEN
    duration = out_tokens / tok_s
    e2el = duration * c / n * 1000.0
    ttft = 95.0 + 14.0 * c * rng.uniform(0.95, 1.05)
    tpot = (e2el - ttft) / (OUT_LEN - 1)
    itl = tpot * rng.uniform(0.995, 1.0)
    metrics: dict[str, Any] = {
        "duration": round(duration, 3),
        "completed": n,
        "failed": 0,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": round(n / duration, 4),
        "output_throughput": round(out_tokens / duration, 2),
        "total_token_throughput": round((in_tokens + out_tokens) / duration, 2),
        "max_concurrency": c,
        "request_rate": "inf",
    }
    spread = {"ttft": (ttft, 0.97, 0.12 + c / 400, 1.35 + c / 150), "tpot": (tpot, 0.99, 0.03, 1.08),
              "itl": (itl, 0.96, 0.2 + c / 300, 1.6 + c / 60), "e2el": (e2el, 0.99, 0.04, 1.1)}
    for key, (mean, med, std, p99) in spread.items():
        metrics[f"mean_{key}_ms"] = round(mean, 2)
        metrics[f"median_{key}_ms"] = round(mean * med, 2)
        metrics[f"std_{key}_ms"] = round(mean * std, 2)
        metrics[f"p99_{key}_ms"] = round(mean * p99, 2)
    return metrics


def gemm_bytes(m: int, n: int, k: int, dtype: str) -> float:
    """Bytes a GEMM moves: W4A16 g32 weights at 0.5625 B each (REFERENCE section 2), bf16 at 2 B."""
    weights = n * k / 2 + (n * k / 32) * 2 if dtype.startswith("int4") else n * k * 2
    return weights + m * k * 2 + m * n * 2


def _gemm_fields(name: str, m: int, n: int, k: int, dtype: str, rng: random.Random) -> dict[str, Any]:
    nbytes = gemm_bytes(m, n, k, dtype)
    flops = 2.0 * m * n * k
    roof_us = nbytes / MEM_BW * 1e6
    int4 = dtype.startswith("int4")
    mem_eff = 0.78 if int4 else 0.86
    compute_eff = 0.35 if int4 else 0.62
    t_us = LAUNCH_US + max(roof_us / mem_eff, flops / (BF16_PEAK_FLOPS * compute_eff) * 1e6)
    t_us *= rng.uniform(0.985, 1.03)
    return {
        "name": name, "m": m, "n": n, "k": k, "dtype": dtype,
        "kernel": "marlin (gptq_marlin_gemm)" if int4 else "torch.mm (cuBLAS)",
        "time_us": round(t_us, 2), "tflops": round(flops / t_us / 1e6, 3),
        "gbps": round(nbytes / t_us / 1e3, 1), "roofline_us": round(roof_us, 2),
        "rel_err": round(rng.uniform(0.004, 0.009), 4) if int4 else None,
    }


def _allreduce_us(size: int) -> float:
    """PCIe NCCL all-reduce on 8 ranks: about 24 us flat up to 64 KB, then bandwidth-bound."""
    return AR_LATENCY_US + max(0, size - 65536) / AR_ALGBW * 1e6


def busbw_gbps(size: int, time_us: float, ranks: int) -> float:
    """nccl-tests: algbw = S / t; busbw = algbw * 2(n-1)/n."""
    return size / (time_us * 1e3) * 2 * (ranks - 1) / ranks


def _ar_fields(size: int, t_us: float, tokens: int, burst: int) -> dict[str, Any]:
    return {"size_bytes": size, "count": size // 2, "dtype": "bfloat16", "ranks": N_GPUS,
            "time_us": round(t_us, 2), "algbw_gbps": round(size / (t_us * 1e3), 3),
            "busbw_gbps": round(busbw_gbps(size, t_us, N_GPUS), 3), "burst": burst, "tokens": tokens}


def campaign_events(seed: int = 0, start: float = START) -> list[Event]:
    """The whole campaign as events in time order: macro sweep, cleanup, micro, analysis, restore."""
    return _Campaign(seed, start).run()


SAMPLE_META: dict[str, Any] = {
    "generator": "kimitui.samplegen",
    "synthetic": True,
    "note": "modelled on the 8 x RTX PRO 6000 Blackwell campaign (REFERENCE.md); figures are not measured",
    "model": MODEL,
    "quantization": "INT4 W4A16 g32 (compressed-tensors pack-quantized), routed experts only",
    "tensor_parallel": N_GPUS,
    "gpus": f"{N_GPUS} x {GPU_NAME}",
}
