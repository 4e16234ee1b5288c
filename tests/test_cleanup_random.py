"""The randomized safety test (issue 18): generated process tables of real processes (trees, reused pids,
other users, host daemons, monitors, non-UTF-8 names, pidfiles, protected processes; issue 32: terminal
leaders, PID namespace inits, execs into a daemon, exited main threads, owners dead before their children)
run through the real planner and executor against the real local agent, and nothing outside what the preview
listed and the operator consented to may ever be signalled or die (tests/safety_tables.py holds the generator,
the harness and the oracle).

KIMITUI_SAFETY_TABLES (default 1000) and KIMITUI_SAFETY_SEED (default 1800) choose the tables: table i has
seed SEED+i, and a failing table is printed with the command that reruns it alone. The tables run in a pid
namespace of their own (unshare), so the pid reuses they force touch no other process of the machine and no
other process can take a pid they freed. Needs root (processes of the uid nobody, a pid namespace and its
/proc/sys/kernel/ns_last_pid): without them it fails, naming what is missing (CI runs as root).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kimitui.cleanup import ConsentDecision
from tests.safety_tables import (
    SETUP_TIMEOUT_S,
    Decision,
    LeafSpec,
    Proc,
    Summary,
    Table,
    _cmdline,
    boot_ticks,
    cannot_run,
    proc_argv,
    proc_exe,
    proc_stat,
    run_tables,
    spawn,
    spawn_at,
)
from tests.sshd import until

TABLES = int(os.environ.get("KIMITUI_SAFETY_TABLES", "1000"))
SEED = int(os.environ.get("KIMITUI_SAFETY_SEED", "1800"))


@pytest.fixture(autouse=True)
def _can_run() -> None:
    """A test that needs a missing part fails (it does not skip): the safety claim would go unchecked."""
    why = cannot_run()
    if why is not None:
        pytest.fail(f"the randomized safety test cannot run here: {why}")


def show(capsys: pytest.CaptureFixture[str], summary: Summary) -> None:
    with capsys.disabled():
        print(f"\n{summary.report()}")


def assert_clean(summary: Summary, tables: int) -> None:
    assert summary.tables == tables
    assert not summary.errors, summary.report()
    assert summary.wrong == 0, summary.report()
    # the harness's own promise: no pid it freed went to another process while a table could name it
    assert summary.foreign == 0 and summary.reuses["stale pid taken"] == 0, summary.report()
    assert summary.sent > 0, "no signal was sent at all: the tables exercise nothing"


async def test_random_tables_signal_only_what_was_previewed_and_consented(capsys: pytest.CaptureFixture[str]) -> None:
    """The cleanup signals only what its preview listed and the operator consented to, each process as
    previewed (pid and start time) and as its role allows, over TABLES random tables of real processes, pid
    reuses included; every process the harness started that died, died of a signal an event reports; and
    no pid the harness freed (a stale main's) went to another process during its table. Prints "N tables, M
    signals sent, 0 wrong" (and what the tables held) even without -s."""
    summary = await run_tables(TABLES, SEED)
    show(capsys, summary)
    assert_clean(summary, TABLES)
    if TABLES < 100:  # a rerun of a few tables need not hit every case
        return
    # what the tables must have exercised: pids reused before the cleanup, between steps and between a
    # preview and its signal (the agent's start-time check said mismatch), ticks refused, stuck workers killed
    assert all(summary.reuses[when] > 0 for when in ("stale", "before", "between", "consent")), summary.report()
    assert summary.outcomes["SIGTERM mismatch"] > 0 and summary.outcomes["SIGKILL sent"] > 0, summary.report()
    assert summary.refused > 0, summary.report()
    # and what the kernel ends along with a target (issue 32): listed, consented, then dead of its signal
    assert summary.died_with["hup_helper (SIGHUP)"] > 0 and summary.died_with["ns_guest (SIGKILL)"] > 0, \
        summary.report()
    assert summary.died_with["pgrp_helper (SIGHUP)"] > 0, summary.report()
    assert summary.roles["exec_daemon"] and summary.roles["lead_exited"] and summary.roles["inheritor"]


class Saboteur(Table):
    """A table whose 'operator' kills a bystander behind the executor's back: no event says so."""

    async def consent(self, preview):  # type: ignore[no-untyped-def]
        for p in self.procs:
            if p.role == "bystander" and p.popen is not None and p.alive():
                os.kill(p.pid, signal.SIGTERM)  # a child of the harness, not yet reaped: this very process
                break
        return await super().consent(preview)


async def test_the_oracle_sees_a_signal_no_event_reports() -> None:
    """The oracle does not take the events' word for what died: a bystander killed behind the executor's
    back (its wait status says SIGTERM, no event says so) is reported."""
    summary = await run_tables(20, SEED, table_cls=Saboteur)
    assert summary.kinds["bystander: delivered without a signal event"] > 0, summary.report()
    assert not summary.errors, summary.report()


class EveryoneAllowed(Table):
    """Tables run with the executor's safety check broken: nobody is refused (patched in the tables'
    namespace, where they run)."""

    @classmethod
    def prepare(cls) -> None:
        from kimitui.cleanup.safety import SafetyPolicy

        SafetyPolicy.refusal = lambda self, c: None  # type: ignore[method-assign]


async def test_the_oracle_sees_a_signal_to_another_users_process() -> None:
    """With the executor's safety check broken (everyone allowed), the other users' processes it then
    signals are each reported."""
    summary = await run_tables(20, SEED, table_cls=EveryoneAllowed)
    assert sum(n for kind, n in summary.kinds.items() if kind.startswith("other_user: signalled in step")), \
        summary.report()


class BlindToFate(Table):
    """Tables run as the cleanup ran before issue 32: no preview lists what dies with a target, nothing refuses a
    target for it, and each signal goes out with the identity check alone (no last look by the agent: not at
    what would die with the process, nor at whether it became a host daemon since)."""

    @classmethod
    def prepare(cls) -> None:
        from kimitui.cleanup import fate
        from kimitui.hosts.base import Host, SignalResult
        from kimitui.hostside.signals import guarded_signal

        fate.companion_rows = lambda *a, **k: []  # type: ignore[assignment]
        fate.refusal = lambda *a, **k: None  # type: ignore[assignment]

        async def signal(self, proc, sig, companions=()):  # type: ignore[no-untyped-def]
            return SignalResult(*guarded_signal(proc.pid, proc.start_time, sig))

        Host.signal = signal  # type: ignore[method-assign]


async def test_the_oracle_judges_what_died_not_only_what_was_sent() -> None:
    """Blind to what the kernel ends along with a target (the cleanup before issue 32), the tables' oracle
    reports the helpers killed by a terminal's hangup or an orphaned group's, and the processes killed with
    their PID namespace (no signal event and no preview row explains their wait status), and the SIGKILL to
    a worker that became a host daemon."""
    summary = await run_tables(120, SEED, table_cls=BlindToFate)
    assert not summary.errors, summary.report()
    kinds = summary.kinds
    assert kinds["hup_helper: delivered without a signal event"] > 0, summary.report()
    assert kinds["ns_guest: delivered without a signal event"] > 0, summary.report()
    assert kinds["pgrp_helper: delivered without a signal event"] > 0, summary.report()
    assert kinds["exec_daemon: signalled after it became a host daemon"] > 0, summary.report()


class NoExecutables(Table):
    """Samples without executables (a source that gives none: an older agent, a recorded sample): a host
    daemon known by its executable alone must still be spared, from the step's own scan."""

    def sample(self):  # type: ignore[no-untyped-def]
        sample = super().sample()
        return dataclasses.replace(sample, procs=[dataclasses.replace(p, exe=None) for p in sample.procs])


async def test_a_daemon_is_spared_when_the_sample_gives_no_executable(capsys: pytest.CaptureFixture[str]) -> None:
    """A host daemon known by its executable alone is never signalled, even when the samples give no
    executable (the step's own scan names it); 200 tables, as clean as the main test's."""
    summary = await run_tables(200, SEED + 50_000, table_cls=NoExecutables)
    show(capsys, summary)
    assert_clean(summary, 200)
    assert summary.roles["daemon"] > 0, summary.report()


REPO = Path(__file__).resolve().parent.parent
COUNTER_PROBE = r"""
import json, os, subprocess, tempfile
from pathlib import Path
from tests.safety_tables import LeafSpec, make_programs, spawn_at

def start(pid):
    with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
        fh.write(str(pid - 1))
    return subprocess.Popen(["sleep", "600"])

assert os.getpid() == 1, "not the init of a pid namespace of its own"
with open("/proc/sys/kernel/pid_max") as fh:
    pid_max = int(fh.read())
top = start(pid_max - 3)  # a long-lived process near the top of the range: on some hosts a kernel thread sits there
freed = start(300)  # the first pid the kernel hands out once the counter wraps (RESERVED_PIDS)
freed.kill(); freed.wait()
victim = start(1000)
victim.kill(); victim.wait()
taker = spawn_at(make_programs(Path(tempfile.mkdtemp())), LeafSpec(1, "bystander"), victim.pid)
forks = []
for _ in range(100):
    p = subprocess.Popen(["true"]); p.wait(); forks.append(p.pid)
print(json.dumps({"top": top.pid, "freed": freed.pid, "victim": victim.pid, "taker": taker and taker.pid,
                  "forks": forks}))
"""
"""Run as pid 1 of a pid namespace of its own: a pid freed, a forced reuse as the tables make it, 100 forks."""


def test_a_forced_pid_reuse_leaves_the_pids_just_freed_free() -> None:
    """After spawn_at forces a pid reuse, the next processes get new pids, never one just freed (a stale
    pidfile's, a killed main's): with a process near the top of the pid range (a kernel thread on some
    hosts), putting the counter back to the highest live pid sent it to the top, it wrapped, and the pid
    freed first came back within 3 forks (issue 31: after 106 forks on CI, instead of ~32,000)."""
    res = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c",
                          COUNTER_PROBE], capture_output=True, text=True, cwd=REPO, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["taker"] == got["victim"] and got["freed"] == 300
    assert got["freed"] not in got["forks"], f"pid {got['freed']} came back after " \
        f"{got['forks'].index(got['freed']) + 1} forks: {got['forks'][:10]}"
    assert got["top"] not in got["forks"] and len(set(got["forks"])) == 100


class PidTaker(Table):
    """A service named pid:N whose main exits before the cleanup, and a process the table did not start
    takes pid N a few clock ticks later: the cleanup previews it as the pid:N main and, consented, signals
    it. That is what the operator named; the taker is the harness's doing (its pid counter let a pid it
    freed go), never a wrong of the cleanup's."""

    same_tick = False

    def __init__(self, spec, *rest, **kw):  # type: ignore[no-untyped-def]
        spec = dataclasses.replace(spec, service="pid", tree=None, loose=[], reuse="none", self_holders=False)
        super().__init__(spec, *rest, **kw)
        self.taker = None

    async def setup(self) -> None:
        for _ in range(100):
            leaf = LeafSpec(self.tok(), "main")
            popen = spawn(self.prog, leaf)
            st = proc_stat(popen.pid)
            assert st is not None
            main = Proc(leaf, popen.pid, st[0], _cmdline(proc_argv(popen.pid)), proc_exe(popen.pid), popen)
            self.free(main)
            if not self.same_tick:
                await until(lambda later=main.start_time + 2: boot_ticks() > later, SETUP_TIMEOUT_S, "a later tick",
                            interval=0.002)
            async with self.forks:
                taker = spawn_at(self.prog, LeafSpec(self.tok(), "bystander"), main.pid)
            taken = proc_stat(taker.pid) if taker is not None else None
            if taker is not None and taken is not None and (taken[0] == main.start_time) == self.same_tick:
                self.main, self.taker = main, taker
                self.procs.append(main)
                return
            if taker is not None:
                taker.kill()
                taker.wait()
        raise AssertionError("no taker with the start time wanted in 100 tries")

    async def consent(self, preview):  # type: ignore[no-untyped-def]
        decision = ConsentDecision(True, None, "safety", "as previewed")
        self.result.decisions.append(Decision(preview.step, preview, decision, "all"))
        return decision

    async def teardown(self) -> None:
        await super().teardown()
        if self.taker is not None:
            self.taker.kill()
            self.taker.wait()


class SameTickTaker(PidTaker):
    """The same, the taker started in the main's own clock tick: the same pid and start time, so the
    signals' (pid, start time) name the main the harness killed; only the harness's own record (it reaped
    the main, SIGKILL, before the cleanup began) tells that they reached another process."""

    same_tick = True


@pytest.mark.parametrize("cls", [PidTaker, SameTickTaker])
async def test_a_process_outside_the_table_is_the_harness_doing_never_a_wrong(cls: type[PidTaker]) -> None:
    """A signal that reached a process the table did not start (a taker of a pid the table freed) is
    reported as the harness's doing, apart from the cleanup's wrongs, however its start time compares: the
    oracle judges by what the harness knows of its own processes (when it reaped them, and how they died),
    not by the (pid, start time) of the signal alone."""
    summary = await run_tables(3, SEED, table_cls=cls)
    assert not summary.errors, summary.report()
    assert summary.wrong == 0, summary.report()
    # each table's graceful SIGTERM reaches its taker; a taker still alive when the process step comes (a
    # loaded machine) gets that step's signals too: more, never fewer, and all of them the harness's doing
    assert summary.foreign_kinds["SIGTERM reached a process the table did not start"] >= 3, summary.report()
    assert summary.foreign == summary.sent, summary.report()
