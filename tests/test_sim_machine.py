"""The simulated machine is one machine: the decode step its server serves holds the GEMMs and all-reduces its
micro benchmarks report, at every batch (the bundled runs it recorded: tests/test_demo_budget.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.machine import CONFIGS, modelled_rows_high, step_parts
from kimitui.hosts.sim.openai_server import add_batching_args, batching_from_args, batching_to_args
from kimitui.hostside import allreduce, gemm_rows

ROOT = Path(__file__).resolve().parent.parent
KIMI = "moonshotai/Kimi-K2.5"


@pytest.mark.parametrize("speedup", [1.0, 2.0])
def test_the_served_step_holds_the_modelled_parts_at_every_batch(speedup: float) -> None:
    model = BatchingModel.default(KIMI, 8, speedup)
    assert model.machine == (KIMI, 8, speedup)
    parts = step_parts(KIMI, 8, model.max_batch, allreduce_speedup=speedup)
    for batch in range(1, model.max_batch + 1):
        # even a micro row drawn at the top of its jitter leaves the rest (attention, routing, ...) some time
        assert modelled_rows_high(parts, batch) < model.step_time(batch), batch
        assert model.rest_time(batch) > 0.0
        assert model.step_time(batch) == pytest.approx(
            model.rest_time(batch) + parts.gemm_s[batch - 1] + parts.allreduce_s[batch - 1])
    # the targets hold with the all-reduce as modelled: 50 tok/s for one stream, 1536 tok/s at 128
    base = BatchingModel.default(KIMI, 8)
    assert base.throughput(1) == pytest.approx(50.0) and base.throughput(128) == pytest.approx(1536.0)
    if speedup > 1.0:  # a faster all-reduce shortens each step by exactly the modelled time it saves
        slow = step_parts(KIMI, 8, 128)
        for batch in (1, 8, 32, 128):
            saved = slow.allreduce_s[batch - 1] - parts.allreduce_s[batch - 1]
            assert base.step_time(batch) - model.step_time(batch) == pytest.approx(saved)
            assert saved == pytest.approx(slow.allreduce_s[batch - 1] * (1 - 1 / speedup))


def test_the_parts_are_the_micro_rows_own_model() -> None:
    """122 graph all-reduces of M x 7168 bf16 values and each GEMM row x its calls per token, by the same
    functions the modelled micro workers draw their rows from."""
    parts = step_parts(KIMI, 8, 128)
    am, gm = allreduce.MODELS["rtx-pro-6000"], gemm_rows.MODELS["rtx-pro-6000"]
    assert parts.allreduces == 122
    for m in (1, 32, 128):
        one = allreduce.modelled_us(am, m * 7168 * 2, "graph", 8)
        assert parts.allreduce_s[m - 1] == pytest.approx(122 * one * 1e-6)
    moe = {"kind": "moe", "name": "moe", "n": 512, "k": 7168, "n2": 7168, "k2": 256, "dtype": "int4-g32",
           "experts": 384, "topk": 8}
    assert parts.gemm_s[31] > 60 * gemm_rows.modelled_gemm_us(moe, "marlin", 32, gm) * 1e-6  # the MoE and more


def test_the_machine_crosses_to_the_service_process_whole() -> None:
    model = BatchingModel.default(KIMI, 8, 2.0)
    p = argparse.ArgumentParser()
    add_batching_args(p)
    again = batching_from_args(p.parse_args(batching_to_args(model)))
    assert again.machine == model.machine
    assert [again.step_time(b) for b in (1, 8, 32, 128, 300)] == pytest.approx(
        [model.step_time(b) for b in (1, 8, 32, 128, 300)])


def test_a_model_without_shapes_gets_the_plain_curve() -> None:
    assert "some/other-model" not in CONFIGS
    plain = BatchingModel.default("some/other-model", 8)
    assert plain.machine is None and plain.parts_s == () and plain.throughput(128) == pytest.approx(1536.0)
