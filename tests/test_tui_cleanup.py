"""The dashboard's cleanup against a real simulated host: F opens the setup dialog, each step asks in a
consent modal, the escalation runs as a worker publishing into the session (recorded, folded, shown).

SimHost(gpus=2, stuck_workers=1): the API server and two workers, the worker on GPU 1 ignores SIGTERM; an
NVML-only monitor that must survive. The real agent samples it through a TelemetrySource.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input

from kimitui.cleanup.audit import read_audit
from kimitui.cleanup.plan import Deadlines
from kimitui.core.events import Consent, Event, LogLine, PhaseEnd, SignalSent, StepPreview, StepResult, Verification
from kimitui.core.session import Session
from kimitui.hosts.local import LocalHost
from kimitui.hosts.sim.host import SimHost
from kimitui.hosts.sim.teardown import alive
from kimitui.live.context import LiveContext
from kimitui.tui.controllers.cleanup_run import CANCEL_NOTE
from kimitui.tui.screens.cleanup_consent import TICKED, UNTICKED, ConsentScreen
from kimitui.tui.screens.cleanup_dialog import CleanupSetupScreen
from kimitui.tui.views.cleanup_view import CleanupView, StepTable
from tests.app_probe import ProbedApp
from tests.support import BIG, Live, cleanup_app, modal, replay_app, start_cleanup
from tests.tui_runs import write_test_run
from tests.waiting import pilot_until

FAST = Deadlines(graceful_s=1.0, term_grace_s=0.5, kill_s=2.0, verify_s=3.0, sample_s=10.0, poll_s=0.01)
SHORT_VERIFY = Deadlines(graceful_s=1.0, term_grace_s=0.5, kill_s=2.0, verify_s=0.5, sample_s=10.0, poll_s=0.01)


def stuck_worker(host: SimHost) -> int:
    (gpu,) = host.stuck_gpus
    return host.worker_holders()[gpu].pid


async def confirm(lv: Live, step: str, seen: dict[str, list[int]],
                  edit: Callable[[ConsentScreen], object] | None = None) -> ConsentScreen:
    screen = await modal(lv, step)
    if edit is not None:
        await edit(screen)  # type: ignore[misc]
    seen[step] = list(screen.ticked)
    await lv.pilot.press("enter")
    await pilot_until(lv.pilot, lambda: lv.app.screen is not screen, f"the {step} modal closed")
    return screen


async def untick(lv: Live, screen: ConsentScreen, pid: int) -> None:
    """Move the cursor to pid's row in the targets table and press space."""
    table = screen.query_one("#consent-targets", DataTable)
    table.focus()
    table.move_cursor(row=table.get_row_index(str(pid)))
    await lv.pilot.pause()
    assert table.get_cell(str(pid), "tick").plain == TICKED
    await lv.pilot.press("space")
    assert table.get_cell(str(pid), "tick").plain == UNTICKED
    assert pid not in screen.ticked


async def verified(lv: Live) -> Verification:
    def done() -> bool:
        runner = lv.app.cleanup.current
        return runner is not None and runner.finished and lv.session.state.cleanup is not None \
            and lv.session.state.cleanup.verification is not None

    await pilot_until(lv.pilot, done, "the verification")
    cleanup = lv.session.state.cleanup
    assert cleanup is not None and cleanup.verification is not None
    # the panel shows the last events (a redraw is at most 1/8 s behind)
    await pilot_until(lv.pilot, lambda: "verification: not yet" not in lv.text("cleanup-verdict")
                   and "cleanup ended" in lv.text("cleanup-phase"), "the verdict on the panel")
    return cleanup.verification


def signalled(events: list[Event], step: str | None = None) -> set[int]:
    return {e.pid for e in events if isinstance(e, SignalSent) and e.outcome == "sent"
            and (step is None or e.step == step)}


def consents(events: list[Event]) -> dict[str, Consent]:
    return {e.step: e for e in events if isinstance(e, Consent)}


def check_ticks_bound_signals(events: list[Event], seen: dict[str, list[int]]) -> None:
    """Every step's consent holds exactly what the modal showed ticked, and nothing else was signalled."""
    for step, consent in consents(events).items():
        if consent.accepted:
            assert sorted(consent.pids) == sorted(seen[step]), step
        assert signalled(events, step) <= set(consent.pids if consent.accepted else []), step


async def test_free_the_gpus_confirm_each_step_ends_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's own deadlines: the graceful stop leaves the stuck worker, the process kill ends it."""
    async with cleanup_app(tmp_path, monkeypatch) as lv:
        host = lv.host
        assert host.monitor_proc is not None and host.service_proc is not None
        stuck = stuck_worker(host)
        workers = list(host.worker_holders().values())
        tree = {host.service_proc.pid, *(p.pid for p in workers)}
        await start_cleanup(lv)
        seen: dict[str, list[int]] = {}
        graceful = await modal(lv, "graceful")
        assert {r.pid for r in graceful.preview.targets} == tree
        assert graceful.query_one("#consent-targets", DataTable).row_count == len(tree)
        assert graceful.ticked == [r.pid for r in graceful.preview.targets]
        await confirm(lv, "graceful", seen)
        process = await confirm(lv, "process", seen)
        assert [r.pid for r in process.preview.targets] == [stuck]
        v = await verified(lv)
        events = lv.events()

        assert v.clean and all(g.clean for g in v.gpus) and not v.holders_left
        assert alive(host.monitor_proc) and not any(alive(w) for w in workers)
        assert host.monitor_proc.pid not in signalled(events)
        assert stuck in {e.pid for e in events if isinstance(e, SignalSent) and e.signal == "SIGKILL"}
        check_ticks_bound_signals(events, seen)
        results = {e.step: e.status for e in events if isinstance(e, StepResult)}
        assert results == {"graceful": "done", "process": "done", "others": "skipped", "device": "skipped",
                           "verify": "done", "reset": "skipped"}
        types = {e.type for e in events}
        assert {"phase_start", "cleanup_plan", "step_preview", "consent", "signal", "signal_outcome",
                "step_result", "verification", "phase_end"} <= types
        end = [e for e in events if isinstance(e, PhaseEnd)][-1]
        assert end.ok and "last consent -> clean" in end.note
        assert all(c.operator and c.accepted for c in consents(events).values())
        audit = read_audit(tmp_path / "data" / "kimitui" / "audit.log")
        assert {r["event"] for r in audit} >= {"step_preview", "consent", "signal", "signal_outcome"}

        steps = lv.app.query_one(StepTable)
        assert steps.column_texts("status") == ["done", "done", "skipped", "skipped", "done", "skipped"]
        assert "SIGKILL" in steps.cell_text("process", "signals")
        verdict = lv.text("cleanup-verdict")
        assert "CLEAN" in verdict and "NOT CLEAN" not in verdict
        sig = lv.text("cleanup-signals")
        assert f"pid {stuck}" in sig and "survived" in sig and "exited after" in sig
        mem = lv.text("cleanup-memory")
        assert "GPU memory since the plan" in mem and " 0 " in mem and " 1 " in mem
        assert "last consent -> clean" in lv.text("cleanup-phase")


async def test_an_unticked_worker_survives_its_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unticked in the process kill, the stuck worker is not signalled and lives; the device kill then
    lists it as a CUDA holder (and the monitor as optional, unticked), confirmed, it ends clean."""
    async with cleanup_app(tmp_path, monkeypatch, FAST) as lv:
        host = lv.host
        assert host.monitor_proc is not None
        stuck = stuck_worker(host)
        worker = host.worker_holders()[host.stuck_gpus[0]]
        await start_cleanup(lv)
        seen: dict[str, list[int]] = {}
        await confirm(lv, "graceful", seen)

        async def spare(screen: ConsentScreen) -> None:
            await untick(lv, screen, stuck)

        await confirm(lv, "process", seen, spare)
        assert seen["process"] == []
        device = await modal(lv, "device")
        assert alive(worker), "the unticked worker survived the process kill"
        assert stuck not in signalled(lv.events())
        assert [r.pid for r in device.preview.targets] == [stuck]
        assert device.ticks == {stuck: True, host.monitor_proc.pid: False}
        await confirm(lv, "device", seen)
        v = await verified(lv)
        events = lv.events()

        assert v.clean
        assert not alive(worker) and alive(host.monitor_proc)
        check_ticks_bound_signals(events, seen)
        assert signalled(events, "process") == set() and signalled(events, "device") == {stuck}
        process = consents(events)["process"]
        assert process.accepted and process.pids == [] and f"unticked {stuck}" in process.note
        results = {e.step: e.status for e in events if isinstance(e, StepResult)}
        assert results["process"] == "skipped" and results["device"] == "done"
        steps = lv.app.query_one(StepTable)
        assert steps.cell_text("process", "ticked") == "0 of 1" and steps.cell_text("device", "ticked") == "1 of 1"


async def test_declined_device_step_leaves_the_holder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker unticked in the process step and the declined device step leave it holding its GPU: it is never
    signalled, it and the monitor live on, and the verification names it as what is left."""
    async with cleanup_app(tmp_path, monkeypatch, SHORT_VERIFY) as lv:
        host = lv.host
        assert host.monitor_proc is not None
        stuck = stuck_worker(host)
        worker = host.worker_holders()[host.stuck_gpus[0]]
        await start_cleanup(lv)
        seen: dict[str, list[int]] = {}
        await confirm(lv, "graceful", seen)

        async def spare(screen: ConsentScreen) -> None:
            await untick(lv, screen, stuck)

        await confirm(lv, "process", seen, spare)
        device = await modal(lv, "device")
        await lv.pilot.press("escape")
        await pilot_until(lv.pilot, lambda: lv.app.screen is not device, "the device modal closed")
        v = await verified(lv)
        events = lv.events()

        assert not v.clean and [h.pid for h in v.holders_left] == [stuck]
        assert alive(worker) and alive(host.monitor_proc)
        assert stuck not in signalled(events)
        assert not consents(events)["device"].accepted
        results = {e.step: e.status for e in events if isinstance(e, StepResult)}
        assert results["device"] == "declined" and results["verify"] == "failed"
        assert results["reset"] == "skipped"  # a holder is left: a reset is not offered
        steps = lv.app.query_one(StepTable)
        assert steps.cell_text("device", "status") == "declined"
        assert "NOT CLEAN" in lv.text("cleanup-verdict") and f"left: pid {stuck}" in lv.text("cleanup-verdict")
        assert "cleanup ended: not clean" in lv.text("cleanup-phase")
        worker_pid = worker.pid
    assert not alive(worker), f"SimHost teardown ends pid {worker_pid}"


async def test_cancel_declines_the_rest_and_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """x in a consent modal cancels the cleanup: no other modal comes up, every step left is recorded as declined by
    the cancel, nothing is signalled, the service lives, and the phase ends not ok saying so."""
    async with cleanup_app(tmp_path, monkeypatch, FAST) as lv:
        host = lv.host
        assert host.service_proc is not None
        service = host.service_proc
        await start_cleanup(lv)
        graceful = await modal(lv, "graceful")
        await lv.pilot.press("x")
        await pilot_until(lv.pilot, lambda: lv.app.screen is not graceful, "the modal closed by the cancel")
        v = await verified(lv)
        events = lv.events()
        runner = lv.app.cleanup.current
        assert runner is not None and runner.cancelled and runner.asked == 1  # no other modal came up

        assert not v.clean and alive(service)
        assert signalled(events) == set()
        given = consents(events)
        assert set(given) == {"graceful", "process", "device"}
        assert all(not c.accepted and c.note == CANCEL_NOTE for c in given.values())
        assert any(isinstance(e, LogLine) and "cancelled by the operator" in e.message for e in events)
        end = [e for e in events if isinstance(e, PhaseEnd)][-1]
        assert not end.ok and "cancelled by the operator" in end.note
        previews = [e.step for e in events if isinstance(e, StepPreview)]
        assert previews == ["graceful", "process", "device"]
        table = lv.app.query_one(StepTable)
        status = dict(zip(table.column_texts("step"), table.column_texts("status"), strict=True))
        assert [status[s] for s in ("graceful", "process", "device")] == ["declined"] * 3
        assert status["others"] == "skipped"  # nothing but the service holds the GPUs: nothing to ask


async def test_setup_dialog_checks_its_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The setup dialog starts nothing until its fields are valid: a bad service or GPU list is said in the dialog,
    escape closes it with no cleanup started, and x with none running says so."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    live = LiveContext(LocalHost(name="box"), "box", default_service="systemd:vllm.service")
    app = ProbedApp(Session(), host_label="box", live=live)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("F")
        await pilot_until(pilot, lambda: isinstance(app.screen, CleanupSetupScreen), "the setup dialog")
        dialog = app.screen
        service = dialog.query_one("#setup-service", Input)
        assert service.value == "systemd:vllm.service"
        service.value = ""
        await pilot.press(*"bogus", "enter")
        assert app.screen is dialog
        assert "expected systemd:UNIT" in str(dialog.query_one("#setup-error").render())
        service.value = "pid:1234"
        dialog.query_one("#setup-gpus", Input).value = "0,x"
        await pilot.press("enter")
        assert app.screen is dialog and "GPU indexes" in str(dialog.query_one("#setup-error").render())
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, CleanupSetupScreen), "the dialog closed")
        assert app.cleanup.current is None
        await pilot.press("x")
        await pilot_until(pilot, lambda: any("no cleanup running" in n for n in app.notices), "the note")


async def test_a_service_that_is_not_there_keeps_the_dialog_open(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The F dialog looks the service up on the host: not there, it says so and stays; none starts a
    cleanup that says it has no service, and frees only what the operator confirms."""
    async with cleanup_app(tmp_path, monkeypatch, SHORT_VERIFY) as lv:
        await lv.pilot.press("F")
        await pilot_until(lv.pilot, lambda: isinstance(lv.app.screen, CleanupSetupScreen), "the setup dialog")
        dialog = lv.app.screen
        service = dialog.query_one("#setup-service", Input)

        def error() -> str:
            return str(dialog.query_one("#setup-error").render())

        for spec, words in (("sim:nosuch", "has no service 'nosuch' (its service is sim:vllm)"),
                            ("pidfile:/nonexistent", "pidfile /nonexistent not found on sim"),
                            ("pid:999999", "pid 999999 on sim: no such process"),
                            ("", "choose the service to stop: ")):
            service.value = spec
            await lv.pilot.press("enter")
            await pilot_until(lv.pilot, lambda w=words: w in error(), f"the error for {spec!r}")
            assert lv.app.screen is dialog and lv.app.cleanup.current is None
        assert "or none" in error()
        assert not [e for e in lv.events() if isinstance(e, (StepPreview, PhaseEnd))]
        service.value = "none"
        await lv.pilot.press("enter")
        await pilot_until(lv.pilot, lambda: lv.app.cleanup.current is not None, "the cleanup worker")
        others = await modal(lv, "others")  # no service: only the others group
        assert len(others.preview.targets) == 2  # the two workers, previewed as not the service
        assert all(r.reason.startswith("on the GPUs, not the service: ") for r in others.preview.targets)
        assert "not the service" in str(others.query_one("#consent-action").render())
        await lv.pilot.press("escape")
        await pilot_until(lv.pilot, lambda: lv.app.screen is not others, "the others modal closed")
        v = await verified(lv)
        events = lv.events()
        graceful = next(e for e in events if isinstance(e, StepPreview) and e.step == "graceful")
        assert graceful.action.startswith("no service (none chosen)") and not graceful.targets
        results = {e.step: e.status for e in events if isinstance(e, StepResult)}
        assert results["graceful"] == "skipped" and results["process"] == "skipped"
        assert results["others"] == "declined" and results["device"] == "skipped"  # not reached without others
        assert not v.clean and not signalled(events)
        assert lv.host.service_proc is not None and alive(lv.host.service_proc)


async def test_replay_only_says_cleanup_needs_a_live_host(tmp_path: Path) -> None:
    """In a replay, F (and the palette's entry) opens no dialog and starts nothing: it says the cleanup needs a live
    host."""
    app = replay_app(write_test_run(tmp_path / "run.jsonl"))
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("F")
        said = lambda: sum("cleanup needs a live host" in n for n in app.notices)  # noqa: E731
        await pilot_until(pilot, lambda: said() == 1, "the note that the cleanup needs a live host")
        assert not isinstance(app.screen, CleanupSetupScreen)
        assert app.cleanup.current is None
        app.action_free_gpus()  # the palette's entry calls the same action: the same note, no dialog
        await pilot_until(pilot, lambda: said() == 2, "the note again")
        assert not isinstance(app.screen, CleanupSetupScreen) and app.cleanup.current is None


async def test_restart_from_the_dashboard_after_a_clean_cleanup(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Free the GPUs, then R: the restart's preview names the service, its start and its health URL; once
    confirmed, the workers are back holding memory and /health answers 200; the panel shows the wait."""
    async with cleanup_app(tmp_path, monkeypatch, deadlines=FAST) as lv:
        host = lv.host
        old = set(host.worker_holders().values())
        await start_cleanup(lv)
        seen: dict[str, list[int]] = {}
        await confirm(lv, "graceful", seen)
        await confirm(lv, "process", seen)
        v = await verified(lv)
        assert v.clean and not host.worker_holders() and await host.health() is None

        await lv.pilot.press("R")
        screen = await modal(lv, "restart")
        action = screen.preview.action
        assert action.startswith("sim vllm: start the simulated vllm service")
        assert f"{host.api_url}/health" in action and screen.preview.targets == []
        await lv.pilot.press("enter")

        def restarted() -> bool:
            runner = lv.app.cleanup.current
            return runner is not None and runner.request.service_spec == "sim:vllm" and runner.finished \
                and runner.note.startswith(("done", "failed", "skipped", "declined", "error"))

        await pilot_until(lv.pilot, restarted, "the restart")
        assert await host.health() == 200
        workers = host.worker_holders()
        assert len(workers) == 2 and not set(workers.values()) & old
        assert all(alive(w) for w in workers.values())
        await pilot_until(lv.pilot, lambda: all((g.mem_used_mib or 0) > 1000 for g in lv.session.state.gpus.values()),
                       "the workers' memory in the telemetry")
        events = lv.events()
        res = [e for e in events if isinstance(e, StepResult) and e.step == "restart"]
        assert len(res) == 1 and res[0].status == "done" and "/health answered" in res[0].reason
        assert [c.accepted for c in consents(events).values() if c.step == "restart"] == [True]
        end = [e for e in events if isinstance(e, PhaseEnd) and e.phase == "restart"]
        assert len(end) == 1 and end[0].ok
        steps = lv.app.query_one(StepTable)
        await pilot_until(lv.pilot, lambda: "restart" in steps.column_texts("step")
                       and steps.cell_text("restart", "status") == "done", "the restart row on the panel")
        assert "/health answered" in lv.app.query_one(CleanupView).notes["restart"]
        # one duration: the reason names none; the tab, the fold and the events agree
        assert res[0].reason == f"{host.api_url}/health answered 200"
        consent = next(e for e in events if isinstance(e, Consent) and e.step == "restart")
        step = lv.session.state.cleanup.steps["restart"]  # type: ignore[union-attr]
        assert step.elapsed_s is not None and abs(step.elapsed_s - (res[0].t - consent.t)) < 1e-9
        assert steps.cell_text("restart", "elapsed") == f"{step.elapsed_s:.2f} s"
        audit = read_audit(tmp_path / "data" / "kimitui" / "audit.log")
        assert any(r["event"] == "consent" and r.get("step") == "restart" for r in audit)


async def test_restart_of_a_running_service_says_so_before_asking(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """R while the service runs: the preview says up front that it is already running; declined, nothing
    is started and the service is as it was."""
    async with cleanup_app(tmp_path, monkeypatch, deadlines=FAST) as lv:
        before = set(lv.host.worker_holders().values())
        await lv.pilot.press("R")
        screen = await modal(lv, "restart")
        # judged by its health endpoint (a live main pid whose workers died would answer 503: not running)
        assert screen.preview.action.startswith(f"already running: sim vllm is up ({lv.host.api_url}/health "
                                                "answers 200)")
        title = str(screen.query_one("#consent-title").render())
        assert "ALREADY RUNNING" in title
        assert not screen.query("#consent-targets") and "SimHost" not in screen.preview.action
        await lv.pilot.press("escape")
        runner = lv.app.cleanup.current
        await pilot_until(lv.pilot, lambda: runner is not None and runner.finished, "the restart to end")
        res = [e for e in lv.events() if isinstance(e, StepResult) and e.step == "restart"]
        assert [r.status for r in res] == ["declined"]
        assert set(lv.host.worker_holders().values()) == before
