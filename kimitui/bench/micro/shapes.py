"""The per-GPU decode GEMMs and all-reduces of a DeepSeek-V3 / Kimi-K2 style model at a TP size.

From a model config (Kimi-K2.5 built in; any HF-style ``config.json`` of the DeepSeek-V3 family, a
multimodal one's ``text_config`` included) and a tensor-parallel size: each GEMM's per-GPU N x K (N =
output features, K = input features) following vLLM's deepseek_v2 model code, its dtype as the checkpoint
stores it (INT4 only where the quantization config quantizes: for Kimi-K2.5 the routed experts), how
often a decoded token calls it, and the all-reduces of one decode step.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kimitui.core.error_words import json_words
from kimitui.hostside.gemm_rows import dtype_bits
from kimitui.hostside.gemm_rows import weight_bytes as stored_weight_bytes

ACT_BYTES = 2
"""Activations are bf16 on the wire and in the GEMMs."""

KIMI_K25: dict[str, Any] = {
    "model_type": "kimi_k25",
    "_name": "moonshotai/Kimi-K2.5",
    "text_config": {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 64,
        "n_routed_experts": 384,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 163840,
        "torch_dtype": "bfloat16",
    },
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                            "group_size": 32},
                "input_activations": None,
            }
        },
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                   "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*vision.*", "re:.*mm_projector.*"],
    },
}
"""Kimi-K2.5's text architecture and INT4 checkpoint (compressed-tensors pack-quantized, 4-bit symmetric,
group 32, W4A16; only the routed experts quantized), as the project reference (REFERENCE.md, section 1) gives them."""


class ShapeError(ValueError):
    """A config that is not of the DeepSeek-V3 family, or a TP size that does not divide it (one line)."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str
    hidden: int
    intermediate: int
    moe_intermediate: int
    layers: int
    heads: int
    experts: int
    topk: int
    shared_experts: int
    first_dense: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope: int
    qk_rope: int
    v_head: int
    vocab: int
    quant: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class GemmShape:
    """One per-GPU GEMM. ``experts`` > 0: a routed-expert weight, [experts, n, k], ``topk`` used per token."""

    name: str
    n: int
    k: int
    dtype: str
    """``bf16``, ``int4-g32`` (W4A16, group 32), ``fp8`` ...: how the checkpoint stores the weight."""
    calls_per_token: int
    split: str
    module: str
    experts: int = 0
    topk: int = 0
    note: str = ""

    @property
    def weight_bytes(self) -> int:
        """Bytes of one (expert's) weight as stored: bf16 2 B; intB-gG B/8 B plus a bf16 scale per group."""
        return weight_bytes(self.n, self.k, self.dtype)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class AllReduceItem:
    name: str
    count_per_step: int
    bytes_per_token: int
    note: str = ""

    def bytes_at(self, m: int) -> int:
        return self.bytes_per_token * m


@dataclass(slots=True)
class ShapePlan:
    model: str
    tp: int
    gemms: list[GemmShape] = field(default_factory=list)
    allreduces: list[AllReduceItem] = field(default_factory=list)
    quant: str = ""

    @property
    def step_allreduces(self) -> AllReduceItem:
        return self.allreduces[0]

    def to_dict(self, ms: list[int] | None = None) -> dict[str, Any]:
        ar = self.step_allreduces
        out: dict[str, Any] = {
            "model": self.model, "tp": self.tp, "quantization": self.quant,
            "gemms": [g.to_dict() for g in self.gemms],
            "allreduces": [asdict(a) for a in self.allreduces],
        }
        if ms:
            out["allreduce_bytes"] = {str(m): ar.bytes_at(m) for m in ms}
        return out


def weight_bytes(n: int, k: int, dtype: str) -> int:
    parse_dtype(dtype)  # a ShapeError for a dtype no one knows
    return stored_weight_bytes(n, k, dtype)


def parse_dtype(dtype: str) -> tuple[int, int | None]:
    """(bits per weight, group size or None): bf16 -> (16, None), int4-g32 -> (4, 32), fp8 -> (8, None)."""
    found = dtype_bits(dtype)
    if found is None:
        raise ShapeError(f"unknown weight dtype {dtype!r}")
    return found


# -- reading configs ------------------------------------------------------------------------------------


def load_config(path: Path | None) -> dict[str, Any]:
    """The built-in Kimi-K2.5 config, or an HF ``config.json`` (a bad file is a one-line ShapeError)."""
    if path is None:
        return KIMI_K25
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ShapeError(f"{path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ShapeError(f"{path}: not JSON ({json_words(exc, 'line')})") from None
    if not isinstance(data, dict):
        raise ShapeError(f"{path}: not a JSON object")
    data.setdefault("_name", str(path))
    return data


def model_config(data: dict[str, Any]) -> ModelConfig:
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    name = str(data.get("_name") or data.get("_name_or_path") or text.get("model_type") or "model")

    def need(key: str) -> int:
        value = text.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ShapeError(f"{name}: config has no positive integer {key!r} (a DeepSeek-V3 / Kimi-K2 style "
                             "config is expected)")
        return value

    def opt(key: str, default: int) -> int:
        value = text.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    q_lora = text.get("q_lora_rank")
    quant = data.get("quantization_config") or text.get("quantization_config")
    return ModelConfig(
        name=name, hidden=need("hidden_size"), intermediate=need("intermediate_size"),
        moe_intermediate=need("moe_intermediate_size"), layers=need("num_hidden_layers"),
        heads=need("num_attention_heads"), experts=need("n_routed_experts"), topk=need("num_experts_per_tok"),
        shared_experts=opt("n_shared_experts", 0), first_dense=opt("first_k_dense_replace", 0),
        q_lora_rank=q_lora if isinstance(q_lora, int) and q_lora > 0 else None,
        kv_lora_rank=need("kv_lora_rank"), qk_nope=need("qk_nope_head_dim"), qk_rope=need("qk_rope_head_dim"),
        v_head=need("v_head_dim"), vocab=need("vocab_size"),
        quant=quant if isinstance(quant, dict) else None,
    )


# -- which modules the checkpoint quantizes ----------------------------------------------------------------


def _matches(entry: str, module: str) -> bool:
    if entry.startswith("re:"):
        return re.match(entry[3:], module) is not None
    return module == entry or module.endswith("." + entry)


def quant_dtype(quant: dict[str, Any] | None, module: str) -> str:
    """How the checkpoint stores ``module``'s weight: bf16 unless its quantization config quantizes it."""
    if not quant:
        return "bf16"
    method = str(quant.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        if any(_matches(e, module) for e in quant.get("ignore") or []):
            return "bf16"
        for group in (quant.get("config_groups") or {}).values():
            weights = group.get("weights") or {}
            targets = group.get("targets") or []
            if any(t == "Linear" or _matches(t, module) for t in targets) and weights.get("num_bits"):
                kind = "int" if weights.get("type", "int") == "int" else str(weights.get("type"))
                gs = weights.get("group_size")
                return f"{kind}{weights['num_bits']}" + (f"-g{gs}" if gs else "")
        return "bf16"
    if method == "fp8":
        skip = quant.get("modules_to_not_convert") or ["lm_head"]
        return "bf16" if any(_matches(e, module) for e in skip) else "fp8"
    if method in ("gptq", "awq", "awq_marlin", "gptq_marlin"):
        skip = quant.get("modules_to_not_convert") or ["lm_head"]
        if any(_matches(e, module) for e in skip):
            return "bf16"
        return f"int{quant.get('bits', 4)}-g{quant.get('group_size', 128)}"
    return "bf16"


def _quant_label(quant: dict[str, Any] | None) -> str:
    if not quant:
        return "none (bf16)"
    method = quant.get("quant_method", "?")
    fmt = quant.get("format")
    return f"{method}" + (f" {fmt}" if fmt else "")


# -- the shapes ------------------------------------------------------------------------------------------


def _split(total: int, tp: int, what: str, name: str) -> int:
    if total % tp:
        raise ShapeError(f"{name}: {what} {total} is not divisible by TP {tp}")
    return total // tp


def shapes_for(data: dict[str, Any], tp: int) -> ShapePlan:
    """The per-GPU GEMMs and the all-reduces of one decode step at tensor parallel ``tp``."""
    if tp < 1:
        raise ShapeError(f"TP must be 1 or more, not {tp}")
    c = model_config(data)
    L = "model.layers"
    attn, dense, moe = f"{L}.1.self_attn", f"{L}.0.mlp", f"{L}.{max(c.first_dense, 1)}.mlp"
    heads = _split(c.heads, tp, "num_attention_heads", c.name)
    moe_layers = c.layers - c.first_dense
    dt = lambda module: quant_dtype(c.quant, module)  # noqa: E731
    g: list[GemmShape] = []
    if c.q_lora_rank is not None:
        g.append(GemmShape("fused_qkv_a", c.q_lora_rank + c.kv_lora_rank + c.qk_rope, c.hidden,
                           dt(f"{attn}.q_a_proj"), c.layers, "replicated", f"{attn}.q_a_proj",
                           note=f"q_a {c.q_lora_rank} + kv_a {c.kv_lora_rank}+{c.qk_rope}"))
        g.append(GemmShape("q_b_proj", heads * (c.qk_nope + c.qk_rope), c.q_lora_rank, dt(f"{attn}.q_b_proj"),
                           c.layers, "column", f"{attn}.q_b_proj"))
    else:
        g.append(GemmShape("q_proj", heads * (c.qk_nope + c.qk_rope), c.hidden, dt(f"{attn}.q_proj"),
                           c.layers, "column", f"{attn}.q_proj"))
        g.append(GemmShape("kv_a_proj", c.kv_lora_rank + c.qk_rope, c.hidden,
                           dt(f"{attn}.kv_a_proj_with_mqa"), c.layers, "replicated",
                           f"{attn}.kv_a_proj_with_mqa"))
    g.append(GemmShape("kv_b_proj", heads * (c.qk_nope + c.v_head), c.kv_lora_rank, dt(f"{attn}.kv_b_proj"),
                       c.layers, "column", f"{attn}.kv_b_proj"))
    g.append(GemmShape("o_proj", c.hidden, heads * c.v_head, dt(f"{attn}.o_proj"), c.layers, "row",
                       f"{attn}.o_proj", note="all-reduce #1 follows"))
    if c.first_dense:
        inter = _split(c.intermediate, tp, "intermediate_size", c.name)
        layers = "layer 0" if c.first_dense == 1 else f"layers 0-{c.first_dense - 1}"
        g.append(GemmShape("dense_gate_up", 2 * inter, c.hidden, dt(f"{dense}.gate_proj"), c.first_dense,
                           "column", f"{dense}.gate_proj", note=layers))
        g.append(GemmShape("dense_down", c.hidden, inter, dt(f"{dense}.down_proj"), c.first_dense, "row",
                           f"{dense}.down_proj", note="all-reduce #2 follows"))
    moe_inter = _split(c.moe_intermediate, tp, "moe_intermediate_size", c.name)
    if c.shared_experts and moe_layers:
        sh = _split(c.moe_intermediate * c.shared_experts, tp, "shared expert intermediate size", c.name)
        g.append(GemmShape("shared_gate_up", 2 * sh, c.hidden, dt(f"{moe}.shared_experts.gate_proj"),
                           moe_layers, "column", f"{moe}.shared_experts.gate_proj"))
        g.append(GemmShape("shared_down", c.hidden, sh, dt(f"{moe}.shared_experts.down_proj"), moe_layers,
                           "row", f"{moe}.shared_experts.down_proj", note="added before all-reduce #2"))
    if moe_layers:
        g.append(GemmShape("moe_w13", 2 * moe_inter, c.hidden, dt(f"{moe}.experts.0.gate_proj"), moe_layers,
                           "intermediate", f"{moe}.experts.0.gate_proj", experts=c.experts, topk=c.topk,
                           note=f"fused MoE: {c.topk} of {c.experts} experts per token"))
        g.append(GemmShape("moe_w2", c.hidden, moe_inter, dt(f"{moe}.experts.0.down_proj"), moe_layers,
                           "intermediate", f"{moe}.experts.0.down_proj", experts=c.experts, topk=c.topk,
                           note="all-reduce #2 follows"))
    vocab = _split(c.vocab, tp, "vocab_size", c.name)
    g.append(GemmShape("lm_head", vocab, c.hidden, dt("lm_head"), 1, "vocab-parallel", "lm_head"))

    hidden_bytes = c.hidden * ACT_BYTES
    ars = [AllReduceItem("decode step", 2 * c.layers if tp > 1 else 0, hidden_bytes,
                         "2 per layer: after o_proj and after the MLP / MoE output")]
    if tp > 1:
        ars.append(AllReduceItem("embedding", 1, hidden_bytes, "vocab-parallel embedding: one more all-reduce"))
        ars.append(AllReduceItem("logits gather", 1, vocab * ACT_BYTES,
                                 "a gather of each GPU's vocab slice, not an all-reduce"))
    return ShapePlan(model=c.name, tp=tp, gemms=g, allreduces=ars, quant=_quant_label(c.quant))


# -- text ------------------------------------------------------------------------------------------------


def format_plan(plan: ShapePlan, ms: list[int]) -> str:
    lines = [f"{plan.model} at TP={plan.tp}: per-GPU decode GEMMs (N = output features, K = input features); "
             f"quantization: {plan.quant}", ""]
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
