"""Issue 36 item 2: the fold says what a sample changed (``core/changes.py``): the revision at which each GPU and
each process last read differently, the process list's, and the latest other event's; a state folded afresh (a
replay's seek) never repeats a revision a table drew at."""

from __future__ import annotations

from dataclasses import replace

from kimitui.core.events import GpuSample, HostSample, LogLine, ProcSample
from kimitui.core.state import SessionState, fold

GPU = GpuSample(index=0, uuid="GPU-0", name="H200", mem_used_mib=10.0, mem_total_mib=143771.0, util_pct=0.0)
P1 = ProcSample(pid=100, start_time=7, gpu_mem_mib={0: 10.0}, kind="cuda", cmdline="python3 -m vllm")
P2 = ProcSample(pid=200, start_time=9, gpu_mem_mib={1: 10.0}, kind="cuda", cmdline="python3 bench.py")


def _sample(state: SessionState, seq: int, gpus: list[GpuSample], procs: list[ProcSample]) -> None:
    fold(state, HostSample(float(seq), seq=seq, gpus=gpus, procs=procs))


def test_a_gpu_or_process_keeps_its_revision_until_it_reads_differently() -> None:
    state = SessionState()
    g1 = replace(GPU, index=1)
    _sample(state, 1, [GPU, g1], [P1, P2])
    first = state.changes
    assert first.gpu == {0: first.rev, 1: first.rev} and first.procs == first.rev
    assert first.proc == {(100, 7): first.rev, (200, 9): first.rev}

    _sample(state, 2, [replace(GPU), replace(g1, util_pct=55.0)], [replace(P1), replace(P2)])  # new objects
    second = state.changes
    assert second.rev > first.rev and second.gpu == {0: first.rev, 1: second.rev}
    assert second.proc == first.proc and second.procs == first.procs  # the same processes, read the same

    reused = replace(P2, start_time=11)  # pid 200 again, another process
    _sample(state, 3, [GPU, g1], [P1, reused])
    third = state.changes
    assert third.proc == {(100, 7): first.rev, (200, 11): third.rev} and third.procs == third.rev
    _sample(state, 4, [GPU, g1], [P1])  # one went: the list changed, the one left did not
    assert state.changes.procs == state.changes.rev and state.changes.proc == {(100, 7): first.rev}


def test_other_events_move_their_own_revision_and_a_fresh_state_never_repeats_one() -> None:
    a = SessionState()
    _sample(a, 1, [GPU], [P1])
    assert a.events_rev == 0
    fold(a, LogLine(2.0, "info", "test", "hello"))
    logged = a.events_rev
    _sample(a, 3, [replace(GPU, util_pct=9.0)], [P1])
    assert a.events_rev == logged  # a sample moves the sample's revisions only
    b = SessionState()  # the same events folded again (a seek)
    _sample(b, 1, [GPU], [P1])
    fold(b, LogLine(2.0, "info", "test", "hello"))
    assert b.events_rev > logged and b.changes.gpu[0] > a.changes.gpu[0]
