"""kimitui's GEMM micro-benchmark worker: runs on the GPU host under ITS python3 (3.8+) and torch.

Sent with worker_start as one payload with the hostside modules it imports (stdlib; torch and vLLM, where
installed, inside functions): kimitui/hosts/bundle.py. The torch side (kernels, timing) is gemm_torch.py.
One JSON object per line on stdout, ``type`` first:
  hello {part, pid, python, simulated}                  once, first
  env {torch, device, backends, mem_bw_gbps, datasheet_gbps, l2_mb, notes}
  progress {item, done, total}                          before each row
  row {name, m, n, k, dtype, backend, kernel, time_us, tflops, gbps, roofline_us, rel_err, ...}
  log {level, message}
  error {message}                                       fatal, then exit 1
  done {rows, elapsed_s}

Backends: ``bf16`` (torch.mm, the dense reference), ``torch-int4`` (torch._weight_int4pack_mm, tinygemm:
honest only near M=1), ``marlin`` (vLLM's marlin_gemm / gptq_marlin_gemm and fused_marlin_moe, when vLLM
is installed on the host; the op is called by its parameter names, so its signature may change between
versions). On CUDA each figure is the median over replays of a CUDA graph of back-to-back calls, timed
with CUDA events, the weights rotated over copies beyond L2. On CPU (tests, no GPU) the same code times
plain loops. ``--modelled rtx-pro-6000`` prints modelled figures instead (the simulated host): no torch.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time

from .simholder import hold_simulated_memory
from .wire import event, event_log

INT4_HONEST = "tinygemm: honest only near M=1"
MAX_REL_ERR = 0.04
DATASHEET_GBPS = (("H200", 4800.0), ("H100 NVL", 3900.0), ("H100 PCIe", 2000.0), ("H100", 3350.0),
                  ("GH200", 4000.0), ("B200", 8000.0), ("A100-SXM4-80GB", 2039.0), ("A100 80GB PCIe", 1935.0),
                  ("A100", 1555.0), ("RTX PRO 6000", 1792.0), ("L40S", 864.0), ("L4", 300.0))
MODELS = {"rtx-pro-6000": {"device": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "bw": 1792.0,
                           "bf16_tflops": 250.0, "l2_mb": 128.0}}



# --- what to measure ----------------------------------------------------------------------------------


def dtype_bits(dtype: str) -> tuple | None:
    """(bits per weight, group size or None) of a weight as the checkpoint stores it: bf16 -> (16, None),
    int4-g32 -> (4, 32), fp8 -> (8, None); None for a dtype no one knows. The one reading of a dtype name:
    the caller's shape plan (kimitui/bench/micro/shapes.py) and this worker both use it."""
    m = re.fullmatch(r"int(\d+)-g(\d+)", dtype)
    if m:
        return int(m.group(1)), int(m.group(2))
    if dtype.startswith("fp8"):
        return 8, None
    if dtype in ("bf16", "fp16", "bfloat16", "float16"):
        return 16, None
    if dtype in ("fp32", "float32"):
        return 32, None
    return None


def weight_bytes(n: int, k: int, dtype: str) -> int:
    """Bytes of an N x K weight as stored: bits/8 per element (fp8: 1 byte), plus a bf16 scale per group
    of a grouped int format. ValueError for a dtype no one knows."""
    found = dtype_bits(dtype)
    if found is None:
        raise ValueError(f"unknown weight dtype {dtype!r}")
    bits, group = found
    if group is None:
        return n * k * bits // 8
    return n * k * bits // 8 + (n * k // group) * 2


def parse_dtype(dtype: str) -> tuple:
    """How this worker benchmarks a dtype: ("bf16", None), ("int", bits, group) or ("other", name) (not
    benchmarked)."""
    if dtype in ("bf16", "bfloat16"):
        return ("bf16", None)
    found = dtype_bits(dtype)
    if found is not None and found[1] is not None:
        return ("int", found[0], found[1])
    return ("other", dtype)


def plan_items(shapes: list, backends: list) -> tuple:
    """(items, skipped): one item per dense shape (a routed expert's shape as ONE expert's dense GEMM)
    plus one fused-MoE item when both expert weights are there; each with the backends that apply."""
    items, skipped = [], []
    by_name = {s["name"]: s for s in shapes}
    for s in shapes:
        kind = parse_dtype(s["dtype"])
        if kind[0] == "other":
            skipped.append("{}: dtype {} is not benchmarked (bf16 and intN-gG are)".format(s["name"], s["dtype"]))
            continue
        wanted = ["bf16"] if kind[0] == "bf16" else [b for b in ("marlin", "torch-int4", "bf16") if b in backends]
        wanted = [b for b in wanted if b in backends]
        if not wanted:
            continue
        label = s["name"] + (" (1 expert)" if s.get("experts") else "")
        items.append({"kind": "dense", "name": label, "n": s["n"], "k": s["k"], "dtype": s["dtype"],
                      "backends": wanted})
    w13, w2 = by_name.get("moe_w13"), by_name.get("moe_w2")
    if w13 and w2 and w13.get("experts") and parse_dtype(w13["dtype"])[0] != "other":
        kind = parse_dtype(w13["dtype"])
        wanted = ["bf16"] if kind[0] == "bf16" else [b for b in ("marlin", "torch-int4", "bf16") if b in backends]
        wanted = [b for b in wanted if b in backends]
        if wanted:
            items.append({"kind": "moe", "name": f"moe ({w13['topk']} of {w13['experts']})",
                          "n": w13["n"], "k": w13["k"], "n2": w2["n"], "k2": w2["k"], "dtype": w13["dtype"],
                          "experts": w13["experts"], "topk": w13["topk"], "backends": wanted})
    return items, skipped


def row_key(name: str, m: int, backend: str) -> str:
    """A row's identity for ``--skip`` (rows a resumed campaign already has)."""
    return f"{name}|{m}|{backend}"


def expected_experts(experts: int, topk: int, m: int) -> float:
    """Distinct experts M tokens touch when each picks ``topk`` of ``experts`` uniformly."""
    return experts * (1.0 - (1.0 - topk / float(experts)) ** m)


def row_bytes(item: dict, m: int, touched: float) -> int:
    act = 2
    if item["kind"] == "moe":
        per = weight_bytes(item["n"], item["k"], item["dtype"]) + weight_bytes(item["n2"], item["k2"], item["dtype"])
        return int(touched * per + m * item["k"] * act + m * item["n2"] * act)
    return weight_bytes(item["n"], item["k"], item["dtype"]) + m * item["k"] * act + m * item["n"] * act


def row_flops(item: dict, m: int) -> float:
    if item["kind"] == "moe":
        return 2.0 * m * item["topk"] * (item["n"] * item["k"] + item["n2"] * item["k2"])
    return 2.0 * m * item["n"] * item["k"]


def as_backend(item: dict, backend: str) -> dict:
    """The item as the backend reads it: the bf16 reference of a quantized weight reads bf16 weights."""
    return dict(item, dtype="bf16") if backend == "bf16" else item


def figures(item: dict, m: int, time_us: float, bw_gbps: float, touched: float) -> dict:
    b = row_bytes(item, m, touched)
    return {"bytes_moved": b, "tflops": row_flops(item, m) / (time_us * 1e-6) / 1e12 if time_us > 0 else 0.0,
            "gbps": b / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0,
            "roofline_us": b / (bw_gbps * 1e9) * 1e6 if bw_gbps else None}


# --- modelled figures (the simulated host) -----------------------------------------------------------

def run_modelled(args: argparse.Namespace, items: list, ms: list) -> int:
    model = MODELS[args.modelled]
    rnd = random.Random(args.seed)
    backends = {"marlin": "modelled: marlin_gemm / fused_marlin_moe ({}, simulated)".format(model["device"]),
                "bf16": "modelled: torch.mm (cuBLAS), simulated",
                "torch-int4": "not modelled (the simulated host models the production kernels)"}
    event("env", torch="", device=model["device"] + " (simulated)", backends=backends, mem_bw_gbps=None,
         datasheet_gbps=model["bw"], l2_mb=model["l2_mb"], simulated=True,
         notes=["modelled figures, not measured: bandwidth {:g} GB/s, bf16 {:g} TFLOP/s".format(model["bw"],
                                                                                       model["bf16_tflops"])])
    keep = hold_simulated_memory(args.sim_dir, [args.gpu], args.sim_mib, 95) if args.sim_dir else []
    skip = set(args.skip)
    rows = [(it, b, m) for it in items for b in it["backends"] if b != "torch-int4" for m in ms
            if row_key(it["name"], m, b) not in skip]
    done = 0
    for it, backend, m in rows:
        event("progress", item=f"{it['name']} M={m} {backend}", done=done, total=len(rows))
        if args.pace:
            time.sleep(args.pace)  # the modelled run takes time like a real one: progress is visible
        touched = expected_experts(it["experts"], it["topk"], m) if it["kind"] == "moe" else 0.0
        it_b = as_backend(it, backend)
        b = row_bytes(it_b, m, touched)
        eff = 0.82 if backend == "bf16" else 0.72
        mem_us = b / (eff * model["bw"] * 1e9) * 1e6
        flop_us = row_flops(it, m) / (0.55 * model["bf16_tflops"] * 1e12) * 1e6
        overhead = 2.6 + (6.0 if it["kind"] == "moe" else 0.0)
        if it["kind"] == "moe" and backend == "bf16":
            overhead += 4.0 * touched  # a loop over the experts, two launches each
        t = (max(mem_us, flop_us) + overhead) * rnd.uniform(0.985, 1.025)
        kernel = {"bf16": "torch.mm", "marlin": "fused_marlin_moe" if it["kind"] == "moe" else "marlin_gemm"}
        event("row", name=it["name"], m=m, n=it["n"], k=it["k"], dtype=it["dtype"] if backend != "bf16" else
             ("bf16" if it["dtype"] == "bf16" else "bf16 (dequant)"), backend=backend, kernel=kernel[backend],
             time_us=round(t, 3), rel_err=None, correct=None, experts=round(touched), simulated=True,
             note="modelled", **figures(it_b, m, t, model["bw"], touched))
        done += 1
    del keep
    return done



def parse_args(argv: list) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="kimitui-gemm")
    ap.add_argument("--shapes", required=True, help="JSON list of {name, n, k, dtype, experts, topk}")
    ap.add_argument("--ms", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--backends", default="marlin,torch-int4,bf16")
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (CPU path)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--target-ms", type=float, default=20.0, help="time of one graph (sets calls per graph)")
    ap.add_argument("--max-calls", type=int, default=200)
    ap.add_argument("--rotate-mb", type=float, default=256.0, help="weights rotated over at least this much")
    ap.add_argument("--max-copies", type=int, default=256)
    ap.add_argument("--max-rel-err", type=float, default=MAX_REL_ERR)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modelled", choices=sorted(MODELS), help="print modelled figures (no torch)")
    ap.add_argument("--sim-dir", help="modelled: hold memory on the simulated host's GPU")
    ap.add_argument("--sim-mib", type=int, default=2860)
    ap.add_argument("--pace", type=float, default=0.0, help="modelled: seconds per row")
    ap.add_argument("--skip", type=json.loads, default=[],
                    help="JSON list of rows not to measure (name|M|backend): a resumed run has them")
    return ap.parse_args(argv)


def main(argv: list | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    t0 = time.time()
    event("hello", part="gemm", pid=os.getpid(), python=".".join(map(str, sys.version_info[:3])),
         simulated=bool(args.modelled))
    try:
        shapes = json.loads(args.shapes)
        ms = [int(x) for x in args.ms.split(",") if x.strip()]
        if not ms or min(ms) < 1:
            raise ValueError("--ms needs positive token counts")
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        items, skipped = plan_items(shapes, backends)
        for why in skipped:
            event_log("warning", why)
        if args.modelled:
            rows = run_modelled(args, items, ms)
        else:
            from .gemm_torch import run_torch

            rows = run_torch(args, items, ms)
    except ImportError as exc:
        event("error", message=f"this host's python cannot import torch ({exc}): the GEMM benchmark needs it")
        return 1
    except Exception as exc:
        event("error", message=f"{type(exc).__name__}: {exc}")
        return 1
    event("done", rows=rows, elapsed_s=round(time.time() - t0, 3))
    return 0

