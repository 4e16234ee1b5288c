"""Each signal is paired with its outcome once, in the fold (``StepState.signals``: SignalRecord), and the
Cleanup tab, the report and the cleanup CLI read that pairing, in describe's words (``signal_status``)."""

from __future__ import annotations

from pathlib import Path

from kimitui.commands.cleanup import text_line
from kimitui.core.describe import signal_status
from kimitui.core.events import (
    CleanupPlan,
    Consent,
    Event,
    PhaseStart,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
)
from kimitui.core.runfile import RunReader, write_run
from kimitui.core.state import SessionState, fold, fold_all
from kimitui.report.markdown import render_report
from kimitui.tui.views.cleanup_view import signals_content

T = 1_700_000_000.0


def escalation() -> list[Event]:
    """A pid service's graceful stop (SIGTERM to its main pid, answered by the stop's wait), then a process
    kill of a stuck worker: SIGTERM (survived), then SIGKILL, whose outcome is not in yet; and a refused pid."""
    return [
        PhaseStart(T, phase="cleanup"),
        CleanupPlan(T + 0.01, service="vllm", manager="pid", gpus=[0], steps=["graceful", "process", "verify"]),
        StepPreview(T + 0.02, step="graceful", action="SIGTERM main pid 100 of vllm"),
        Consent(T + 0.03, step="graceful", accepted=True, operator="op", pids=[100, 101]),
        SignalSent(T + 0.04, step="graceful", pid=100, start_time=5000, signal="SIGTERM", cmdline="vllm serve"),
        SignalOutcome(T + 0.10, step="graceful", pid=101, start_time=5001, signal="stop", outcome="exited",
                      elapsed_s=0.06),  # a worker of the service: no signal of ours, the stop's wait
        SignalOutcome(T + 0.12, step="graceful", pid=100, start_time=5000, signal="stop", outcome="exited",
                      elapsed_s=0.08),
        StepResult(T + 0.13, step="graceful", status="done", elapsed_s=0.1),
        StepPreview(T + 0.20, step="process", action="SIGTERM, SIGKILL after 2s"),
        Consent(T + 0.21, step="process", accepted=True, operator="op", pids=[200]),
        SignalSent(T + 0.22, step="process", pid=300, start_time=7000, signal="-", outcome="refused",
                   detail="another user's process"),
        SignalSent(T + 0.23, step="process", pid=200, start_time=6000, signal="SIGTERM", cmdline="worker 0"),
        SignalOutcome(T + 2.23, step="process", pid=200, start_time=6000, signal="SIGTERM", outcome="survived",
                      elapsed_s=2.0, state="S"),
        SignalSent(T + 2.24, step="process", pid=200, start_time=6000, signal="SIGKILL", cmdline="worker 0"),
    ]


def pairs(state: SessionState, step: str) -> list[tuple[int, str, str, str | None]]:
    cleanup = state.cleanup
    assert cleanup is not None
    return [(r.sent.pid, r.sent.signal, r.sent.outcome, r.outcome.outcome if r.outcome else None)
            for r in cleanup.steps[step].signals]


def test_the_fold_pairs_each_signal_with_its_own_outcome() -> None:
    """Each signal is paired with its own outcome once: a SIGKILL's outcome pairs with the SIGKILL, never with the
    SIGTERM already answered; a refused signal has none; an outcome with no signal of ours (the stop's wait on a
    worker) is kept apart."""
    state = fold_all(escalation())
    assert pairs(state, "graceful") == [(100, "SIGTERM", "sent", "exited")]  # the stop's wait answers it
    assert pairs(state, "process") == [(300, "-", "refused", None), (200, "SIGTERM", "sent", "survived"),
                                       (200, "SIGKILL", "sent", None)]
    assert state.cleanup is not None
    graceful, process = state.cleanup.steps["graceful"], state.cleanup.steps["process"]
    assert len(graceful.outcomes) == 2  # the worker's outcome is kept, with no signal to pair it with
    assert [signal_status(r) for r in process.signals] == [
        "refused: another user's process", "survived after 2.00 s (state S)", "sent, waiting"]
    assert [r.waiting for r in process.signals] == [False, False, True]
    assert state.cleanup.signalled == [100, 200]
    # the SIGKILL's outcome comes in: it is the SIGKILL's, not the SIGTERM's (already answered)
    fold(state, SignalOutcome(T + 2.30, step="process", pid=200, start_time=6000, signal="SIGKILL",
                              outcome="exited", elapsed_s=0.06))
    assert pairs(state, "process")[1:] == [(200, "SIGTERM", "sent", "survived"), (200, "SIGKILL", "sent", "exited")]


def test_an_outcome_of_another_process_or_start_pairs_with_nothing() -> None:
    """An outcome for the same pid with another start time (a reused pid, not our process) pairs with nothing: the
    signal stays waiting."""
    events = escalation()
    events.append(SignalOutcome(T + 2.30, step="process", pid=200, start_time=6001, signal="SIGKILL",
                                outcome="exited", elapsed_s=0.06))  # pid 200 reused: not our process
    state = fold_all(events)
    assert pairs(state, "process")[-1] == (200, "SIGKILL", "sent", None)


def test_the_tab_the_report_and_the_cli_say_the_folds_pairing(tmp_path: Path) -> None:
    """The Cleanup tab, the report and the cleanup CLI say the fold's pairing in the same words, signal by signal."""
    events = escalation()
    state = fold_all(events)
    assert state.cleanup is not None
    records = [r for step in state.cleanup.steps.values() for r in step.signals]
    words = [signal_status(r) for r in records]
    assert words == ["exited after 0.08 s", "refused: another user's process", "survived after 2.00 s (state S)",
                     "sent, waiting"]

    tab = signals_content(state.cleanup).plain.splitlines()
    assert tab[0] == "signals (4)"
    assert tab[1:] == [f"  {step:<9}{r.sent.signal:<8}pid {r.sent.pid:<8}{w}" for step, r, w in
                       zip(["graceful", "process", "process", "process"], records, words, strict=True)]

    report = render_report(RunReader(write_run(tmp_path / "run.jsonl", events)))
    section = report[report.index("### Signals"): report.index("### Verification")]
    rows = [line for line in section.splitlines() if line.startswith("| +")]
    assert [row.rstrip(" |").rsplit(" | ", 1)[1] for row in rows] == words
    assert [row.split(" | ")[2:4] for row in rows] == [["SIGTERM", "100"], ["-", "300"], ["SIGTERM", "200"],
                                                        ["SIGKILL", "200"]]

    # the cleanup CLI: each event in describe's words, the pids reached from the fold's records
    cli = [text_line(ev, T, state) for ev in events if isinstance(ev, SignalSent | SignalOutcome)]
    assert "[  2.230s] process: pid 200 survived 2.00s after SIGTERM (state S)" in cli
    assert state.cleanup.signalled == [100, 200]
