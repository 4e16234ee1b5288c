from __future__ import annotations

from pathlib import Path

from kimitui.core.events import (
    Consent,
    GpuSample,
    HostSample,
    LogLine,
    PhaseEnd,
    PhaseStart,
)
from kimitui.core.replay import Player, state_at
from kimitui.core.runfile import RunReader, write_run
from kimitui.core.session import Session
from kimitui.core.state import HISTORY_POINTS, SessionState, fold, fold_all
from tests.support import campaign, comparable


def test_fold_builds_dashboard_state() -> None:
    """Folding a run builds what the dashboard shows: GPUs, processes, memory history, phases, the cleanup's steps and
    signals and verdict, the sweep's points and the log."""
    state = fold_all(campaign())
    assert len(state.gpus) == 8 and state.gpus[3].mem_used_mib == 3.0
    assert state.procs == []
    assert len(state.mem_history[0]) == HISTORY_POINTS
    assert [p.phase for p in state.phases] == ["macro", "cleanup"]
    assert all(p.end is not None for p in state.phases) and state.phase is None
    cleanup = state.cleanup
    assert cleanup is not None and cleanup.verification is not None and cleanup.verification.clean
    assert cleanup.steps["graceful"].status == "done" and cleanup.steps["verify"].status == "pending"
    assert cleanup.steps["graceful"].signals[0].sent.pid == 100
    assert state.single_stream_tok_s() == 50.0
    assert [p.concurrency for p in state.macro_points] == [1, 128]
    assert any("verify: CLEAN" in entry.message for entry in state.log)


def test_fold_is_deterministic() -> None:
    """The same events fold to the same state, every time."""
    assert comparable(fold_all(campaign())) == comparable(fold_all(campaign()))


def test_seek_equals_folding_from_start(tmp_path: Path) -> None:
    """Seeking to any position of a recorded run gives the state folding its events from the start gives (replay equals
    live)."""
    events = campaign()
    reader = RunReader(write_run(tmp_path / "run.jsonl", events))
    for position in (0, 1, 15, 120, 299, 305, 310, len(events) - 1, len(events)):
        expected = fold_all(events[:position])
        got = state_at(reader, position)
        assert comparable(got) == comparable(expected), position
        assert got.events_folded == position


def test_seek_equals_folding_when_readings_fail(tmp_path: Path) -> None:
    """A GPU whose memory could not be read leaves a gap in its history, not a missing point: a seek (the
    last samples only) and a fold from the start keep the same points, and every GPU's history stays on
    the samples' one time axis (the phase marks are drawn on it)."""
    events = campaign(samples=HISTORY_POINTS + 50)
    samples = [i for i, e in enumerate(events) if isinstance(e, HostSample)]
    for i in samples[-20:]:  # the newest 20 samples read no memory on GPU 1
        ev = events[i]
        events[i] = HostSample(t=ev.t, host=ev.host, seq=ev.seq, procs=ev.procs, gpus=[
            GpuSample(g.index, g.uuid, g.name, mem_used_mib=None if g.index == 1 else g.mem_used_mib,
                      mem_total_mib=g.mem_total_mib) for g in ev.gpus])
    reader = RunReader(write_run(tmp_path / "run.jsonl", events))
    expected = fold_all(events)
    got = state_at(reader, len(events))
    assert comparable(got) == comparable(expected)
    assert len(expected.mem_history[1]) == len(expected.mem_history[0]) == HISTORY_POINTS
    assert [t for t, _ in expected.mem_history[1]] == [t for t, _ in expected.mem_history[0]]
    assert [m for _, m in expected.mem_history[1]][-20:] == [None] * 20


def test_player_paces_by_recorded_time(tmp_path: Path) -> None:
    """The player plays the run at its recorded pace on its own clock, faster at a higher speed, within the speeds it
    allows."""
    events = campaign()
    reader = RunReader(write_run(tmp_path / "run.jsonl", events))
    now = [0.0]
    player = Player(reader, clock=lambda: now[0])
    player.advance()  # starts the clock
    assert player.position == 0
    now[0] = 1.0
    player.advance()
    # 1 s of run time at 1x: samples at 0, .25, .5, .75, 1.0 and the log line at .001
    assert player.position == 6
    player.set_speed(64)
    now[0] = 2.0
    player.advance()
    assert reader.times[player.position - 1] <= reader.start_time + 65.0 < reader.times[player.position]
    assert player.set_speed(1000) == 64 and player.set_speed(0.01) == 0.5


def test_player_pause_step_and_phase_jumps(tmp_path: Path) -> None:
    """Paused, the player moves only when told: a step publishes the next event, the phase jumps land on phase
    boundaries both ways, and playing to the end leaves the state folding every event gives."""
    events = campaign()
    reader = RunReader(write_run(tmp_path / "run.jsonl", events))
    now = [0.0]
    session = Session()
    seen: list = []
    session.subscribe(seen.append)
    player = Player(reader, session=session, clock=lambda: now[0])
    player.advance()
    assert player.toggle_pause() is True
    now[0] = 100.0
    assert player.advance() == 0 and player.position == 0
    assert player.step() == 1 and player.position == 1 and seen == [events[0]]

    assert player.next_phase()
    assert reader.types[player.position - 1] == "phase_start"
    assert session.state.phase is not None and session.state.phase.phase == "macro"
    assert player.next_phase() and session.state.phase is None  # past macro's end
    assert player.next_phase() and session.state.phase.phase == "cleanup"
    assert player.prev_phase() and session.state.phase is None and len(session.state.phases) == 1
    player.to_end()
    assert player.finished and not player.next_phase()
    assert comparable(session.state) == comparable(fold_all(events))
    player.seek_index(0)
    assert session.state.events_folded == 0 and not session.state.gpus


def test_live_session_records_and_replays_identically(tmp_path: Path) -> None:
    """A live session's recording replays to the state the live session had."""
    from kimitui.core.runfile import RunWriter

    path = tmp_path / "live.jsonl"
    session = Session(RunWriter(path, host="sim"))
    for ev in campaign(40):
        session.publish(ev)
    session.close()
    reader = RunReader(path)
    replayed = Player(reader)
    replayed.to_end()
    assert comparable(replayed.session.state) == comparable(session.state)


def test_fold_tolerates_cleanup_events_without_plan() -> None:
    """A cleanup event with no plan before it (a run cut short, an older run) is logged, not a crash."""
    state = SessionState()
    fold(state, Consent(t=1.0, step="graceful", accepted=False))
    assert state.cleanup is None and "declined" in state.log[-1].message


def test_boundaries_at_one_instant_are_one_jump(tmp_path: Path) -> None:
    """A phase end and the next start recorded at the same time: jumping lands past both, and playing on
    from there publishes nothing of the boundary again."""
    events = [
        LogLine(t=1.0, message="before"),
        PhaseStart(t=2.0, phase="macro"),
        LogLine(t=3.0, message="in macro"),
        PhaseEnd(t=4.0, phase="macro"),
        PhaseStart(t=4.0, phase="cleanup"),
        LogLine(t=5.0, message="in cleanup"),
    ]
    reader = RunReader(write_run(tmp_path / "run.jsonl", events))
    now = [0.0]
    player = Player(reader, clock=lambda: now[0])
    assert player.next_phase() and player.position == 2
    assert player.next_phase() and player.position == 5
    assert player.session.state.phase is not None and player.session.state.phase.phase == "cleanup"
    assert player.prev_phase() and player.position == 2
    player.advance()
    now[0] = 0.5  # half a second of run time: nothing is due before t=2.5
    assert player.advance() == 0
    assert player.session.state.phase.phase == "macro"
    assert not player.prev_phase() or player.position == 0
