"""The bf16 MoE row three ways at one model's expert shapes, on one GPU: the micro worker's grouped GEMM
(hostside/gemm_moe.py), its old loop of torch.mm over the selected experts, and transformers' own
``*SparseMoeBlock``: its experts module on its router's routing, and the block called whole (router, softmax
and top-k included; the router's own GEMM is added to the worker's figure for that comparison).

    python3 scripts/device_moe_kernels.py FOLDER [--ms 1,2,4,8,16,64]

FOLDER holds the model's config.json (Qwen3-MoE or Mixtral). Prints one JSON object: {M: {grouped_us,
loop_us, router_us, block_us, experts_us, grouped_vs_experts, grouped_vs_block}}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--ms", default="1,2,4,8,16,64")
    p.add_argument("--device", default="cuda:0")
    ns = p.parse_args()
    import torch
    from linear_timing import timed
    from transformers import AutoConfig, AutoModelForCausalLM

    from kimitui.hostside import gemm, gemm_moe
    from kimitui.hostside.gemm_rows import plan_items
    from kimitui.hostside.gemm_torch import Bench

    cfg = AutoConfig.from_pretrained(ns.folder)
    cfg.num_hidden_layers = min(cfg.num_hidden_layers, len(getattr(cfg, "mlp_only_layers", None) or []) + 1)
    ms = [int(x) for x in ns.ms.split(",")]
    inter = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
    experts = getattr(cfg, "num_experts", None) or cfg.num_local_experts
    shapes = [{"name": "moe_w13", "n": 2 * inter, "k": cfg.hidden_size, "dtype": "bf16", "experts": experts,
               "topk": cfg.num_experts_per_tok},
              {"name": "moe_w2", "n": cfg.hidden_size, "k": inter, "dtype": "bf16", "experts": experts,
               "topk": cfg.num_experts_per_tok}]
    item = next(it for it in plan_items(shapes, ["bf16"])[0] if it["kind"] == "moe")
    dev = ns.device
    args = gemm.parse_args(["--shapes", "[]", "--device", "cpu" if dev == "cpu" else "cuda"])
    if dev != "cpu":
        torch.cuda.set_device(dev)
    bench = Bench(torch, dev, args, 0.0)
    got: dict[tuple[int, str], float] = {}

    def report(it, m, backend, kernel, t, calls, how, err, touched, note=""):  # type: ignore[no-untyped-def]
        got[(m, kernel)] = t
        print(json.dumps({"m": m, "kernel": kernel, "us": round(t, 2), "how": how, "err": err,
                          "experts": touched}), file=sys.stderr)

    gemm_moe.moe_rows(bench, item, ms, ["bf16"], report)
    real = gemm_moe.grouped_mm_of
    gemm_moe.grouped_mm_of = lambda torch: None  # the loop, as a torch without a grouped GEMM measures it
    gemm_moe.moe_rows(bench, item, ms, ["bf16"], report)
    gemm_moe.grouped_mm_of = real
    torch.manual_seed(0)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    block = next(m for m in model.modules() if type(m).__name__.endswith("SparseMoeBlock"))
    out = {}
    with torch.inference_mode():
        for m in ms:
            h = torch.randn(1, m, cfg.hidden_size, dtype=torch.bfloat16, device=dev)
            x = h.reshape(m, -1)
            w = torch.randn(experts, cfg.hidden_size, dtype=torch.bfloat16, device=dev)
            router = timed(lambda x=x, w=w: torch.mm(x, w.t()), dev) * 1e6
            blk = timed(lambda h=h: block(h), dev) * 1e6
            _logits, weights, index = block.gate(x)
            experts_us = timed(lambda x=x, i=index, w=weights: block.experts(x, i, w), dev) * 1e6
            grouped = got.get((m, "grouped_mm"))
            loop = got.get((m, "torch.mm loop over experts"), 0.0)
            out[m] = {"grouped_us": None if grouped is None else round(grouped, 2), "loop_us": round(loop, 2),
                      "router_us": round(router, 2), "block_us": round(blk, 2), "experts_us": round(experts_us, 2),
                      "grouped_vs_experts": round(grouped / experts_us - 1.0, 4) if grouped else None,
                      "grouped_vs_block": round((grouped + router) / blk - 1.0, 4) if grouped else None}
    print(json.dumps({"config": str(ns.folder), "experts": experts, "topk": cfg.num_experts_per_tok,
                      "torch": torch.__version__, "experts_implementation":
                      getattr(cfg, "_experts_implementation", None), "by_m": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
