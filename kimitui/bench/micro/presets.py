"""The models operators run, by name: each transcribed from its public HF ``config.json`` (the repository
named beside it; only the fields the shapes read, and the quantization config as published).

    kimitui shapes --model glm-5 --tp 8

The parameter counts they give (``kimitui shapes --model NAME --json``: params_total, params_active) are held
to the published totals in tests/test_micro_shapes_families.py.
"""

from __future__ import annotations

from typing import Any

from kimitui.bench.micro.shape_core import KIMI_K25, ShapeError

DEEPSEEK_V3: dict[str, Any] = {
    # https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (FP8 per-block checkpoint)
    "_name": "deepseek-ai/DeepSeek-V3",
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3,
    "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc",
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 129280, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
}

GLM_5: dict[str, Any] = {
    # https://huggingface.co/zai-org/GLM-5/blob/main/config.json (bf16; MLA + DSA indexer, 3 dense + 75 MoE)
    "_name": "zai-org/GLM-5",
    "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
    "hidden_size": 6144, "intermediate_size": 12288, "moe_intermediate_size": 2048,
    "num_hidden_layers": 78, "num_attention_heads": 64, "num_key_value_heads": 64,
    "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3,
    "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc",
    "q_lora_rank": 2048, "kv_lora_rank": 512, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64,
    "v_head_dim": 256, "index_topk": 2048, "index_n_heads": 32, "index_head_dim": 128,
    "vocab_size": 154880, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

QWEN3_235B_A22B: dict[str, Any] = {
    # https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json (bf16)
    "_name": "Qwen/Qwen3-235B-A22B",
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 4096, "intermediate_size": 12288, "moe_intermediate_size": 1536,
    "num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
    "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "attention_bias": False, "vocab_size": 151936, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}

LLAMA_31_70B: dict[str, Any] = {
    # https://huggingface.co/meta-llama/Llama-3.1-70B-Instruct/blob/main/config.json (bf16)
    "_name": "meta-llama/Llama-3.1-70B-Instruct",
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    "attention_bias": False, "mlp_bias": False, "vocab_size": 128256, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

GPT_OSS_120B: dict[str, Any] = {
    # https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json (MXFP4 experts, the rest bf16)
    "_name": "openai/gpt-oss-120b",
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
    "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "num_local_experts": 128, "num_experts_per_tok": 4, "experts_per_token": 4,
    "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18,
    "attention_bias": True, "vocab_size": 201088, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "mxfp4",
                            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"]},
}

PRESETS: dict[str, dict[str, Any]] = {
    "kimi-k2.5": KIMI_K25,  # moonshotai/Kimi-K2.5 (docs/reference.md section 1)
    "glm-5": GLM_5,
    "deepseek-v3": DEEPSEEK_V3,
    "qwen3-235b-a22b": QWEN3_235B_A22B,
    "llama-3.1-70b": LLAMA_31_70B,
    "gpt-oss-120b": GPT_OSS_120B,
}


def preset(name: str) -> dict[str, Any]:
    """A copy of the preset's config (a ShapeError naming the presets for a name that is none)."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise ShapeError(f"no preset {name!r}; presets: {', '.join(PRESETS)}")
    import copy

    return copy.deepcopy(PRESETS[key])
