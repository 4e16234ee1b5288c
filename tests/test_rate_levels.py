"""Issue 38 item 2: request rates as a sweep's levels (``bench macro --request-rate 10 160``): each level sends its
requests at its own rate under one concurrency cap; the command names each level by its rate, the verdict says the
highest rate meeting the SLOs (``max_rate_meeting_slo``), the run file records the rates, and its fold, report and
Benchmarks tab read the levels as rates (never as the cap they share)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.commands.bench import add_parser, cmd_bench
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.core.state import fold_all
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.report.markdown import render_report
from kimitui.tui.views.macro_view import BenchView
from kimitui.tui.views.result_tables import MacroTable
from tests.app_probe import ProbedApp
from tests.support import BIG, sim_server_thread
from tests.waiting import pilot_until

# TPOT 10 ms alone, more for each request beside it: 8-token requests at 10 req/s (two or three at once, p99 TPOT
# about 14 ms on a quiet machine) meet a 30 ms TPOT SLO with room for a busy machine's stalls (spread over 7 gaps);
# at 160 req/s all 16 run at once (p99 about 38 ms, and a busy machine only adds to it) and miss it
STEEP = BatchingModel.from_targets(single_stream_tps=100, plateau_tps=210, plateau_batch=8, prefill_tps=1e6)


@pytest.fixture
def server_url() -> Iterator[str]:
    with sim_server_thread(STEEP) as url:
        yield url


@pytest.fixture
def rate_run(server_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, dict[str, object]]:
    """A fixed sweep of two rates: (its run file, what the command printed, its --output JSON)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    out = tmp_path / "rates.json"
    args = parser.parse_args(["bench", "macro", "--url", server_url, "--model", "moonshotai/Kimi-K2.5",
                              "--request-rate", "10", "160", "--concurrency", "64", "--requests", "16",
                              "--max-tokens", "8", "--warmup", "0", "--slo", "tpot:30", "--output", str(out)])
    assert cmd_bench(args) == 0
    printed = capsys.readouterr()
    (run,) = (tmp_path / "data" / "kimitui" / "runs").glob("*.jsonl")
    return run, printed.out, json.loads(out.read_text())


def test_the_command_names_each_level_by_its_rate_and_says_the_highest_meeting_the_slos(
        rate_run: tuple[Path, str, dict[str, object]]) -> None:
    _, printed, saved = rate_run
    lines = printed.splitlines()
    assert [line.split(" ok")[0].split()[:2] for line in lines if " ok " in line] == [["10", "req/s"],
                                                                                    ["160", "req/s"]]
    verdict_line = next(line for line in lines if line.startswith("verdict: "))
    assert "met at p99 up to 10 req/s" in verdict_line, verdict_line
    verdict = saved["verdict"]
    assert isinstance(verdict, dict) and verdict["max_rate_meeting_slo"] == 10.0
    assert verdict["slo_met_at_p99_request_rates"] == [10.0] and "max_concurrency_meeting_slo" not in verdict
    levels = saved["levels"]
    assert isinstance(levels, list) and saved["level_axis"] == "rate"
    assert [(lv["concurrency"], lv["request_rate"], lv["num_prompts"]) for lv in levels] == [(64, 10.0, 16),
                                                                                           (64, 160.0, 16)]


def test_the_fold_and_the_report_read_the_levels_as_rates(rate_run: tuple[Path, str, dict[str, object]]) -> None:
    run, _, _ = rate_run
    state = fold_all(list(RunReader(run).events()))
    sweep = state.sweep
    assert sweep is not None and sweep.axis == "rate" and sweep.levels == [10.0, 160.0]
    assert sorted(sweep.points) == [10.0, 160.0] and [p.label for p in sweep.point_list] == ["10 req/s", "160 req/s"]
    assert state.macro_by_level == {} and state.macro_requests == {}  # a rate level is no concurrency level
    assert sorted(state.rate_requests) == [10.0, 160.0]
    assert all(lv.received == 16 for lv in state.rate_requests.values())
    assert sweep.verdict is not None and sweep.verdict.axis == "rate" and sweep.verdict.slo_concurrency == 10.0
    report = render_report(RunReader(run))
    assert "| request rate | ok/failed |" in report and "| 10 req/s | 16/0 |" in report
    assert "met at p99 up to 10 req/s" in report and "Levels by request rate" in report


async def test_the_benchmarks_tab_plots_and_lists_the_rates(rate_run: tuple[Path, str, dict[str, object]]) -> None:
    run, _, _ = rate_run
    session = Session()
    player = Player(RunReader(run), session, clock=lambda: 0.0)
    player.seek_index(len(player.reader))  # the whole run folded: its sweep ended
    app = ProbedApp(session, player=player)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("b")
        await pilot_until(pilot, lambda: bool(app.query(BenchView)), "the Benchmarks tab")
        view = app.query_one(BenchView)
        await pilot_until(pilot, lambda: bool(view.plotted.get("throughput", (None, []))[1]), "the rates plotted")
        await pilot_until(pilot, lambda: len(view.plotted["throughput"][1]) == 2, "both rates plotted")
        assert [x for x, _ in view.plotted["throughput"][1]] == [10.0, 160.0]
        table = view.query_one(MacroTable)
        assert table.column_texts("concurrency") == ["10/s", "160/s"]
