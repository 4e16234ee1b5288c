"""kimitui against the engine it is built for: a real vLLM (PyPI's CPU build, tests/vllm_server.py) serving a
tiny random Llama, TP=2, under supervisord, started once for the module (about a minute). Without its venv
(scripts/ci_vllm_deps.sh, which ./run-tests runs) every test here fails, naming the script.

In order: the tree is vLLM's; ``kimitui bench macro``, chat (the model thinks first: vLLM's reasoning parser
splits its stream) then completions; a campaign (Phase 1, the drain of
requests in flight, the graceful stop of the real tree through supervisorctl, the restart waited for by
/health, the post-restart probe); last, a worker stopped by SIGSTOP, which outlives the graceful stop and is
freed by the process step (that test ends the server)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kimitui.cleanup import Deadlines, PidService, auto_consent
from kimitui.cleanup.drain import read_in_flight
from kimitui.core.events import (
    DrainProgress,
    Event,
    MacroPoint,
    PhaseStart,
    ProbeResult,
    ServedModel,
    SignalOutcome,
    StepPreview,
    StepResult,
)
from tests.campaign_rig import campaign_rig, small_config
from tests.cleanup_rig import Rig, results
from tests.cleanup_support import SimDir
from tests.support import ROOT, phases_of
from tests.vllm_server import (
    MAX_NUM_SEQS,
    START_TIMEOUT_S,
    THINK_WORDS,
    VENV_BIN,
    Member,
    SupervisedVllm,
    VllmMissing,
    alive,
    healthy,
    make_vllm_model,
    one_at_a_time,
    start_supervised,
    titled,
    vllm_python,
)
from tests.waiting import until

API = "python -m vllm.entrypoints.openai.api_server"
ENGINE, TP0, TP1 = "VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP1"
MAX_TOKENS = 16
INPUT_LEN = 64
DRAIN_TOKENS = 200
"""Each drained request's output (ignore_eos): a few seconds of the engine's time, all of it seen."""


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SupervisedVllm]:
    try:
        vllm_python()
        missing = ""
    except VllmMissing as exc:
        missing = str(exc)
    if missing:
        pytest.fail(missing, pytrace=False)
    model = make_vllm_model(tmp_path_factory.mktemp("vllm-model"))
    with one_at_a_time():
        server = start_supervised(model, tmp_path_factory.mktemp("vllm-sv"))
        try:
            yield server
        finally:
            left = server.stop()
    assert not left, f"vLLM's processes left after its stop (SIGKILLed): {left}"


def _api_title(members: list[Member]) -> Member:
    return next(m for m in members if API in m.title)


def _workers(members: list[Member]) -> list[Member]:
    return [titled(members, TP0), titled(members, TP1)]


def _bench(url: str, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kimitui", "bench", "macro", "--url", url, *flags],
                          cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
                          env=dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data")))


def test_the_tree_is_vllms(vllm: SupervisedVllm) -> None:
    """The API server (supervisord's program) forks the resource tracker and EngineCore, which forks a worker
    per rank, each named by setproctitle as on a GPU host."""
    members = vllm.members()
    api = members[0]
    assert API in api.title and api.pid == vllm.main_pid()
    assert [m.title for m in members[1:] if "VLLM::" in m.title] == [ENGINE, TP0, TP1]
    assert any("resource_tracker" in m.title for m in members), members


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_bench_macro_measures_every_request_exactly(vllm: SupervisedVllm, tmp_path: Path, endpoint: str) -> None:
    """Every request completes with its full output (ignore_eos is a field vLLM takes: none dropped), each
    prompt is INPUT_LEN tokens as vLLM's /tokenize counts them, and the server's histograms are joined to each
    level over as many finished requests as the client completed."""
    sweep = tmp_path / "sweep.json"
    res = _bench(vllm.url, tmp_path, "--endpoint", endpoint, "--concurrency", "1,2", "--requests", "4",
                 "--input-len", str(INPUT_LEN), "--max-tokens", str(MAX_TOKENS), "--output", str(sweep))
    assert res.returncode == 0, res.stderr
    levels = json.loads(sweep.read_text())["levels"]
    assert [(lv["concurrency"], lv["completed"], lv["failed"]) for lv in levels] == [(1, 4, 0), (2, 4, 0)], levels
    # the chat stream thinks (vLLM's kimi_k2 parser: delta.reasoning, then </think>, then delta.content): TTFT is
    # the first thought, TTFO the first word of the answer; the completions endpoint is not parsed
    thought = THINK_WORDS if endpoint == "chat" else 0
    for lv in levels:
        assert (lv["answered"], lv["total_reasoning_tokens"], lv["mean_reasoning_tokens"]) == \
            (4, 4 * thought, thought), lv
        if thought:
            assert lv["mean_ttfo_ms"] > lv["mean_ttft_ms"] > 0 and lv["p99_ttfo_ms"] >= lv["median_ttfo_ms"], lv
        else:
            assert lv["mean_ttfo_ms"] == lv["mean_ttft_ms"], lv
        assert lv["total_output_tokens"] == 4 * MAX_TOKENS and not lv.get("request_fields_dropped"), lv
        assert lv["input_len_method"] == "tokenize", lv
        assert lv["mean_input_tokens"] == lv["min_input_tokens"] == lv["max_input_tokens"] == INPUT_LEN, lv
        assert lv["server_engine"] == "vllm" and lv["server_requests"] == lv["completed"], lv
        assert all(lv[f"server_mean_{k}_ms"] > 0 for k in ("ttft", "itl", "e2e")), lv
        assert lv["mean_ttft_ms"] > 0 and lv["output_throughput"] > 0, lv


# --- a campaign: the drain, the graceful stop of the real tree, the restart, the probe ------------------

async def _stream(url: str, model: str) -> int:
    """One completion of DRAIN_TOKENS tokens, streamed; the tokens it got."""
    body = {"model": model, "prompt": "hello", "max_tokens": DRAIN_TOKENS, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    got = 0
    async with httpx.AsyncClient(timeout=None) as client, \
            client.stream("POST", f"{url}/v1/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage")
                got = usage["completion_tokens"] if usage else got
    return got


def _continue(workers: list[Member]) -> None:
    for w in workers:
        if alive([w]):
            os.kill(w.pid, signal.SIGCONT)


async def test_a_campaign_drains_stops_restarts_and_probes_the_real_server(
        vllm: SupervisedVllm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Phase 1, then held before the transition while MAX_NUM_SEQS + 1 requests reach the engine (one waits)
    and its workers are stopped (SIGSTOP) so that nothing finishes before the drain reads them: the drain's
    preview shows vLLM's own running and waiting, its consent continues the workers, and its wait ends when
    both are 0, no request cut off. The graceful stop (supervisorctl stop) ends every process of the real tree,
    previewed by name; the restart (supervisorctl start) is waited for by /health; the probe measures it."""
    members = vllm.members()
    workers = _workers(members)
    cfg = small_config(["macro", "cleanup", "restart", "check"],
                       service={"spec": f"supervisor:vllm@{vllm.conf}", "api_url": vllm.url},
                       macro={"concurrency": [1, 2], "requests": "2x", "max_tokens": MAX_TOKENS},
                       cleanup={"drain_s": START_TIMEOUT_S, "graceful_s": 60},
                       restart={"health_s": START_TIMEOUT_S}, model={"tp": 2},
                       # the probe is checked, drift is not the point: the widest margins
                       check={"margin_pct": 1000, "ttft_margin_pct": 1000})
    monkeypatch.setenv("PATH", f"{VENV_BIN}:{os.environ['PATH']}")  # supervisorctl found on PATH, as on a host
    streams: list[asyncio.Future[int]] = []
    try:
        async with campaign_rig(cfg, tmp_path) as rig:
            def on_event(ev: Event) -> None:
                if isinstance(ev, PhaseStart) and ev.phase == "macro":
                    rig.machine.toggle_pause()  # held before the transition
                if isinstance(ev, DrainProgress) and ev.status == "read":
                    _continue(workers)

            rig.session.subscribe(on_event)
            run = asyncio.ensure_future(rig.machine.run())
            await until(lambda: rig.machine.held_before == "cleanup" or run.done(), "the campaign held")
            assert not run.done(), run.result()
            streams = [asyncio.ensure_future(_stream(vllm.url, vllm.model)) for _ in range(MAX_NUM_SEQS + 1)]

            async def all_at_the_engine() -> bool:
                now = await read_in_flight(f"{vllm.url}/metrics")
                return (now.running, now.waiting) == (MAX_NUM_SEQS, 1)

            await until(all_at_the_engine, "the requests running and waiting at the engine")
            for w in workers:
                os.kill(w.pid, signal.SIGSTOP)
            rig.machine.toggle_pause()
            end = await run
            got = await asyncio.gather(*streams)
    finally:
        _continue(workers)
        for s in streams:
            s.cancel()
    assert end.status == "done", end
    (served,) = rig.of(ServedModel)  # vLLM's /v1/models names the folder it loaded: its config read there
    assert served.family == "llama" and served.tp == 2 and served.params_total and not served.note, served
    assert "/config.json (pid " in served.source, served.source
    assert phases_of(rig.events) == [(p, s) for p in ("macro", "cleanup", "restart", "check")
                                     for s in ("start", "ok")], end
    assert [(p.concurrency, p.metrics["completed"], p.metrics["failed"]) for p in rig.of(MacroPoint)] == \
        [(1, 2, 0), (2, 4, 0)]

    drain = rig.of(DrainProgress)
    assert (drain[0].status, drain[0].running, drain[0].waiting) == ("read", MAX_NUM_SEQS, 1), drain
    assert (drain[-1].status, drain[-1].running, drain[-1].waiting) == ("drained", 0, 0), drain
    preview = {p.step: p for p in rig.of(StepPreview)}
    assert f"{MAX_NUM_SEQS} requests running and 1 waiting" in preview["drain"].action
    res = {r.step: r for r in rig.of(StepResult)}
    assert res["drain"].status == "done" and res["drain"].reason == f"{MAX_NUM_SEQS + 1} requests finished"
    assert got == [DRAIN_TOKENS] * (MAX_NUM_SEQS + 1), "no request was cut off"

    # the graceful stop: the whole real tree previewed, by its titles, and every process of it gone
    targets = {t.pid: t for t in preview["graceful"].targets}
    assert {m.pid for m in members} <= set(targets), (members, targets)
    assert [targets[m.pid].cmdline for m in (titled(members, ENGINE), *workers)] == [ENGINE, TP0, TP1]
    assert res["graceful"].status == "done" and res["graceful"].reason.startswith("every service process exited")
    assert not alive(members), alive(members)

    # the restart started it again (a new tree) and waited for /health; the probe measured it
    assert res["restart"].status == "done", res["restart"]
    (probe,) = rig.of(ProbeResult)
    assert probe.failed == 0 and probe.tok_s and probe.baseline_tok_s, probe
    assert healthy(vllm.url)
    again = vllm.members()
    assert _api_title(again).pid not in {m.pid for m in members} and len(_workers(again)) == 2


# --- last: a stopped worker, freed by the process step (ends the server) ------------------------------------

SIM_GPUS = 2
"""The simulated driver's GPUs for the ``rig`` fixture (tests/conftest.py): Worker_TPn holds GPU n."""
WORKER_MIB = 1000.0
STOP = Deadlines(graceful_s=20.0, term_grace_s=2.0, kill_s=10.0, verify_s=30.0, sample_s=30.0, poll_s=0.05)
"""The graceful wait is what ends with the stopped worker still there (vLLM itself waits for it far longer); long
enough for Worker_TP0 to have exited through vLLM's own stop on a loaded machine (5 s was not, beside two CPU hogs
and the rest of the suite)."""


async def test_a_stopped_worker_outlives_the_graceful_stop_and_the_process_step_frees_it(
        vllm: SupervisedVllm, rig: Rig, sim: SimDir) -> None:
    """Worker_TP1 stopped (state T: its SIGTERM stays pending): the graceful stop's SIGTERM to the API server
    ends Worker_TP0 (its death pipe closes) but not TP1, which vLLM waits for; the process step signals what is
    left, TP1 among them, and every process of the tree is gone; the simulated GPUs the workers held are free.
    What ends TP1 is the process step's SIGTERM, pending while it is stopped: once the API server exits, the
    tree's process group is orphaned with a stopped member, and the kernel sends the group SIGHUP and SIGCONT;
    while the API server lives, the step's SIGKILL after the grace does."""
    members = vllm.members()
    api, (tp0, tp1) = members[0], _workers(members)
    for gpu, worker in enumerate((tp0, tp1)):  # simholder's record, written for the worker's pid
        record = {"pid": worker.pid, "start_time": worker.start_time, "mem_mib": {str(gpu): WORKER_MIB}}
        (sim.path / "holders" / f"{worker.pid}.json").write_text(json.dumps(record))
    await rig.settled({tp0.pid, tp1.pid})
    os.kill(tp1.pid, signal.SIGSTOP)
    try:
        ex = rig.executor(auto_consent(["graceful", "process"], "tester"), PidService(pid=api.pid), deadlines=STOP)
        report = await ex.run()
    finally:
        _continue([tp1])
    res = results(rig)
    outcomes = {(o.step, o.pid): o.outcome for o in rig.of(SignalOutcome)}
    assert res["graceful"].status == "done" and "left" in res["graceful"].reason, res["graceful"]
    assert outcomes[("graceful", tp1.pid)] == "survived" and outcomes[("graceful", tp0.pid)] == "exited", outcomes
    process = next(p for p in rig.of(StepPreview) if p.step == "process")
    assert tp1.pid in {t.pid for t in process.targets}, process
    assert [s.signal for s in rig.signals(tp1.pid)][:1] == ["SIGTERM"] and \
        all(s.step == "process" for s in rig.signals(tp1.pid)), rig.signals(tp1.pid)
    assert res["process"].status == "done", res["process"]
    assert not alive(members), alive(members)
    assert report.clean, report
