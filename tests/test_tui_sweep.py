"""The macro sweep from the dashboard, against a real simulated OpenAI server over HTTP: the dialog,
the worker, progress per level and overall, the live plots, the headline, cancel; replay mode."""

from __future__ import annotations

from textual.widgets import Digits, Input, Static, TabbedContent

from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader
from kimitui.core.session import Session
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.openai_server import DEFAULT_MODEL, SimOpenAIServer
from kimitui.resources import bundled_sample_run
from kimitui.tui.app import KimituiApp
from kimitui.tui.screens.macro_dialog import MacroDialog, parse_form
from kimitui.tui.views.macro_progress import FractionBar, headline_text
from kimitui.tui.views.macro_view import BenchView
from kimitui.tui.views.result_tables import MacroTable
from tests.app_probe import ProbedApp
from tests.support import BIG, FAST_SERVER, open_dialog, sweep_app, text_of
from tests.waiting import pilot_until

NARROW = BatchingModel(base_s=0.005, per_seq_s=0.0, max_batch=4)
"""Only 4 sequences decode at once: at concurrency 16 the level takes 4 times as long as at 4."""


def notes(app: KimituiApp) -> list[str]:
    return list(app.notices)


def tab_label(app: KimituiApp) -> str:
    return str(app.screen_stack[0].query_one("#views", TabbedContent).get_tab("bench").label)


async def test_sweep_from_the_dialog_fills_progress_plots_table_and_headline() -> None:
    async with SimOpenAIServer(batching=FAST_SERVER) as srv:
        app = sweep_app(srv.url)
        async with app.run_test(size=BIG) as pilot:
            dialog = await open_dialog(app, pilot)
            # prefilled: the live host's server, model asked from /v1/models, the default levels
            assert dialog.query_one("#url", Input).value == srv.url
            assert dialog.query_one("#model", Input).value == ""
            assert dialog.query_one("#concurrency", Input).value == "1,2,4,8,16,32,64,128"
            assert dialog.query_one("#requests", Input).value == "4x"
            for key, value in {"concurrency": "1,4,16", "max-tokens": "16", "input-len": "32"}.items():
                dialog.query_one(f"#{key}", Input).value = value
            await pilot.click("#start")
            await pilot_until(pilot, lambda: app.macro.run is not None, "the sweep to start")
            run = app.macro.run
            assert run is not None and run.config.concurrency == [1, 4, 16] and run.config.requests_per_stream == 4
            assert app.active_view == "bench"  # starting a sweep shows it

            overall_seen: list[float] = []
            labels: set[str] = set()

            def sample() -> None:
                bars = app.screen_stack[0].query(FractionBar)
                for bar in bars:
                    if bar.id == "overall-progress":
                        overall_seen.append(bar.progress)
                labels.add(tab_label(app))

            await pilot_until(pilot, lambda: not run.active, "the sweep to end", each=sample)
            assert run.status == "done", run.error
            # progress went up through the levels, not straight from 0 to the end
            assert overall_seen == sorted(overall_seen)
            # (within a level too: the level bar moves with the requests, not only at level ends)
            assert len(set(overall_seen)) >= 3 and any(0 < v < 3 and v != int(v) for v in overall_seen), overall_seen
            assert any(label.startswith("Benchmarks ▶ ") for label in labels), labels
            await pilot_until(pilot, lambda: tab_label(app) == "Benchmarks", "the tab label back to plain")

            state = app.session.state
            assert sorted(state.macro_by_level) == [1, 4, 16]
            toks = {c: p.metrics["output_throughput"] for c, p in state.macro_by_level.items()}
            assert toks[1] < toks[4] < toks[16]
            span = state.phases[-1]
            assert span.phase == "macro" and span.ok and DEFAULT_MODEL in span.title

            view = app.screen_stack[0].query_one(BenchView)
            table = view.query_one(MacroTable)
            await pilot_until(pilot, lambda: table.row_keys == ["1:1", "1:4", "1:16"], "3 table rows")
            assert table.cell_text("1:16", "output_throughput") == f"{toks[16]:.0f}"
            await pilot_until(pilot, lambda: view.query_one(Digits).value == headline_text(toks[1]), "the headline")
            assert "single stream" in text_of(app, "#single-stream")
            assert f"{toks[1]:.1f} tok/s" in text_of(app, "#single-stream")
            assert text_of(app, "#sweep-status").startswith("done: 3 levels")

            # the plots hold the points: tok/s, median TTFT and median TPOT against concurrency
            metric, series = view.plotted["throughput"]
            assert metric == "output_throughput" and series == [(c, toks[c]) for c in (1, 4, 16)]
            metric, series = view.plotted["ttft"]
            assert metric == "median_ttft_ms"
            assert series == [(c, state.macro_by_level[c].metrics["median_ttft_ms"]) for c in (1, 4, 16)]
            metric, series = view.plotted["tpot"]
            assert metric == "median_tpot_ms" and all(v > 0 for _, v in series)
            assert view.query_one("#ttft-box").border_title == "TTFT ms (median)"
            bars = {bar.id: bar for bar in view.query(FractionBar)}
            assert bars["overall-progress"].progress == 3 and bars["overall-progress"].total == 3
            assert bars["level-progress"].percentage == 1.0
            for plot in view.plots.values():
                assert plot.size.width >= 30 and plot.size.height >= 12
            # the simulated server's /metrics, read through the sweep, under the tok/s plot
            assert state.sweep is not None and state.sweep.server and view.query_one("#server-plots").display
            assert max(v for _, v in view.plotted_server["server-requests"][0]) <= 16
            # the x axis is labelled with the levels
            rendered = str(view.plots["throughput"].render())
            assert "16" in rendered and "concurrency" in rendered


async def test_cancel_mid_sweep_keeps_the_finished_levels() -> None:
    async with SimOpenAIServer(batching=NARROW) as srv:
        app = sweep_app(srv.url)
        async with app.run_test(size=BIG) as pilot:
            dialog = await open_dialog(app, pilot, concurrency="1,4,16", **{"max-tokens": "16"})
            await pilot.press("enter")  # in a field: start
            await pilot_until(pilot, lambda: app.macro.run is not None, "the sweep to start")
            assert not isinstance(app.screen, MacroDialog) and dialog.is_attached is False
            run = app.macro.run
            assert run is not None

            def on_last_level() -> bool:
                p = run.progress
                return p is not None and p.level_index == 2 and p.stage == "run"

            await pilot_until(pilot, on_last_level, "the third level to run")
            assert app.active_view == "bench"
            await pilot.press("x")
            await pilot_until(pilot, lambda: not run.active, "the sweep to stop")
            assert run.status == "cancelled"
            state = app.session.state
            await pilot_until(pilot, lambda: state.phases and state.phases[-1].end is not None, "the phase to end")
            span = state.phases[-1]
            assert span.phase == "macro" and span.ok is False
            assert span.note.startswith("cancelled after 2 of 3 levels")
            # the finished levels are kept: as events in the state and in the sweep's result
            assert run.result is not None and [lv.concurrency for lv in run.result.levels] == [1, 4]
            assert sorted(state.macro_by_level) == [1, 4]
            assert any("cancelling the sweep" in n for n in notes(app))
            view = app.screen_stack[0].query_one(BenchView)
            await pilot_until(pilot, lambda: view.query_one(MacroTable).row_keys == ["1:1", "1:4"], "2 table rows")
            await pilot_until(pilot, lambda: "cancelled after 2 of 3 levels" in text_of(app, "#sweep-status"),
                           "the cancelled status")
            assert [c for c, _ in view.plotted["throughput"][1]] == [1, 4]
            assert tab_label(app) == "Benchmarks"
            # a second sweep starts from the last one's settings
            dialog = await open_dialog(app, pilot)
            assert dialog.query_one("#concurrency", Input).value == "1,4,16"
            assert dialog.query_one("#max-tokens", Input).value == "16"
            await pilot.press("escape")
            await pilot_until(pilot, lambda: not isinstance(app.screen, MacroDialog), "the dialog to close")
            assert app.macro.run is run


async def test_dialog_says_what_is_wrong_and_escape_starts_nothing() -> None:
    app = sweep_app("http://127.0.0.1:9")
    async with app.run_test(size=(80, 24)) as pilot:
        dialog = await open_dialog(app, pilot, concurrency="1,600")
        await pilot.click("#start")
        await pilot_until(pilot, lambda: "out of range" in str(dialog.query_one("#dialog-error", Static).render()),
                       "the error line")
        assert isinstance(app.screen, MacroDialog) and app.macro.run is None
        # the whole form fits at 80x24
        assert dialog.query_one("#start").region.bottom <= 24
        dialog.query_one("#concurrency", Input).value = "1"
        dialog.query_one("#requests", Input).value = "many"
        dialog.query_one("#requests", Input).focus()
        await pilot.press("enter")
        await pilot_until(pilot, lambda: "4x" in str(dialog.query_one("#dialog-error", Static).render()),
                       "the requests error")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, MacroDialog), "the dialog to close")
        assert app.macro.run is None
        # x on the Benchmarks tab with nothing running changes nothing
        await pilot.press("b")
        await pilot.press("x")
        assert app.macro.run is None


async def test_server_that_does_not_answer_fails_in_one_line() -> None:
    app = sweep_app("http://127.0.0.1:9")
    async with app.run_test(size=BIG) as pilot:
        await open_dialog(app, pilot, concurrency="1")
        await pilot.click("#start")
        await pilot_until(pilot, lambda: app.macro.run is not None and not app.macro.run.active, "the failure")
        run = app.macro.run
        assert run is not None and run.status == "failed" and run.error and "/v1/models" in run.error
        await pilot_until(pilot, lambda: text_of(app, "#sweep-status").startswith("failed: GET "), "failed status")
        assert any("the sweep failed" in n for n in notes(app))


def test_parse_form_requests_modes() -> None:
    base = {"url": "http://h:1", "model": " ", "endpoint": "chat", "concurrency": "1, 8", "requests": "64",
            "max-tokens": "128", "input-len": "64", "warmup": "0"}
    cfg = parse_form(base)
    assert cfg.model is None and cfg.endpoint == "chat" and cfg.concurrency == [1, 8]
    assert [cfg.level_requests(c) for c in (1, 8)] == [64, 64]
    cfg = parse_form({**base, "requests": "4x"})
    assert [cfg.level_requests(c) for c in (1, 8)] == [4, 32]


async def test_replay_sweep_action_only_notifies_and_the_sample_run_shows_its_headline() -> None:
    session = Session()
    player = Player(RunReader(bundled_sample_run()), session, clock=lambda: 0.0)
    app = ProbedApp(session, player=player)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("M")
        await pilot_until(pilot, lambda: any("benchmarks need a live host" in n for n in notes(app)), "the note")
        assert not isinstance(app.screen, MacroDialog) and app.macro.run is None
        from kimitui.tui.commands import palette_commands

        app.notices.clear()
        entries = {title: cb for title, _, cb in palette_commands(app)}
        entries["Benchmarks: run macro sweep…"]()
        await pilot_until(pilot, lambda: any("benchmarks need a live host" in n for n in notes(app)), "the note")
        assert not isinstance(app.screen, MacroDialog) and app.macro.run is None
        await pilot.press("e", "b")
        state = app.session.state
        single = state.single_stream_tok_s()
        assert single is not None
        await pilot_until(pilot, lambda: bool(app.query(BenchView)), "the Benchmarks tab")
        view = app.query_one(BenchView)
        await pilot_until(pilot, lambda: view.query_one(Digits).value == headline_text(single), "the headline")
        assert str(view.query_one("#headline-caption", Static).render()) == "tok/s at concurrency 1"
        status = text_of(app, "#sweep-status")  # the campaign's sweep, recorded with its progress
        assert status.startswith(f"done: {len(state.macro_by_level)} levels in ") and "M runs another" not in status
        levels = sorted(state.macro_by_level)
        assert [c for c, _ in view.plotted["throughput"][1]] == levels
        assert view.plotted["ttft"][0] == "median_ttft_ms"


# 4-token requests, TPOT 20 ms alone and 8 ms more for each request beside it, 76 ms at most (8 at once). The
# dashboard shares the load generator's event loop: on a loaded machine its stalls (hundreds of ms in CI) enter the
# TPOT, so the search here runs under an SLO no rate can miss (10 s) and doubles to the highest rate, a probe at a
# time; whether an SLO is met is tests/test_slo_search.py's, away from the dashboard
SLOW_STEEP = BatchingModel.from_targets(single_stream_tps=50, plateau_tps=105, plateau_batch=8, prefill_tps=1e6)


async def test_a_rate_search_from_the_dialog_is_plotted_probe_by_probe() -> None:
    from textual.widgets import Select

    async with SimOpenAIServer(batching=SLOW_STEEP) as srv:
        app = sweep_app(srv.url)
        async with app.run_test(size=BIG) as pilot:
            dialog = await open_dialog(app, pilot, concurrency="64", rates="5,80", requests="16", warmup="0",
                                       **{"max-tokens": "4", "goodput": "tpot:10000"})
            dialog.query_one("#search", Select).value = "yes"
            await pilot_until(pilot, lambda: "a search from 5 to 80 req/s" in str(
                dialog.query_one("#dialog-scale", Static).render()), "the search's scale")
            await pilot.click("#start")
            await pilot_until(pilot, lambda: app.macro.run is not None, "the search to start")
            run = app.macro.run
            assert run is not None and run.config.rate_levels == [5.0, 80.0] and run.config.search
            view = app.screen_stack[0].query_one(BenchView)
            seen: list[int] = []  # how many probes the plot held each time it was looked at

            def sample() -> None:
                seen.append(len(view.plotted.get("throughput", (None, []))[1]))

            await pilot_until(pilot, lambda: not run.active, "the search to end", each=sample)
            assert run.status == "done", run.error
            sweep = app.session.state.sweep
            assert sweep is not None and sweep.axis == "rate" and sweep.verdict is not None
            probes = sweep.verdict.searched
            assert probes == [5.0, 10.0, 20.0, 40.0, 80.0] and sweep.verdict.slo_concurrency == 80.0
            await pilot_until(pilot, lambda: len(view.plotted["throughput"][1]) == len(probes), "every probe plotted")
            assert [x for x, _ in view.plotted["throughput"][1]] == sorted(probes)
            assert 1 in seen and 2 in seen  # plotted as they came, not at the end
            await pilot_until(pilot, lambda: "met up to 80 req/s" in text_of(app, "#single-stream"), "the verdict")
            assert "peak" in text_of(app, "#single-stream") and "req/s" in text_of(app, "#single-stream")
            assert "request rate (req/s)" in str(view.plots["throughput"].render())
