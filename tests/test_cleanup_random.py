"""The randomized safety test (issue 18): generated process tables of real processes (trees, reused pids,
other users, host daemons, monitors, non-UTF-8 names, pidfiles, protected processes) run through the real
planner and executor against the real local agent, and nothing outside what the preview listed and the
operator consented to may ever be signalled (tests/safety_tables.py holds the generator, the harness and the
oracle).

KIMITUI_SAFETY_TABLES (default 1000) and KIMITUI_SAFETY_SEED (default 1800) choose the tables: table i has
seed SEED+i, and a failing table is printed with the command that reruns it alone. Needs root (processes of
the uid nobody, /proc/sys/kernel/ns_last_pid): without them it fails, naming what is missing (CI runs as root).
"""

from __future__ import annotations

import dataclasses
import os
import signal

import pytest

from tests.safety_tables import Summary, Table, cannot_run, run_tables

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
    assert summary.sent > 0, "no signal was sent at all: the tables exercise nothing"


async def test_random_tables_signal_only_what_was_previewed_and_consented(capsys: pytest.CaptureFixture[str]) -> None:
    """Prints "N tables, M signals sent, 0 wrong" (and what the tables held) even without -s."""
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


class Saboteur(Table):
    """A table whose 'operator' kills a bystander behind the executor's back: no event says so."""

    async def consent(self, preview):  # type: ignore[no-untyped-def]
        for p in self.procs:
            if p.role == "bystander" and p.popen is not None and p.alive():
                os.kill(p.pid, signal.SIGTERM)  # a child of the harness, not yet reaped: this very process
                break
        return await super().consent(preview)


async def test_the_oracle_sees_a_signal_no_event_reports() -> None:
    summary = await run_tables(20, SEED, table_cls=Saboteur)
    assert summary.kinds["bystander: delivered without a signal event"] > 0, summary.report()
    assert not summary.errors, summary.report()


async def test_the_oracle_sees_a_signal_to_another_users_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the executor's safety check broken (everyone allowed), the other users' processes it then
    signals are each reported."""
    from kimitui.cleanup.safety import SafetyPolicy

    monkeypatch.setattr(SafetyPolicy, "refusal", lambda self, c: None)
    summary = await run_tables(20, SEED)
    assert sum(n for kind, n in summary.kinds.items() if kind.startswith("other_user: signalled in step")), \
        summary.report()


class NoExecutables(Table):
    """Samples without executables (a source that gives none: an older agent, a recorded sample): a host
    daemon known by its executable alone must still be spared, from the step's own scan."""

    def sample(self):  # type: ignore[no-untyped-def]
        sample = super().sample()
        return dataclasses.replace(sample, procs=[dataclasses.replace(p, exe=None) for p in sample.procs])


async def test_a_daemon_is_spared_when_the_sample_gives_no_executable(capsys: pytest.CaptureFixture[str]) -> None:
    summary = await run_tables(200, SEED + 50_000, table_cls=NoExecutables)
    show(capsys, summary)
    assert_clean(summary, 200)
    assert summary.roles["daemon"] > 0, summary.report()
