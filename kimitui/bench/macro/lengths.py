"""Prompts of an exact token length, without a tokenizer on the client.

Counting words is not counting tokens (``--input-len 128`` once sent 322 tokens to a real server), and
shipping the model's tokenizer is not an option. So the server counts, and the client builds prompts
whose count it can predict:

1. A counter: the server's tokenize endpoint where it has one (vLLM's ``POST /tokenize``,
   ``{"model", "prompt"}`` or ``{"model", "messages"}`` -> ``{"count", ...}``; SGLang's ``POST /v1/tokenize``;
   llama.cpp's ``POST /tokenize``, ``{"content"}`` -> ``{"tokens"}``; the last two for completions only, as
   they apply no chat template), else the ``usage.prompt_tokens`` of a one-token request with the same
   endpoint and template as the measured ones.
2. Calibration (once a sweep): the count of the anchor word alone (the *overhead*: special tokens, the
   chat template, the anchor), then the count of the anchor followed by all the candidate words. If they
   add exactly one token each, the calibration is done (two counts). Otherwise groups of ``GROUP`` words,
   then the single words of the failing groups (the least failing first) until ``MIN_WORDS`` words are
   known to be one token each.
   A last count checks a whole prompt of the requested length and corrects the overhead if it is off.
3. A prompt for a target of ``L`` tokens is the anchor and ``L - overhead`` random one-token words, each
   after a space (tokenizers that split on spaces before merging, BPE and SentencePiece alike, count
   such words independently).
4. Adjusting: every measured request with ``usage.prompt_tokens`` is compared with its prediction, and
   the tokens-per-word factor follows the observed ratio, so a template quirk that the calibration
   missed is corrected on the following requests (and the achieved lengths are reported either way).

When the server can count nothing (neither endpoint answers usefully), the method is ``estimated``: one
token per word, adjusted from ``usage`` as the requests come back.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Protocol

import httpx

ANCHOR = "The"
CANDIDATES: tuple[str, ...] = (
    "of", "to", "in", "is", "on", "as", "by", "at", "it", "an", "be", "we", "so", "no", "if", "my",
    "me", "do", "up", "or", "he", "us", "go", "am",
    "the", "and", "for", "was", "are", "his", "her", "had", "not", "but", "one", "all", "can", "has",
    "out", "may", "two", "new", "man", "any", "now", "our", "did", "way", "how", "see", "get", "day",
)
"""Common short English words: one token each, after a space, in the vocabularies of current LLMs."""
GROUP = 8
MIN_WORDS = 16
CHECK_WORDS_MAX = 4096
COUNT_CONCURRENCY = 8


class CountError(Exception):
    """The server could not count a prompt (no such endpoint, an error, no usage)."""


class TokenCounter(Protocol):
    method: str

    async def count(self, text: str) -> int: ...


def chat_messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@dataclass(frozen=True, slots=True)
class TokenizeForm:
    """One engine's tokenize endpoint: where it is, what it is sent, where the count is in its answer."""

    name: str
    path: str
    text_key: str
    """The body's key for the text: ``prompt`` (vLLM, SGLang) or ``content`` (llama.cpp)."""
    counts_chat: bool
    """It applies the chat template to ``messages`` (vLLM only)."""

    def body(self, model: str, text: str, chat: bool) -> dict[str, Any]:
        if chat:
            return {"model": model, "messages": chat_messages(text)}
        if self.name == "llamacpp":
            return {"content": text, "add_special": True}  # as /completion counts it: BOS included
        return {"model": model, self.text_key: text}

    def count_in(self, answer: object) -> int:
        """The number of tokens in the answer; raises ``CountError`` when it has none."""
        if not isinstance(answer, dict):
            raise CountError(f"POST {self.path}: the answer is not a JSON object")
        count = answer.get("count") if self.name != "llamacpp" else None
        tokens = answer.get("tokens")
        if count is None and self.name != "vllm" and isinstance(tokens, list):
            count = len(tokens)
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            raise CountError(f"POST {self.path}: no count of tokens in the answer")
        return count


TOKENIZE_FORMS = (
    TokenizeForm("vllm", "/tokenize", "prompt", counts_chat=True),
    TokenizeForm("sglang", "/v1/tokenize", "prompt", counts_chat=False),
    TokenizeForm("llamacpp", "/tokenize", "content", counts_chat=False),
)
"""Tried in this order; the first that counts the first prompt counts them all. llama.cpp answers vLLM's
body with ``{"tokens": []}`` (no ``content``), which is not a count, so it is not mistaken for vLLM."""


class TokenizeCounter:
    """The server's own tokenize endpoint, in the form it speaks (``TOKENIZE_FORMS``): vLLM's
    ``POST /tokenize`` (at the server's root, not under ``/v1``), SGLang's ``POST /v1/tokenize``, or
    llama.cpp's ``POST /tokenize`` with ``{"content"}`` -> ``{"tokens"}``. Only vLLM's applies a chat
    template, so for chat prompts only it is tried."""

    method = "tokenize"

    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str, chat: bool) -> None:
        self.client, self.base_url, self.model, self.chat = client, base_url, model, chat
        self._gate = asyncio.Semaphore(COUNT_CONCURRENCY)
        self._found = asyncio.Lock()
        self.form: TokenizeForm | None = None
        """The form the server answered, once known."""

    @property
    def via(self) -> str:
        if self.form is None:
            return "POST /tokenize"
        return f"POST {self.form.path}" + (" (llama.cpp's form)" if self.form.name == "llamacpp" else "")

    async def count(self, text: str) -> int:
        if self.form is None:
            async with self._found:
                if self.form is None:
                    return await self._find_form(text)
        return await self._count(self.form, text)

    async def _find_form(self, text: str) -> int:
        failures: list[str] = []
        for form in TOKENIZE_FORMS:
            if self.chat and not form.counts_chat:
                continue
            try:
                count = await self._count(form, text)
            except CountError as exc:
                failures.append(str(exc))
                continue
            self.form = form
            return count
        raise CountError("; ".join(failures))

    async def _count(self, form: TokenizeForm, text: str) -> int:
        async with self._gate:
            try:
                resp = await self.client.post(self.base_url + form.path, json=form.body(self.model, text, self.chat))
            except httpx.HTTPError as exc:
                raise CountError(f"POST {form.path}: {type(exc).__name__}") from None
        if resp.status_code != 200:
            raise CountError(f"POST {form.path}: HTTP {resp.status_code}")
        try:
            answer = resp.json()
        except ValueError:
            raise CountError(f"POST {form.path}: the answer is not JSON") from None
        return form.count_in(answer)


Sender = Callable[[bytes], Awaitable[tuple[int | None, str | None]]]
"""Sends one request body; returns (usage.prompt_tokens or None, failure reason or None)."""


class UsageCounter:
    """The ``usage.prompt_tokens`` of a request for one output token, through the measured endpoint."""

    method = "usage"

    def __init__(self, send: Sender, body: Callable[[str], dict[str, Any]]) -> None:
        self.send, self.body = send, body
        self._gate = asyncio.Semaphore(COUNT_CONCURRENCY)
        self.requests = 0

    async def count(self, text: str) -> int:
        async with self._gate:
            self.requests += 1
            tokens, error = await self.send(json.dumps(self.body(text)).encode())
        if error is not None:
            raise CountError(f"a counting request failed ({error})")
        if tokens is None:
            raise CountError("the server's answer had no usage.prompt_tokens")
        return tokens


@dataclass(slots=True)
class Calibration:
    method: str
    """``tokenize`` or ``usage`` (the server counted: lengths are exact), or ``estimated``."""
    overhead: int = 0
    """Tokens of a prompt holding the anchor alone (special tokens, chat template, the anchor)."""
    words: tuple[str, ...] = CANDIDATES
    """Words known to be one token each after a space."""
    tokens_per_word: float = 1.0
    counts: int = 0
    """Counts the calibration took."""
    seconds: float = 0.0
    note: str = ""
    via: str = ""
    """The endpoint that counted, as the operator reads it (``POST /v1/tokenize``), when not vLLM's."""

    @property
    def exact(self) -> bool:
        return self.method in ("tokenize", "usage")

    def words_for(self, target: int) -> int:
        return max(0, round((target - self.overhead) / self.tokens_per_word))

    def predict(self, words: int) -> int:
        return self.overhead + round(words * self.tokens_per_word)

    def describe(self) -> str:
        if not self.exact:
            return (f"input lengths estimated at {self.tokens_per_word:.2f} tokens a word, then adjusted from "
                    f"usage ({self.note or 'the server cannot count'})")
        via = (self.via or "POST /tokenize") if self.method == "tokenize" else \
            "usage.prompt_tokens of one-token requests"
        text = (f"input lengths exact, counted by the server ({via}): {self.overhead} tokens of template and "
                f"anchor, {len(self.words)} one-token words; {self.counts} counts in {self.seconds:.2f} s")
        return text + (f"; {self.note}" if self.note else "")


def prompt_text(words: Sequence[str]) -> str:
    return " ".join((ANCHOR, *words))


async def calibrate(counter: TokenCounter, check_target: int, seed: int = 0) -> Calibration:
    """See the module docstring; raises ``CountError`` when the counter fails."""
    start = perf_counter()
    calls = 0

    async def count(words: Sequence[str]) -> int:
        nonlocal calls
        calls += 1
        return await counter.count(prompt_text(words))

    base = await count(())

    async def excess(group: Sequence[str]) -> int:
        return await count(group) - base - len(group)

    good: list[str]
    first = await excess(CANDIDATES)
    per_word = (first + len(CANDIDATES)) / len(CANDIDATES)
    if per_word < 0.5:
        raise CountError(f"{len(CANDIDATES)} more words added {first + len(CANDIDATES)} tokens: the counts do "
                         "not follow the prompt")
    if first == 0:
        good = list(CANDIDATES)
    else:
        groups = [CANDIDATES[i:i + GROUP] for i in range(0, len(CANDIDATES), GROUP)]
        results = await asyncio.gather(*(excess(g) for g in groups))
        good = [w for g, e in zip(groups, results, strict=True) if e == 0 for w in g]
        failing = [groups[i] for _, i in sorted((e, i) for i, e in enumerate(results) if e != 0)]
        for group in failing:  # single words, least failing group first, until there are enough
            if len(good) >= MIN_WORDS:
                break
            singles = await asyncio.gather(*(excess([w]) for w in group))
            good += [w for w, e in zip(group, singles, strict=True) if e == 0]
        good = [w for w in CANDIDATES if w in set(good)]
    if len(good) < MIN_WORDS:
        return Calibration("estimated", overhead=base, tokens_per_word=per_word, counts=calls,
                           seconds=perf_counter() - start,
                           note=f"only {len(good)} of {len(CANDIDATES)} candidate words are one token")
    cal = Calibration(counter.method, overhead=base, words=tuple(good), counts=calls,
                      via=getattr(counter, "via", ""))
    rng = random.Random(seed)
    k = cal.words_for(min(max(check_target, 1), CHECK_WORDS_MAX))
    check = [rng.choice(cal.words) for _ in range(k)]
    got = await count(check)
    if got != cal.predict(k):
        cal.note = f"a {cal.predict(k)}-token check prompt counted {got}: overhead corrected"
        cal.overhead += got - cal.predict(k)
    cal.counts = calls
    cal.seconds = perf_counter() - start
    return cal


class LengthModel:
    """A calibration that follows what the server reports: ``observe`` compares each measured request's
    ``usage.prompt_tokens`` with its prediction and refits the tokens-per-word factor."""

    __slots__ = ("_extra", "_words", "cal")

    def __init__(self, cal: Calibration) -> None:
        self.cal = cal
        self._words = 0
        self._extra = 0

    def words_for(self, target: int) -> int:
        return self.cal.words_for(target)

    def predict(self, words: int) -> int:
        return self.cal.predict(words)

    def observe(self, words: int, actual: int) -> None:
        if words <= 0:
            return
        self._words += words
        self._extra += actual - self.cal.overhead
        if self._words and self._extra > 0:
            self.cal.tokens_per_word = self._extra / self._words
