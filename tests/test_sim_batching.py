"""The simulated server's batching model and its decode loop (no HTTP, no processes)."""

from __future__ import annotations

import asyncio
import time

import pytest

from kimitui.hosts.sim.batching import BatchingModel, DecodeScheduler
from tests.waiting import until


def test_reference_model_matches_the_reference_host() -> None:
    m = BatchingModel.from_targets()
    assert m.throughput(1) == pytest.approx(50.0)
    assert m.throughput(128) == pytest.approx(1536.0)
    assert m.max_batch == 128
    # saturates: beyond the full batch requests queue and throughput stays on the plateau
    assert m.throughput(256) == pytest.approx(1536.0)
    curve = [m.throughput(c) for c in (1, 2, 4, 8, 16, 32, 64, 128)]
    assert curve == sorted(curve)
    assert curve[4] < 0.5 * 1536  # still far from the plateau at 16
    assert m.step_time(1) == pytest.approx(0.020)
    assert m.step_time(128) == pytest.approx(128 / 1536)


def test_custom_targets_and_instant() -> None:
    m = BatchingModel.from_targets(single_stream_tps=40, plateau_tps=3000, plateau_batch=256)
    assert m.throughput(1) == pytest.approx(40)
    assert m.throughput(256) == pytest.approx(3000)
    inst = BatchingModel.instant()
    assert inst.is_instant and inst.step_time(500) == 0.0 and inst.throughput(1) == float("inf")
    with pytest.raises(ValueError):
        BatchingModel.from_targets(single_stream_tps=10, plateau_tps=2000, plateau_batch=128)


async def _consume(sched: DecodeScheduler, concurrency: int, tokens: int) -> tuple[float, list[list[int]]]:
    seqs = [sched.submit(tokens) for _ in range(concurrency)]

    async def eat(seq) -> list[int]:  # type: ignore[no-untyped-def]
        return [await seq.queue.get() for _ in range(tokens)]

    t0 = time.perf_counter()
    got = await asyncio.gather(*(eat(s) for s in seqs))
    return concurrency * tokens / (time.perf_counter() - t0), got


async def test_decode_loop_delivers_the_model_throughput() -> None:
    # five times the reference speed keeps the test short; the loop's timing is what is checked
    model = BatchingModel.from_targets(single_stream_tps=250, plateau_tps=7680, plateau_batch=128)
    batches: list[int] = []
    sched = DecodeScheduler(model, on_batch=batches.append)
    sched.start()
    steps = []
    try:
        tps1, got1 = await _consume(sched, 1, 50)
        steps.append(sched.steps)
        tps128, got128 = await _consume(sched, 128, 24)
        steps.append(sched.steps - sum(steps))
        tps256, _ = await _consume(sched, 256, 12)
        steps.append(sched.steps - sum(steps))
    finally:
        await sched.stop()
    assert got1 == [list(range(50))]
    assert all(g == list(range(24)) for g in got128)
    # the shape, in the loop's own count of steps: one stream takes a step a token; 128 streams share each
    # step (batching pays: 24 steps, not 3,072); 256 submitted run as two full batches of 128 (the plateau)
    assert steps == [50, 24, 24]
    assert max(batches) == 128 and batches[-1] == 0
    # never faster than the model: steps follow each other back to back, none ends early (causal); how much
    # slower is the machine's (benchmarks/timing_figures.py)
    assert tps1 < 1.03 * 250 and tps128 < 1.03 * 7680 and tps256 < 1.03 * 7680


async def test_cancelled_request_leaves_the_batch() -> None:
    model = BatchingModel.from_targets(single_stream_tps=1000, plateau_tps=8000, plateau_batch=16)
    sched = DecodeScheduler(model)
    sched.start()
    try:
        a = sched.submit(1000)
        b = sched.submit(3)
        assert [await b.queue.get() for _ in range(3)] == [0, 1, 2]
        await a.queue.get()
        await a.queue.get()
        assert sched.batch == 1  # b finished and left the batch at the step boundary
        sched.cancel(a)
        await until(lambda: sched.batch == 0, "the cancelled sequence to leave the batch")
        assert a.produced < 1000
    finally:
        await sched.stop()


async def test_prefill_takes_steps_in_chunks_and_delays_the_first_token() -> None:
    # 20,000 prompt tokens at most 8,192 a step: the first token comes with the third step (no sleep
    # decides this: the steps are counted)
    model = BatchingModel.from_targets(single_stream_tps=1000, plateau_tps=8000, plateau_batch=16,
                                       prefill_tps=1e9)
    sched = DecodeScheduler(model)
    sched.start()
    try:
        long = sched.submit(2, prompt_tokens=20_000)
        short = sched.submit(1, prompt_tokens=10)  # waits behind the long prompt: the budget goes first come
        assert await long.queue.get() == 0
        assert sched.steps == 3
        assert short.queue.qsize() == 1  # its 10 tokens fitted in the third step, beside the long prompt's rest
    finally:
        await sched.stop()


async def test_prefill_time_grows_with_the_prompt() -> None:
    # 2,000 tok/s of prefill: 1,000 prompt tokens add at least half a second before the first token
    model = BatchingModel.from_targets(single_stream_tps=1000, plateau_tps=8000, plateau_batch=16, prefill_tps=2000)
    assert model.prefill_time(1000) == pytest.approx(0.5)
    assert BatchingModel.instant().prefill_time(10**6) == 0.0
    sched = DecodeScheduler(model)
    sched.start()
    try:
        waits = []
        for prompt in (10, 1000):
            t0 = time.perf_counter()
            seq = sched.submit(1, prompt_tokens=prompt)
            await seq.queue.get()
            waits.append(time.perf_counter() - t0)
    finally:
        await sched.stop()
    # never sooner than the model allows (a step, plus the prefill); later only by the machine's lateness
    assert waits[0] >= model.step_time(1) + model.prefill_time(10) - 1e-3
    assert waits[1] >= model.step_time(1) + model.prefill_time(1000) - 1e-3
    with pytest.raises(ValueError):
        BatchingModel.from_targets(prefill_tps=0)


def test_a_faster_all_reduce_shortens_each_step_by_the_time_it_saves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled pair's other half (KIMITUI_SIM_ALLREDUCE_SPEEDUP=2): the modelled all-reduce rows are
    twice as fast, and each decode step of the simulated server is shorter by half its 122 all-reduces."""
    from kimitui.hostside import allreduce

    base = BatchingModel.from_targets()
    assert base.allreduce_faster(1.0) is base
    fast = base.allreduce_faster(2.0)
    m = allreduce.MODELS["rtx-pro-6000"]
    for batch in (1, 8, 128):
        ar = 122 * (m["graph_latency_us"] + batch * 7168 * 2 * allreduce.bus_factor(8) / (m["busbw_gbps"] * 1e3))
        assert base.step_time(batch) - fast.step_time(batch) == pytest.approx(ar / 2 * 1e-6)
    assert 1 / fast.step_time(1) > 1 / base.step_time(1) and fast.throughput(128) > base.throughput(128)
    monkeypatch.setenv(allreduce.SPEEDUP_ENV, "2")
    assert allreduce.modelled("rtx-pro-6000")["busbw_gbps"] == 2 * m["busbw_gbps"]
    assert allreduce.modelled("rtx-pro-6000")["graph_latency_us"] == m["graph_latency_us"] / 2
    for bad in ("0.5", "fast", "inf", ""):
        monkeypatch.setenv(allreduce.SPEEDUP_ENV, bad)
        assert allreduce.modelled("rtx-pro-6000") == m
