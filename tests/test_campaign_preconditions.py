"""A failed precondition stops the campaign before its next destructive step: a Phase 1 in which nothing
was measured (the server unreachable, every request refused) does not lead on to stopping the service.
Headless the campaign ends failed there (unless --continue-after-failure); in the dashboard it holds, the
reason recorded, and the operator chooses."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kimitui.cleanup import PidService, auto_consent
from kimitui.cleanup.plan import CleanupTarget
from kimitui.core.events import CampaignControl, Consent, Event, LogLine, PhaseEnd, PhaseStart, StepPreview
from kimitui.hosts.local import LocalHost
from kimitui.phases.restart import restart_phase
from tests.campaign_rig import campaign_rig, small_config
from tests.cleanup_rig import FAST, Rig
from tests.cleanup_support import make_sim
from tests.faulty_server import Behavior, FaultyServer
from tests.support import run_kimitui, write_campaign
from tests.waiting import until


def started(events: list[Event]) -> list[str]:
    return [e.phase for e in events if isinstance(e, PhaseStart)]


def closed_port() -> int:
    with socket.socket() as s:  # nothing listens there once it is closed
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def refusing() -> AsyncIterator[str]:
    """A real server that lists a model and answers every completion 503."""
    async with FaultyServer(Behavior(mode="status", status=503)) as srv:
        yield srv.url


async def test_an_unreachable_server_in_phase_1_ends_a_headless_campaign_before_the_transition(
        tmp_path: Path) -> None:
    cfg = small_config(["macro", "cleanup", "micro"], service={"api_url": f"http://127.0.0.1:{closed_port()}"})
    async with campaign_rig(cfg, tmp_path) as rig:
        end = await asyncio.wait_for(rig.machine.run(), 120)
        pid_alive = await rig.machine.service.is_active(rig.host)  # type: ignore[union-attr]
    assert end.status == "failed" and "Phase 1" in end.note and "--continue-after-failure" in end.note, end.note
    assert started(rig.events) == ["macro"] and pid_alive


async def test_every_request_refused_in_phase_1_ends_it_too(tmp_path: Path, refusing: str) -> None:
    cfg = small_config(["macro", "cleanup"], service={"api_url": refusing})
    async with campaign_rig(cfg, tmp_path) as rig:
        end = await asyncio.wait_for(rig.machine.run(), 120)
    (macro_end,) = [e for e in rig.of(PhaseEnd) if e.phase == "macro"]
    assert not macro_end.ok and "every request failed" in macro_end.note
    assert end.status == "failed" and "every request failed" in end.note and started(rig.events) == ["macro"]


async def test_continue_after_failure_goes_on_to_the_transition(tmp_path: Path, refusing: str) -> None:
    cfg = small_config(["macro", "cleanup"], service={"api_url": refusing})
    async with campaign_rig(cfg, tmp_path) as rig:
        rig.machine.continue_after_failure = True
        end = await asyncio.wait_for(rig.machine.run(), 120)
    assert started(rig.events) == ["macro", "cleanup"] and end.status == "done"


async def test_the_dashboard_holds_after_a_failed_phase_1_and_the_operator_chooses(tmp_path: Path,
                                                                                   refusing: str) -> None:
    cfg = small_config(["macro", "cleanup", "micro"], service={"api_url": refusing},
                       model={"preset": "kimi-k2.5"})  # its server's model is no real one's: the file names it
    async with campaign_rig(cfg, tmp_path) as rig:
        rig.machine.headless = False
        task = asyncio.ensure_future(rig.machine.run())
        try:
            await until(lambda: rig.machine.held_before == "cleanup" or task.done(), "the campaign to hold")
            assert not task.done(), "the campaign ended instead of holding"
            c = rig.session.state.campaign
            assert c is not None and c.paused and c.pause_before == "cleanup"
            assert "Phase 1" in c.pause_note and "every request failed" in c.pause_note
            assert started(rig.events) == ["macro"]
            rig.machine.abort("the operator chose not to stop the service")
            end = await asyncio.wait_for(task, 60)
        finally:
            task.cancel()
    (hold,) = [e for e in rig.of(CampaignControl) if e.action == "pause"]
    assert hold.operator == "kimitui" and "A aborts" in hold.note
    assert end.status == "aborted" and started(rig.events) == ["macro"]


# --- the restart: "already running" is the health endpoint's answer; GPU memory still held is said --------

class Health:
    """A real HTTP server on loopback whose /health answers 503 until ``up_when`` exists, then 200."""

    def __init__(self, up_when: Path, always: int | None = None) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code = always if always is not None else 200 if up_when.exists() else 503
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/health"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
async def cleanup_rig(tmp_path: Path) -> AsyncIterator[Rig]:
    sim = make_sim(tmp_path / "sim", gpus=2)
    rig = Rig(sim, LocalHost(), tmp_path)
    await rig.start()
    try:
        yield rig
    finally:
        await rig.close()
        sim.teardown()


async def test_a_live_main_pid_whose_health_answers_503_is_restarted(cleanup_rig: Rig, tmp_path: Path) -> None:
    """The main process lives, its workers died: /health answers 503. That is not running: the restart
    runs its start command (here it brings the health endpoint up) instead of skipping."""
    started_flag = tmp_path / "started"
    main = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    health = Health(started_flag)
    try:
        svc = PidService(pid=main.pid, start=[sys.executable, "-c", f"open({str(started_flag)!r}, 'w')"],
                         health_url=health.url)
        target = CleanupTarget(host="test", service=svc, deadlines=dataclasses.replace(FAST, health_s=30.0),
                               operator="tester")
        result, note = await restart_phase(cleanup_rig.host, target, auto_consent(["restart"], "tester"),
                                           cleanup_rig.session.publish, "restart", skip_if_running=True,
                                           view=cleanup_rig.feed)
    finally:
        health.close()
        main.kill()
        main.wait()
    assert result is not None and result.status == "done", note
    assert started_flag.exists()
    (preview,) = [p for p in cleanup_rig.of(StepPreview) if p.step == "restart"]
    assert not preview.action.startswith("already running"), preview.action


async def test_a_service_whose_health_answers_200_is_not_started_again(cleanup_rig: Rig, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    health = Health(marker, always=200)
    try:
        svc = PidService(pidfile=str(tmp_path / "none.pid"),
                         start=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"], health_url=health.url)
        target = CleanupTarget(host="test", service=svc, deadlines=FAST, operator="tester")
        result, note = await restart_phase(cleanup_rig.host, target, auto_consent(["restart"], "tester"),
                                           cleanup_rig.session.publish, "restart", skip_if_running=True,
                                           view=cleanup_rig.feed)
    finally:
        health.close()
    assert result is not None and result.status == "skipped" and "answers 200" in note, note
    assert not marker.exists()


async def test_a_restart_while_the_gpus_hold_memory_says_so_and_the_policy_does_not_start_it(
        cleanup_rig: Rig, tmp_path: Path) -> None:
    """After an abort mid-transition the old service's processes still hold GPU memory: the preview names
    them and asks to finish the cleanup first; the file's restart = yes does not cover that start."""
    from kimitui.campaign.setup import policy_consent

    holder = cleanup_rig.sim.start_holder(1, 30_000.0)
    await cleanup_rig.settled({holder})
    marker = tmp_path / "started"
    svc = PidService(pidfile=str(tmp_path / "none.pid"), start=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    target = CleanupTarget(host="test", service=svc, deadlines=FAST, operator="tester")
    consent = policy_consent({"restart": "yes"}, None, "tester", lambda: False)
    result, note = await restart_phase(cleanup_rig.host, target, consent, cleanup_rig.session.publish, "restart",
                                       view=cleanup_rig.feed)
    (preview,) = [p for p in cleanup_rig.of(StepPreview) if p.step == "restart"]
    assert preview.action.startswith("GPU memory still held: GPUs 1 are not clean") and f"pid {holder}" in \
        preview.action and "finish the cleanup first" in preview.action, preview.action
    assert result is not None and result.status == "declined" and not marker.exists(), note
    (answer,) = [c for c in cleanup_rig.of(Consent) if c.step == "restart"]
    assert not answer.accepted and "finish the cleanup first" in answer.note


# --- the preflight: a typo is found in the first second, before anything is recorded ---------------------

@pytest.mark.parametrize(("edit", "message"), [
    ({"[cleanup]\n": '[cleanup]\ngpus = "0,99"\n'}, "[cleanup] gpus 0,99: demo (8 simulated GPUs) has no GPU 99 "
                                                    "(it has GPUs 0-7)"),
    ({'spec = "sim:vllm"': 'spec = "sim:vlm"'}, "[service] spec 'sim:vlm': sim:vlm: the simulated host demo has no "
                                                "service 'vlm'"),
])
def test_the_campaign_preflight_refuses_a_typo_before_phase_1(tmp_path: Path, edit: dict[str, str],
                                                             message: str) -> None:
    done = run_kimitui(tmp_path, "campaign", str(write_campaign(tmp_path, **edit)), "--headless")
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "data" / "kimitui" / "runs").exists()  # nothing recorded as started


def test_a_valid_gpu_list_passes_the_preflight(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, **{"[cleanup]\n": '[cleanup]\ngpus = "0,1"\n',
                                       "[campaign]\n": '[campaign]\nphases = ["macro"]\n'})
    done = run_kimitui(tmp_path, "campaign", str(path), "--headless")
    assert done.returncode == 0 and "campaign done" in done.stdout, done.stderr


def test_a_headless_campaign_whose_phase_1_failed_exits_1_and_never_stops_the_service(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, **{'spec = "sim:vllm"': f'spec = "sim:vllm"\napi_url = "http://127.0.0.1:'
                                                            f'{closed_port()}"'})
    done = run_kimitui(tmp_path, "campaign", str(path), "--headless")
    assert done.returncode == 1, done.stderr
    assert "campaign FAILED: Phase 1" in done.stdout and "--continue-after-failure" in done.stdout
    assert "phase cleanup started" not in done.stdout, done.stdout


@pytest.mark.parametrize("gpus", ["99", "0,8"])
def test_gpus_the_demo_does_not_have_are_a_usage_error(tmp_path: Path, gpus: str) -> None:
    for argv in (["cleanup", "--host", "demo", "--gpus", gpus, "--dry-run"],
                 ["bench", "micro", "--host", "demo", "--gpus", gpus]):
        done = run_kimitui(tmp_path, *argv)
        assert done.returncode == 2 and "demo has no GPU" in done.stderr and "(it has GPUs 0-7)" in done.stderr, \
            done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "data" / "kimitui" / "runs").exists()


# --- an abort before the transition: the restart offered when the service is down, said unneeded when up --

async def abort_at_the_hold(rig: Any, before: Callable[[], Awaitable[object]] | None = None) -> Any:
    rig.machine.headless = False
    task = asyncio.ensure_future(rig.machine.run())
    try:
        await until(lambda: rig.machine.held_before == "cleanup" or task.done(), "the campaign to hold")
        assert not task.done(), "the campaign ended instead of holding"
        if before is not None:
            await before()
        rig.machine.abort("the operator pressed A")
        return await asyncio.wait_for(task, 120)
    finally:
        task.cancel()


async def test_an_abort_before_the_transition_offers_the_restart_of_a_service_that_is_down(
        tmp_path: Path) -> None:
    cfg = small_config(["macro", "cleanup", "micro"], service={"api_url": f"http://127.0.0.1:{closed_port()}"})
    async with campaign_rig(cfg, tmp_path, stuck=0) as rig:  # no worker left holding a GPU once it stops
        end = await abort_at_the_hold(rig, rig.host.stop_service)
        up = await rig.host.health()
    assert end.status == "aborted" and started(rig.events) == ["macro", "restart"]
    (answer,) = [c for c in rig.of(Consent) if c.step == "restart"]
    assert answer.accepted and answer.note == "campaign policy: abort_restart = yes"
    assert up == 200, "the service is back"


async def test_an_abort_before_the_transition_says_a_running_service_needs_no_restart(tmp_path: Path) -> None:
    cfg = small_config(["macro", "cleanup", "micro"], service={"api_url": f"http://127.0.0.1:{closed_port()}"})
    async with campaign_rig(cfg, tmp_path) as rig:
        end = await abort_at_the_hold(rig)
    assert end.status == "aborted" and started(rig.events) == ["macro"]
    said = [e.message for e in rig.of(LogLine) if "no restart is needed" in e.message]
    assert said and "was not stopped and is running" in said[0], said
