"""The simulated server's tokenizer: deterministic, small, and deliberately not one token per word.

The text is split into words (runs of letters, digits and ``_``) and single punctuation marks; whitespace
is dropped. A piece is cut into slices of up to 4 characters, and a slice is one token, unless it is
"rare": a slice of two characters or more whose CRC-32 is a multiple of ``RARE_EVERY`` is two tokens (its
first character, then the rest). So "the" is one token, "which" two, "everything" three, and about one
short word in four is two tokens too ("and", "if", "not"): a client that counts words gets the length
wrong, as it would against a real BPE vocabulary, and cannot guess which words are single tokens. Token
ids are a CRC of each token's text, above the special tokens.

Everything that counts prompt tokens in the simulated server goes through here: ``POST /tokenize``,
``usage.prompt_tokens`` and the prefill cost of the batching model, so the three always agree.

A completion prompt gets a BOS token in front (``add_special_tokens``, on by default as in vLLM). A chat
prompt is rendered by a ChatML-like template: BOS, then per message ``<|im_start|>``, the role, the
content and ``<|im_end|>``, then ``<|im_start|>assistant`` when a generation prompt is added (the
default), so a chat prompt is its contents' tokens + 3 per message + 3.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable

BOS, IM_START, IM_END = 1, 2, 3
ROLE_IDS = {"system": 4, "user": 5, "assistant": 6, "tool": 7}
OTHER_ROLE = 8
FIRST_ID = 1000
VOCAB_SIZE = 163_840
"""Kimi-K2.5's vocabulary size: ids stay below it."""
CHARS_PER_TOKEN = 4
RARE_EVERY = 4
_PIECES = re.compile(r"\w+|[^\w\s]")


def _id(text: bytes) -> int:
    return FIRST_ID + zlib.crc32(text) % (VOCAB_SIZE - FIRST_ID)


def _slices(text: str) -> list[bytes]:
    """The tokens' texts (see the module docstring)."""
    out: list[bytes] = []
    for piece in _PIECES.findall(text):
        for i in range(0, len(piece), CHARS_PER_TOKEN):
            chunk = piece[i:i + CHARS_PER_TOKEN].encode()
            if len(chunk) > 1 and zlib.crc32(chunk) % RARE_EVERY == 0:
                out += [chunk[:1], chunk[1:]]
            else:
                out.append(chunk)
    return out


def encode_text(text: str) -> list[int]:
    """Token ids of ``text`` alone (no special tokens)."""
    return [_id(s) for s in _slices(text)]


def count_text(text: str) -> int:
    return len(_slices(text))


def encode_prompt(text: str, add_special_tokens: bool = True) -> list[int]:
    """A completion prompt: BOS + the text's tokens (without BOS when ``add_special_tokens`` is off)."""
    return ([BOS] if add_special_tokens else []) + encode_text(text)


def encode_chat(messages: Iterable[tuple[str, str]], add_generation_prompt: bool = True) -> list[int]:
    """A chat prompt from (role, content) pairs, through the template described in the module docstring."""
    ids = [BOS]
    for role, content in messages:
        ids += [IM_START, ROLE_IDS.get(role, OTHER_ROLE), *encode_text(content), IM_END]
    if add_generation_prompt:
        ids += [IM_START, ROLE_IDS["assistant"]]
    return ids
