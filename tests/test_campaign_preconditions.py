"""A failed precondition stops the campaign before its next destructive step: a Phase 1 in which nothing
was measured (the server unreachable, every request refused) does not lead on to stopping the service.
Headless the campaign ends failed there (unless --continue-after-failure); in the dashboard it holds, the
reason recorded, and the operator chooses."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kimitui.core.campaign_events import CampaignControl
from kimitui.core.events import Event, PhaseEnd, PhaseStart
from tests.campaign_rig import POLL_S, campaign_rig, small_config
from tests.faulty_server import Behavior, FaultyServer


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
    cfg = small_config(["macro", "cleanup", "micro"], service={"api_url": refusing})
    async with campaign_rig(cfg, tmp_path) as rig:
        rig.machine.headless = False
        task = asyncio.ensure_future(rig.machine.run())
        try:
            deadline = time.monotonic() + 120
            while rig.machine.held_before != "cleanup":
                assert time.monotonic() < deadline and not task.done(), "the campaign did not hold"
                await asyncio.sleep(POLL_S)
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
