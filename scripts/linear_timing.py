"""A plain timing of a model's own linears in torch, per decode step of M tokens: the check the analysis's GEMM
share is held to (issue 35 item 4: within 15 %).

    python3 scripts/linear_timing.py FOLDER --ms 1,2,4 [--device cuda]

The model is built from FOLDER's config.json with random weights (transformers' own modules, bf16, on the
device), then every ``nn.Linear`` outside a sparse-MoE block is called on an input of M rows, and in every
sparse-MoE block (``*SparseMoeBlock``) its two GEMM parts: the router's linear (``gate.weight``) and the
experts module (transformers' own experts implementation, e.g. grouped_mm) on the routing its own router gives
M tokens. The router's softmax and top-k are routing, not linears: the budget leaves them in "the rest", and so
does this timing (``--whole-moe`` times each block whole instead, router and all). Each part is timed over
CUDA-graph replays (on a CPU: a loop). The sum over every module of the model is one decode step's linears.
Prints one JSON object: {"ms": {M: ms}, "linears": N, "moe_blocks": N, "moe": "gemms" | "whole block", ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def timed(fn: Any, device: str, calls: int = 20, replays: int = 5) -> float:
    """Seconds per call of ``fn()``."""
    import torch

    for _ in range(3):
        fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(stream):
                fn()
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    fn()
        except RuntimeError:  # not capturable (a data-dependent MoE): timed eagerly with events
            graph = None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = float("inf")
        for _ in range(replays):
            start.record()
            if graph is not None:
                graph.replay()
            else:
                for _ in range(calls):
                    fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1000.0 / calls)
        return best
    best = float("inf")
    for _ in range(replays):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - began) / calls)
    return best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--ms", default="1,2,4")
    p.add_argument("--device", default="cuda")
    p.add_argument("--whole-moe", action="store_true", help="time each sparse-MoE block whole (router included)")
    ns = p.parse_args()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(ns.folder)
    torch.manual_seed(0)
    with torch.device(ns.device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    blocks = [m for m in model.modules() if type(m).__name__.endswith("SparseMoeBlock")]
    inside = {id(sub) for b in blocks for sub in b.modules()}
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and id(m) not in inside]
    split = bool(blocks) and not ns.whole_moe and all(
        hasattr(b, "experts") and hasattr(getattr(b, "gate", None), "weight") for b in blocks)
    out: dict[str, Any] = {"ms": {}, "linears": len(linears), "moe_blocks": len(blocks), "device": ns.device,
                           "torch": torch.__version__, "layers": config.num_hidden_layers,
                           "moe": "gemms" if split else "whole block" if blocks else None,
                           "experts_implementation": getattr(config, "_experts_implementation", None)}
    block = blocks[0] if blocks else None  # every block has the same shapes: the first is timed
    with torch.inference_mode():
        for m in (int(x) for x in ns.ms.split(",")):
            total = 0.0
            by_shape: dict[tuple[int, int], float] = {}
            for lin in linears:
                key = (lin.out_features, lin.in_features)
                if key not in by_shape:  # the same shape takes the same time: timed once
                    x = torch.randn(m, lin.in_features, dtype=torch.bfloat16, device=ns.device)
                    by_shape[key] = timed(lambda lin=lin, x=x: lin(x), ns.device)
                total += by_shape[key]
            if block is not None:
                hidden = torch.randn(1, m, config.hidden_size, dtype=torch.bfloat16, device=ns.device)
                if split:
                    x = hidden.reshape(m, -1)
                    _logits, weights, index = block.gate(x)
                    router = block.gate.weight
                    per_block = (timed(lambda x=x, w=router: torch.nn.functional.linear(x, w), ns.device)
                                 + timed(lambda x=x, i=index, w=weights: block.experts(x, i, w), ns.device))
                else:
                    per_block = timed(lambda h=hidden: block(h), ns.device)
                total += per_block * len(blocks)
            out["ms"][str(m)] = round(total * 1000.0, 4)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
