"""Write a random model of a real family's shapes under a folder (nothing downloaded), for the device's budget
check (issue 35 item 4: scripts/device_model_budget.sh): the analysis run against ``transformers serve`` serving
it, and ``scripts/linear_timing.py`` timing its own linears.

    python3 scripts/make_random_model.py FOLDER --family llama-3-8b [--layers N] [--device cuda]

Families (each transcribed from its public config.json, named below): ``llama-3-8b``
(meta-llama/Meta-Llama-3-8B: hidden 4096, 32 layers, GQA 32/8, MLP 14336, vocab 128256) and ``qwen3-moe``
(Qwen/Qwen3-30B-A3B: hidden 2048, 48 layers, 32/4 heads of 128, 128 experts of 768, top 8, vocab 151936).
``--layers`` keeps fewer layers (the per-layer shapes are the family's; the parameter count is not). The
tokenizer is the tiny word-level one of kimitui/hosts/sim/tiny_llama.py; every token id past it is suppressed
in generation, so each generated token is a word (a stream of exactly max_tokens content chunks).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FAMILIES: dict[str, dict[str, Any]] = {
    "llama-3-8b": {  # meta-llama/Meta-Llama-3-8B config.json
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
    "qwen3-moe": {  # Qwen/Qwen3-30B-A3B config.json
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
        "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
}


def make(folder: Path, family: str, layers: int | None, device: str, seed: int = 0) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from kimitui.hosts.sim.tiny_llama import make_tiny_model

    make_tiny_model(folder, seed)  # the tokenizer (and a tiny model, replaced below)
    tokenizer = json.loads((folder / "tokenizer_config.json").read_text())
    data = dict(FAMILIES[family])
    if layers:
        data["num_hidden_layers"] = layers
    specials = json.loads((folder / "config.json").read_text())
    config = AutoConfig.for_model(data.pop("model_type"), **{k: v for k, v in data.items() if k != "torch_dtype"},
                                  bos_token_id=specials.get("bos_token_id"), eos_token_id=specials.get("eos_token_id"),
                                  pad_token_id=specials.get("pad_token_id"))
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    words = len(json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"])
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.suppress_tokens = [i for i in range(config.vocab_size)
                                               if i >= words or i in (config.bos_token_id, config.eos_token_id,
                                                                      config.pad_token_id) or i < 7]
    model.save_pretrained(folder)
    del tokenizer
    return {"family": family, "layers": config.num_hidden_layers,
            "params": sum(p.numel() for p in model.parameters()), "folder": str(folder)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--family", choices=sorted(FAMILIES), required=True)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--device", default="cpu")
    ns = p.parse_args()
    ns.folder.mkdir(parents=True, exist_ok=True)
    print(json.dumps(make(ns.folder, ns.family, ns.layers, ns.device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
