"""A tiny random Llama made on the spot (nothing is downloaded): what ``kimitui demo --engine vllm`` serves with
a real vLLM, and what the tests serve with ``transformers serve`` and vLLM.

``make_tiny_model(folder)`` writes a word-level tokenizer trained on a generated corpus, wrapped as a
``PreTrainedTokenizerFast`` with a chat template, and a 2-layer ``LlamaConfig`` model with random weights, both
saved with ``save_pretrained``. It needs torch, tokenizers and transformers (vLLM's venv has them, kimitui's need
not): the demo runs this file as a script with the engine's python,

    ENGINE_PYTHON kimitui/hosts/sim/tiny_llama.py FOLDER [--hidden-size 256]

so it imports nothing of kimitui. vLLM's CPU build takes hidden 256 (4 heads of 64), not the 64 (head_dim 16)
that is enough for ``transformers serve``.

``--think N`` makes a model that reasons as Kimi-K2.5 does, for a real vLLM's reasoning parser (``kimi_k2``,
``deepseek_r1``): its tokenizer has ``<think>`` and ``</think>`` (special, as in Kimi's), and its weights are
set rather than random, so that greedy decoding answers every prompt the same way: N words of thought, then
``</think>``, then one word over and over. The layers add nothing (their output projections are zero), so the
next token is a function of the current one alone, which the embeddings and the LM head spell out.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

WORDS = 400
"""Distinct words of the generated corpus (the vocabulary is these plus the special tokens)."""

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
THINK_TOKENS = ["<think>", "</think>"]

VLLM_HIDDEN = 256
"""The hidden size vLLM's CPU build serves: 4 heads of 64 (its CPU attention takes head_dim 64, not 16)."""


def corpus(seed: int) -> list[str]:
    """Sentences of made-up words: letters drawn by a seeded generator, the same every run."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choices(letters, k=rng.randint(2, 7))) for _ in range(WORDS * 2)})[:WORDS]
    return [" ".join(rng.choices(words, k=rng.randint(5, 20))) for _ in range(2000)]


def make_tiny_model(folder: Path, seed: int = 0, hidden_size: int = 64, think: int = 0) -> Path:
    """A tokenizer and a random 2-layer Llama (4 heads of HIDDEN_SIZE / 4) saved under FOLDER; returns FOLDER.
    THINK > 0: a model that thinks THINK words before it answers (``script_thinking``)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    specials = SPECIAL_TOKENS + (THINK_TOKENS if think else [])
    raw.train_from_iterator(corpus(seed), trainers.WordLevelTrainer(special_tokens=specials))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>", pad_token="<pad>",
                                        additional_special_tokens=THINK_TOKENS if think else None)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=2048, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    # Random weights would often pick a special token (the streamed text skips those: a chunk-free stream)
    # or the EOS (an output that ends at a random length): every generated token is a word, so a request
    # gets exactly max_tokens content chunks.
    model.generation_config.suppress_tokens = tokenizer.all_special_ids
    if think:
        script_thinking(model, tokenizer, think)
    model.save_pretrained(folder)
    return folder


def script_thinking(model: Any, tokenizer: Any, words: int) -> list[int]:
    """Set MODEL's weights so that greedy decoding goes, from any token: WORDS chosen words, ``</think>``, then
    one answer word repeated. The layers' output projections are zeroed (the residual stream is the current
    token's embedding); each token's embedding is the unit vector of its place in the chain (every token outside
    the chain shares place 0), and the LM head's row for each token points at the place before it. Returns the
    chain's token ids."""
    import torch

    vocab = tokenizer.get_vocab()
    plain = sorted(i for t, i in vocab.items() if t not in SPECIAL_TOKENS and t not in THINK_TOKENS)
    chain = [*plain[:words], vocab["</think>"], plain[words]]
    hidden = model.config.hidden_size
    if len(chain) + 1 > hidden:
        raise ValueError(f"{words} words of thought need a hidden size over {len(chain)}")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        embed.zero_()
        embed[:, 0] = 1.0
        head.zero_()
        for place, token in enumerate(chain, start=1):
            embed[token].zero_()
            embed[token, place] = 1.0
        for place, token in enumerate(chain):  # place 0 (any other token) leads to the first word
            head[token, place] = 4.0
        head[chain[-1], len(chain)] = 4.0  # the answer word repeats
    return chain


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tiny_llama.py", description="Write a tiny random Llama to FOLDER.")
    p.add_argument("folder", type=Path)
    p.add_argument("--hidden-size", type=int, default=VLLM_HIDDEN)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--think", type=int, default=0, metavar="N",
                   help="a model that thinks N words (then </think>) before it answers, the same for every prompt")
    ns = p.parse_args(sys.argv[1:] if argv is None else argv)
    ns.folder.mkdir(parents=True, exist_ok=True)
    make_tiny_model(ns.folder, ns.seed, ns.hidden_size, ns.think)
    return 0


if __name__ == "__main__":
    sys.exit(main())
