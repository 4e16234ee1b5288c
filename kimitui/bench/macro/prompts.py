"""Request payloads: synthetic prompts of a given token length, or prompts from a JSONL file."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimitui.bench.macro.config import ConfigError, MacroConfig

# Short, common English words: each is one token in the BPE vocabularies of current LLMs when preceded by
# a space, so a prompt of N of them is close to N tokens without a tokenizer on the client.
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her it an are be this which or had not "
    "but one all were they we can their has been more when who will no if out so said what up its about "
    "into than them only some time new could these two may first then do any like my now over such our "
    "man me even most made after also did many before must through back years where much your way well "
    "down should because each just those people how too little state good very make world still own see "
    "men work long get here between both life being under never day same another know while last might"
)
_WORDS = tuple(_WORD_TEXT.split())


@dataclass(slots=True)
class Prompt:
    """One request's input: ``text`` for /v1/completions, ``messages`` for /v1/chat/completions."""

    text: str | None
    messages: list[dict[str, Any]] | None
    est_tokens: int
    """The prompt length used when the server's usage does not report ``prompt_tokens``."""


def synthetic_prompts(count: int, input_len: int, seed: int) -> list[Prompt]:
    """Deterministic prompts of ``input_len`` words, each different from its first word on (so a prefix
    cache cannot serve one from another)."""
    rng = random.Random(seed)
    out = []
    n = len(_WORDS)
    for i in range(count):
        words = [str(i)] + [_WORDS[rng.randrange(n)] for _ in range(input_len - 1)]
        out.append(Prompt(" ".join(words), None, input_len))
    return out


def _estimate_tokens(text: str) -> int:
    return max(1, round(len(text) / 4))


def load_jsonl(path: Path) -> list[Prompt]:
    prompts: list[Prompt] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
            if isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
                prompts.append(Prompt(obj["prompt"], None, _estimate_tokens(obj["prompt"])))
            elif isinstance(obj, dict) and isinstance(obj.get("messages"), list) and obj["messages"]:
                text = " ".join(str(m.get("content", "")) for m in obj["messages"] if isinstance(m, dict))
                prompts.append(Prompt(None, obj["messages"], _estimate_tokens(text)))
            else:
                raise ConfigError(f'{path}:{lineno}: expected {{"prompt": "..."}} or {{"messages": [...]}}')
    if not prompts:
        raise ConfigError(f"{path}: no prompts")
    return prompts


class PromptSource:
    """Hands out request bodies in order, cycling through the prompts."""

    def __init__(self, cfg: MacroConfig, model: str, count: int) -> None:
        self.cfg = cfg
        self.model = model
        self.prompts = load_jsonl(cfg.dataset) if cfg.dataset else synthetic_prompts(
            max(1, count), cfg.input_len, cfg.seed)
        self._next = 0

    def take(self) -> tuple[bytes, int]:
        """The next request body (encoded JSON) and its estimated prompt length."""
        prompt = self.prompts[self._next % len(self.prompts)]
        self._next += 1
        return json.dumps(self.body(prompt)).encode(), prompt.est_tokens

    def body(self, prompt: Prompt) -> dict[str, Any]:
        cfg = self.cfg
        body: dict[str, Any] = {"model": self.model}
        if cfg.endpoint == "chat":
            body["messages"] = prompt.messages or [{"role": "user", "content": prompt.text or ""}]
            body["max_completion_tokens"] = cfg.max_tokens
        else:
            body["prompt"] = prompt.text if prompt.text is not None else "\n".join(
                str(m.get("content", "")) for m in prompt.messages or [])
        body["max_tokens"] = cfg.max_tokens
        body["temperature"] = cfg.temperature
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        if cfg.ignore_eos:
            body["ignore_eos"] = True
        return body
