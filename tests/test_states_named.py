"""States named as they are (issue 20, item 6): a cancelled sweep reads cancelled, not FAILED, in
``kimitui replay --summary`` and the log; a refused micro run does not mark the header "after micro"; a
replay's header carries a REPLAY mark, not the recorded "connected"."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimitui.commands.main import main
from kimitui.core.describe import describe
from kimitui.core.events import ConnectionState, Event, PhaseEnd, PhaseStart
from kimitui.core.runfile import write_run
from kimitui.core.state import fold_all
from kimitui.tui.widgets.status_bar import status_content
from tests.support import replay_app, status_text
from tests.waiting import pilot_until

T0 = 1_700_000_000.0
CANCELLED = PhaseEnd(t=T0 + 9, phase="macro", ok=False, note="cancelled after 2 of 5 levels; single stream 48.2 tok/s")
REFUSED = PhaseEnd(t=T0 + 12, phase="micro", ok=False, note="refused: GPUs 0,1 hold 92,411 MiB (pid 5081)")


def events() -> list[Event]:
    return [PhaseStart(t=T0, phase="macro", title="serving sweep"), CANCELLED,
            PhaseStart(t=T0 + 10, phase="micro", title="micro"), REFUSED]


def test_a_cancelled_sweep_and_a_refused_micro_run_are_named_so_in_the_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "run.jsonl", [ConnectionState(t=T0, host="h"), *events(),
                                             PhaseStart(t=T0 + 13, phase="analysis", title="budget"),
                                             PhaseEnd(t=T0 + 14, phase="analysis", ok=False, note="no verdict")],
                    host="h")
    assert main(["replay", "--summary", str(run)]) == 0
    phases = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("phases"))
    assert "macro 9.0 s cancelled" in phases and "micro 2.0 s refused" in phases, phases
    assert "analysis 1.0 s FAILED" in phases, phases  # a phase that did fail still says so
    assert "FAILED" not in phases.split("analysis")[0], phases
    assert describe(CANCELLED).startswith("phase macro cancelled") and "FAILED" not in describe(CANCELLED)


def test_a_refused_micro_run_does_not_mark_the_header_after_micro() -> None:
    state = fold_all(events())
    header = status_content(state, None, live=True, host="h").plain
    assert "after micro" not in header and "micro refused" in header, header
    done = fold_all([*events(), PhaseStart(t=T0 + 20, phase="micro", title="micro"),
                     PhaseEnd(t=T0 + 30, phase="micro", ok=True, note="gemm done, allreduce done")])
    assert "after micro" in status_content(done, None, live=True, host="h").plain


async def test_a_replay_header_is_marked_replay_not_connected() -> None:
    from kimitui.resources import bundled_sample_run

    app = replay_app(bundled_sample_run())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("e")
        await pilot_until(pilot, lambda: app.session.state.connection == "connected" and "END" in status_text(app),
                       "the run's end")
        header = status_text(app)
        assert " REPLAY " in header and "connected" not in header, header
