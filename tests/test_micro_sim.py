"""The micro phase on the simulated host: refusal while the GPUs are held, the modelled run (its workers
hold simulated GPU memory the telemetry sees), cancel freeing every GPU, and ``bench micro --host demo``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from kimitui.bench.micro.runner import MicroConfig, MicroRunner
from kimitui.cleanup.sample_feed import SampleFeed
from kimitui.core.events import Consent, Event, HostSample, MicroEnd, MicroProgress, Topology
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.core.state import fold_all
from kimitui.hosts.sim.host import SimHost
from kimitui.hosts.telemetry import TelemetrySource
from tests.cleanup_rig import sample_where
from tests.support import ROOT


def _watch(host: SimHost, session: Session) -> tuple[TelemetrySource, SampleFeed]:
    source = TelemetrySource(host, interval=0.1, sim_dir=host.sim_dir, dev_prefix=host.dev_prefix, scan_interval=0.1)
    feed = SampleFeed()
    feed.follow(source.events(), publish=session.publish)
    return source, feed


async def test_refuses_while_the_gpus_hold_memory_naming_the_holders() -> None:
    async with SimHost(gpus=2, stuck_workers=0, nvml_monitor=True) as host:
        session = Session()
        source, feed = _watch(host, session)
        workers = host.worker_holders()
        sample = await sample_where(feed, lambda s: {p.pid for p in workers.values()} <= {p.pid for p in s.procs},
                                    "the workers in a sample")
        events: list[Event] = []
        cfg = MicroConfig(modelled="rtx-pro-6000", sim_dir=host.sim_dir, ms=[1])
        res = await MicroRunner(host, host.name, cfg, events.append).run(sample)
        source.stop()
        await feed.stop()
    end = next(e for e in events if isinstance(e, MicroEnd))
    assert end.status == "refused" and end.part == "all" and not res.ok
    # GPUs holding the same memory are one line: 'GPUs 0-1: 92,411 MiB in use each (free is within ...)'
    assert "GPUs 0-1: " in end.detail and "MiB in use each" in end.detail and "override" in end.detail
    assert {h.pid for h in end.holders} == {p.pid for p in workers.values()}  # the vLLM workers, not the monitor
    assert host.monitor_proc is not None and host.monitor_proc.pid not in {h.pid for h in end.holders}
    assert not any(isinstance(e, Topology) for e in events)  # nothing was started on the host


async def test_modelled_run_holds_simulated_memory_and_cancel_frees_every_gpu() -> None:
    async with SimHost(gpus=4, stuck_workers=0, nvml_monitor=False) as host:
        await host.stop_service()
        session = Session()
        source, feed = _watch(host, session)
        idle = await sample_where(feed, lambda s: all(g.mem_used_mib == 0 for g in s.gpus), "idle GPUs")
        cancel = asyncio.Event()
        events: list[Event] = []
        cfg = MicroConfig(parts=["allreduce"], modelled="rtx-pro-6000", sim_dir=host.sim_dir, pace_s=0.05,
                          sweep_max=1 << 30)
        runner = MicroRunner(host, host.name, cfg, events.append, cancel)
        task = asyncio.create_task(runner.run(idle))
        # every rank holds memory on its GPU: the telemetry shows the four of them
        held = await sample_where(feed, lambda s: all((g.mem_used_mib or 0) >= 1000 for g in s.gpus), "held GPUs")
        ranks = {p.pid for p in held.procs if p.kind == "cuda"}
        assert len(ranks) == 4 and any(isinstance(e, MicroProgress) for e in events)
        cancel.set()
        res = await asyncio.wait_for(task, 30)
        freed = await sample_where(feed, lambda s: all(g.mem_used_mib == 0 for g in s.gpus) and not s.procs,
                                   "freed GPUs")
        source.stop()
        await feed.stop()
    end = next(e for e in events if isinstance(e, MicroEnd))
    assert end.status == "cancelled" and res.cancelled and "every rank ended" in end.detail
    assert freed.t > held.t and not ({p.pid for p in freed.procs} & ranks)
    topo = next(e for e in events if isinstance(e, Topology))
    assert topo.simulated and topo.summary.startswith("4 x PCIe Gen5 x16, no NVLink, P2P OK")


def test_bench_micro_demo_runs_to_the_end_and_records_a_simulated_run(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "kimitui", "bench", "micro", "--host", "demo", "--json",
                          "--pace", "0.01", "--ms", "1,8,64,256", "--sweep-max", "64K", "--burst-tokens", "1,8",
                          "--interval", "0.2"], capture_output=True, text=True, timeout=180, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "freeing the simulated GPUs first" in out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    rows = [d for d in lines if d["type"] in ("gemm_row", "allreduce_row")]
    assert rows and all(r["simulated"] for r in rows)
    # issue 38 item 5: the modelled GPU meets its power cap under a FLOP-bound row (bf16 at M=256, an int4 expert
    # at M=64), not under a bandwidth-bound one (every row at M <= 8), and the row says so with its clock
    gemm = [r for r in rows if r["type"] == "gemm_row"]
    capped = {(r["name"], r["m"], r["backend"]) for r in gemm if r["throttle"]}
    assert ("o_proj", 256, "bf16") in capped and all(m >= 64 for _, m, _ in capped)
    assert all(r["throttle"] == ["power cap"] and r["sm_clock_mhz"] == 2235.0 for r in gemm if r["throttle"])
    assert all(not r["throttle"] and r["sm_clock_mhz"] == 2617.0 for r in gemm if r["m"] <= 8)
    topo = next(d for d in lines if d["type"] == "topology")
    assert topo["summary"].startswith("8 x PCIe Gen5 x16, no NVLink, P2P OK") and topo["link_gbps"] == 63.0
    burst = next(r for r in rows if r.get("burst", 1) == 122 and r["tokens"] == 1)
    assert 17 < burst["time_us"] < 22  # modelled PCIe graph latency, docs/reference.md section 2
    assert [(d["part"], d["status"]) for d in lines if d["type"] == "micro_end"] == [("gemm", "done"),
                                                                                       ("allreduce", "done")]
    run = next((tmp_path / "kimitui" / "runs").glob("*.jsonl"))
    events = list(RunReader(run).events())
    state = fold_all(events)
    assert [p.phase for p in state.phases] == ["cleanup", "micro"] and all(p.ok for p in state.phases)
    assert state.cleanups and state.cleanups[-1].verification and state.cleanups[-1].verification.clean
    # freed as the campaign frees them before its Phase 2: its consent policy, yes to each step taken
    consents = [e for e in events if isinstance(e, Consent)]
    assert consents and all(c.accepted and c.note == f"campaign policy: {c.step} = yes" for c in consents), consents
    assert state.micro is not None and state.micro.plan.simulated
    # the telemetry recorded the workers holding simulated GPU memory during the micro phase
    micro = state.phases[1]
    during = [e for e in events if isinstance(e, HostSample) and micro.start <= e.t <= (micro.end or 0)]
    holding = {p.pid for s in during for p in s.procs if p.kind == "cuda" and p.gpu_mem_mib
               and "kimitui-worker" in p.cmdline}
    assert holding, "no sample caught a micro worker holding simulated GPU memory"


def test_bench_micro_measures_the_preset_it_is_given(tmp_path: Path) -> None:
    """``--model NAME``: the plan and every row are that preset's shapes (not Kimi-K2.5's); a name that is no
    preset is one line, exit 2, before any host is opened."""
    from kimitui.bench.micro.presets import preset
    from kimitui.bench.micro.shapes import shapes_for

    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "kimitui", "bench", "micro", "--host", "demo", "--json", "--gemm",
                          "--model", "glm-5", "--pace", "0", "--ms", "1", "--interval", "0.2"],
                         capture_output=True, text=True, timeout=180, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    (plan,) = [d for d in lines if d["type"] == "micro_plan"]
    want = shapes_for(preset("glm-5"), 8)
    assert plan["model"] == "zai-org/GLM-5" and [g["name"] for g in plan["gemms"]] == [g.name for g in want.gemms]
    rows = {d["name"]: (d["n"], d["k"]) for d in lines if d["type"] == "gemm_row"}
    assert rows["o_proj"] == (6144, 2048) and "indexer_wq_b" in rows, rows  # GLM-5's, at TP=8
    assert set(rows.values()) <= {(g.n, g.k) for g in want.gemms}, rows
    bad = subprocess.run([sys.executable, "-m", "kimitui", "bench", "micro", "--host", "demo", "--model", "glm-6"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "kimitui bench micro: no preset 'glm-6'; presets: kimi-k2.5, glm-5, deepseek-v3, qwen3-235b-a22b, "
        "llama-3.1-70b, gpt-oss-120b"], bad.stderr
