"""The campaign machine on the simulated host: the whole campaign headless, the abort paths, a transition
that does not free the GPUs, the drain before the graceful stop, the post-restart drift flag, and the
controls (pause, skip) recorded before they act."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from kimitui.core.events import (
    CampaignControl,
    CampaignEnd,
    CampaignPlan,
    Consent,
    DecodeBudget,
    DrainProgress,
    Event,
    LogLine,
    MacroPoint,
    PhaseEnd,
    PhaseStart,
    ProbeResult,
    StepPreview,
    StepResult,
)
from kimitui.core.replay import state_at
from kimitui.core.runfile import RunReader
from kimitui.hosts.sim.batching import BatchingModel
from tests.campaign_rig import campaign_rig, small_config
from tests.support import phases_of
from tests.waiting import DEADLINE_S, until


async def test_the_whole_campaign_runs_and_its_record_folds_the_same(tmp_path: Path) -> None:
    async with campaign_rig(small_config(), tmp_path) as rig:
        end = await rig.machine.run()
        service_up = await rig.host.health() == 200
    assert end.status == "done" and end.note == "every phase over"
    assert phases_of(rig.events) == [(p, s) for p in ("macro", "cleanup", "micro", "analysis", "restart", "check")
                                     for s in ("start", "ok")]
    assert service_up, "the service is back after the campaign"
    (plan,) = rig.of(CampaignPlan)
    assert plan.phases == ["macro", "cleanup", "micro", "analysis", "restart", "check"] and plan.headless
    assert [p.concurrency for p in rig.of(MacroPoint)] == [1, 4]
    (budget,) = rig.of(DecodeBudget)
    assert [r.m for r in budget.rows] == [1, 4] and budget.bound in ("gemm", "allreduce", "rest")
    assert budget.level in ("knee", "highest level measured") and budget.plateau_m in (1, 4)
    assert budget.verdict.startswith(f"At the {budget.level} (") and any("122 all-reduces" in a
                                                                          for a in budget.assumptions)
    (probe,) = rig.of(ProbeResult)
    assert probe.tok_s and probe.baseline_tok_s and not probe.drift
    consents = {c.step: c for c in rig.of(Consent)}
    assert consents["graceful"].accepted and consents["graceful"].note == "campaign policy: graceful = yes"
    # the run file is the record: its fold has the campaign as it ran, every phase done
    state = state_at(RunReader(rig.path), len(RunReader(rig.path)))
    c = state.campaign
    assert c is not None and c.end is not None and c.end.status == "done"
    assert {p.status for p in c.phases.values()} == {"done"}
    assert state.budget == budget and state.probe == probe
    # the budget is a pure function of the fold: recomputed from the record it says the same
    from kimitui.phases.analysis import decode_budget

    again = decode_budget(state, budget.t)
    assert again.rows == budget.rows and again.verdict == budget.verdict


async def test_the_budget_adds_up_what_phase_2_measured(tmp_path: Path) -> None:
    """122 x all-reduce(M) + sum of GEMM(M) x calls per token, next to the TPOT of Phase 1: each part is
    the measured rows times their counts, the rest what is left of the TPOT."""
    async with campaign_rig(small_config(["macro", "cleanup", "micro", "analysis"]), tmp_path) as rig:
        await rig.machine.run()
    state = rig.session.state
    budget = state.budget
    assert budget is not None
    plan = state.micro.plan if state.micro else None
    assert plan is not None
    calls = {g["name"]: g["calls_per_token"] for g in plan.gemms}
    for row in budget.rows:
        m = row.m
        times = {(r.name, r.backend): r.time_us for r in state.gemm if r.m == m}
        bf16 = sum(times[(name, "bf16")] * n for name, n in calls.items()
                   if not name.startswith("moe_")) / 1000.0
        int4 = times[("moe (8 of 384)", "marlin")] * calls["moe_w13"] / 1000.0
        burst = next(r for r in state.allreduce if r.burst == 122 and r.tokens == m)
        assert calls["o_proj"] == 61 and calls["moe_w13"] == 60 and calls["lm_head"] == 1
        assert abs(row.bf16_gemm_ms - bf16) < 1e-3 and abs(row.int4_gemm_ms - int4) < 1e-3
        assert abs(row.allreduce_ms - burst.burst_us / 1000.0) < 1e-3
        tpot = state.macro_by_level[m].metrics["median_tpot_ms"]
        assert row.tpot_ms == tpot and abs(row.rest_ms - (tpot - row.allreduce_ms - int4 - bf16)) < 1e-3


async def test_abort_stops_the_phase_in_hand_and_offers_the_restart(tmp_path: Path) -> None:
    async with campaign_rig(small_config(), tmp_path) as rig:

        def abort_in_micro(ev: Event) -> None:
            if isinstance(ev, PhaseStart) and ev.phase == "micro":
                rig.machine.abort("test: abort in Phase 2")

        rig.session.subscribe(abort_in_micro)
        end = await rig.machine.run()
        up = await rig.host.health() == 200
    assert end.status == "aborted"
    (ctl,) = [c for c in rig.of(CampaignControl) if c.action == "abort"]
    assert ctl.phase == "micro" and ctl.note == "test: abort in Phase 2"
    done = phases_of(rig.events)
    assert ("analysis", "start") not in done and ("check", "start") not in done
    assert done[-2:] == [("restart", "start"), ("restart", "ok")], "the restart is offered after the abort"
    restart = next(c for c in rig.of(Consent) if c.step == "restart")
    assert restart.accepted and restart.note == "campaign policy: abort_restart = yes"
    assert up


async def test_abort_with_the_restart_declined_leaves_the_service_stopped(tmp_path: Path) -> None:
    cfg = small_config(consent={"abort_restart": "no"})
    async with campaign_rig(cfg, tmp_path) as rig:

        def abort_after_cleanup(ev: Event) -> None:
            if isinstance(ev, PhaseEnd) and ev.phase == "cleanup":
                rig.machine.abort()

        rig.session.subscribe(abort_after_cleanup)
        end = await rig.machine.run()
        up = await rig.host.health()
    assert end.status == "aborted" and up is None
    restart = next(c for c in rig.of(Consent) if c.step == "restart")
    assert not restart.accepted and restart.note == "campaign policy: abort_restart = no"
    assert ("micro", "start") not in phases_of(rig.events)


async def test_a_transition_that_leaves_the_gpus_held_ends_the_campaign(tmp_path: Path) -> None:
    """The stuck worker survives the graceful stop and the process and device steps are declined: Phase 2
    would measure beside it, so the campaign fails there and offers the restart. The worker still holds
    its GPU: the restart's preview says so, and the file's abort_restart = yes does not start the service
    beside it (finish the cleanup first)."""
    cfg = small_config(["cleanup", "micro", "analysis", "restart"], consent={"process": "no", "device": "no"})
    async with campaign_rig(cfg, tmp_path) as rig:
        end = await rig.machine.run()
    assert end.status == "failed" and "did not free the GPUs" in end.note
    assert ("micro", "start") not in phases_of(rig.events)
    declined = {r.step for r in rig.of(StepResult) if r.status == "declined"}
    assert declined == {"process", "device", "restart"}
    assert ("restart", "start") in phases_of(rig.events)
    (preview,) = [p for p in rig.of(StepPreview) if p.step == "restart"]
    assert preview.action.startswith("GPU memory still held") and "finish the cleanup first" in preview.action


async def test_pause_and_skip_are_recorded_and_kept(tmp_path: Path) -> None:
    cfg = small_config(["cleanup", "micro", "analysis"])
    async with campaign_rig(cfg, tmp_path) as rig:

        task = asyncio.ensure_future(rig.machine.run())
        try:
            await until(lambda: any(isinstance(e, PhaseStart) for e in rig.events), "the transition")
            assert rig.machine.toggle_pause()  # during the transition: the campaign stops before Phase 2
            await until(lambda: any(isinstance(e, PhaseEnd) and e.phase == "cleanup" for e in rig.events), "its end")
            await until(lambda: rig.machine.held_before == "micro", "the hold before Phase 2")
            assert not any(isinstance(e, PhaseStart) and e.phase == "micro" for e in rig.events), "paused"
            c = rig.session.state.campaign
            assert c is not None and c.paused and c.pause_before == "micro"
            assert rig.machine.skip_next() == "micro"
            assert not rig.machine.toggle_pause()
            end = await asyncio.wait_for(task, 60)
        finally:
            task.cancel()
    assert end.status == "done"
    actions = [(c.action, c.phase) for c in rig.of(CampaignControl)]
    assert actions == [("pause", "micro"), ("skip", "micro"), ("resume", "")]
    assert [p for p, s in phases_of(rig.events) if s == "start"] == ["cleanup", "analysis"]
    c = rig.session.state.campaign
    assert c is not None and c.phases["micro"].status == "skipped" and not c.paused


async def _stream(url: str, max_tokens: int) -> int:
    """One streamed completion; returns the tokens received."""
    got = 0
    async with httpx.AsyncClient(timeout=60) as client:
        body = {"model": "moonshotai/Kimi-K2.5", "prompt": "hello", "max_tokens": max_tokens, "stream": True,
                "ignore_eos": True}
        async with client.stream("POST", f"{url}/v1/completions", json=body) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: {"):
                    got += 1
    return got


SLOW = BatchingModel(base_s=0.05, per_seq_s=0.0, max_batch=2)
"""20 tokens a second, 2 sequences at once: a third request waits."""


async def test_the_drain_waits_for_the_requests_in_flight_before_the_graceful_stop(tmp_path: Path) -> None:
    cfg = small_config(["cleanup"], cleanup={"drain_s": DEADLINE_S})  # the drain's end is the requests'
    async with campaign_rig(cfg, tmp_path, batching=SLOW) as rig:
        streams = [asyncio.ensure_future(_stream(rig.host.api_url, 20)) for _ in range(3)]
        from kimitui.cleanup.drain import read_in_flight

        async def three_in_flight() -> bool:
            return (await read_in_flight(f"{rig.host.api_url}/metrics")).total >= 3

        await until(three_in_flight, "the 3 requests at the server")
        end = await rig.machine.run()
        got = await asyncio.gather(*streams)
    assert end.status == "done"
    drain = rig.of(DrainProgress)
    assert (drain[0].status, drain[0].running, drain[0].waiting) == ("read", 2, 1)
    assert drain[-1].status == "drained" and (drain[-1].running, drain[-1].waiting) == (0, 0)
    preview = next(p for p in rig.of(StepPreview) if p.step == "drain")
    assert "2 requests running and 1 waiting" in preview.action
    result = next(r for r in rig.of(StepResult) if r.step == "drain")
    assert result.status == "done" and result.reason == "3 requests finished"
    graceful = next(p for p in rig.of(StepPreview) if p.step == "graceful")
    assert graceful.t >= drain[-1].t, "the graceful stop comes after the drain"
    assert got == [20, 20, 20], "no request was cut off"


async def test_a_drain_past_its_deadline_says_what_the_stop_cuts_off(tmp_path: Path) -> None:
    cfg = small_config(["cleanup"], cleanup={"drain_s": 0.5})
    async with campaign_rig(cfg, tmp_path, batching=SLOW) as rig:
        stream = asyncio.ensure_future(_stream(rig.host.api_url, 400))
        from kimitui.cleanup.drain import read_in_flight

        async def in_flight() -> bool:
            return (await read_in_flight(f"{rig.host.api_url}/metrics")).total >= 1

        await until(in_flight, "the request at the server")
        end = await rig.machine.run()
        got = await asyncio.gather(stream, return_exceptions=True)
    assert end.status == "done"
    last = rig.of(DrainProgress)[-1]
    assert last.status == "deadline" and last.running == 1
    result = next(r for r in rig.of(StepResult) if r.step == "drain")
    assert "deadline of 0.5 s passed with 1 running" in result.reason
    assert isinstance(got[0], Exception) or got[0] < 400, "the graceful stop cut the request off"


async def test_the_probe_flags_a_service_that_came_back_slower(tmp_path: Path) -> None:
    # the default margin (10 %), not the test campaign's wide one: the model halves the speed, and Phase 1's
    # figure on a busy machine is below the model's, so the drop measured can be well under half
    cfg = small_config(["macro", "cleanup", "restart", "check"], macro={"concurrency": [1]},
                       check={"margin_pct": 10.0})
    async with campaign_rig(cfg, tmp_path) as rig:

        def slower_on_restart(ev: Event) -> None:  # the service comes back with half the single-stream speed
            if isinstance(ev, PhaseStart) and ev.phase == "restart":
                rig.host.batching = BatchingModel.from_targets(single_stream_tps=25.0)

        rig.session.subscribe(slower_on_restart)
        end = await rig.machine.run()
    (probe,) = rig.of(ProbeResult)
    # The restarted service cannot stream faster than its model's 25 tok/s (causal); Phase 1's figure, measured
    # in the same run, is the model's 50 tok/s or less on a busy machine, so the drop is checked against
    # that figure and the margin, not against the models' halving.
    assert probe.baseline_tok_s is not None and probe.tok_s is not None and probe.tok_s < 1.05 * 25.0
    assert probe.tok_s_change_pct == pytest.approx(100 * (probe.tok_s / probe.baseline_tok_s - 1), abs=0.01)
    assert probe.drift and probe.tok_s_change_pct is not None and probe.tok_s_change_pct < -probe.margin_pct
    check_end = [e for e in rig.of(PhaseEnd) if e.phase == "check"][-1]
    assert not check_end.ok and check_end.note.startswith("DRIFT: tok/s -")
    assert end.status == "done" and end.note == "drift after the restart"


async def test_a_restart_that_is_still_cold_is_not_drift(tmp_path: Path) -> None:
    """A freshly started engine's first requests are slow (the simulated server's ``cold=4``: its first 4
    requests after each start run at a third of its pace). Phase 1 warms it up with 4 requests not counted;
    the probe, its warm-up not set, warms the restarted engine up as Phase 1 did and measures 8 warm requests:
    no drift."""
    cfg = small_config(["macro", "cleanup", "restart", "check"],
                       macro={"concurrency": [1], "requests": "8x", "warmup": 4}, check={"requests": 8})
    assert cfg.check.warmup == -1 and cfg.check_warmup() == 4
    async with campaign_rig(cfg, tmp_path, quirks="cold=4") as rig:
        end = await rig.machine.run()
    (probe,) = rig.of(ProbeResult)
    assert end.status == "done" and not probe.drift, probe
    assert probe.requests == 8 and len(probe.tpot_all_ms) == 8 and probe.failed == 0, probe
    assert rig.of(CampaignPlan)[0].settings["check"]["warmup"] == 4


async def test_a_probe_that_measures_the_cold_requests_says_drift(tmp_path: Path) -> None:
    """The control: the same cold engine, the probe told to warm nothing up (``[check] warmup = 0``) and to
    measure 4 requests (too few to judge by their spread: the margin alone), all of them cold: drift, the
    single stream about a third of Phase 1's. So the test above meets a server that really is cold."""
    cfg = small_config(["macro", "cleanup", "restart", "check"],
                       macro={"concurrency": [1], "requests": "8x", "warmup": 4}, check={"requests": 4, "warmup": 0})
    async with campaign_rig(cfg, tmp_path, quirks="cold=4") as rig:
        await rig.machine.run()
    (probe,) = rig.of(ProbeResult)
    assert probe.drift and probe.tok_s_change_pct is not None and probe.tok_s_change_pct < -probe.margin_pct, probe


async def test_a_headless_campaign_never_waits_on_a_prompt(tmp_path: Path) -> None:
    from kimitui.commands.campaign import CampaignUsageError, apply_answers

    cfg = small_config(consent={"process": "ask", "device": "ask"})
    try:
        apply_answers(cfg, None, None, headless=True)
    except CampaignUsageError as exc:
        assert "consent process, device is 'ask'" in str(exc) and "--yes process,device" in str(exc)
    else:
        raise AssertionError("a headless campaign with consent 'ask' was accepted")
    apply_answers(cfg, "process", "device", headless=True)
    assert cfg.consent["process"] == "yes" and cfg.consent["device"] == "no"


def test_campaign_end_is_folded() -> None:
    from kimitui.core.state import SessionState, fold

    s = SessionState()
    for e in [CampaignPlan(1.0, phases=["macro"]), PhaseStart(2.0, phase="macro"), PhaseEnd(3.0, phase="macro"),
              CampaignEnd(4.0, status="done")]:
        fold(s, e)
    assert s.campaign is not None and s.campaign.end is not None and s.campaign.phases["macro"].status == "done"


async def test_a_one_gpu_host_is_told_at_the_start_that_phase_3_will_have_no_verdict(tmp_path: Path) -> None:
    # as on the lent one-GPU H200 (docs/device-runs/campaign-1xh200): the all-reduce cannot run there
    cfg = small_config(["macro", "cleanup", "micro", "analysis"], macro={"concurrency": [1]})
    async with campaign_rig(cfg, tmp_path, gpus=1, stuck=0) as rig:
        end = await rig.machine.run()
    first_phase = next(i for i, e in enumerate(rig.events) if isinstance(e, PhaseStart))
    warned = [e for e in rig.events[:first_phase] if isinstance(e, LogLine) and e.level == "warning"]
    assert len(warned) == 1 and "1 GPU in scope: Phase 2's all-reduce needs 2 or more" in warned[0].message
    analysis = [e for e in rig.of(PhaseEnd) if e.phase == "analysis"][-1]
    assert not analysis.ok and "no all-reduce" in analysis.note
    assert end.status == "done" and end.note == "every phase over; not ok: Phase 3 analysis"


@pytest.mark.parametrize("metrics_url", ["", "http://127.0.0.1:9/metrics"])
async def test_phase_1_reads_the_metrics_url_the_campaign_names(metrics_url: str, tmp_path: Path) -> None:
    """The sweep reads the server's /metrics at the campaign's ``metrics_url`` (the one the drain reads), or at the
    API's own /metrics when none is named: a URL with nothing behind it is said once, and Phase 1 goes on."""
    from kimitui.core.events import ServerSample

    cfg = small_config(["macro"], service={"metrics_url": metrics_url} if metrics_url else {})
    async with campaign_rig(cfg, tmp_path) as rig:
        end = await rig.machine.run()
    assert end.status == "done", end
    said = [e.message for e in rig.of(LogLine) if "server metrics" in e.message]
    if metrics_url:
        assert not rig.of(ServerSample) and len(said) == 1, said
        assert said[0].startswith(f"no server metrics (GET {metrics_url}:"), said
    else:
        assert rig.of(ServerSample) and said == [f"server metrics: vllm at {rig.host.api_url}/metrics, read every "
                                                 "200 ms"], said
        assert all("server_mean_ttft_ms" in p.metrics for p in rig.of(MacroPoint))
