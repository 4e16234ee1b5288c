"""Which family a config is, and the GQA families' per-GPU decode GEMMs (vLLM's model code for each).

Dense (vLLM llama.py / qwen2.py / qwen3.py; Mistral runs as Llama): QKVParallelLinear fuses q, k and v
(per GPU ``(q_heads/tp + 2*max(1, kv_heads/tp)) * head_dim x hidden``: KV heads fewer than the GPUs are
replicated), o_proj row-parallel, MergedColumnParallelLinear fuses gate and up (``2*intermediate/tp x
hidden``), down_proj row-parallel: two all-reduces per layer.

MoE (qwen3_moe.py, mixtral.py, glm4_moe.py, gpt_oss.py): the same attention; the router gate a replicated
linear that stays bf16 (vLLM builds it without the quantization config); FusedMoE's w13 ``[E, 2*I/tp,
hidden]`` and w2 ``[E, hidden, I/tp]`` split on the intermediate dim, or with expert parallel ``[E/tp, 2*I,
hidden]`` / ``[E/tp, hidden, I]`` (whole experts, a GPU holding E/tp of them); GLM-4.5's shared expert a
TP-split dense MLP added before the layer's second all-reduce. The MLA families (DeepSeek-V3, Kimi-K2,
GLM-5) are in shapes_mla.py.

Left out: gpt-oss's MXFP4 kernels in vLLM pad each GPU's intermediate slice up to their tile (2880/8 = 360
may run as 384), the sliding-window / full alternation (attention, not weights), and the biases' adds.
"""

from __future__ import annotations

from typing import Any

from kimitui.bench.micro.shape_core import (
    GemmShape,
    ShapeError,
    ShapePlan,
    TextConfig,
    quant_label,
    split_tp,
    step_allreduces,
    vocab_split,
)

FAMILIES: dict[str, str] = {
    "llama": "dense", "mistral": "dense", "qwen2": "dense", "qwen3": "dense",
    "qwen3_moe": "qwen3_moe", "mixtral": "mixtral",
    "deepseek_v3": "mla", "deepseek_v2": "mla", "kimi_k2": "mla", "deepseek_v32": "mla", "glm_moe_dsa": "mla",
    "glm4_moe": "glm4_moe", "gpt_oss": "gpt_oss",
}
"""HF ``model_type`` -> the builder that reads it."""

ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe", "MixtralForCausalLM": "mixtral",
    "DeepseekV3ForCausalLM": "deepseek_v3", "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV32ForCausalLM": "deepseek_v32", "GlmMoeDsaForCausalLM": "glm_moe_dsa",
    "Glm4MoeForCausalLM": "glm4_moe", "GptOssForCausalLM": "gpt_oss",
}

KNOWN = ("Llama / Mistral / Qwen2 / Qwen3 (dense), Qwen3-MoE, Mixtral, DeepSeek-V3 / Kimi-K2 (deepseek_v3), "
         "GLM-4.5 (glm4_moe), GLM-5 (glm_moe_dsa), gpt-oss (gpt_oss)")


def family_of(data: dict[str, Any]) -> str:
    """The text model's ``model_type`` (its architecture's when it names none); a ShapeError naming it and
    the families known when no builder reads it."""
    c = TextConfig(data)
    model_type = c.text.get("model_type")
    if not model_type:
        for arch in c.text.get("architectures") or data.get("architectures") or []:
            model_type = ARCHITECTURES.get(str(arch))
            if model_type:
                break
    if not model_type and "kv_lora_rank" in c.text:
        model_type = "deepseek_v3"  # the DeepSeek-V3 style configs this command read before it knew others
    if model_type not in FAMILIES:
        archs = c.text.get("architectures") or data.get("architectures") or []
        said = f"architecture {model_type or 'unnamed'!r}" + (f" ({', '.join(map(str, archs))})" if archs else "")
        raise ShapeError(f"{c.name}: {said} is not a known family; known: {KNOWN}")
    return str(model_type)


def build(model_type: str, data: dict[str, Any], tp: int, expert_parallel: bool) -> ShapePlan:
    if FAMILIES[model_type] == "mla":
        from kimitui.bench.micro.shapes_mla import build_mla

        return build_mla(model_type, data, tp, expert_parallel)
    return build_gqa(model_type, data, tp, expert_parallel)


def _moe_layers(c: TextConfig, model_type: str, layers: int) -> list[bool]:
    """Which layers are MoE: Qwen3-MoE's mlp_only_layers and decoder_sparse_step, GLM-4.5's first dense."""
    if model_type in ("llama", "mistral", "qwen2", "qwen3"):
        return [False] * layers
    if model_type == "qwen3_moe":
        dense = set(c.text.get("mlp_only_layers") or [])
        step = max(c.opt("decoder_sparse_step", 1), 1)
        return [i not in dense and (i + 1) % step == 0 for i in range(layers)]
    if model_type == "glm4_moe":
        first = c.opt("first_k_dense_replace", 0)
        return [i >= first for i in range(layers)]
    return [True] * layers


def build_gqa(model_type: str, data: dict[str, Any], tp: int, ep: bool) -> ShapePlan:
    """The GQA families: dense, Qwen3-MoE, Mixtral, GLM-4.5/4.6, gpt-oss. The plan's ``params_*`` hold what
    the GEMMs leave out (norms, biases, sinks, the embedding table): shapes_for adds the GEMMs."""
    c = TextConfig(data, "Llama / Qwen / Mixtral / GLM-4.5 / gpt-oss style")
    hidden, layers = c.need("hidden_size"), c.need("num_hidden_layers")
    heads = c.need("num_attention_heads")
    kv = c.opt("num_key_value_heads", heads) or heads
    head_dim = c.opt("head_dim", 0) or hidden // heads
    vocab = c.need("vocab_size")
    q_gpu = split_tp(heads, tp, "num_attention_heads", c.name)
    if kv >= tp:
        kv_gpu = split_tp(kv, tp, "num_key_value_heads", c.name)
    elif tp % kv:
        raise ShapeError(f"{c.name}: TP {tp} is not a multiple of num_key_value_heads {kv}")
    else:
        kv_gpu = 1  # each KV head replicated on tp/kv GPUs
    moe = _moe_layers(c, model_type, layers)
    n_moe, n_dense = sum(moe), layers - sum(moe)
    L = "model.layers"
    first_moe = moe.index(True) if n_moe else 0
    first_dense = moe.index(False) if n_dense else 0
    attn = f"{L}.{first_moe if n_moe else 0}.self_attn"
    g: list[GemmShape] = []
    extra_total = extra_active = 0

    def add(*args: Any, **kw: Any) -> None:
        g.append(GemmShape(*args, **kw))

    # attention
    add("qkv_proj", (q_gpu + 2 * kv_gpu) * head_dim, hidden, c.dtype(f"{attn}.q_proj"), layers, "column",
        f"{attn}.q_proj", note=f"fused QKV: {q_gpu} q + 2 x {kv_gpu} kv heads of {head_dim}"
        + (" (kv replicated)" if kv < tp else ""))
    add("o_proj", hidden, q_gpu * head_dim, c.dtype(f"{attn}.o_proj"), layers, "row", f"{attn}.o_proj",
        note="all-reduce #1 follows")
    qkv_bias = model_type == "qwen2" or model_type == "gpt_oss" or c.flag("attention_bias")
    per_layer = 2 * hidden  # input and post-attention norms
    per_layer += (heads + 2 * kv) * head_dim if qkv_bias else 0
    if model_type == "gpt_oss" or (model_type in ("llama", "mistral") and c.flag("attention_bias")):
        per_layer += hidden  # o_proj bias
    if model_type in ("qwen3", "qwen3_moe") or (model_type == "glm4_moe" and c.flag("use_qk_norm")):
        per_layer += 2 * head_dim  # q_norm, k_norm
    if model_type == "gpt_oss":
        per_layer += heads  # attention sinks: one learned logit per head
    extra_total += per_layer * layers + hidden  # + the final norm
    extra_active += per_layer * layers + hidden

    # dense MLP layers
    if n_dense:
        inter = split_tp(c.need("intermediate_size"), tp, "intermediate_size", c.name)
        mlp = f"{L}.{first_dense}.mlp"
        names = ("gate_up_proj", "down_proj") if not n_moe else ("dense_gate_up", "dense_down")
        note = "" if not n_moe else f"{n_dense} dense layer{'s' if n_dense > 1 else ''}"
        add(names[0], 2 * inter, hidden, c.dtype(f"{mlp}.gate_proj"), n_dense, "column", f"{mlp}.gate_proj",
            note=note or "fused gate_up")
        add(names[1], hidden, inter, c.dtype(f"{mlp}.down_proj"), n_dense, "row", f"{mlp}.down_proj",
            note="all-reduce #2 follows")
        if model_type in ("llama", "mistral") and c.flag("mlp_bias"):  # gate, up and down biases
            extra_total += (2 * c.need("intermediate_size") + hidden) * n_dense
            extra_active += (2 * c.need("intermediate_size") + hidden) * n_dense

    # MoE layers
    if n_moe:
        mt = model_type
        own = ("num_local_experts" if mt in ("mixtral", "gpt_oss") else
               "n_routed_experts" if mt == "glm4_moe" else "num_experts")
        # transformers 5 saves a Qwen3-MoE config with num_local_experts (its attribute_map reads either)
        experts = c.need(own, *(k for k in ("num_experts", "num_local_experts", "n_routed_experts") if k != own))
        topk = c.need("num_experts_per_tok", "experts_per_token")
        moe_i = c.need("intermediate_size" if mt in ("mixtral", "gpt_oss") else "moe_intermediate_size")
        block = "block_sparse_moe" if mt == "mixtral" else "mlp"
        m = f"{L}.{first_moe}.{block}"
        router = f"{m}.router" if mt == "gpt_oss" else f"{m}.gate"
        add("router", experts, hidden, "bf16", n_moe, "replicated", router,
            note=f"{experts} expert logits, top {topk}")
        shared = c.opt("n_shared_experts", 0) if mt == "glm4_moe" else 0
        if shared:
            sh = split_tp(moe_i * shared, tp, "shared expert intermediate size", c.name)
            add("shared_gate_up", 2 * sh, hidden, c.dtype(f"{m}.shared_experts.gate_proj"), n_moe, "column",
                f"{m}.shared_experts.gate_proj")
            add("shared_down", hidden, sh, c.dtype(f"{m}.shared_experts.down_proj"), n_moe, "row",
                f"{m}.shared_experts.down_proj", note="added before all-reduce #2")
        w1, w2 = {"mixtral": ("w1", "w2"), "gpt_oss": ("gate_up_proj", "down_proj")}.get(mt, ("gate_proj",
                                                                                             "down_proj"))
        e0 = f"{m}.experts" if mt == "gpt_oss" else f"{m}.experts.0"
        if ep:
            e_gpu = split_tp(experts, tp, "the experts (expert parallel)", c.name)
            n13, n2k, split = 2 * moe_i, moe_i, "expert"
            how = f"expert parallel: {e_gpu} whole experts per GPU, {topk} of {experts} per token in all"
        else:
            e_gpu = experts
            n13 = 2 * split_tp(moe_i, tp, "the experts' intermediate size", c.name)
            n2k, split = n13 // 2, "intermediate"
            how = f"fused MoE: {topk} of {experts} experts per token"
        add("moe_w13", n13, hidden, c.dtype(f"{e0}.{w1}"), n_moe, split, f"{e0}.{w1}", experts=e_gpu, topk=topk,
            note=how)
        add("moe_w2", hidden, n2k, c.dtype(f"{e0}.{w2}"), n_moe, split, f"{e0}.{w2}", experts=e_gpu, topk=topk,
            note="all-reduce #2 follows")
        if mt == "gpt_oss":  # router bias; each expert's gate_up and down biases
            extra_total += (experts + experts * (2 * moe_i + hidden)) * n_moe
            extra_active += (experts + topk * (2 * moe_i + hidden)) * n_moe
        if mt == "glm4_moe":  # the router's e_score_correction_bias
            extra_total += experts * n_moe
            extra_active += experts * n_moe

    # lm_head and the embedding
    tied = c.flag("tie_word_embeddings")
    add("lm_head", vocab_split(vocab, tp), hidden, c.dtype("lm_head"), 1, "vocab-parallel", "lm_head",
        note="tied to the embedding" if tied else "")
    embedding = 0 if tied else vocab * hidden
    plan = ShapePlan(model=c.name, tp=tp, gemms=g,
                     allreduces=step_allreduces(hidden, layers, tp, vocab_split(vocab, tp)),
                     quant=quant_label(c.quant))
    pad = (vocab_split(vocab, 1) - vocab) * hidden  # lm_head's padded rows are no parameters
    plan.params_total, plan.params_active = extra_total + embedding - pad, extra_active - pad
    plan.params_embedding = embedding
    return plan
