"""What dies along with a target, with real processes (issue 32): the kernel ends more than the cleanup signals.

- A session leader with a controlling terminal (screen -dm, tmux new -d): a helper it double-forked without
  setsid is in the terminal's foreground group and dies of the SIGHUP when the leader ends.
- A group's last link to its session (a service's main): when it ends while a member of its group is stopped,
  the group is orphaned and the kernel sends every member SIGHUP then SIGCONT; a helper it double-forked dies.
- The init of a PID namespace (a container's PID 1): a process entered from outside (nsenter) dies of the
  SIGKILL when the namespace ends; and a SIGTERM the init has no handler for is dropped by the kernel.
- A worker that execs into a host daemon between the SIGTERM and the SIGKILL (same pid, same start time).
- A live process whose main thread exited (pthread_exit): /proc reads it as a zombie, yet it runs and holds.
- Memory whose owner died: a holder SIGKILLed while the children it forked keep its device files open.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from kimitui.cleanup import ConsentDecision, PidService
from kimitui.core.events import StepPreview
from kimitui.hostside import fate
from kimitui.hostside.procfs import read_stat
from tests.cleanup_rig import SHORT_VERIFY, Rig, results, sample_where
from tests.cleanup_support import SimDir, alive, start_time

SIM_GPUS = 2


async def as_previewed(preview: StepPreview) -> ConsentDecision:
    return ConsentDecision(True, None, "tester", "as previewed")


def ticking(*pids: int) -> object:
    """Accept each preview with its targets and these pids ticked in."""

    async def decide(preview: StepPreview) -> ConsentDecision:
        shown = {r.pid for r in preview.spared}
        return ConsentDecision(True, [r.pid for r in preview.targets] + [p for p in pids if p in shown], "tester")

    return decide


def ready_text(sim: SimDir, name: str) -> str:
    path = sim.path / "ready" / name
    sim.wait(lambda: path.exists() and path.read_text(), what=name)
    return path.read_text()


def start_in_tty(sim: SimDir, gpu: int, mib: float) -> tuple[int, int]:
    """(main, helper): a worker leading a session with a pty as its controlling terminal (as under screen -dm),
    and the helper it double-forked without setsid."""
    tty = sim.spawn("tty", "hup_main", str(gpu), str(mib))
    main = int(ready_text(sim, f"tty-{tty.pid}"))
    helper = int(ready_text(sim, f"helper-{main}"))
    sim.wait(lambda: (sim.path / "ready" / str(main)).exists() and main in sim.holder_pids(), what="the tty main")
    return main, helper


def previews(rig: Rig, step: str) -> list[StepPreview]:
    return [p for p in rig.of(StepPreview) if p.step == step]


def sent(rig: Rig, pid: int) -> list[str]:
    return [s.signal for s in rig.signals(pid) if s.outcome == "sent"]


async def test_a_terminal_leaders_helper_is_previewed_and_the_leader_refused_unless_it_is_ticked(
        rig: Rig, sim: SimDir) -> None:
    """The leader's SIGTERM would hang its terminal up and kill the helper (no descendant, never signalled by
    us): every step lists the helper as "dies with pid M (terminal hangup)" and refuses the leader, one line
    saying how to go on, while the helper is not ticked. Nothing dies."""
    main, helper = start_in_tty(sim, 0, 9_000)
    st = read_stat(main)
    assert st is not None and st.session == main and st.tty_nr != 0 and st.tpgid == main
    assert read_stat(helper).pgrp == main and read_stat(helper).ppid != main  # re-parented away
    assert [(c.pid, c.why) for c in fate.fate_now(main)] == [(helper, fate.HANGUP)]
    await rig.settled({main})
    await rig.executor(as_previewed, PidService(pid=main), deadlines=SHORT_VERIFY).run()

    assert alive(main) and alive(helper)
    graceful = previews(rig, "graceful")[0]
    row = next(r for r in graceful.spared if r.pid == helper)
    assert row.dies_with == main and f"dies with pid {main} (terminal hangup)" in row.reason
    assert row.start_time == start_time(helper)
    refused = [s for s in rig.signals(main) if s.outcome == "refused"]
    assert refused and not sent(rig, main)
    assert all(f"would take pid {helper}" in s.detail and "terminal hangup" in s.detail and "tick it" in s.detail
               for s in refused), refused
    assert results(rig)["graceful"].status == "failed" and f"would take pid {helper}" in results(rig)["graceful"].reason
    assert not rig.signals(helper) or all(s.outcome != "sent" for s in rig.signals(helper))


async def test_ticking_the_terminal_helper_lets_the_leader_go_and_both_end(rig: Rig, sim: SimDir) -> None:
    main, helper = start_in_tty(sim, 0, 9_000)
    await rig.settled({main})
    report = await rig.executor(ticking(helper), PidService(pid=main)).run()
    assert report.clean
    assert not alive(main) and not alive(helper)
    assert sent(rig, main) == ["SIGTERM"]
    # the agent was told what may die with it: the helper, ticked; it died of the hangup, no signal of ours
    assert sent(rig, helper) == []


def start_orphan_main(sim: SimDir, gpu: int, mib: float) -> tuple[int, int, int]:
    """(main, stopped, helper): a worker leading a process group in a session whose leader stays (the group's
    link), with a child it stopped and a sleeper it double-forked without setsid (re-parented away)."""
    wrapper = sim.spawn("session", "orphan_main", str(gpu), str(mib))
    main = int(ready_text(sim, f"session-{wrapper.pid}"))
    stopped = int(ready_text(sim, f"stopped-{main}"))
    helper = int(ready_text(sim, f"helper-{main}"))
    sim.wait(lambda: (sim.path / "ready" / str(main)).exists() and main in sim.holder_pids(), what="the group's main")
    return main, stopped, helper


async def test_a_group_orphaned_with_a_stopped_member_is_previewed_and_its_link_refused_unless_ticked(
        rig: Rig, sim: SimDir) -> None:
    """The main's SIGTERM would orphan its process group while its child is stopped: the kernel would send the
    group SIGHUP and SIGCONT, and kill the helper it double-forked (no descendant, never signalled by us). Every
    step that would signal the main while that holds lists the helper as "dies with pid M (its process group is
    orphaned ...)" and refuses the main, one line saying how to go on. The helper lives through the cleanup."""
    main, stopped, helper = start_orphan_main(sim, 0, 9_000)
    st, hst = read_stat(main), read_stat(helper)
    assert st.pgrp == main and st.session != main and hst.pgrp == main and hst.ppid != main
    assert read_stat(stopped).state == "T"
    assert sorted((c.pid, c.why, c.via) for c in fate.fate_now(main)) == sorted(
        [(stopped, fate.ORPHANED, main), (helper, fate.ORPHANED, main)])
    await rig.settled({main})
    await rig.executor(as_previewed, PidService(pid=main), deadlines=SHORT_VERIFY).run()

    assert alive(helper)
    assert not rig.signals(helper) or all(s.outcome != "sent" for s in rig.signals(helper))
    graceful = previews(rig, "graceful")[0]
    row = next(r for r in graceful.spared if r.pid == helper)
    assert row.dies_with == main and f"dies with pid {main} ({fate.ORPHANED})" in row.reason
    assert row.start_time == start_time(helper) and "not the service's" in row.reason
    first = rig.signals(main)[0]
    assert first.outcome == "refused" and f"would take pid {helper}" in first.detail and "tick it" in first.detail


async def test_ticking_the_orphaned_groups_helper_lets_the_main_go_and_the_group_ends(rig: Rig, sim: SimDir) -> None:
    """Ticked, the helper is consented: the main's SIGTERM goes; the kernel's SIGHUP ends the helper and the
    stopped child (SIGCONT wakes it to it), no signal of ours to either."""
    main, stopped, helper = start_orphan_main(sim, 0, 9_000)
    await rig.settled({main})
    report = await rig.executor(ticking(helper), PidService(pid=main)).run()
    assert report.clean
    assert not alive(main) and not alive(helper) and not alive(stopped)
    assert sent(rig, main) == ["SIGTERM"]
    assert sent(rig, helper) == [] and sent(rig, stopped) == []


def start_ns_init(sim: SimDir, gpu: int, mib: float) -> tuple[subprocess.Popen[bytes], int]:
    """A worker that is PID 1 of a PID namespace of its own (unshare --pid --fork), as a container's is."""
    import sys

    from tests.cleanup_support import HERE

    before = sim.holder_pids()
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--", sys.executable, str(HERE), "worker", str(sim.path),
                             str(gpu), str(mib), "0"], stdin=subprocess.DEVNULL)
    sim.children.append(proc)
    sim.wait(lambda: len(sim.holder_pids() - before) == 1, what="the namespace's init")
    (init,) = sim.holder_pids() - before
    return proc, init


def enter_ns(sim: SimDir, init: int) -> int:
    """A sleeper entered into INIT's PID namespace from outside (nsenter): in it, no descendant of it."""
    import sys

    from tests.cleanup_support import HERE

    proc = subprocess.Popen(["nsenter", "-t", str(init), "--pid", "--", sys.executable, str(HERE), "sleeper",
                             str(sim.path)], stdin=subprocess.DEVNULL)
    sim.children.append(proc)

    def guest() -> int | None:
        try:
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        except OSError:
            return None
        return int(kids[0]) if kids and (sim.path / "spawned" / kids[0]).exists() else None

    return int(sim.wait(guest, what="the entered process"))  # type: ignore[arg-type]


async def test_a_namespace_init_is_refused_while_an_entered_process_would_die_with_it(rig: Rig, sim: SimDir) -> None:
    _unshare, init = start_ns_init(sim, 1, 7_000)
    guest = enter_ns(sim, init)
    assert read_stat(guest).ppid != init
    assert [(c.pid, c.why) for c in fate.fate_now(init)] == [(guest, fate.PIDNS)]
    await rig.settled({init})
    await rig.executor(as_previewed, PidService(pid=init), deadlines=SHORT_VERIFY).run()
    assert alive(init) and alive(guest)
    row = next(r for r in previews(rig, "graceful")[0].spared if r.pid == guest)
    assert row.dies_with == init and "its PID namespace ends" in row.reason
    assert not sent(rig, init)
    assert all("would take pid" in s.detail for s in rig.signals(init) if s.outcome == "refused")


async def test_a_namespace_inits_unhandled_sigterm_is_said_to_be_ignored_then_sigkill_ends_it(
        rig: Rig, sim: SimDir) -> None:
    """No process entered: nothing dies with it. The SIGTERM is sent, and said to be dropped by the kernel (the
    init has no handler); the process step's SIGKILL ends it."""
    _unshare, init = start_ns_init(sim, 1, 7_000)
    await rig.settled({init})
    report = await rig.executor(as_previewed, PidService(pid=init)).run()
    assert report.clean and not alive(init)
    term = next(s for s in rig.signals(init) if s.signal == "SIGTERM")
    assert term.outcome == "sent" and term.detail.startswith("ignored:") and "init of its own PID namespace" in \
        term.detail, term
    assert "SIGKILL" in sent(rig, init)


async def test_a_worker_that_execs_into_a_host_daemon_after_sigterm_gets_no_sigkill(
        rig: Rig, sim: SimDir, tmp_path: Path) -> None:
    """Same pid, same start time: the identity check lets it through; the agent's last look, right before the
    SIGKILL, finds the executable is nvidia-persistenced now and refuses."""
    exe = tmp_path / "root" / "usr" / "bin" / "nvidia-persistenced"
    exe.parent.mkdir(parents=True)
    shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
    worker = sim.start_ready("exec_daemon", "0", "5000", str(exe))
    born = start_time(worker)
    await rig.settled({worker})
    await rig.executor(as_previewed, deadlines=SHORT_VERIFY).run()
    assert alive(worker) and start_time(worker) == born and os.readlink(f"/proc/{worker}/exe") == str(exe)
    signals = rig.signals(worker)
    assert [s.signal for s in signals if s.outcome == "sent"] == ["SIGTERM"]
    kill = next(s for s in signals if s.signal == "SIGKILL")
    assert kill.outcome == "refused" and "the host's own daemon" in kill.detail and "right before" in kill.detail
    assert "not signalled: pid" in results(rig)["others"].reason


async def test_a_process_whose_main_thread_exited_is_seen_alive_and_cleaned(rig: Rig, sim: SimDir) -> None:
    holder = sim.start_ready("leader_exit", "1", "3000")

    def raw_state() -> str:
        return Path(f"/proc/{holder}/stat").read_text().rpartition(")")[2].split()[0]

    sim.wait(lambda: (st := read_stat(holder)) is not None and st.task != 0 and raw_state() == "Z",
             what="the main thread to exit")  # Z: what /proc says of the leader
    sample = await sample_where(rig.feed, lambda s: any(p.pid == holder and p.kind == "cuda" for p in s.procs),
                                "the holder seen as a CUDA context")
    seen = next(p for p in sample.procs if p.pid == holder)
    assert seen.state != "Z" and seen.cmdline and seen.exe
    report = await rig.executor(as_previewed, PidService(pid=holder)).run()
    assert report.clean and not alive(holder)
    assert sent(rig, holder) == ["SIGTERM"]
    assert results(rig)["graceful"].status == "done"


async def test_memory_of_an_exited_owner_is_shown_held_by_its_children_and_freed_with_them(
        rig: Rig, sim: SimDir) -> None:
    owner = sim.start_ready("orphaner", "1", "6754")
    kids = [int(k) for k in ready_text(sim, str(owner)).split()]
    await rig.settled({owner, *kids})  # the agent saw whose children they are
    os.kill(owner, signal.SIGKILL)  # left unreaped a while (a zombie holds no files either)
    sim.wait(lambda: not alive(owner), what="the owner to die")

    def kept(s: object) -> bool:
        procs = {p.pid: p for p in s.procs}  # type: ignore[attr-defined]
        return owner in procs and procs[owner].kind == "exited" and sorted(procs[owner].held_by) == sorted(kids)

    zombie = await sample_where(rig.feed, kept, "the exited (unreaped) owner held by its children")
    assert {p.pid: p for p in zombie.procs}[owner].state == "Z"
    next(c for c in sim.children if c.pid == owner).wait()  # reaped: its pid is gone from /proc
    sample = await sample_where(rig.feed, lambda s: kept(s) and not {p.pid: p for p in s.procs}[owner].visible,
                                "the exited (reaped) owner held by its children")
    procs = {p.pid: p for p in sample.procs}
    assert procs[owner].gpu_mem_mib == {1: 6754.0}
    assert all(procs[k].inherits == [owner] for k in kids)
    report = await rig.executor(as_previewed).run()
    others = previews(rig, "others")[0]
    assert sorted(t.pid for t in others.targets) == sorted(kids)
    assert all(f"holds 6,754 MiB of exited pid {owner} through inherited descriptors" in t.reason
               for t in others.targets)
    row = next(r for r in others.spared if r.pid == owner)
    assert row.kind == "exited" and f"kept by pid {', '.join(map(str, sorted(kids)))}" in row.reason
    assert "not visible" not in row.reason
    assert report.clean and not any(alive(k) for k in kids)
    assert not rig.signals(owner)


def test_fate_of_rows_follows_hangups_and_namespaces_and_leaves_sighup_ignorers() -> None:
    """The pure part: what ends with a leader of a terminal, what with a namespace init, in turn."""
    rows = {
        10: fate.Row(10, 1, "S", 10, 10, 34816, 10, (10,), 0, 1),      # leads pts/0, its own group in front
        11: fate.Row(11, 1, "S", 10, 10, 34816, 10, (11,), 0, 1),      # in the foreground group
        12: fate.Row(12, 1, "S", 10, 10, 34816, 10, (12,), 1, 1),      # ignores SIGHUP (nohup)
        13: fate.Row(13, 1, "S", 13, 10, 34816, 10, (13,), 0, 1),      # a background group: no hangup
        20: fate.Row(20, 1, "S", 20, 20, 0, -1, (20, 1), 0, 2),        # init of namespace 2
        21: fate.Row(21, 1, "S", 21, 11, 0, -1, (21, 5), 0, 2),        # entered into it
        22: fate.Row(22, 1, "Z", 20, 20, 0, -1, (22, 6), 0, 2),        # a zombie: nothing to end
    }
    got = fate.fate(10, rows, {2: {2}})
    assert [(c.pid, c.why, c.ignores) for c in got] == [(11, fate.HANGUP, False), (12, fate.HANGUP, True)]
    assert [(c.pid, c.why, c.via) for c in fate.fate(20, rows, {2: {2}})] == [(21, fate.PIDNS, 20)]
    assert fate.fate(11, rows, {2: {2}}) == []  # not a session leader
    rows[21] = rows[21]._replace(session=21, pgrp=21, tty_nr=34817, tpgid=21)  # leads a terminal of its own
    rows[23] = fate.Row(23, 1, "S", 21, 21, 34817, 21, (23,), 0, 1)
    assert [(c.pid, c.via) for c in fate.fate(20, rows, {2: {2}})] == [(21, 20), (23, 21)]  # in turn


def test_fate_of_rows_follows_orphaned_groups_with_a_stopped_member() -> None:
    """kill_orphaned_pgrp: a dying process orphans its own group (it was the group's only link to its session)
    or a child's group in its session (re-parented away); only a group with a stopped member is signalled, and
    a member whose parent links the group to the session outside it keeps it from being orphaned."""
    def row(pid: int, pgrp: int, ppid: int, state: str = "S", sid: int = 5, ign: int = 0) -> fate.Row:
        return fate.Row(pid, 1, state, pgrp, sid, 0, -1, (pid,), ign, 1, ppid)

    rows = {r.pid: r for r in [
        row(5, 5, 1),               # the session's leader: the link of group 10
        row(10, 10, 5),             # the main, leading group 10
        row(11, 10, 10, "T"),       # its stopped child
        row(12, 10, 1),             # a helper double-forked away (parent: init)
        row(13, 10, 1, ign=1),      # one that ignores SIGHUP
        row(20, 20, 10),            # a child of the main leading a group of its own (same session)
        row(21, 20, 20, "T"),       # stopped, in that group
    ]}
    got = fate.fate(10, rows)
    assert sorted((c.pid, c.why, c.via, c.ignores) for c in got) == [
        (11, fate.ORPHANED, 10, False), (12, fate.ORPHANED, 10, False), (13, fate.ORPHANED, 10, True),
        (20, fate.ORPHANED, 10, False), (21, fate.ORPHANED, 10, False)]
    assert fate.fate(11, rows) == []  # its parent is in its own group: not the link
    no_stop = {**rows, 11: rows[11]._replace(state="S"), 21: rows[21]._replace(state="S")}
    assert fate.fate(10, no_stop) == []  # nothing stopped: no signal at all
    linked = {**rows, 14: row(14, 10, 5)}  # another member whose parent (5) links group 10 to the session
    assert {c.pid for c in fate.fate(10, linked)} == {20, 21}
    other_session = {**rows, 5: row(5, 5, 1, sid=6)}  # the main's parent in another session: never a link
    assert {c.pid for c in fate.fate(10, other_session)} == {20, 21}


def test_parse_status_reads_nspid_and_the_signal_masks() -> None:
    from kimitui.hostside.procfs import parse_status, sig_bit

    st = parse_status(b"Name:\tx\nUid:\t0\t0\t0\t0\nNSpid:\t4711\t1\nSigIgn:\t0000000000001001\n"
                      b"SigCgt:\t0000000000004002\n")
    assert (st.uid, st.nspid) == (0, (4711, 1))
    assert sig_bit(st.sig_ign, signal.SIGHUP) and sig_bit(st.sig_ign, signal.SIGPIPE)
    assert sig_bit(st.sig_cgt, signal.SIGTERM) and not sig_bit(st.sig_cgt, signal.SIGHUP)




def _stat_line(pid: int, state: str, flags: int, start: int = 777) -> str:
    fields = [state, "1", str(pid), str(pid), "0", "-1", str(flags)] + ["0"] * 12 + [str(start)] + ["0"] * 30
    return f"{pid} (worker) {' '.join(fields)}\n"


def _fake_proc(root: Path, pid: int, leader: tuple[str, int], threads: dict[int, tuple[str, int]]) -> str:
    (root / str(pid) / "task").mkdir(parents=True)
    (root / str(pid) / "stat").write_text(_stat_line(pid, *leader))
    for tid, (state, flags) in {pid: leader, **threads}.items():
        (root / str(pid) / "task" / str(tid)).mkdir()
        (root / str(pid) / "task" / str(tid) / "stat").write_text(_stat_line(tid, state, flags))
    return str(root)


def test_a_leader_still_on_its_way_out_is_read_from_its_live_thread(tmp_path: Path) -> None:
    """The window before the leader reads Z: PF_EXITING, its mm already let go (cmdline and exe read empty);
    a first look there cached an empty command line for the process's whole life (a CI run caught it)."""
    exiting = 0x400040 | 0x4
    root = _fake_proc(tmp_path / "a", 50, ("R", exiting), {51: ("S", 0x400040)})
    st = read_stat(50, root)
    assert st is not None and (st.pid, st.start_time, st.state, st.task) == (50, 777, "S", 51)
    whole = _fake_proc(tmp_path / "b", 60, ("R", exiting), {61: ("R", exiting)})  # exit_group: every thread
    st = read_stat(60, whole)
    assert st is not None and (st.state, st.task) == ("R", 0)
    plain = _fake_proc(tmp_path / "c", 70, ("S", 0x400040), {71: ("S", 0x400040)})
    st = read_stat(70, plain)
    assert st is not None and (st.state, st.task) == ("S", 0)
