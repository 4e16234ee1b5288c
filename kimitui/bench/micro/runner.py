"""The micro run on the caller's side: check the GPUs are free, read the topology, start each worker on
the host, turn its JSON lines into events (published as they come), cancel on request.

Every figure a view or report shows is in those events: ``MicroPlan`` (what will be measured),
``Topology``, ``MicroEnv`` (what each worker found: torch, device, backends, copy bandwidth),
``MicroProgress``, ``GemmRow`` / ``AllReduceRow``, ``MicroEnd`` (done, cancelled, failed or refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimitui.bench.micro.shapes import ShapePlan, load_config, shapes_for
from kimitui.bench.micro.topology import parse_topology
from kimitui.bench.micro.workers import WorkerHost, WorkerProcess
from kimitui.core.events import (
    AllReduceRow,
    Event,
    GemmRow,
    HostSample,
    LogLine,
    MicroEnd,
    MicroEnv,
    MicroPlan,
    MicroProgress,
    ProcRef,
    Topology,
)
from kimitui.core.procdisplay import gpu_list
from kimitui.hosts import bundle
from kimitui.hostside import allreduce, gemm

Publish = Callable[[Event], None]
DEFAULT_MS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_BACKENDS = ("marlin", "torch-int4", "bf16")
DEFAULT_BURST_TOKENS = (1, 8, 32, 128)
PARTS = ("gemm", "allreduce")
FIRST_LINE_S = 300.0
"""A worker that says nothing for this long (torch import, model weights on a busy host) has failed."""
LINE_S = 600.0
"""Longest silence between two lines of a running worker (one GEMM shape, one 1 GB all-reduce size)."""


class MicroError(Exception):
    """A micro run that cannot start (one line)."""


@dataclass(slots=True)
class MicroConfig:
    parts: list[str] = field(default_factory=lambda: list(PARTS))
    tp: int = 8
    config_path: Path | None = None
    model_config: dict[str, Any] | None = None
    """The model's config as read (a preset's, or the one the campaign found on the host): before config_path."""
    expert_parallel: bool = False
    ms: list[int] = field(default_factory=lambda: list(DEFAULT_MS))
    backends: list[str] = field(default_factory=lambda: list(DEFAULT_BACKENDS))
    gpus: list[int] | None = None
    """GPUs in scope (default: every GPU telemetry sees; the GEMM runs on the first)."""
    ranks: int | None = None
    device: str = "auto"
    """auto / cuda / cpu: cpu is the CPU path (gloo, CPU tensors, small sizes; no GPU check)."""
    sweep_max: int = 1 << 30
    sweep_min: int = 1024
    burst_tokens: list[int] = field(default_factory=lambda: list(DEFAULT_BURST_TOKENS))
    modes: list[str] = field(default_factory=lambda: ["eager", "graph"])
    force: bool = False
    threshold_mib: float = 256.0
    modelled: str | None = None
    """rtx-pro-6000 on the simulated host: modelled figures, clearly marked simulated."""
    sim_dir: str | None = None
    pace_s: float = 0.0
    python: str | None = None
    gemm_args: list[str] = field(default_factory=list)
    allreduce_args: list[str] = field(default_factory=list)
    skip: dict[str, list[str]] = field(default_factory=dict)
    """Part -> rows not to measure again (a resumed campaign has them): gemm ``name|M|backend``,
    allreduce ``MODE|BYTES`` and ``burst|M``."""

    @property
    def cpu(self) -> bool:
        return self.device == "cpu"

    def model_data(self) -> dict[str, Any]:
        """The config whose shapes are measured: as given, else read from config_path (Kimi-K2.5 without)."""
        return self.model_config if self.model_config is not None else load_config(self.config_path)

    def validate(self) -> None:
        unknown = [p for p in self.parts if p not in PARTS]
        if unknown or not self.parts:
            raise MicroError(f"parts: {', '.join(unknown) or 'none'} (choose from {', '.join(PARTS)})")
        if not self.ms or min(self.ms) < 1:
            raise MicroError("token counts (M) must be 1 or more")
        bad = [b for b in self.backends if b not in DEFAULT_BACKENDS]
        if bad:
            raise MicroError(f"unknown backend {', '.join(bad)} (marlin, torch-int4, bf16)")
        if not self.modes or any(m not in ("eager", "graph") for m in self.modes):
            raise MicroError(f"modes {','.join(self.modes) or 'none'}: eager and/or graph")
        if self.device not in ("auto", "cuda", "cpu"):
            raise MicroError(f"device {self.device!r}: auto, cuda or cpu")


@dataclass(slots=True)
class PartResult:
    part: str
    status: str = "pending"
    rows: int = 0
    detail: str = ""


@dataclass(slots=True)
class MicroResult:
    run_id: str
    plan: ShapePlan | None = None
    topology: Topology | None = None
    parts: dict[str, PartResult] = field(default_factory=dict)
    refused: list[ProcRef] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refused and all(p.status in ("done", "skipped") for p in self.parts.values())

    @property
    def cancelled(self) -> bool:
        return any(p.status == "cancelled" for p in self.parts.values())


# --- is the GPU free? --------------------------------------------------------------------------------------


def gpu_holders(sample: HostSample, scope: list[int], threshold_mib: float) -> tuple[list[str], list[ProcRef]]:
    """(why not free, one line per GPU; the processes holding memory on the GPUs in scope). A GPU is free
    when its used memory (nvidia-smi's: the driver's reserved memory apart) is within the threshold."""
    gpus = {g.index: g for g in sample.gpus}
    busy = []
    used: dict[str, list[int]] = {}  # "92,411 MiB" -> the GPUs holding that much: 8 alike read as one line
    for i in scope:
        g = gpus.get(i)
        if g is None:
            busy.append(f"GPU {i}: not on this host")
        elif g.mem_used_mib is not None and g.mem_used_mib > threshold_mib:
            used.setdefault(f"{g.mem_used_mib:,.0f} MiB", []).append(i)
    for mib, on in used.items():
        which = f"GPU {on[0]}: {mib} in use" if len(on) == 1 else f"GPUs {gpu_list(on)}: {mib} in use each"
        busy.append(f"{which} (free is within {threshold_mib:.0f} MiB)")
    holders = []
    for p in sample.procs:
        on = sorted(set(p.gpu_mem_mib) & set(scope) | (set(p.gpus) & set(scope) if p.kind == "cuda" else set()))
        if on:
            holders.append(ProcRef(pid=p.pid, start_time=p.start_time, user=p.user, gpus=on,
                                   mem_mib=float(sum(p.gpu_mem_mib.get(i, 0.0) for i in on)), unit=p.unit,
                                   cmdline=p.cmdline, kind=p.kind,
                                   reason="holds memory on a GPU in scope" if any(p.gpu_mem_mib.get(i) for i in on)
                                   else "has a CUDA context on a GPU in scope"))
    return busy, holders


# --- worker lines -> events -----------------------------------------------------------------------------

_GEMM_FIELDS = {"name", "m", "n", "k", "dtype", "kernel", "time_us", "tflops", "gbps", "roofline_us", "rel_err",
                "backend", "note", "bytes_moved", "experts", "correct", "simulated", "throttle", "sm_clock_mhz"}
_AR_FIELDS = {"size_bytes", "count", "dtype", "ranks", "time_us", "algbw_gbps", "busbw_gbps", "burst", "tokens",
              "mode", "wrong", "backend", "burst_us", "simulated", "throttle", "sm_clock_mhz"}


@dataclass(slots=True)
class LineState:
    done: bool = False
    errors: list[str] = field(default_factory=list)
    rows: int = 0


def parse_worker_line(line: Any, run_id: str, part: str, st: LineState, t: float) -> Event | None:
    """One line of a worker (its JSON text, or the value the host program already parsed; a line that was
    no JSON arrives as ``{"text": ...}``) as an event (None for hello / done); a bad line is a warning, never
    lost."""
    if isinstance(line, dict) and set(line) == {"text"}:
        line = str(line["text"])
    if isinstance(line, str) and not line.strip():
        return None
    try:
        data = json.loads(line) if isinstance(line, str) else line
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        kind = data.get("type")
        if kind == "hello":
            return None
        if kind == "done":
            st.done = True
            return None
        if kind == "env":
            return MicroEnv(t, run_id=run_id, part=part, python=str(data.get("python") or ""),
                            torch=str(data.get("torch") or ""), device=str(data.get("device") or ""),
                            backends={str(k): str(v) for k, v in (data.get("backends") or {}).items()},
                            mem_bw_gbps=data.get("mem_bw_gbps"), datasheet_gbps=data.get("datasheet_gbps"),
                            l2_mb=data.get("l2_mb"), ranks=int(data.get("ranks") or 0),
                            simulated=bool(data.get("simulated")), notes=[str(n) for n in data.get("notes") or []])
        if kind == "progress":
            return MicroProgress(t, run_id=run_id, part=part, item=str(data.get("item", "")),
                                 done=int(data.get("done", 0)), total=int(data.get("total", 0)))
        if kind == "row":
            st.rows += 1
            if part == "gemm":
                return GemmRow(t, run_id=run_id, **{k: v for k, v in data.items() if k in _GEMM_FIELDS})
            return AllReduceRow(t, run_id=run_id, **{k: v for k, v in data.items() if k in _AR_FIELDS})
        if kind == "log":
            level = data.get("level") if data.get("level") in ("debug", "info", "warning", "error") else "info"
            return LogLine(t, level, f"micro.{part}", str(data.get("message", "")))
        if kind == "error":
            st.errors.append(str(data.get("message", "")))
            return LogLine(t, "error", f"micro.{part}", str(data.get("message", "")))
        raise ValueError(f"unknown line type {kind!r}")
    except (ValueError, TypeError) as exc:
        return LogLine(t, "warning", f"micro.{part}", f"bad worker line ({exc}): {str(line)[:120]!r}")


# --- the run -------------------------------------------------------------------------------------------


class MicroRunner:
    """One micro run on one host. ``cancel`` (an asyncio.Event) stops the worker in hand, kills its ranks,
    and ends the run (parts not started are cancelled too)."""

    def __init__(self, host: WorkerHost, host_name: str, cfg: MicroConfig, publish: Publish,
                 cancel: asyncio.Event | None = None, clock: Callable[[], float] = time.time) -> None:
        self.host = host
        self.host_name = host_name
        self.cfg = cfg
        self.publish = publish
        self.cancel = cancel or asyncio.Event()
        self.clock = clock
        self.result = MicroResult(uuid.uuid4().hex[:8])
        self.worker: WorkerProcess | None = None

    # -- planning ---------------------------------------------------------------------------------------

    def scope(self, sample: HostSample | None) -> list[int]:
        if self.cfg.gpus:
            return list(self.cfg.gpus)
        if sample is not None and sample.gpus:
            return sorted(g.index for g in sample.gpus)
        return [0]

    def ranks(self, scope: list[int]) -> int:
        if self.cfg.ranks:
            return self.cfg.ranks
        return 2 if self.cfg.cpu else max(1, len(scope))

    def gemm_argv(self, plan: ShapePlan, scope: list[int]) -> list[str]:
        cfg = self.cfg
        argv = ["--shapes", json.dumps([g.to_dict() for g in plan.gemms], separators=(",", ":")),
                "--ms", ",".join(map(str, cfg.ms)), "--backends", ",".join(cfg.backends),
                "--device", cfg.device, "--gpu", str(scope[0])]
        if cfg.cpu:
            argv += ["--rotate-mb", "0"]
        if cfg.skip.get("gemm"):
            argv += ["--skip", json.dumps(cfg.skip["gemm"], separators=(",", ":"))]
        return argv + self._common() + cfg.gemm_args

    def allreduce_argv(self, plan: ShapePlan, scope: list[int]) -> list[str]:
        cfg = self.cfg
        ranks = self.ranks(scope)
        gpus = scope[:ranks] if len(scope) >= ranks else list(range(ranks))
        hidden = plan.step_allreduces.bytes_per_token // 2
        argv = ["--ranks", str(ranks), "--gpus", ",".join(map(str, gpus)),
                "--backend", "gloo" if cfg.cpu else "nccl", "--hidden", str(hidden),
                "--tokens", ",".join(map(str, cfg.ms)), "--sweep-min", str(cfg.sweep_min),
                "--sweep-max", str(cfg.sweep_max), "--modes", ",".join(cfg.modes),
                "--burst", str(plan.step_allreduces.count_per_step or 122),
                "--burst-tokens", ",".join(map(str, cfg.burst_tokens))]
        if cfg.skip.get("allreduce"):
            argv += ["--skip", json.dumps(cfg.skip["allreduce"], separators=(",", ":"))]
        return argv + self._common() + cfg.allreduce_args

    def _common(self) -> list[str]:
        cfg, out = self.cfg, []
        if cfg.modelled:
            out += ["--modelled", cfg.modelled, "--pace", repr(cfg.pace_s)]
            if cfg.sim_dir:
                out += ["--sim-dir", cfg.sim_dir]
        return out

    def totals(self, plan: ShapePlan, scope: list[int]) -> dict[str, int]:
        cfg, out = self.cfg, {}
        if "gemm" in cfg.parts:
            items, _ = gemm.plan_items([g.to_dict() for g in plan.gemms], cfg.backends)
            if cfg.cpu or cfg.modelled:  # no Marlin on a CPU; the model has no tinygemm
                drop = "marlin" if cfg.cpu else "torch-int4"
                items = [dict(i, backends=[b for b in i["backends"] if b != drop]) for i in items]
            out["gemm"] = max(0, sum(len(i["backends"]) for i in items) * len(cfg.ms) - len(cfg.skip.get("gemm", ())))
        if "allreduce" in cfg.parts:
            ns = allreduce.parse_args(self.allreduce_argv(plan, scope))
            modes = [m for m in ns.modes if m == "eager" or (m == "graph" and not cfg.cpu)]
            out["allreduce"] = max(0, len(allreduce.sizes_for(ns)) * len(modes) + len(ns.burst_tokens)
                                   - len(cfg.skip.get("allreduce", ())))
        return out

    # -- running ----------------------------------------------------------------------------------------

    async def run(self, sample: HostSample | None = None) -> MicroResult:
        cfg, res = self.cfg, self.result
        cfg.validate()
        plan = shapes_for(cfg.model_data(), cfg.tp, cfg.expert_parallel)
        res.plan = plan
        scope = self.scope(sample)
        now = self.clock()
        self.publish(MicroPlan(now, run_id=res.run_id, host=self.host_name, model=plan.model, tp=plan.tp,
                               parts=list(cfg.parts), gemms=[g.to_dict() for g in plan.gemms], ms=list(cfg.ms),
                               backends=list(cfg.backends), sizes=self._sizes(plan, scope),
                               ranks=self.ranks(scope) if "allreduce" in cfg.parts else 0, gpus=scope,
                               totals=self.totals(plan, scope), simulated=bool(cfg.modelled), forced=cfg.force))
        if not cfg.cpu:
            refusal = self._refusal(sample, scope)
            if refusal is not None:
                return res
        await self._topology()
        for part in cfg.parts:
            if self.cancel.is_set():
                self._end(part, "cancelled", "cancelled before it started", 0.0)
                continue
            if part == "allreduce" and not cfg.cpu and self.ranks(scope) < 2:
                self._end(part, "skipped", "an all-reduce needs 2 GPUs or more in scope", 0.0)
                continue
            argv = self.gemm_argv(plan, scope) if part == "gemm" else self.allreduce_argv(plan, scope)
            program = bundle.program(bundle.GEMM if part == "gemm" else bundle.ALLREDUCE)
            await self._run_part(part, program.encode("utf-8"), argv)
        return res

    def _sizes(self, plan: ShapePlan, scope: list[int]) -> list[int]:
        if "allreduce" not in self.cfg.parts:
            return []
        ns = allreduce.parse_args(self.allreduce_argv(plan, scope))
        return [s for s, _ in allreduce.sizes_for(ns)]

    def _refusal(self, sample: HostSample | None, scope: list[int]) -> MicroEnd | None:
        cfg = self.cfg
        if sample is None:
            busy, holders = ["no telemetry sample: the GPUs' memory is unknown"], []
        else:
            busy, holders = gpu_holders(sample, scope, cfg.threshold_mib)
        if not busy and not holders:
            return None
        if cfg.force:
            why = "; ".join(busy) or f"{len(holders)} process(es) on the GPUs"
            self.publish(LogLine(self.clock(), "warning", "micro", f"GPU memory check overridden: {why}"))
            return None
        detail = "; ".join(busy) or "processes hold the GPUs"
        detail += " (free the GPUs first, or override the check)"
        self.result.refused = holders or []
        end = MicroEnd(self.clock(), run_id=self.result.run_id, part="all", status="refused", detail=detail,
                       holders=holders)
        for part in cfg.parts:
            self.result.parts[part] = PartResult(part, "refused", 0, detail)
        self.publish(end)
        return end

    async def _topology(self) -> None:
        fields = {"sim_dir": self.cfg.sim_dir} if self.cfg.sim_dir else {}
        try:
            data = await self.host.request("topology", fields, timeout=60.0)
        except Exception as exc:  # the topology is context, not a reason to stop the benchmarks
            self.publish(LogLine(self.clock(), "warning", "topology", f"topology not read: {exc}"))
            return
        topo = parse_topology(data, self.host_name, self.clock(), simulated=bool(self.cfg.modelled))
        if self.cfg.cpu and not topo.gpus:
            topo = dataclasses.replace(topo, summary="CPU path: no GPUs (gloo over shared memory)")
        self.result.topology = topo
        self.publish(topo)

    async def _run_part(self, part: str, source: bytes, argv: list[str]) -> None:
        t0 = time.monotonic()
        st = LineState()
        env = {"PYTHONWARNINGS": "ignore", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
        try:
            worker = await self.host.start_worker(source, argv, env, self.cfg.python)
        except Exception as exc:
            self._end(part, "failed", f"could not start the worker: {exc}", time.monotonic() - t0)
            return
        self.worker = worker
        status, detail = await self._follow(part, worker, st)
        self.worker = None
        rc = getattr(worker, "returncode", None)
        if status == "ended":
            if st.done and not st.errors:
                status, detail = "done", ""
            else:
                status = "failed"
                tail = (getattr(worker, "stderr_tail", "") or "").strip().splitlines()
                why = st.errors[0] if st.errors else (tail[-1] if tail else "the worker ended without finishing")
                detail = why + (f" (exit status {rc})" if rc not in (None, 0) else "")
        self._end(part, status, detail, time.monotonic() - t0, st.rows)

    async def _follow(self, part: str, worker: WorkerProcess, st: LineState) -> tuple[str, str]:
        """Publish the worker's lines until it ends ('ended'), is cancelled, or falls silent."""
        it = worker.lines().__aiter__()
        cancelled = asyncio.create_task(self.cancel.wait())
        first = True
        try:
            while True:
                nxt = asyncio.ensure_future(it.__anext__())
                done, _ = await asyncio.wait({nxt, cancelled}, timeout=FIRST_LINE_S if first else LINE_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    nxt.cancel()
                    with contextlib.suppress(BaseException):
                        await nxt
                    await worker.cancel()
                    if cancelled in done:
                        return "cancelled", "cancelled by the operator: every rank ended"
                    return "failed", "the worker fell silent: stopped, every rank ended"
                try:
                    line = nxt.result()
                except StopAsyncIteration:
                    return "ended", ""
                except Exception as exc:  # a dropped connection: the worker is gone with it
                    with contextlib.suppress(Exception):
                        await worker.cancel()
                    return "failed", f"lost the worker: {exc}"
                first = False
                ev = parse_worker_line(line, self.result.run_id, part, st, self.clock())
                if ev is not None:
                    self.publish(ev)
        finally:
            cancelled.cancel()
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    def _end(self, part: str, status: str, detail: str, elapsed: float, rows: int = 0) -> None:
        self.result.parts[part] = PartResult(part, status, rows, detail)
        self.publish(MicroEnd(self.clock(), run_id=self.result.run_id, part=part, status=status,  # type: ignore[arg-type]
                              detail=detail, elapsed_s=round(elapsed, 3), rows=rows))
