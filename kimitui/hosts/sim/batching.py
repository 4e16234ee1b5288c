"""The decode-step batching model of the simulated vLLM server, and the loop that applies it.

Continuous batching as vLLM does it: every step decodes one token for each running request, and a step
takes ``base_s + per_seq_s * batch`` seconds. At most ``max_batch`` requests run at once (vLLM's
``max_num_seqs``); the rest wait for a slot. Aggregate throughput is ``batch / step_time(batch)``: it grows
with concurrency and flattens at ``max_batch``. The defaults follow the reference host
(8 x RTX PRO 6000, TP=8): 50 tok/s for one stream, a plateau of 1536 tok/s at concurrency 128.

The simulated host serves with ``BatchingModel.default``: for a model whose shapes it knows (Kimi-K2.5), the
step at batch M is the machine's own modelled GEMMs and all-reduces at M (the figures its micro benchmarks
report, ``machine.py``) plus a rest linear in M fitted to those two targets; so a campaign's analysis on the
simulated host finds the measured parts within the TPOT at every M.

Prefill: a request's prompt is processed in the steps after it is admitted, at most
``prefill_chunk`` prompt tokens a step over all requests (vLLM's chunked prefill and its
``max_num_batched_tokens``), each prompt token adding ``1 / prefill_tps`` seconds to its step; a
request's first token comes at the end of the step that finishes its prompt. So TTFT grows with the
prompt length counted by the toy tokenizer, the same count as ``usage.prompt_tokens``. The prefill rate
is a simulated figure (8,000 tok/s by default), not a measurement. With a prefix cache (``prefix_cache``),
a request is looked up as it is admitted, and the prompt tokens it finds cached are not prefilled again.

``BatchingModel.instant()`` (step time 0) streams every token with no delay: the server for measuring a
load generator's own ceiling.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from kimitui.hosts.sim.prefix_cache import PrefixCache

REFERENCE_SINGLE_STREAM_TPS = 50.0
REFERENCE_PLATEAU_TPS = 1536.0
REFERENCE_PLATEAU_BATCH = 128
REFERENCE_PREFILL_TPS = 8000.0
PREFILL_CHUNK = 8192
ALLREDUCES_PER_STEP = 122
HIDDEN = 7168
COLD_FACTOR = 3.0
"""How much slower a cold engine's steps are (quirks ``cold=N``): the H200's transformers serve streamed 35 tok/s
just after its start against 95 warm (issue 37)."""


@dataclass(frozen=True, slots=True)
class BatchingModel:
    base_s: float
    per_seq_s: float
    max_batch: int
    prefill_tps: float = REFERENCE_PREFILL_TPS
    """Prompt tokens prefilled per second (inf: prefill is free)."""
    prefill_chunk: int = PREFILL_CHUNK
    """Most prompt tokens prefilled in one step."""
    parts_s: tuple[float, ...] = ()
    """The simulated machine's modelled GEMMs and all-reduces of one step at batch 1, 2, ... ``max_batch``
    (seconds; ``machine.py``), added to ``base_s + per_seq_s * batch`` (then the rest: attention, routing,
    sampling, scheduling); empty for a plain linear model."""
    machine: tuple[str, int, float] | None = None
    """(served model, TP, all-reduce speedup) that ``parts_s`` was modelled for (None: no parts)."""

    @classmethod
    def from_targets(cls, *, single_stream_tps: float = REFERENCE_SINGLE_STREAM_TPS,
                     plateau_tps: float = REFERENCE_PLATEAU_TPS,
                     plateau_batch: int = REFERENCE_PLATEAU_BATCH,
                     prefill_tps: float = REFERENCE_PREFILL_TPS) -> BatchingModel:
        """The model whose throughput is ``single_stream_tps`` at batch 1 and ``plateau_tps`` at
        ``plateau_batch`` (and stays there beyond it)."""
        if plateau_batch < 2:
            raise ValueError("plateau_batch must be at least 2")
        t1 = 1.0 / single_stream_tps
        tp = plateau_batch / plateau_tps
        per_seq = (tp - t1) / (plateau_batch - 1)
        if per_seq < 0:
            raise ValueError("the plateau must be reached by batching: plateau_tps/plateau_batch <= single")
        if not prefill_tps > 0:
            raise ValueError("prefill_tps must be positive")
        return cls(base_s=t1 - per_seq, per_seq_s=per_seq, max_batch=plateau_batch, prefill_tps=prefill_tps)

    @classmethod
    def simulated_machine(cls, model: str, tp: int, *, allreduce_speedup: float = 1.0,
                          single_stream_tps: float = REFERENCE_SINGLE_STREAM_TPS,
                          plateau_tps: float = REFERENCE_PLATEAU_TPS,
                          plateau_batch: int = REFERENCE_PLATEAU_BATCH,
                          prefill_tps: float = REFERENCE_PREFILL_TPS) -> BatchingModel:
        """The decode step of the simulated machine serving ``model`` at TP ``tp``: its modelled GEMMs and
        all-reduces at each batch (the figures its micro benchmarks report, ``machine.step_parts``) plus a
        rest that is linear in the batch, fitted so that the whole step gives ``single_stream_tps`` at batch 1
        and ``plateau_tps`` at ``plateau_batch`` (with the all-reduce as modelled; ``allreduce_speedup``
        then shortens the all-reduce alone). ValueError where the modelled parts alone exceed a target step
        (the targets and the machine would contradict each other); KeyError for a model without shapes."""
        from kimitui.hosts.sim.machine import step_parts

        if plateau_batch < 2:
            raise ValueError("plateau_batch must be at least 2")
        if not prefill_tps > 0:
            raise ValueError("prefill_tps must be positive")
        k = allreduce_speedup if allreduce_speedup >= 1.0 else 1.0
        parts = step_parts(model, tp, plateau_batch)
        fast = parts if k == 1.0 else step_parts(model, tp, plateau_batch, allreduce_speedup=k)
        whole = [g + a for g, a in zip(parts.gemm_s, parts.allreduce_s, strict=True)]
        rest1 = 1.0 / single_stream_tps - whole[0]
        rest_p = plateau_batch / plateau_tps - whole[-1]
        if rest1 < 0 or rest_p < 0:
            raise ValueError(f"the modelled GEMMs and all-reduces of a step exceed the targets' step "
                             f"({whole[0] * 1e3:.1f} ms at batch 1, {whole[-1] * 1e3:.1f} ms at {plateau_batch})")
        per_seq = (rest_p - rest1) / (plateau_batch - 1)
        return cls(base_s=rest1 - per_seq, per_seq_s=per_seq, max_batch=plateau_batch, prefill_tps=prefill_tps,
                   parts_s=tuple(g + a for g, a in zip(fast.gemm_s, fast.allreduce_s, strict=True)),
                   machine=(model, tp, k))

    @classmethod
    def default(cls, model: str, tp: int, allreduce_speedup: float = 1.0) -> BatchingModel:
        """The simulated host's serving model: its machine's (``simulated_machine``) where the simulator knows
        the served model's shapes at this TP and they fit the reference targets, else the plain reference
        curve (its all-reduce made faster the linear way)."""
        from kimitui.bench.micro.shapes import ShapeError

        try:
            return cls.simulated_machine(model, tp, allreduce_speedup=allreduce_speedup)
        except (KeyError, ValueError, ShapeError):
            return cls.from_targets().allreduce_faster(allreduce_speedup, tp)

    def rest_time(self, batch: int) -> float:
        """Seconds of a step at ``batch`` outside the modelled parts (all of it for a plain model)."""
        return self.base_s + self.per_seq_s * min(batch, self.max_batch)

    @classmethod
    def instant(cls, max_batch: int = 1 << 20) -> BatchingModel:
        return cls(base_s=0.0, per_seq_s=0.0, max_batch=max_batch, prefill_tps=float("inf"))

    def allreduce_faster(self, speedup: float, ranks: int = 8) -> BatchingModel:
        """This model with the modelled all-reduce of a step (kimitui.hostside.allreduce's: 122 per step, M x
        7168 bf16 values each, graph latency plus size over busbw) ``speedup`` times faster: each step is
        shorter by the time saved, at batch 1 and per sequence alike."""
        from kimitui.hostside.allreduce import MODELS, bus_factor

        if speedup <= 1.0 or self.is_instant:
            return self
        if self.machine is not None:
            model, tp, k = self.machine
            return BatchingModel.simulated_machine(
                model, tp, allreduce_speedup=k * speedup, **self._targets(), prefill_tps=self.prefill_tps)
        m = MODELS["rtx-pro-6000"]
        saved = 1.0 - 1.0 / speedup
        base = ALLREDUCES_PER_STEP * m["graph_latency_us"] * 1e-6 * saved
        per_seq = ALLREDUCES_PER_STEP * HIDDEN * 2 * bus_factor(ranks) / (m["busbw_gbps"] * 1e9) * saved
        return replace(self, base_s=self.base_s - base, per_seq_s=self.per_seq_s - per_seq)

    def prefill_time(self, tokens: int) -> float:
        """Seconds that prefilling ``tokens`` prompt tokens adds to a step."""
        return tokens / self.prefill_tps

    @property
    def is_instant(self) -> bool:
        return self.base_s == 0.0 and self.per_seq_s == 0.0

    def _targets(self) -> dict[str, float | int]:
        """The targets a machine model was fitted to (its throughput at batch 1 and at ``max_batch`` with the
        all-reduce as modelled)."""
        assert self.machine is not None
        from kimitui.hosts.sim.machine import step_parts

        model, tp, _k = self.machine
        parts = step_parts(model, tp, self.max_batch)
        step1 = self.rest_time(1) + parts.gemm_s[0] + parts.allreduce_s[0]
        step_p = self.rest_time(self.max_batch) + parts.gemm_s[-1] + parts.allreduce_s[-1]
        return {"single_stream_tps": 1.0 / step1, "plateau_tps": self.max_batch / step_p,
                "plateau_batch": self.max_batch}

    def step_time(self, batch: int) -> float:
        """Seconds one decode step takes with ``batch`` running requests."""
        b = min(batch, self.max_batch)
        return self.base_s + self.per_seq_s * b + (self.parts_s[b - 1] if self.parts_s and b > 0 else 0.0)

    def throughput(self, concurrency: int) -> float:
        """Steady-state output tokens per second with ``concurrency`` streams (infinite when instant)."""
        batch = min(concurrency, self.max_batch)
        step = self.step_time(batch)
        return float("inf") if step == 0 else batch / step


class Sequence:
    """One running request as the scheduler sees it: tokens are pushed to its queue as steps end."""

    __slots__ = ("admitted_at", "block_hashes", "cached_tokens", "cold", "done", "max_tokens", "prefill_left",
                 "produced", "prompt_tokens", "queue")

    def __init__(self, max_tokens: int, prompt_tokens: int = 0, block_hashes: tuple[int, ...] = ()) -> None:
        self.max_tokens = max_tokens
        self.prompt_tokens = prompt_tokens
        self.prefill_left = prompt_tokens
        self.block_hashes = block_hashes
        self.cached_tokens = 0
        """Prompt tokens the prefix cache held when the request was admitted (not prefilled again)."""
        self.admitted_at: float | None = None
        """The scheduler's clock when the request entered the batch (None while it waits)."""
        self.produced = 0
        self.queue: asyncio.Queue[int] = asyncio.Queue()
        self.done = False
        self.cold = False
        """One of the first requests of a cold engine (``cold_requests``): the batch's steps are slower."""


class DecodeScheduler:
    """The step loop: admits waiting requests at step boundaries, pushes one token index per request per
    step to its queue (``-1`` never: a request ends when ``produced == max_tokens``)."""

    def __init__(self, model: BatchingModel, *, on_batch: Callable[[int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, prefix_cache: PrefixCache | None = None,
                 cold_requests: int = 0) -> None:
        self.model = model
        self._cold_left = cold_requests
        """Requests still to be submitted cold: a freshly started engine's first ones (quirks ``cold=N``)."""
        self.prefix_cache = prefix_cache
        self._on_batch = on_batch
        self._clock = clock
        self._waiting: list[Sequence] = []
        self._running: list[Sequence] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.steps = 0

    @property
    def batch(self) -> int:
        return len(self._running)

    @property
    def queued(self) -> int:
        return len(self._waiting)

    @property
    def in_flight(self) -> tuple[int, int]:
        """(running, waiting) requests now, as vLLM's ``num_requests_running`` / ``num_requests_waiting``
        count them: those in the batch (their prefill included) and those waiting for a slot."""
        return sum(1 for s in self._running if not s.done), sum(1 for s in self._waiting if not s.done)

    @property
    def kv_tokens(self) -> int:
        """Tokens whose KV the running requests hold now: their prompts and what they generated."""
        return sum(s.prompt_tokens + s.produced for s in self._running if not s.done)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="sim-decode-loop")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def submit(self, max_tokens: int, prompt_tokens: int = 0, block_hashes: tuple[int, ...] = ()) -> Sequence:
        seq = Sequence(max_tokens, prompt_tokens, block_hashes)
        if self._cold_left > 0:
            self._cold_left -= 1
            seq.cold = True
        self._waiting.append(seq)
        self._wake.set()
        return seq

    def cancel(self, seq: Sequence) -> None:
        """The client went away: drop the request from the batch."""
        seq.done = True
        if seq in self._waiting:
            self._waiting.remove(seq)

    def _admit(self) -> None:
        self._running = [s for s in self._running if not s.done]
        room = self.model.max_batch - len(self._running)
        if room > 0 and self._waiting:
            now = self._clock()
            for seq in self._waiting[:room]:
                seq.admitted_at = now
                if self.prefix_cache is not None:
                    seq.cached_tokens = self.prefix_cache.schedule(seq.block_hashes, seq.prompt_tokens)
                    seq.prefill_left -= seq.cached_tokens
            self._running.extend(self._waiting[:room])
            del self._waiting[:room]

    def _plan_prefill(self) -> int:
        """Prompt tokens prefilled in the coming step (first come, first served, up to the chunk);
        takes them off the sequences' ``prefill_left``."""
        budget = self.model.prefill_chunk
        total = 0
        for seq in self._running:
            if budget <= 0:
                break
            if seq.prefill_left > 0 and not seq.done:
                n = min(seq.prefill_left, budget)
                seq.prefill_left -= n
                budget -= n
                total += n
        return total

    async def _loop(self) -> None:
        last_batch = -1
        step_end = float("-inf")
        while True:
            self._admit()
            if not self._running:
                if last_batch != 0 and self._on_batch:
                    self._on_batch(0)
                last_batch = 0
                self._wake.clear()
                await self._wake.wait()
                step_end = float("-inf")  # idle: the next step starts when the work arrives, not before
                continue
            batch = len(self._running)
            if batch != last_batch and self._on_batch:
                self._on_batch(batch)
            last_batch = batch
            # Steps follow each other back to back: the time spent handing tokens out between two steps
            # belongs to the next step, so throughput does not drift below the model's figure.
            now = self._clock()
            prefilled = self._plan_prefill()
            step = self.model.step_time(batch) + (self.model.prefill_time(prefilled) if prefilled else 0.0)
            if any(s.cold and not s.done for s in self._running):
                step *= COLD_FACTOR
            start = step_end if 0.0 <= now - step_end < step else now
            step_end = start + step
            while (left := step_end - self._clock()) > 0:
                await asyncio.sleep(left)
            self.steps += 1
            for seq in self._running:
                if seq.done or seq.prefill_left > 0:
                    continue
                seq.queue.put_nowait(seq.produced)
                seq.produced += 1
                if seq.produced >= seq.max_tokens:
                    seq.done = True
