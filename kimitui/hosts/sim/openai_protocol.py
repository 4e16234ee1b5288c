"""OpenAI / vLLM wire format for the simulated server: request validation and response bodies.

Shapes follow vLLM's OpenAI-compatible server: streamed chunks as ``data: {...}\\n\\n`` ending with
``data: [DONE]``; with ``stream_options.include_usage`` a last chunk with empty ``choices`` and
``usage``; chat streams send the ``role`` delta with the first token. Prompts are tokenized by the toy
tokenizer (``toy_tokenizer``; a list of token ids counts exactly), the same one ``POST /tokenize``
answers with; each generated token is one word, so the text of a completion has as many words as
``completion_tokens``. The simulated model generates ``max_tokens`` tokens (finish_reason ``length``),
or fewer when it is told to stop at EOS (``eos_after``, the ``eos=N`` quirk) and the request does not
say ``ignore_eos``.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from kimitui.hosts.sim import toy_tokenizer
from kimitui.hosts.sim.prefix_cache import block_hashes

DEFAULT_COMPLETION_MAX_TOKENS = 16
DEFAULT_CHAT_MAX_TOKENS = 256
_VOCAB = ("the", "model", "answers", "with", "simulated", "tokens", "from", "a", "batch", "of",
          "eight", "GPUs", "while", "decode", "steps", "run", "in", "parallel", "and", "memory", "holds")
VOCAB_WORDS = tuple(" " + w for w in _VOCAB)
_VOCAB_JSON = tuple(json.dumps(w).encode() for w in VOCAB_WORDS)
_ids = itertools.count(1)

Kind = Literal["completion", "chat"]
OPENAI_FIELDS = frozenset((
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options",
    "temperature", "top_p", "n", "stop", "seed", "presence_penalty", "frequency_penalty", "logit_bias",
    "logprobs", "top_logprobs", "user", "echo", "suffix", "best_of", "response_format", "tools",
    "tool_choice", "parallel_tool_calls", "metadata", "store", "modalities", "audio", "prediction",
    "reasoning_effort", "service_tier"))
"""The request fields of OpenAI's API; a strict server (``strict_fields``) refuses any other."""


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return {"object": "error", "error": {"message": str(self), "type": self.kind, "code": self.status},
                "message": str(self), "type": self.kind, "code": self.status}


@dataclass(slots=True)
class GenRequest:
    kind: Kind
    model: str
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    request_id: str
    created: int
    finish_reason: str = "length"
    """``length`` (all ``max_tokens`` generated) or ``stop`` (the model's EOS came first)."""
    arrived: float = 0.0
    """The server's monotonic clock when the request's handling began (its metrics start there)."""
    block_hashes: tuple[int, ...] = ()
    """The prompt's full blocks, hashed as the prefix cache looks them up (``prefix_cache``)."""
    reasoning: int | None = None
    """A reasoning model's thinking: the first this many tokens of the answer (None: the server has no
    reasoning parser, as for completions)."""

    @property
    def thinking(self) -> int:
        """The tokens of this answer that are thinking (all of them for an answer cut short)."""
        return min(self.reasoning or 0, self.max_tokens)


def _int_field(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"'{name}' must be an integer")
    return value


def _prompt_ids(prompt: object, add_special_tokens: bool = True) -> list[int]:
    if isinstance(prompt, str):
        return toy_tokenizer.encode_prompt(prompt, add_special_tokens)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return list(prompt)
        if len(prompt) == 1:
            return _prompt_ids(prompt[0], add_special_tokens)
        raise ApiError(400, "only one prompt per request is supported by the simulated server")
    raise ApiError(400, "'prompt' must be a string or a list of token ids")


def _messages(messages: object) -> list[tuple[str, str]]:
    """(role, text) pairs of a chat request (the text parts of a content list joined)."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list")
    out = []
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ApiError(400, "each message needs a 'role'")
        content = msg.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            parts = []
            for part in content:
                if not isinstance(part, dict):
                    raise ApiError(400, "message content parts must be objects")
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
            text = " ".join(parts)
        elif content is None:
            text = ""
        else:
            raise ApiError(400, "message 'content' must be a string or a list of parts")
        out.append((msg["role"], text))
    return out


def _bool_field(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise ApiError(400, f"'{name}' must be a boolean")
    return value


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def _check_model(body: dict[str, Any], served_model: str) -> None:
    model = body.get("model", served_model)
    if model is not None and model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")


def tokenize(raw: bytes, *, served_model: str, max_model_len: int) -> dict[str, Any]:
    """``POST /tokenize`` as vLLM answers it: ``{"model", "prompt"}`` (``add_special_tokens`` defaults to
    true) or ``{"model", "messages"}`` (``add_generation_prompt`` defaults to true) ->
    ``{"count", "max_model_len", "tokens", "token_strs"}``."""
    body = _json_object(raw)
    _check_model(body, served_model)
    if "messages" in body:
        ids = toy_tokenizer.encode_chat(_messages(body["messages"]),
                                        _bool_field(body, "add_generation_prompt", True))
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise ApiError(400, "'prompt' must be a string")
        ids = toy_tokenizer.encode_prompt(prompt, _bool_field(body, "add_special_tokens", True))
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids, "token_strs": None}


def _check_fields(body: dict[str, Any]) -> None:
    unexpected = {name for name in body if name not in OPENAI_FIELDS}
    if unexpected:
        raise ApiError(422, f"Unexpected fields in the request: {unexpected!r}", "UnprocessableEntity")


def tokenize_sglang(raw: bytes, *, served_model: str, max_model_len: int) -> dict[str, Any]:
    """SGLang's ``POST /v1/tokenize``: ``{"model", "prompt", "add_special_tokens"}`` -> ``{"tokens", "count",
    "max_model_len"}`` (a prompt only: no chat template)."""
    body = _json_object(raw)
    _check_model(body, served_model)
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise ApiError(400, "'prompt' must be a string")
    ids = toy_tokenizer.encode_prompt(prompt, _bool_field(body, "add_special_tokens", True))
    return {"tokens": ids, "count": len(ids), "max_model_len": max_model_len}


def tokenize_llamacpp(raw: bytes) -> dict[str, Any]:
    """llama.cpp's ``POST /tokenize``: ``{"content", "add_special"}`` -> ``{"tokens"}``. As llama.cpp does, a
    body without ``content`` gets no tokens (not an error), and ``add_special`` defaults to false."""
    body = _json_object(raw)
    content = body.get("content")
    if content is None:
        return {"tokens": []}
    if not isinstance(content, str):
        raise ApiError(400, "'content' must be a string")
    return {"tokens": toy_tokenizer.encode_prompt(content, _bool_field(body, "add_special", False))}


def parse_generation(kind: Kind, raw: bytes, *, served_model: str, max_model_len: int,
                     strict_fields: bool = False, eos_after: int | None = None,
                     reasoning: int | None = None) -> GenRequest:
    """Validate a /v1/completions or /v1/chat/completions body the way vLLM does (400 / 404); with
    ``strict_fields``, fields outside OpenAI's API get 422; with ``eos_after``, a request without
    ``ignore_eos: true`` ends after that many tokens (finish_reason ``stop``)."""
    body = _json_object(raw)
    if strict_fields:
        _check_fields(body)
    _check_model(body, served_model)
    if kind == "completion":
        ids = _prompt_ids(body.get("prompt"), _bool_field(body, "add_special_tokens", True))
    else:
        ids = toy_tokenizer.encode_chat(_messages(body.get("messages")),
                                        _bool_field(body, "add_generation_prompt", True))
    prompt_tokens = len(ids)
    max_tokens = _int_field(body, "max_tokens")
    if kind == "chat" and max_tokens is None:
        max_tokens = _int_field(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = DEFAULT_COMPLETION_MAX_TOKENS if kind == "completion" else DEFAULT_CHAT_MAX_TOKENS
    if max_tokens < 1:
        raise ApiError(400, "'max_tokens' must be at least 1")
    if prompt_tokens + max_tokens > max_model_len:
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. However, you "
                            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the input, "
                            f"{max_tokens} for the completion).")
    n = _int_field(body, "n")
    if n not in (None, 1):
        raise ApiError(400, "the simulated server supports n=1 only")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean")
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise ApiError(400, "Stream options can only be defined when `stream=True`.")
        if not isinstance(options, dict):
            raise ApiError(400, "'stream_options' must be an object")
    include_usage = bool(options and options.get("include_usage"))
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise ApiError(400, "'ignore_eos' must be a boolean")
    finish_reason = "length"
    if eos_after is not None and not ignore_eos and eos_after < max_tokens:
        max_tokens, finish_reason = eos_after, "stop"
    prefix = "cmpl" if kind == "completion" else "chatcmpl"
    return GenRequest(kind, served_model, prompt_tokens, max_tokens, stream, include_usage,
                      f"{prefix}-sim{next(_ids):08d}", int(time.time()), finish_reason,
                      block_hashes=block_hashes(ids), reasoning=reasoning if kind == "chat" else None)


def token_text(index: int) -> str:
    return VOCAB_WORDS[index % len(VOCAB_WORDS)]


def usage(req: GenRequest, completion_tokens: int) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + completion_tokens,
                           "completion_tokens": completion_tokens}
    if req.reasoning is not None:  # vLLM gives the details wherever a reasoning parser is set
        out["completion_tokens_details"] = {"reasoning_tokens": min(req.thinking, completion_tokens)}
    return out


class ChunkWriter:
    """Pre-built byte templates for one request's SSE chunks (one json.dumps per request, not per token)."""

    def __init__(self, req: GenRequest) -> None:
        self.req = req
        head = (f'data: {{"id":"{req.request_id}","object":"'
                f'{"text_completion" if req.kind == "completion" else "chat.completion.chunk"}",'
                f'"created":{req.created},"model":{json.dumps(req.model)},"choices":[{{"index":0,')
        self._head = head.encode()
        finish = json.dumps(req.finish_reason).encode()
        if req.kind == "completion":
            self._open = b'"text":'
            self._tail = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            self._last = b',"logprobs":null,"finish_reason":' + finish + b',"stop_reason":null}]}\n\n'
        else:
            self._open = b'"delta":{"content":'
            self._tail = b'},"logprobs":null,"finish_reason":null}]}\n\n'
            self._last = b'},"logprobs":null,"finish_reason":' + finish + b'}]}\n\n'
        self._think = b'"delta":{"reasoning":'
        """A thinking token's delta, as vLLM 0.32 streams it (``reasoning``; ``reasoning_content`` before)."""
        self.finish_in_last_token = True
        """False when a separate content-free final chunk carries the finish_reason (``final``)."""

    def role(self) -> bytes:
        """The chat stream's first chunk: the assistant role with empty content (no-op for completions)."""
        if self.req.kind != "chat":
            return b""
        return self._head + b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'

    def role_only(self) -> bytes:
        """A chat stream's role-only chunk, as servers that send it ahead of generating do."""
        return self._head + b'"delta":{"role":"assistant"},"logprobs":null,"finish_reason":null}]}\n\n'

    def token(self, index: int) -> bytes:
        last = self.finish_in_last_token and index == self.req.max_tokens - 1
        opening = self._think if index < self.req.thinking else self._open
        return self._head + opening + _VOCAB_JSON[index % len(_VOCAB_JSON)] + (self._last if last else self._tail)

    def usage(self, completion_tokens: int) -> bytes:
        kind = "text_completion" if self.req.kind == "completion" else "chat.completion.chunk"
        obj = {"id": self.req.request_id, "object": kind, "created": self.req.created, "model": self.req.model,
               "choices": [], "usage": usage(self.req, completion_tokens)}
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    def final(self, completion_tokens: int, with_usage: bool) -> bytes:
        """The content-free last chunk of a stream without ``[DONE]``: the finish_reason, usage if asked."""
        kind = "text_completion" if self.req.kind == "completion" else "chat.completion.chunk"
        choice: dict[str, Any] = {"index": 0, "finish_reason": self.req.finish_reason}
        if self.req.kind == "chat":
            choice["delta"] = {}
        else:
            choice["text"] = ""
        obj: dict[str, Any] = {"id": self.req.request_id, "object": kind, "created": self.req.created,
                               "model": self.req.model, "choices": [choice]}
        if with_usage:
            obj["usage"] = usage(self.req, completion_tokens)
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    @staticmethod
    def done() -> bytes:
        return b"data: [DONE]\n\n"


def full_response(req: GenRequest, *, with_usage: bool = True) -> dict[str, Any]:
    """The non-streamed body once all ``max_tokens`` tokens are generated."""
    thinking = req.thinking
    text = "".join(token_text(i) for i in range(thinking, req.max_tokens))
    if req.kind == "completion":
        choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": req.finish_reason,
                                  "stop_reason": None}
        obj = "text_completion"
    else:
        message: dict[str, Any] = {"role": "assistant", "content": text if text or not thinking else None}
        if req.reasoning is not None:
            message["reasoning"] = "".join(token_text(i) for i in range(thinking)) or None
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": req.finish_reason}
        obj = "chat.completion"
    out: dict[str, Any] = {"id": req.request_id, "object": obj, "created": req.created, "model": req.model,
                           "choices": [choice]}
    if with_usage:
        out["usage"] = usage(req, req.max_tokens)
    return out


def models_list(model: str, max_model_len: int, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": "vllm",
                                        "root": model, "parent": None, "max_model_len": max_model_len}]}
