"""The pieces every family's shapes share: the plan's types (GemmShape, ShapePlan, AllReduceItem), reading a
config (load_config, TextConfig), which modules a checkpoint quantizes (quant_dtype), the vocab and
all-reduce arithmetic. kimitui.bench.micro.shapes is the module to import: it re-exports these and adds
shapes_for and format_plan.
"""

from __future__ import annotations

import fnmatch
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
group 32, W4A16; only the routed experts quantized), as docs/reference.md section 1 gives them."""


class ShapeError(ValueError):
    """A config of no known family, a field it lacks, or a TP size that does not divide it (one line)."""


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
    family: str = ""
    expert_parallel: bool = False
    params_total: int = 0
    """Parameters of the whole model (embeddings, lm_head, every layer; no MTP / draft layers)."""
    params_active: int = 0
    """Parameters a decoded token uses: only its top-k routed experts, and not the input embedding table (a
    token reads one row of it; publishers count active parameters so: gpt-oss's 5.1B is 5.7B with it)."""
    params_embedding: int = 0
    """The input embedding table (counted in ``params_total``, left out of ``params_active``)."""

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


MXFP4 = "mxfp4"
"""OCP MX FP4 (gpt-oss's experts): 4-bit e2m1 values, one 8-bit (e8m0) scale per 32."""


def weight_bytes(n: int, k: int, dtype: str) -> int:
    if dtype == MXFP4:
        return n * k // 2 + n * k // 32
    parse_dtype(dtype)  # a ShapeError for a dtype no one knows
    return stored_weight_bytes(n, k, dtype)


def parse_dtype(dtype: str) -> tuple[int, int | None]:
    """(bits per weight, group size or None): bf16 -> (16, None), int4-g32 -> (4, 32), fp8 -> (8, None)."""
    if dtype == MXFP4:
        return 4, 32
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


class TextConfig:
    """The text model's fields of a config (a multimodal one's ``text_config``), read with one-line errors."""

    def __init__(self, data: dict[str, Any], expects: str = "") -> None:
        self.text: dict[str, Any] = data["text_config"] if isinstance(data.get("text_config"), dict) else data
        self.name = str(data.get("_name") or data.get("_name_or_path") or self.text.get("model_type") or "model")
        quant = data.get("quantization_config") or self.text.get("quantization_config")
        self.quant: dict[str, Any] | None = quant if isinstance(quant, dict) else None
        self.expects = expects

    def need(self, *keys: str) -> int:
        """The first of ``keys`` the config has, a positive integer (a ShapeError naming the first if none)."""
        for key in keys:
            value = self.text.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        raise ShapeError(f"{self.name}: config has no positive integer {keys[0]!r}"
                         + (f" (a {self.expects} config is expected)" if self.expects else ""))

    def opt(self, key: str, default: int) -> int:
        value = self.text.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.text.get(key, default)
        return value if isinstance(value, bool) else default

    def dtype(self, module: str) -> str:
        return quant_dtype(self.quant, module)


# -- which modules the checkpoint quantizes ----------------------------------------------------------------


def _matches(entry: str, module: str) -> bool:
    if entry.startswith("re:"):
        return re.match(entry[3:], module) is not None
    if "*" in entry:  # gpt-oss: "model.layers.*.self_attn" names the module and everything under it
        return fnmatch.fnmatchcase(module, entry) or fnmatch.fnmatchcase(module, entry + ".*")
    return module == entry or module.endswith("." + entry) or module.startswith(entry + ".") \
        or ("." + entry + ".") in module


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
                if weights.get("type") == "float":
                    return f"fp{weights['num_bits']}"
                gs = weights.get("group_size")
                return f"int{weights['num_bits']}" + (f"-g{gs}" if gs else "")
        return "bf16"
    if method == "fp8":
        skip = quant.get("modules_to_not_convert") or quant.get("ignored_layers") or ["lm_head"]
        return "bf16" if any(_matches(e, module) for e in skip) else "fp8"
    if method == MXFP4:  # vLLM's Mxfp4Config quantizes the fused MoE experts only
        skip = quant.get("modules_to_not_convert") or []
        return MXFP4 if ".experts" in module and not any(_matches(e, module) for e in skip) else "bf16"
    if method in ("gptq", "awq", "awq_marlin", "gptq_marlin"):
        skip = quant.get("modules_to_not_convert") or ["lm_head"]
        if any(_matches(e, module) for e in skip) or module.endswith("lm_head"):
            return "bf16"
        bits, group = quant.get("bits", quant.get("w_bit", 4)), quant.get("group_size", quant.get("q_group_size", 128))
        return f"int{bits}-g{group}"
    return "bf16"


def quant_label(quant: dict[str, Any] | None) -> str:
    if not quant:
        return "none (bf16)"
    method = quant.get("quant_method", "?")
    fmt = quant.get("format") or quant.get("fmt")
    block = quant.get("weight_block_size")
    return f"{method}" + (f" {fmt}" if fmt else "") + (f" block {block[0]}x{block[1]}" if block else "")


# -- the shapes ------------------------------------------------------------------------------------------


def split_tp(total: int, tp: int, what: str, name: str) -> int:
    if total % tp:
        raise ShapeError(f"{name}: {what} {total} is not divisible by TP {tp}")
    return total // tp


def vocab_split(vocab: int, tp: int) -> int:
    """Each GPU's rows of vLLM's vocab-parallel embedding / lm_head: the vocab padded to 64, split over TP."""
    padded = -(-vocab // 64) * 64
    return -(-padded // tp)


def step_allreduces(hidden: int, layers: int, tp: int, vocab_per_gpu: int, note: str = "") -> list[AllReduceItem]:
    hidden_bytes = hidden * ACT_BYTES
    ars = [AllReduceItem("decode step", 2 * layers if tp > 1 else 0, hidden_bytes,
                         note or "2 per layer: after o_proj and after the MLP / MoE output")]
    if tp > 1:
        ars.append(AllReduceItem("embedding", 1, hidden_bytes, "vocab-parallel embedding: one more all-reduce"))
        ars.append(AllReduceItem("logits gather", 1, vocab_per_gpu * ACT_BYTES,
                                 "a gather of each GPU's vocab slice, not an all-reduce"))
    return ars
