"""The bundled sample run: deterministic, and it holds the campaign REFERENCE.md describes."""

from __future__ import annotations

import importlib.util
import itertools
from collections import Counter
from pathlib import Path

import pytest

from kimitui.core.events import (
    AllReduceRow,
    CleanupPlan,
    Consent,
    GemmRow,
    HostSample,
    MacroPoint,
    PhaseEnd,
    PhaseStart,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
    Verification,
    encode,
)
from kimitui.core.runfile import RunReader
from kimitui.samplegen import VLLM_HELD_MIB, campaign_events, gemm_bytes

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("make_sample_run", ROOT / "scripts" / "make_sample_run.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


EVENTS = campaign_events()


def of(cls):
    return [e for e in EVENTS if isinstance(e, cls)]


def test_same_seed_same_events_other_seed_differs():
    again = campaign_events()
    assert [encode(e) for e in again] == [encode(e) for e in EVENTS]
    assert [encode(e) for e in campaign_events(seed=1)] != [encode(e) for e in EVENTS]


def test_regenerating_gives_byte_identical_files_and_matches_the_bundled_run(tmp_path):
    mod = _script()
    name = "campaign-8x-rtx-pro-6000.jsonl.gz"
    a = mod.make_sample_run(tmp_path / "a" / name)
    b = mod.make_sample_run(tmp_path / "b" / name)
    assert a.read_bytes() == b.read_bytes()
    bundled = ROOT / "kimitui" / "data" / "sample_runs" / "campaign-8x-rtx-pro-6000.jsonl.gz"
    assert bundled.read_bytes() == a.read_bytes(), "sample run is stale: run scripts/make_sample_run.py"
    assert bundled.stat().st_size < 2_000_000


def test_bundled_run_reads_cleanly_in_time_order():
    reader = RunReader(ROOT / "kimitui" / "data" / "sample_runs" / "campaign-8x-rtx-pro-6000.jsonl.gz")
    assert reader.warnings == []
    assert len(reader) == len(EVENTS)
    assert list(reader.times) == sorted(reader.times)
    assert 120 < reader.end_time - reader.start_time < 900
    assert reader.header.meta["synthetic"] is True


def test_samples_at_2hz_with_8_gpus_and_969_gb_held():
    samples = of(HostSample)
    gaps = [b.t - a.t for a, b in itertools.pairwise(samples)]
    assert max(gaps) < 4.0 and sorted(gaps)[len(gaps) // 2] == pytest.approx(0.5, abs=0.01)
    first = samples[0]
    assert len(first.gpus) == 8 and {g.mem_total_mib for g in first.gpus} == {97887.0}
    assert all("RTX PRO 6000" in g.name and g.uuid.startswith("GPU-") for g in first.gpus)
    assert abs(VLLM_HELD_MIB * 2**20 - 96.9e9) < 0.1 * 2**20
    workers = [p for p in first.procs if p.cmdline.startswith("VllmWorker")]
    assert len(workers) == 8 and sorted(p.gpus[0] for p in workers) == list(range(8))
    assert all(p.gpu_mem_mib == {p.gpus[0]: VLLM_HELD_MIB} and p.kind == "cuda" for p in workers)
    assert all(p.unit == "vllm.service" and p.start_time for p in workers)
    api = [p for p in first.procs if "vllm.entrypoints.openai.api_server" in p.cmdline]
    assert len(api) == 1 and "--tensor-parallel-size 8" in api[0].cmdline
    monitors = [p for p in first.procs if p.kind == "handle" and p.unit != "vllm.service"]
    assert len(monitors) == 1 and monitors[0].gpu_mem_mib == {}
    # the monitor is there all the time
    assert all(any(p.pid == monitors[0].pid for p in s.procs) for s in samples)


def test_sweep_saturates_near_1536_at_128():
    points = {p.concurrency: p.metrics for p in of(MacroPoint)}
    assert sorted(points) == [1, 2, 4, 8, 16, 32, 64, 128]
    tok = [points[c]["output_throughput"] for c in sorted(points)]
    assert tok == sorted(tok)
    assert 40 <= points[1]["output_throughput"] <= 60
    assert abs(points[128]["output_throughput"] - 1536) < 40
    assert points[128]["output_throughput"] / points[64]["output_throughput"] < 1.2  # plateau
    for c, m in points.items():
        for key in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                    "request_throughput", "total_token_throughput", "max_concurrency", "request_rate"):
            assert key in m
        for stat in ("mean", "median", "std", "p99"):
            for metric in ("ttft", "tpot", "itl", "e2el"):
                assert f"{stat}_{metric}_ms" in m
        assert m["max_concurrency"] == c
        assert abs(m["total_output_tokens"] / m["duration"] - m["output_throughput"]) < 0.5


def test_cleanup_graceful_leaves_two_stuck_workers_that_process_kill_frees():
    plan = of(CleanupPlan)[0]
    assert plan.service == "vllm.service" and plan.manager == "systemd" and plan.gpus == list(range(8))
    assert plan.steps == ["graceful", "process", "device", "verify"]
    graceful = [o for o in of(SignalOutcome) if o.step == "graceful"]
    assert sum(o.outcome == "exited" for o in graceful) == 7
    stuck = [o.pid for o in graceful if o.outcome == "survived"]
    assert len(stuck) == 2
    kills = [s for s in of(SignalSent) if s.step == "process"]
    assert [s.signal for s in kills] == ["SIGTERM", "SIGTERM", "SIGKILL", "SIGKILL"]
    assert {s.pid for s in kills} == set(stuck)
    killed = [o for o in of(SignalOutcome) if o.step == "process" and o.signal == "SIGKILL"]
    assert {o.pid for o in killed if o.outcome == "exited"} == set(stuck)
    # their memory is gone from the first sample after the result, and was there before the kill
    result = next(r for r in of(StepResult) if r.step == "process")
    before = [s for s in of(HostSample) if s.t < killed[0].t][-1]
    after = next(s for s in of(HostSample) if s.t >= result.t)
    stuck_gpus = {p.gpus[0] for p in before.procs if p.pid in stuck}
    assert len(stuck_gpus) == 2
    for g in before.gpus:
        if g.index in stuck_gpus:
            assert g.mem_used_mib > 90000
    assert all(g.mem_used_mib < 2000 for g in after.gpus)
    # every step: preview, then consent, then its result
    for step in ("graceful", "process", "device"):
        kinds = [type(e) for e in EVENTS if getattr(e, "step", None) == step]
        assert kinds[0] is StepPreview and kinds[1] is Consent and kinds[-1] is StepResult


def test_device_step_targets_the_leftover_and_spares_the_monitor():
    preview = next(p for p in of(StepPreview) if p.step == "device")
    assert len(preview.targets) == 1 and preview.targets[0].kind == "cuda" and preview.targets[0].gpus == [3]
    assert 0 < preview.targets[0].mem_mib < 4096
    assert len(preview.spared) == 1
    assert preview.spared[0].kind == "handle"
    assert preview.spared[0].reason == "handle only (NVML monitor), not ticked"
    consent = next(c for c in of(Consent) if c.step == "device")
    assert consent.pids == [preview.targets[0].pid]


def test_verification_clean_against_the_reserved_baseline():
    (v,) = of(Verification)
    assert v.clean and len(v.gpus) == 8
    reserved = of(HostSample)[0].gpus[0].mem_reserved_mib
    assert all(g.clean and g.baseline_mib == reserved and g.used_mib == reserved for g in v.gpus)
    sample = next(s for s in of(HostSample) if s.t >= v.t)
    assert all(g.mem_used_mib == reserved for g in sample.gpus)


def test_micro_rows_follow_the_roofline_and_allreduce_latency():
    rows = of(GemmRow)
    names = {r.name for r in rows}
    assert {"fused_qkv_a", "q_b_proj", "kv_b_proj", "o_proj", "lm_head", "moe_w13", "moe_w2"} <= names
    assert {r.m for r in rows} == {1, 8, 32, 128}
    lm = next(r for r in rows if r.name == "lm_head" and r.m == 1)
    assert (lm.n, lm.k) == (20480, 7168)
    for r in rows:
        assert r.roofline_us == pytest.approx(gemm_bytes(r.m, r.n, r.k, r.dtype) / 1792e3, abs=0.01)
        assert r.time_us > r.roofline_us
        assert (r.rel_err is not None) == r.dtype.startswith("int4")
        if r.rel_err is not None:
            assert r.rel_err < 0.04
    ars = of(AllReduceRow)
    plain = [r for r in ars if r.burst == 1]
    assert [r.tokens for r in plain] == [1, 2, 4, 8, 16, 32, 64, 128]
    for r in plain:
        assert r.size_bytes == r.tokens * 7168 * 2 and r.ranks == 8
        assert abs(r.busbw_gbps - r.algbw_gbps * 2 * 7 / 8) < 0.01
        if r.size_bytes <= 65536:
            assert 22 < r.time_us < 27
    assert [r.burst for r in ars if r.burst > 1] == [122]


def test_phases_in_order_and_service_restored():
    starts = [e.phase for e in of(PhaseStart)]
    assert starts == ["macro", "cleanup", "micro", "analysis", "restore"]
    assert [e.phase for e in of(PhaseEnd)] == starts and all(e.ok for e in of(PhaseEnd))
    last = of(HostSample)[-1]
    assert all(g.mem_used_mib > 90000 for g in last.gpus)
    counts = Counter(e.type for e in EVENTS)
    assert counts["log"] >= 3 and counts["connection"] >= 2
