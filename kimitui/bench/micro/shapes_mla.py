"""The MLA families' per-GPU decode GEMMs: DeepSeek-V3 / Kimi-K2 / K2.5 (vLLM deepseek_v2.py) and GLM-5
(``glm_moe_dsa``: vLLM runs it with the same DeepseekV2 model code, MLA plus DeepSeek-V3.2's sparse-attention
indexer).

MLA: q_a and kv_a fused and replicated (``q_lora + kv_lora + rope x hidden``), q_b and kv_b column-parallel
over the heads, o_proj row-parallel (all-reduce #1); the first_k_dense_replace layers a TP-split dense MLP,
the others a TP-split shared expert plus the fused routed experts (all-reduce #2).

The indexer (vLLM's ``Indexer`` in deepseek_v2.py, built when the config names ``index_topk``): ``wq_b``
(``index_n_heads*index_head_dim x q_lora_rank``), ``wk`` (``index_head_dim x hidden``) and ``weights_proj``
(``index_n_heads x hidden``), all replicated. Left out: its k_norm (a LayerNorm, counted in the parameters),
the FP8 top-k scoring over the cached keys (attention, not a GEMM of weights), and the MTP layer
(``num_nextn_predict_layers``: a draft layer, not in the decode step nor in the published totals).

The router gate: listed as a GEMM for GLM-5; for DeepSeek-V3 / Kimi it is counted in the parameters but not
listed, so the plan stays the project reference's table (docs/reference.md section 1) that the campaign goldens hold.
"""

from __future__ import annotations

from typing import Any

from kimitui.bench.micro.shape_core import (
    GemmShape,
    ShapePlan,
    TextConfig,
    quant_label,
    split_tp,
    step_allreduces,
    vocab_split,
)


def build_mla(model_type: str, data: dict[str, Any], tp: int, ep: bool) -> ShapePlan:
    c = TextConfig(data, "DeepSeek-V3 / Kimi-K2 / GLM-5 style")
    hidden, inter = c.need("hidden_size"), c.need("intermediate_size")
    moe_i, layers_n = c.need("moe_intermediate_size"), c.need("num_hidden_layers")
    n_heads, experts = c.need("num_attention_heads"), c.need("n_routed_experts")
    topk = c.need("num_experts_per_tok")
    shared, first_dense = c.opt("n_shared_experts", 0), c.opt("first_k_dense_replace", 0)
    q_lora = c.opt("q_lora_rank", 0) or None
    kv_lora, nope, rope = c.need("kv_lora_rank"), c.need("qk_nope_head_dim"), c.need("qk_rope_head_dim")
    v_head, vocab = c.need("v_head_dim"), c.need("vocab_size")
    index_topk = c.opt("index_topk", 0)
    router_gemm = model_type == "glm_moe_dsa"

    L = "model.layers"
    attn, dense, moe = f"{L}.1.self_attn", f"{L}.0.mlp", f"{L}.{max(first_dense, 1)}.mlp"
    heads = split_tp(n_heads, tp, "num_attention_heads", c.name)
    moe_layers = layers_n - first_dense
    dt = c.dtype
    g: list[GemmShape] = []
    if q_lora is not None:
        g.append(GemmShape("fused_qkv_a", q_lora + kv_lora + rope, hidden, dt(f"{attn}.q_a_proj"), layers_n,
                           "replicated", f"{attn}.q_a_proj", note=f"q_a {q_lora} + kv_a {kv_lora}+{rope}"))
        g.append(GemmShape("q_b_proj", heads * (nope + rope), q_lora, dt(f"{attn}.q_b_proj"), layers_n, "column",
                           f"{attn}.q_b_proj"))
    else:
        g.append(GemmShape("q_proj", heads * (nope + rope), hidden, dt(f"{attn}.q_proj"), layers_n, "column",
                           f"{attn}.q_proj"))
        g.append(GemmShape("kv_a_proj", kv_lora + rope, hidden, dt(f"{attn}.kv_a_proj_with_mqa"), layers_n,
                           "replicated", f"{attn}.kv_a_proj_with_mqa"))
    g.append(GemmShape("kv_b_proj", heads * (nope + v_head), kv_lora, dt(f"{attn}.kv_b_proj"), layers_n, "column",
                       f"{attn}.kv_b_proj"))
    if index_topk:
        ih, idim = c.need("index_n_heads"), c.need("index_head_dim")
        ix = f"{attn}.indexer"
        if q_lora is not None:
            g.append(GemmShape("indexer_wq_b", ih * idim, q_lora, dt(f"{ix}.wq_b"), layers_n, "replicated",
                               f"{ix}.wq_b", note=f"sparse-attention indexer: {ih} heads of {idim}"))
        g.append(GemmShape("indexer_wk", idim, hidden, dt(f"{ix}.wk"), layers_n, "replicated", f"{ix}.wk"))
        g.append(GemmShape("indexer_weights", ih, hidden, "bf16", layers_n, "replicated", f"{ix}.weights_proj",
                           note=f"then top {index_topk} cached tokens attended"))
    g.append(GemmShape("o_proj", hidden, heads * v_head, dt(f"{attn}.o_proj"), layers_n, "row", f"{attn}.o_proj",
                       note="all-reduce #1 follows"))
    if first_dense:
        inter_gpu = split_tp(inter, tp, "intermediate_size", c.name)
        which = "layer 0" if first_dense == 1 else f"layers 0-{first_dense - 1}"
        g.append(GemmShape("dense_gate_up", 2 * inter_gpu, hidden, dt(f"{dense}.gate_proj"), first_dense, "column",
                           f"{dense}.gate_proj", note=which))
        g.append(GemmShape("dense_down", hidden, inter_gpu, dt(f"{dense}.down_proj"), first_dense, "row",
                           f"{dense}.down_proj", note="all-reduce #2 follows"))
    if moe_layers and router_gemm:
        g.append(GemmShape("router", experts, hidden, "bf16", moe_layers, "replicated", f"{moe}.gate",
                           note=f"{experts} expert logits, top {topk}"))
    if shared and moe_layers:
        sh = split_tp(moe_i * shared, tp, "shared expert intermediate size", c.name)
        g.append(GemmShape("shared_gate_up", 2 * sh, hidden, dt(f"{moe}.shared_experts.gate_proj"), moe_layers,
                           "column", f"{moe}.shared_experts.gate_proj"))
        g.append(GemmShape("shared_down", hidden, sh, dt(f"{moe}.shared_experts.down_proj"), moe_layers, "row",
                           f"{moe}.shared_experts.down_proj", note="added before all-reduce #2"))
    if moe_layers:
        if ep:
            e_gpu = split_tp(experts, tp, "n_routed_experts (expert parallel)", c.name)
            n13, k2, split = 2 * moe_i, moe_i, "expert"
            how = f"expert parallel: {e_gpu} whole experts per GPU, {topk} of {experts} per token in all"
        else:
            e_gpu = experts
            k2 = split_tp(moe_i, tp, "moe_intermediate_size", c.name)
            n13, split = 2 * k2, "intermediate"
            how = f"fused MoE: {topk} of {experts} experts per token"
        g.append(GemmShape("moe_w13", n13, hidden, dt(f"{moe}.experts.0.gate_proj"), moe_layers, split,
                           f"{moe}.experts.0.gate_proj", experts=e_gpu, topk=topk, note=how))
        g.append(GemmShape("moe_w2", hidden, k2, dt(f"{moe}.experts.0.down_proj"), moe_layers, split,
                           f"{moe}.experts.0.down_proj", experts=e_gpu, topk=topk, note="all-reduce #2 follows"))
    tied = c.flag("tie_word_embeddings")
    g.append(GemmShape("lm_head", vocab_split(vocab, tp), hidden, dt("lm_head"), 1, "vocab-parallel", "lm_head"))

    # beside the GEMMs: norms (input, post-attention, q_a, kv_a; the final one), the indexer's k_norm
    # (LayerNorm: weight and bias), the router's e_score_correction_bias, DeepSeek's unlisted router gate
    extra = layers_n * (2 * hidden + (q_lora or 0) + kv_lora) + hidden
    if index_topk:
        extra += layers_n * 2 * c.need("index_head_dim")
    if moe_layers:
        extra += moe_layers * experts * (1 if router_gemm else 1 + hidden)
    embedding = 0 if tied else vocab * hidden
    plan = ShapePlan(model=c.name, tp=tp, gemms=g,
                     allreduces=step_allreduces(hidden, layers_n, tp, vocab_split(vocab, tp)),
                     quant=quant_label(c.quant))
    pad = (vocab_split(vocab, 1) - vocab) * hidden  # lm_head's padded rows are no parameters
    plan.params_total, plan.params_active, plan.params_embedding = extra + embedding - pad, extra - pad, embedding
    return plan
