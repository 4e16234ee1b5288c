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
import sys
import time

from .gemm_rows import (  # noqa: F401 (the worker's names)
    DATASHEET_GBPS,
    INT4_HONEST,
    MAX_REL_ERR,
    MODELLED_JITTER,
    MODELS,
    as_backend,
    dtype_bits,
    expected_experts,
    figures,
    modelled_clock,
    modelled_gemm_us,
    parse_dtype,
    plan_items,
    row_bytes,
    row_flops,
    row_key,
    weight_bytes,
)
from .simholder import hold_simulated_memory
from .wire import event, event_log


def run_modelled(args: argparse.Namespace, items: list, ms: list) -> int:
    model = MODELS[args.modelled]
    rnd = random.Random(args.seed)
    backends = {"marlin": "modelled: marlin_gemm / fused_marlin_moe ({}, simulated)".format(model["device"]),
                "bf16": "modelled: torch.mm (cuBLAS); MoE: grouped_mm, simulated",
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
        t = modelled_gemm_us(it, backend, m, model) * rnd.uniform(*MODELLED_JITTER)
        kernel = {"bf16": "grouped_mm" if it["kind"] == "moe" else "torch.mm",
                  "marlin": "fused_marlin_moe" if it["kind"] == "moe" else "marlin_gemm"}
        event("row", name=it["name"], m=m, n=it["n"], k=it["k"], dtype=it["dtype"] if backend != "bf16" else
             ("bf16" if it["dtype"] == "bf16" else "bf16 (dequant)"), backend=backend, kernel=kernel[backend],
             time_us=round(t, 3), rel_err=None, correct=None, experts=round(touched), simulated=True,
             note="modelled", **figures(it_b, m, t, model["bw"], touched), **modelled_clock(it, backend, m, model))
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

