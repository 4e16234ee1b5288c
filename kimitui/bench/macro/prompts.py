"""Request payloads: synthetic prompts of a target token length, or prompts from a JSONL file.

Synthetic prompts are the calibration's anchor followed by random one-token words (``lengths``), drawn
from a seeded stream per level and purpose (warm-up, measured) and salted per sweep
(``MacroConfig.prompt_salt``), so every prompt differs from the others within its first few tokens: no
prefix-cache hit between them, across levels, nor across sweeps against the same server (whose prefix
cache is counted in blocks of 16 tokens by vLLM: two prompts share a block only when their first 16 tokens
are the same). Unsalted (``--seed`` given), a run repeats its prompts exactly with the same seed. Lengths:
``input_len`` / ``max_tokens``, or with a spread, a seeded normal draw per request (at least 1); a trace can
give each request its own lengths.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimitui.bench.macro.config import ConfigError, MacroConfig
from kimitui.bench.macro.lengths import LengthModel, chat_messages, prompt_text


@dataclass(slots=True)
class Prompt:
    """One request's input from a dataset: ``text`` for /v1/completions, ``messages`` for chat."""

    text: str | None
    messages: list[dict[str, Any]] | None
    est_tokens: int
    """The prompt length used when the server's usage does not report ``prompt_tokens``."""


@dataclass(slots=True)
class Planned:
    """One request, ready to send."""

    body: bytes
    est_input: int
    """The predicted prompt length (the server's usage replaces it when reported)."""
    target_input: int | None
    """The length asked for (None: a dataset prompt)."""
    max_tokens: int
    words: int = -1
    """Words after the anchor of a synthetic prompt (-1: a dataset prompt)."""
    messages: list[dict[str, Any]] | None = None
    """A chat request's messages (a conversation's next turn extends them)."""
    turn: int = 1
    """Its turn in a conversation (``MacroConfig.turns``; 1: the first, or no conversation)."""


def _estimate_tokens(text: str) -> int:
    return max(1, round(len(text) / 4))


def load_jsonl(path: Path) -> list[Prompt]:
    prompts: list[Prompt] = []
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    with fh:
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


def draw_length(rng: random.Random, mean: int, stddev: float) -> int:
    return mean if stddev <= 0 else max(1, round(rng.gauss(mean, stddev)))


class PromptSource:
    """Hands out request bodies in order: synthetic prompts through ``lengths`` (a ``LengthModel``), or
    the dataset's prompts cycled."""

    def __init__(self, cfg: MacroConfig, model: str, lengths: LengthModel | None, stream: int,
                 dataset: list[Prompt] | None = None) -> None:
        self.cfg = cfg
        self.model = model
        self.lengths = lengths
        self.dataset = dataset
        salt = f":{cfg.prompt_salt}" if cfg.prompt_salt else ""
        self._words = random.Random(f"{cfg.seed}:words:{stream}{salt}")
        self._sizes = random.Random(f"{cfg.seed}:lengths:{stream}")
        self._next = 0
        # the same prefixes for every level and purpose of the sweep (seeded by the sweep, not the stream)
        self._prefixes = [random.Random(f"{cfg.seed}:prefix:{i}{salt}").choices(lengths.cal.words, k=cfg.prefix_len)
                          for i in range(cfg.num_prefixes)] if cfg.prefix_len and lengths is not None else []

    def take(self, input_len: int | None = None, output_len: int | None = None) -> Planned:
        """The next request; ``input_len`` / ``output_len`` override the configured lengths (a trace's)."""
        cfg = self.cfg
        target = input_len if input_len is not None else draw_length(self._sizes, cfg.input_len,
                                                                      cfg.input_len_stddev)
        max_tokens = output_len if output_len is not None else draw_length(self._sizes, cfg.max_tokens,
                                                                           cfg.max_tokens_stddev)
        if self.dataset is not None:
            prompt = self.dataset[self._next % len(self.dataset)]
            self._next += 1
            body = self.body(prompt.text, prompt.messages, max_tokens)
            return Planned(json.dumps(body).encode(), prompt.est_tokens, None, max_tokens)
        assert self.lengths is not None
        prefix = self._prefixes[self._next % len(self._prefixes)] if self._prefixes else []
        self._next += 1
        target += len(prefix)  # its own input_len after the shared prefix, as vLLM's random dataset counts
        k = self.lengths.words_for(target)
        text = prompt_text(prefix[:k] + self._words.choices(self.lengths.cal.words, k=max(0, k - len(prefix))))
        body = self.body(text, None, max_tokens)
        return Planned(json.dumps(body).encode(), self.lengths.predict(k), target, max_tokens, k,
                       messages=body.get("messages"))

    def next_turn(self, before: Planned, answer: str) -> Planned:
        """A conversation's next turn: the messages so far, the answer they got, and a new user message of a
        synthetic prompt's length (``input_len``); the server sees the whole history again, as a chat does."""
        fresh = self.take()
        assert before.messages is not None and fresh.messages is not None
        messages = [*before.messages, {"role": "assistant", "content": answer}, *fresh.messages]
        body = self.body(None, messages, fresh.max_tokens)
        history = before.est_input + before.max_tokens + fresh.est_input
        return Planned(json.dumps(body).encode(), history, None, fresh.max_tokens, -1, messages, before.turn + 1)

    def observe(self, planned: Planned, prompt_tokens: int, from_usage: bool) -> None:
        """A request came back: its prompt's length as the server counted it adjusts the next ones."""
        if from_usage and planned.words >= 0 and self.lengths is not None:
            self.lengths.observe(planned.words, prompt_tokens)

    def body(self, text: str | None, messages: list[dict[str, Any]] | None, max_tokens: int) -> dict[str, Any]:
        cfg = self.cfg
        body: dict[str, Any] = {"model": self.model}
        if cfg.endpoint == "chat":
            body["messages"] = messages or chat_messages(text or "")
            body["max_completion_tokens"] = max_tokens
        else:
            body["prompt"] = text if text is not None else "\n".join(
                str(m.get("content", "")) for m in messages or [])
        body["max_tokens"] = max_tokens
        body["temperature"] = cfg.temperature
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        if cfg.ignore_eos:
            body["ignore_eos"] = True
        for name in cfg.omit_fields:
            body.pop(name, None)
        return body
