"""How the simulated server departs from vLLM, to behave like the other engines operators run (for tests).

A spec is a comma-separated list (``--quirks`` of the servers, ``SimHost(quirks=...)``):

- ``strict_fields``: a request field outside the OpenAI API (vLLM's ``ignore_eos``, ``min_tokens``,
  ``add_special_tokens`` ...) gets 422 ``{"detail": "Unexpected fields in the request: {'ignore_eos'}"}``,
  as ``transformers serve`` answers;
- ``role_first``: a chat stream sends a role-only chunk (``{"role": "assistant"}``) as soon as the request
  arrives, ahead of the first token (vLLM sends it with the first token);
- ``no_done``: a stream ends with a content-free chunk carrying ``finish_reason`` (and ``usage`` when asked
  for) and no ``data: [DONE]``;
- ``eos=N``: the model emits EOS after N tokens unless the request says ``ignore_eos: true`` (outputs
  shorter than ``max_tokens``, finish_reason ``stop``);
- ``listen_delay=S``: the port opens S seconds after the server starts (nothing listens while it loads);
- ``cold=N``: the first N requests after the server starts run at a third of its pace, as a freshly started
  engine's do (``transformers serve`` loads the model on its first request; an engine meets each new shape
  the first time, allocators grow): every step while one of them is in the batch takes ``COLD_FACTOR`` times;
- ``reasoning=N``: a reasoning model (Kimi-K2.5 behind vLLM's ``kimi_k2`` reasoning parser): on the chat
  endpoint the first N tokens of every answer are its thinking, streamed as vLLM 0.32 does (``delta.reasoning``
  and, in the usage, ``completion_tokens_details.reasoning_tokens``); a request whose ``max_tokens`` is N or
  fewer gets no answer at all, as a thinking model cut short does. 0 (the default): no reasoning;
- ``metrics=vllm|sglang|none``: the names ``/metrics`` serves (``none``: 404);
- ``tokenize=vllm|sglang|llamacpp|none``: ``POST /tokenize`` with ``{"prompt"|"messages"}`` -> ``{"count"}``
  (vLLM), ``POST /v1/tokenize`` with ``{"prompt"}`` -> ``{"tokens", "count"}`` (SGLang), ``POST /tokenize``
  with ``{"content"}`` -> ``{"tokens"}`` (llama.cpp), or no tokenize endpoint;
- ``transformers``: ``strict_fields,role_first,no_done,metrics=none,tokenize=none``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal

MetricsFlavor = Literal["vllm", "sglang", "none"]
TokenizeForm = Literal["vllm", "sglang", "llamacpp", "none"]
METRICS_FLAVORS: tuple[MetricsFlavor, ...] = ("vllm", "sglang", "none")
TOKENIZE_FORMS: tuple[TokenizeForm, ...] = ("vllm", "sglang", "llamacpp", "none")
_FLAGS = ("strict_fields", "role_first", "no_done")
DEMO_REASONING_TOKENS = 32
"""The demo's simulated Kimi-K2.5 thinks this many tokens before each chat answer (``kimitui demo
--reasoning-tokens``): its TTFO (first output token) comes after its TTFT, as the real model's does."""


class QuirkError(ValueError):
    """A quirks spec that does not parse."""


@dataclass(frozen=True, slots=True)
class EngineQuirks:
    strict_fields: bool = False
    role_first: bool = False
    no_done: bool = False
    eos_after: int | None = None
    listen_delay_s: float = 0.0
    cold_requests: int = 0
    reasoning_tokens: int = 0
    metrics: MetricsFlavor = "vllm"
    tokenize: TokenizeForm = "vllm"

    @classmethod
    def parse(cls, spec: str) -> EngineQuirks:
        quirks = cls()
        for item in (part.strip() for part in spec.split(",")):
            if item:
                quirks = quirks._with(item)
        return quirks

    def _with(self, item: str) -> EngineQuirks:
        key, has_value, value = item.partition("=")
        if not has_value:
            if key == "transformers":
                return replace(self, strict_fields=True, role_first=True, no_done=True, metrics="none",
                               tokenize="none")
            if key in _FLAGS:
                return replace(self, **{key: True})
            raise QuirkError(f"unknown quirk {key!r}; one of {', '.join((*_FLAGS, 'transformers'))}, eos=N, "
                             "listen_delay=S, cold=N, reasoning=N, metrics=..., tokenize=...")
        if key == "eos":
            if not value.isdigit() or int(value) < 1:
                raise QuirkError(f"eos={value!r}: a number of tokens, at least 1")
            return replace(self, eos_after=int(value))
        if key == "reasoning":
            if not value.isdigit():
                raise QuirkError(f"reasoning={value!r}: a number of tokens, 0 or more")
            return replace(self, reasoning_tokens=int(value))
        if key == "cold":
            if not value.isdigit() or int(value) < 1:
                raise QuirkError(f"cold={value!r}: a number of requests, at least 1")
            return replace(self, cold_requests=int(value))
        if key == "listen_delay":
            try:
                delay = float(value)
            except ValueError:
                delay = -1.0
            if not 0 <= delay < 3600:
                raise QuirkError(f"listen_delay={value!r}: seconds, 0 or more")
            return replace(self, listen_delay_s=delay)
        if key == "metrics" and value in METRICS_FLAVORS:
            return replace(self, metrics=value)  # type: ignore[arg-type]
        if key == "tokenize" and value in TOKENIZE_FORMS:
            return replace(self, tokenize=value)  # type: ignore[arg-type]
        raise QuirkError(f"unknown quirk {item!r}")

    def spec(self) -> str:
        """The spec that parses back to these quirks."""
        default = EngineQuirks()
        parts = [name for name in _FLAGS if getattr(self, name)]
        if self.eos_after is not None:
            parts.append(f"eos={self.eos_after}")
        if self.listen_delay_s:
            parts.append(f"listen_delay={self.listen_delay_s!r}")
        if self.cold_requests:
            parts.append(f"cold={self.cold_requests}")
        if self.reasoning_tokens:
            parts.append(f"reasoning={self.reasoning_tokens}")
        parts += [f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                  if f.name in ("metrics", "tokenize") and getattr(self, f.name) != getattr(default, f.name)]
        return ",".join(parts)
