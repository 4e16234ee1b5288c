"""The GEMM worker's torch side: weights, the kernels (torch.mm, tinygemm int4, vLLM's Marlin), timing
(CUDA graphs replayed and timed with CUDA events; plain loops on a CPU); the fused-MoE rows are gemm_moe.py.
torch is the caller's: imported by run_torch, passed to the rest."""

from __future__ import annotations

import argparse
import statistics
import time

from .clocks import ClockWatch
from .gemm_moe import grouped_mm_of, moe_rows
from .gemm_rows import DATASHEET_GBPS, INT4_HONEST, as_backend, figures, parse_dtype, row_key, weight_bytes
from .gemm_weights import copies_for, quantized, rel_err
from .wire import event, event_log


class Int4:
    """torch's tinygemm int4 kernel on this device: pack [N, K] ints 0..15, multiply by a packed weight."""

    def __init__(self, torch: object, device: str) -> None:
        self.torch, self.device = torch, device
        ops = torch.ops.aten
        if device == "cpu" and hasattr(ops, "_weight_int4pack_mm_for_cpu"):
            self._pack_op, self._mm_op = ops._convert_weight_to_int4pack_for_cpu, ops._weight_int4pack_mm_for_cpu
            self.kernel = "torch._weight_int4pack_mm_for_cpu"
        else:
            self._pack_op, self._mm_op = torch._convert_weight_to_int4pack, torch._weight_int4pack_mm
            self.kernel = "torch._weight_int4pack_mm"

    def pack(self, q: object) -> object:
        torch = self.torch
        k = q.shape[1]
        tiles = 8 if k % 256 == 0 else 4 if k % 128 == 0 else 2
        if self.device == "cpu":
            return self._pack_op(q.to(torch.int32).contiguous(), tiles)
        u8 = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8).contiguous()  # even k in the high nibble
        return self._pack_op(u8, tiles)

    def mm(self, x: object, packed: object, group: int, scales_zeros: object) -> object:
        return self._mm_op(x, packed, group, scales_zeros)


class Marlin:
    """vLLM's Marlin kernels, found by name and called by parameter name (signatures change by version)."""

    def __init__(self, torch: object, device: str) -> None:
        self.torch, self.ok, self.gemm, self.moe = torch, False, None, None
        if device == "cpu":
            self.why = "not available: Marlin needs a CUDA GPU"
            return
        try:
            import vllm  # type: ignore
            from vllm import _custom_ops as ops  # type: ignore
            from vllm.model_executor.layers.quantization.utils import marlin_utils as mu  # type: ignore
            from vllm.model_executor.layers.quantization.utils.marlin_utils_test import (  # type: ignore
                marlin_quantize,
            )
            from vllm.scalar_type import scalar_types  # type: ignore
        except ImportError as exc:
            missing = getattr(exc, "name", None) == "vllm"
            self.why = "not available (vLLM not installed)" if missing else f"not available: {exc}"
            return
        except Exception as exc:
            self.why = f"not available: importing vLLM failed: {type(exc).__name__}: {exc}"
            return
        self.version = getattr(vllm, "__version__", "?")
        self.gemm_name = "marlin_gemm" if hasattr(ops, "marlin_gemm") else "gptq_marlin_gemm"
        self.gemm = getattr(ops, self.gemm_name, None)
        self.quantize, self.qtype, self.mu = marlin_quantize, scalar_types.uint4b8, mu
        try:
            from vllm.model_executor.layers.fused_moe.fused_marlin_moe import fused_marlin_moe  # type: ignore
            self.moe = fused_marlin_moe
        except Exception:
            self.moe = None
        self.ok = self.gemm is not None
        self.why = "vllm {}: {}{}".format(self.version, self.gemm_name,
                                      ", fused_marlin_moe" if self.moe else ", no fused_marlin_moe")
        if not self.ok:
            self.why = f"not available: vllm {self.version} has neither marlin_gemm nor gptq_marlin_gemm"

    def workspace(self, n: int, device: object) -> object:
        mu = self.mu
        if hasattr(mu, "marlin_make_workspace_new"):
            return mu.marlin_make_workspace_new(device)
        return mu.marlin_make_workspace(n, device)

    @staticmethod
    def call(fn: object, values: dict) -> object:
        """Call ``fn`` with the values its parameters name; a required one we cannot name is an error."""
        import inspect

        kwargs = {}
        for name, p in inspect.signature(fn).parameters.items():
            if name in values:
                kwargs[name] = values[name]
            elif p.default is inspect.Parameter.empty:
                raise RuntimeError(f"{fn.__name__} has a parameter this worker does not know: {name}")
        return fn(**kwargs)

    def values(self, device: object, m: int, n: int, k: int) -> dict:
        torch = self.torch
        empty = torch.empty(0, dtype=torch.int, device=device)
        return {"c": None, "b_bias": None, "a_scales": None, "global_scale": None, "b_zeros": empty,
                "g_idx": empty, "perm": empty, "workspace": self.workspace(n, device), "b_q_type": self.qtype,
                "b_q_type_id": self.qtype.id, "num_bits": 4, "size_m": m, "size_n": n, "size_k": k,
                "is_k_full": True, "has_zp": False, "use_atomic_add": False, "use_fp32_reduce": True,
                "is_zp_float": False}


class Timer:
    """Per-call time of ``fn(i)`` (i rotates the weights): on CUDA a graph of back-to-back calls replayed
    and timed with events (eager events if capture fails, said in the note); on CPU a plain loop."""

    def __init__(self, torch: object, device: str, args: argparse.Namespace) -> None:
        self.torch, self.cuda, self.args = torch, device != "cpu", args

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def _eager_us(self, fn: object, calls: int) -> float:
        torch = self.torch
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for i in range(calls):
                fn(i)
            b.record()
            b.synchronize()
            return a.elapsed_time(b) * 1000.0 / calls
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        return (time.perf_counter() - t0) * 1e6 / calls

    def measure(self, fn: object) -> tuple:
        """(us per call, calls per measurement, how: 'graph' | 'eager' | 'eager (...)')."""
        args = self.args
        for i in range(args.warmup):
            fn(i)
        self._sync()
        est = max(self._eager_us(fn, 3), 0.5)
        calls = int(max(3, min(args.max_calls, args.target_ms * 1000.0 / est)))
        if not self.cuda:
            times = [self._eager_us(fn, calls) for _ in range(args.replays)]
            return statistics.median(times), calls, "loop"
        torch = self.torch
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for i in range(2):
                    fn(i)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(calls):
                    fn(i)
        except Exception as exc:
            self._sync()
            times = [self._eager_us(fn, calls) for _ in range(args.replays)]
            return statistics.median(times), calls, f"eager (graph capture failed: {type(exc).__name__})"
        graph.replay()
        self._sync()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(args.replays):
            a.record()
            graph.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1000.0 / calls)
        del graph
        return statistics.median(times), calls, "graph"


class Bench:
    def __init__(self, torch: object, device: str, args: argparse.Namespace, bw: float) -> None:
        self.torch, self.device, self.args, self.bw = torch, device, args, bw
        self.timer = Timer(torch, device, args)
        self.int4 = Int4(torch, device)
        self.marlin = Marlin(torch, device)
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(args.seed)

    def randn(self, *shape: int) -> object:
        torch = self.torch
        return torch.randn(shape, device=self.device, generator=self.gen).to(torch.bfloat16)

    # dense ---------------------------------------------------------------------------------------------

    def dense(self, it: dict, ms: list, backends: list, report: object) -> None:
        torch, n, k = self.torch, it["n"], it["k"]
        kind = parse_dtype(it["dtype"])
        if kind[0] == "bf16":
            w = self.randn(n, k) * 0.02
            for m in ms:
                x = self.randn(m, k)
                ws = [w] + [w.clone() for _ in range(copies_for(n * k * 2, self.args) - 1)]
                t, calls, how = self.timer.measure(lambda i, x=x, ws=ws: torch.mm(x, ws[i % len(ws)].t()))
                report(it, m, "bf16", "torch.mm", t, calls, how, None, 0)
                del ws
            return
        group = kind[2]
        q, s, wref = quantized(torch, n, k, group, self.device, self.gen)
        for backend in backends:
            if backend == "torch-int4":
                sz = torch.stack([s, torch.zeros_like(s)], dim=2).contiguous()
                packed = self.int4.pack(q)
                ps = [packed] + [packed.clone() for _ in range(copies_for(weight_bytes(n, k, it["dtype"]),
                                                                            self.args) - 1)]
                for m in ms:
                    x = self.randn(m, k)
                    err = rel_err(torch, self.int4.mm(x, packed, group, sz), torch.mm(x, wref.t()))
                    t, calls, how = self.timer.measure(
                        lambda i, x=x, ps=ps, sz=sz: self.int4.mm(x, ps[i % len(ps)], group, sz))
                    report(it, m, backend, self.int4.kernel, t, calls, how, err, 0)
                del ps
            elif backend == "marlin":
                mk = self.marlin
                wr, qw, ms_, _, _, _ = mk.quantize(wref.t().contiguous(), mk.qtype, group, False)
                qs = [qw] + [qw.clone() for _ in range(copies_for(weight_bytes(n, k, it["dtype"]), self.args) - 1)]
                for m in ms:
                    x = self.randn(m, k)
                    v = dict(mk.values(x.device, m, n, k), a=x, b_scales=ms_)
                    err = rel_err(torch, mk.call(mk.gemm, dict(v, b_q_weight=qw)), torch.mm(x, wr))
                    t, calls, how = self.timer.measure(
                        lambda i, v=v, qs=qs, mk=mk: mk.call(mk.gemm, dict(v, b_q_weight=qs[i % len(qs)])))
                    report(it, m, backend, mk.gemm_name, t, calls, how, err, 0)
                del qs
            elif backend == "bf16":
                ws = [wref] + [wref.clone() for _ in range(copies_for(n * k * 2, self.args) - 1)]
                for m in ms:
                    x = self.randn(m, k)
                    t, calls, how = self.timer.measure(lambda i, x=x, ws=ws: torch.mm(x, ws[i % len(ws)].t()))
                    report(it, m, "bf16", "torch.mm", t, calls, how, None, 0)
                del ws

def copy_bandwidth(torch: object, device: str) -> float:
    """GB/s of a device-to-device copy, counting bytes read and written."""
    nbytes = (1 << 30) if device != "cpu" else (64 << 20)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    reps = 10 if device != "cpu" else 3
    if device != "cpu":
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            dst.copy_(src)
        b.record()
        b.synchronize()
        secs = a.elapsed_time(b) / 1000.0
    else:
        t0 = time.perf_counter()
        for _ in range(reps):
            dst.copy_(src)
        secs = time.perf_counter() - t0
    return 2.0 * nbytes * reps / secs / 1e9


def run_torch(args: argparse.Namespace, items: list, ms: list) -> int:
    import torch


    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA GPU here")
        device = f"cuda:{args.gpu}"
        torch.cuda.set_device(device)
        name = torch.cuda.get_device_name(device)
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0) / 2 ** 20 or None
    else:
        torch.set_num_threads(max(1, args.threads))
        name, l2 = "cpu", None
    sheet = next((gbps for key, gbps in DATASHEET_GBPS if key in name), None)
    bw = copy_bandwidth(torch, device)
    bench = Bench(torch, device, args, bw)
    backends = {"bf16": f"torch.mm (torch {torch.__version__})" + ("; MoE: grouped_mm" if grouped_mm_of(torch) else ""),
                "torch-int4": f"{bench.int4.kernel} ({INT4_HONEST})",
                "marlin": bench.marlin.why}
    notes = [f"roofline = bytes moved / the copy bandwidth measured here ({bw:.0f} GB/s)"]
    if not bench.marlin.ok:
        notes.append(f"marlin {bench.marlin.why}: torch-int4 stands in for it, honest only near M=1")
    event("env", torch=torch.__version__, device=name, backends=backends, mem_bw_gbps=round(bw, 1),
         datasheet_gbps=sheet, l2_mb=l2, simulated=False, notes=notes)
    skip = set(args.skip)
    for it in items:
        it["backends"] = [b for b in it["backends"] if b != "marlin" or bench.marlin.ok]
        # a resumed run: the Ms whose every row is measured already are not measured again
        it["ms"] = [m for m in ms if any(row_key(it["name"], m, b) not in skip for b in it["backends"])]
    total = sum(len(it["backends"]) * len(it["ms"]) for it in items)
    state = {"done": 0}
    watch = ClockWatch.for_device(torch, device)  # the clock caps met while each row was measured
    stand_in = "" if bench.marlin.ok else f"stands in for marlin ({bench.marlin.why}); "

    def report(it: dict, m: int, backend: str, kernel: str, t: float, calls: int, how: str, err: object,
               touched: float, note: str = "") -> None:
        notes = [note] if note else []
        if backend == "torch-int4":
            notes.append(stand_in + INT4_HONEST)
        if how != "graph":
            notes.append(how if how != "loop" else "CPU loop")
        notes.append(f"{calls} calls per {'graph' if how == 'graph' else 'timing'}")
        dtype = it["dtype"] if backend != "bf16" or it["dtype"] == "bf16" else "bf16 (dequant)"
        event("row", name=it["name"], m=m, n=it["n"], k=it["k"], dtype=dtype, backend=backend, kernel=kernel,
             time_us=round(t, 3), rel_err=None if err is None else round(err, 5),
             correct=None if err is None else bool(err < args.max_rel_err), experts=round(touched),
             simulated=False, note="; ".join(notes), **figures(as_backend(it, backend), m, t, bw, touched),
             **watch.lap())
        state["done"] += 1

    for it in items:
        if not it["ms"]:
            continue
        event("progress", item=it["name"], done=state["done"], total=total)
        try:
            if it["kind"] == "moe":
                moe_rows(bench, it, it["ms"], it["backends"], report)
            else:
                bench.dense(it, it["ms"], it["backends"], report)
        except Exception as exc:  # one shape failing (out of memory, a kernel's limit) is a log line
            event_log("error", "{}: {}: {}".format(it["name"], type(exc).__name__, str(exc).splitlines()[0][:300]
                                         if str(exc) else ""))
        if device != "cpu":
            torch.cuda.empty_cache()
    return state["done"]


