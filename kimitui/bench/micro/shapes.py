"""The per-GPU decode GEMMs and all-reduces of a served model at a TP size, and its parameter counts.

From a model config (Kimi-K2.5 built in; presets by name in presets.py; any HF-style ``config.json``, a
multimodal one's ``text_config`` included) and a tensor-parallel size: each GEMM's per-GPU N x K (N =
output features, K = input features) following vLLM's model code for the family (shape_families.py: the
GQA families, dense and MoE; shapes_mla.py: DeepSeek-V3 / Kimi-K2 / GLM-5), its dtype as the checkpoint
stores it (INT4 / FP8 / MXFP4 only where the quantization config quantizes: for Kimi-K2.5 the routed
experts), how often a decoded token calls it, and the all-reduces of one decode step.
"""


from __future__ import annotations

from typing import Any

from kimitui.bench.micro.shape_core import (
    ACT_BYTES,
    KIMI_K25,
    MXFP4,
    AllReduceItem,
    GemmShape,
    ShapeError,
    ShapePlan,
    TextConfig,
    load_config,
    parse_dtype,
    quant_dtype,
    step_allreduces,
    vocab_split,
    weight_bytes,
)
from kimitui.bench.micro.shape_families import build, family_of

__all__ = ["ACT_BYTES", "KIMI_K25", "MXFP4", "AllReduceItem", "GemmShape", "ShapeError", "ShapePlan", "TextConfig",
           "count_words", "format_plan", "load_config", "parse_dtype", "quant_dtype", "shapes_for",
           "step_allreduces", "vocab_split", "weight_bytes"]


def shapes_for(data: dict[str, Any], tp: int, expert_parallel: bool = False) -> ShapePlan:
    """The per-GPU GEMMs and the all-reduces of one decode step at tensor parallel ``tp`` (``expert_parallel``:
    vLLM's --enable-expert-parallel, the routed experts split across the GPUs whole), and the model's
    parameter counts."""
    if tp < 1:
        raise ShapeError(f"TP must be 1 or more, not {tp}")
    family = family_of(data)
    plan = build(family, data, tp, expert_parallel)
    full = plan if tp == 1 and not expert_parallel else build(family, data, 1, False)
    plan.params_total, plan.params_active, plan.params_embedding = _count(full)
    plan.family, plan.expert_parallel = family, expert_parallel
    return plan


def _count(full: ShapePlan) -> tuple[int, int, int]:
    """(total, active, embedding) from the TP=1 plan: each GEMM's weight times its layers (times the experts,
    or the top-k for active), plus what the builder counted beside the GEMMs (norms, biases, sinks, the
    embedding table)."""
    total = active = 0
    for g in full.gemms:
        per = g.n * g.k * g.calls_per_token
        total += per * (g.experts or 1)
        active += per * (g.topk or 1)
    extra_total, extra_active, embedding = full.params_total, full.params_active, full.params_embedding
    return total + extra_total, active + extra_active, embedding


# -- text ------------------------------------------------------------------------------------------------


def count_words(n: int) -> str:
    """A parameter count as people write it: 671.03B, 13.09M, 4,096."""
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:,}"


def format_plan(plan: ShapePlan, ms: list[int]) -> str:
    lines = [f"{plan.model} at TP={plan.tp}: per-GPU decode GEMMs (N = output features, K = input features); "
             f"quantization: {plan.quant}"]
    if plan.params_total:
        ep = "; expert parallel" if plan.expert_parallel else ""
        lines.append(f"parameters: {count_words(plan.params_total)} total, {count_words(plan.params_active)} active "
                     f"per token (top-k experts, without the embedding table); family {plan.family}{ep}")
    lines.append("")
    head = f"{'GEMM':<16} {'per-GPU N x K':>22} {'split':<14} {'dtype':<9} {'calls/token':>11}  note"
    lines += [head, "-" * len(head)]
    for s in plan.gemms:
        nk = f"[{s.experts}, {s.n}, {s.k}]" if s.experts else f"{s.n} x {s.k}"
        calls = f"{s.calls_per_token}" + (f" x {s.topk}" if s.topk else "")
        lines.append(f"{s.name:<16} {nk:>22} {s.split:<14} {s.dtype:<9} {calls:>11}  {s.note}")
    ar = plan.step_allreduces
    lines += ["", f"All-reduces per decode step: {ar.count_per_step} ({ar.note}); message = M x "
                  f"{ar.bytes_per_token // ACT_BYTES} x {ACT_BYTES} bytes"]
    if ar.count_per_step:
        lines += [f"{'M':>6} {'bytes':>12} {'per step':>14}"]
        for m in ms:
            lines.append(f"{m:>6} {ar.bytes_at(m):>12,} {ar.count_per_step * ar.bytes_at(m):>14,}")
    for extra in plan.allreduces[1:]:
        lines.append(f"plus {extra.count_per_step} {extra.name}: {extra.bytes_per_token:,} bytes per token "
                     f"({extra.note})")
    return "\n".join(lines) + "\n"
