"""Honest results and readable fields (issue #8, items 4, 6 and 7): failed levels shown as failed, one
duration per step, the replay clock, start times, one unit spelling, full log lines, whole GPU names, the
footer, the run file's path, a second sweep beside the first, fast typing in the sweep dialog."""

from __future__ import annotations

import time
from pathlib import Path

from textual import events
from textual.widgets import DataTable, Input

from kimitui.core.events import (
    Consent,
    GpuSample,
    HostSample,
    MacroPoint,
    MacroProgress,
    PhaseEnd,
    PhaseStart,
    ProcRef,
    ProcSample,
    StepPreview,
    StepResult,
)
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader, write_run
from kimitui.core.session import Session
from kimitui.core.state import SessionState, fold_all
from kimitui.report.markdown import render_report
from kimitui.resources import bundled_sample_run
from kimitui.tui import fmt
from kimitui.tui.palette import Colors
from kimitui.tui.replay_info import ReplayInfo
from kimitui.tui.screens.cleanup_consent import ConsentScreen
from kimitui.tui.screens.help_screen import HelpScreen
from kimitui.tui.screens.macro_dialog import MacroDialog
from kimitui.tui.views.cleanup_view import StepTable, step_cells
from kimitui.tui.views.macro_view import BenchView
from kimitui.tui.views.result_tables import MacroTable
from kimitui.tui.widgets.event_log import EventLog
from kimitui.tui.widgets.proc_table import proc_cells
from kimitui.tui.widgets.status_bar import status_content
from tests.app_probe import ProbedApp
from tests.faulty_server import Behavior, FaultyServer
from tests.screen_text import screen_text
from tests.support import BIG, FakeClock, open_dialog, replay_app, sweep_app, text_of
from tests.waiting import pilot_until

SMALL = (80, 24)
PLAIN = Colors("blue", "yellow", "green", "yellow", "red", "grey50", "white")
LOADING = '{"error": {"message": "model loading", "type": "ServiceUnavailable"}}'


# -- 4. honest results -----------------------------------------------------------------------------------

async def test_a_sweep_whose_every_request_fails_is_shown_failed_with_counts_and_the_first_error() -> None:
    async with FaultyServer(Behavior(mode="status", status=503, body=LOADING)) as srv:
        app = sweep_app(srv.url)
        published: list[object] = []
        app.session.subscribe(published.append)
        async with app.run_test(size=BIG) as pilot:
            await open_dialog(app, pilot, concurrency="1,2,4", **{"max-tokens": "8", "warmup": "0"})
            await pilot.click("#start")
            await pilot_until(pilot, lambda: app.macro.run is not None and not app.macro.run.active, "the sweep")
            # M records one start of the sweep, one phase, ended not ok with the first error
            assert [e.status for e in published if isinstance(e, MacroProgress)].count("starting") == 1
            assert [type(e) for e in published if isinstance(e, PhaseStart | PhaseEnd)] == [PhaseStart, PhaseEnd]
            span = app.session.state.phases[-1]
            assert span.phase == "macro" and span.ok is False and "503" in span.note, span
            view = app.screen_stack[0].query_one(BenchView)
            await pilot_until(pilot, lambda: text_of(app, "#sweep-status").startswith("failed"), "the failed status")
            status = text_of(app, "#sweep-status")
            assert "every request failed at 3 levels" in status and "done" not in status
            assert "c=1: 4 of 4 requests failed" in status and "503" in status and "model loading" in status
            table = view.query_one(MacroTable)
            await pilot_until(pilot, lambda: table.row_keys == ["1:1", "1:2", "1:4"], "3 rows")
            for c, sent in (("1:1", 4), ("1:2", 8), ("1:4", 16)):
                assert table.cell_text(c, "output_throughput") == "FAILED"
                assert table.cell_text(c, "requests") == f"0/{sent}"
                assert "model loading" in table.cell_text(c, "error")
            # nothing was measured: no point is plotted (no zeros), on any plot
            assert all(series == [] for _, series in view.plotted.values()), view.plotted
            assert app.session.state.single_stream_tok_s() is None
            # the log says so in full
            await pilot.press("d")
            log = app.screen_stack[0].query_one(EventLog)
            await pilot_until(pilot, lambda: any("FAILED" in line for line in log.shown), "the log line")
            line = next(line for line in log.shown if "concurrency 4: FAILED" in line)
            assert "16 requests failed" in line and "model loading" in line
            await pilot_until(pilot, lambda: line[:70] in screen_text(app), "the line on screen")


def _step_times(events: list[object]) -> dict[str, float]:
    """Each step's duration from its events: operator's answer to result (else the result's own figure)."""
    consent = {e.step: e.t for e in events if isinstance(e, Consent)}
    out = {}
    for e in events:
        if isinstance(e, StepResult) and e.step != "verify":
            out[e.step] = e.t - consent[e.step] if e.step in consent else e.elapsed_s
    return out


def test_one_cleanup_step_has_one_duration_in_the_tab_the_log_and_the_report() -> None:
    reader = RunReader(bundled_sample_run())
    events = list(reader.events())
    state = fold_all(events)
    cleanup = state.cleanup
    assert cleanup is not None
    report = render_report(RunReader(bundled_sample_run()))
    colors = PLAIN
    expected = _step_times(events)
    assert set(expected) >= {"graceful", "process", "device"}
    for name, seconds in expected.items():
        step = cleanup.steps[name]
        figure = f"{seconds:.2f}"
        assert step.elapsed_s is not None and f"{step.elapsed_s:.2f}" == figure
        tab = step_cells(step, colors, cleanup, state.clock)[2].plain  # type: ignore[union-attr]
        assert tab == f"{figure} s", (name, tab)
        assert f"### Step {name}: {step.status} in {figure} s" in report, name
        assert any(entry.message.startswith(f"{name}: {step.status} in {figure}s") for entry in state.log), name


def test_a_restart_has_one_duration_and_its_reason_names_none() -> None:
    t = 1000.0
    events = [PhaseStart(t, phase="restart"),
              StepPreview(t + 0.2, step="restart", action="sim vllm: start"),
              Consent(t + 4.2, step="restart", accepted=True, operator="ana"),
              StepResult(t + 5.75, step="restart", status="done", reason="http://h/health answered 200",
                         elapsed_s=5.55)]
    from kimitui.core.events import CleanupPlan

    state = fold_all([CleanupPlan(t, steps=["restart"]), *events])
    step = state.cleanup.steps["restart"]  # type: ignore[union-attr]
    assert step.elapsed_s is not None and round(step.elapsed_s, 2) == 1.55
    assert state.log[-1].message.startswith("restart: done in 1.55s")


def test_the_replay_header_never_shows_more_than_the_run_at_64x() -> None:
    clock = FakeClock()
    reader = RunReader(bundled_sample_run())
    player = Player(reader, Session(), clock=clock, speed=64)
    player.advance()
    clock.now = 10.0  # 640 s of run: more than the whole run
    player.advance()
    assert player.finished
    info = ReplayInfo.of(player)
    assert info.elapsed <= info.duration
    text = status_content(player.session.state, info, live=False).plain
    whole = fmt.duration(reader.end_time - reader.start_time)
    assert player.duration < 640 and f"{whole}/{whole}" in text


# -- 6. readable fields ----------------------------------------------------------------------------------

def _sample(t: float, boot: float | None) -> HostSample:
    return HostSample(t, host="h", seq=1, gpus=[GpuSample(0, "GPU-0", "NVIDIA H200")],
                      procs=[ProcSample(pid=42, start_time=360_000, container="5d6c468c1f2e9a0b",
                                        gpu_mem_mib={0: 10.0})],
                      boot_time=boot, clock_ticks=100 if boot is not None else None)


def test_start_times_read_as_times_when_the_host_says_when_it_booted() -> None:
    t = time.time()
    boot = t - 7200.0  # booted two hours ago; the process started 3600 s after boot
    state = fold_all([_sample(t, boot)])
    at = state.started_at(360_000)
    assert at is not None and abs(at - (boot + 3600.0)) < 1e-6
    assert SessionState().started_at(360_000) is None
    assert fold_all([_sample(t, None)]).started_at(360_000) is None


async def test_the_consent_modal_shows_start_times_and_the_unit_as_the_process_table_does() -> None:
    t = time.time()
    boot = t - 7200.0
    session = Session()
    session.publish(_sample(t, boot))
    app = ProbedApp(session)
    ref = ProcRef(pid=42, start_time=360_000, user="ana", gpus=[0], mem_mib=10.0, unit="docker:5d6c468c1f2e9a0b",
                  cmdline="python3 /opt/x/probe.py --device 0", reason="NVML: 10 MiB on GPU 0", kind="cuda")
    async with app.run_test(size=BIG) as pilot:
        screen = ConsentScreen(StepPreview(t, step="device", action="SIGTERM", targets=[ref]), "ana", "",
                               session.state)
        app.push_screen(screen)
        await pilot_until(pilot, lambda: screen.query_one("#consent-targets", DataTable).row_count == 1,
                          "the consent modal's row")
        table = screen.query_one("#consent-targets", DataTable)
        start = table.get_cell("42", "start")
        assert start == time.strftime("%H:%M:%S", time.localtime(boot + 3600.0))
        unit = table.get_cell("42", "unit")
        proc_unit = proc_cells(session.state.procs[0], PLAIN)[5]
        assert unit == proc_unit.plain == "docker:5d6c468c"  # type: ignore[union-attr]
        assert "probe.py --device 0" in table.get_cell("42", "what").plain


async def test_event_log_lines_use_the_whole_panel(tmp_path: Path) -> None:
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e")
        log = app.query_one(EventLog)

        def long_lines() -> list[str]:
            return [line for line in log.shown[-6:] if 60 < len(line) < 110]

        await pilot_until(pilot, lambda: long_lines() and all(line in screen_text(app) for line in long_lines()),
                          "the log's last long lines whole on screen")


async def test_gpu_names_are_whole_when_the_table_has_room() -> None:
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=(170, 40)) as pilot:
        await pilot.press("e")
        await pilot_until(pilot, lambda: app.session.state.gpus, "the first sample")
        name = app.session.state.gpus[0].name.removeprefix("NVIDIA ")
        assert len(name) > 18
        await pilot_until(pilot, lambda: name in screen_text(app), f"{name!r} whole on screen")


# -- 7. the footer, the run file, a second sweep, fast keys -------------------------------------------------

async def test_replay_footer_fits_80_columns_without_live_keys() -> None:
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=SMALL) as pilot:
        # the footer's keys are composed after the first frame: waited for (a loaded CI box drew it blank once)
        await pilot_until(pilot, lambda: "? Help" in screen_text(app).splitlines()[-1], "the footer's keys")
        footer = screen_text(app).splitlines()[-1]
        assert "? Help" in footer and "q Quit" in footer, footer
        assert "Sweep" not in footer and "Free GPUs" not in footer, footer
        await pilot.press("M")  # still answers: it needs a live host
        await pilot_until(pilot, lambda: any("need a live host" in n for n in app.notices), "the note")


async def test_help_names_the_run_file(tmp_path: Path) -> None:
    path = bundled_sample_run()
    app = replay_app(path, run_path=path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("question_mark")
        await pilot_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        assert str(path) in str(app.screen.query_one("#help-text").render())


def _two_sweeps(path: Path) -> Path:
    t = 1_750_000_000.0
    ev: list[object] = []
    for n, scale in enumerate((1.0, 1.5)):
        ev.append(PhaseStart(t, phase="macro", title=f"sweep {n + 1}"))
        for c in (1, 2, 4):
            t += 1.0
            ev.append(MacroPoint(t, concurrency=c, metrics={"output_throughput": 50.0 * c * scale,
                                                            "median_ttft_ms": 10.0 * c, "median_tpot_ms": 20.0,
                                                            "completed": 4 * c, "failed": 0, "num_prompts": 4 * c}))
        ev.append(PhaseEnd(t, phase="macro"))
    return write_run(path, ev, host="h")  # type: ignore[arg-type]


async def test_a_second_sweep_is_plotted_beside_the_first(tmp_path: Path) -> None:
    app = replay_app(_two_sweeps(tmp_path / "two.jsonl"))
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e", "b")
        await pilot_until(pilot, lambda: bool(app.query(BenchView)), "the Benchmarks tab")
        view = app.query_one(BenchView)
        await pilot_until(pilot, lambda: len(view.plotted_series.get("throughput", [])) == 2, "two series")
        first, second = view.plotted_series["throughput"]
        assert first == [(1, 50.0), (2, 100.0), (4, 200.0)]
        assert second == [(1, 75.0), (2, 150.0), (4, 300.0)]
        assert view.query_one("#throughput-box").border_title.endswith("2 sweeps")
        assert view.query_one(MacroTable).cell_text("2:4", "output_throughput") == "300"


async def test_a_second_sweep_keeps_the_first_ones_rows_in_the_table_by_sweep(tmp_path: Path) -> None:
    """The sweep-points table holds both sweeps' rows, each marked with its sweep (a second sweep used to
    replace the first one's rows); on screen as in the table."""
    app = replay_app(_two_sweeps(tmp_path / "two.jsonl"))
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e", "b")
        await pilot_until(pilot, lambda: bool(app.query(BenchView)), "the Benchmarks tab")
        table = app.query_one(BenchView).query_one(MacroTable)
        await pilot_until(pilot, lambda: table.row_count == 6, "six rows")
        assert table.column_texts("sweep") == ["1", "1", "1", "2", "2", "2"]
        assert table.column_texts("concurrency") == ["1", "2", "4"] * 2
        assert table.column_texts("output_throughput") == ["50", "100", "200", "75", "150", "300"]

        def rows_shown() -> list[str]:
            return [line for line in screen_text(app).splitlines() if "/4" in line or "/8" in line or "/16" in line]

        await pilot_until(pilot, lambda: len(rows_shown()) == 6, "the six rows on screen")
        lines = rows_shown()
        cells = [line.strip(" │").split()[:3] for line in lines]
        assert cells == [["1", "1", "50"], ["1", "2", "100"], ["1", "4", "200"],
                         ["2", "1", "75"], ["2", "2", "150"], ["2", "4", "300"]], lines
        assert "Sweep" in next(line for line in screen_text(app).splitlines() if "Out tok/s" in line)


async def test_keys_typed_fast_after_tab_in_the_sweep_dialog_go_to_the_next_field() -> None:
    app = sweep_app("http://127.0.0.1:9")
    async with app.run_test(size=BIG) as pilot:
        dialog = await open_dialog(app, pilot)
        for key in ("x", "tab", "m", "o", "tab", "tab", "7"):  # one burst, as a terminal delivers it
            app.post_message(events.Key(key, "\t" if key == "tab" else key))

        def values() -> dict[str, str]:
            return {k: dialog.query_one(f"#{k}", Input).value for k in ("url", "model", "concurrency")}

        # the burst's last key, "7", at the end of the concurrency field: every key has been handled
        await pilot_until(pilot, lambda: values()["concurrency"].endswith("7"), "the last key of the burst")
        assert isinstance(app.screen, MacroDialog)
        assert values() == {"url": "http://127.0.0.1:9x", "model": "mo", "concurrency": "1,2,4,8,16,32,64,1287"}


async def test_cleanup_tab_elapsed_matches_the_fold_on_the_bundled_run() -> None:
    app = replay_app(bundled_sample_run())
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e", "c")
        await pilot_until(pilot, lambda: bool(app.query(StepTable)), "the Cleanup tab")
        table = app.query_one(StepTable)
        cleanup = app.session.state.cleanup
        assert cleanup is not None
        await pilot_until(pilot, lambda: "graceful" in table.row_keys, "the steps")
        for name, step in cleanup.steps.items():
            if step.elapsed_s is not None:
                assert table.cell_text(name, "elapsed") == f"{step.elapsed_s:.2f} s"


async def test_the_plots_legend_numbers_a_sweep_as_the_table_does(tmp_path: Path) -> None:
    """A first sweep whose every request failed has rows (FAILED) but no line: the lines of the two after
    it are sweeps 2 and 3 in the legend, as in the table and the report (not 1 and 2)."""
    t = 1_750_000_000.0
    ev: list[object] = [PhaseStart(t, phase="macro", title="down")]
    for c in (1, 2):
        t += 1.0
        ev.append(MacroPoint(t, concurrency=c, metrics={"completed": 0, "failed": 4 * c, "num_prompts": 4 * c,
                                                        "errors": ["HTTP 503: model loading"]}))
    ev.append(PhaseEnd(t, phase="macro", ok=False))
    for scale in (1.0, 1.5):
        ev.append(PhaseStart(t, phase="macro", title="up"))
        for c in (1, 2):
            t += 1.0
            ev.append(MacroPoint(t, concurrency=c, metrics={"output_throughput": 50.0 * c * scale,
                                                            "median_ttft_ms": 10.0, "median_tpot_ms": 20.0,
                                                            "completed": 4 * c, "failed": 0, "num_prompts": 4 * c}))
        ev.append(PhaseEnd(t, phase="macro"))
    app = replay_app(write_run(tmp_path / "three.jsonl", ev, host="h"))  # type: ignore[arg-type]
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e", "b")
        await pilot_until(pilot, lambda: bool(app.query(BenchView)), "the Benchmarks tab")
        view = app.query_one(BenchView)
        table = view.query_one(MacroTable)
        await pilot_until(pilot, lambda: table.row_count == 6 and len(view.plotted_series.get("throughput", [])) == 2,
                       "six rows, two lines")
        assert table.column_texts("sweep") == ["1", "1", "2", "2", "3", "3"]
        assert table.column_texts("output_throughput") == ["FAILED", "FAILED", "50", "100", "75", "150"]
        legend = str(view.plots["throughput"].render())
        assert "sweep 2" in legend and "sweep 3" in legend and "sweep 1" not in legend
        assert "### Sweep 3: up" in render_report(RunReader(tmp_path / "three.jsonl"))


def test_the_process_table_says_whose_descriptors_keep_an_exited_pids_memory() -> None:
    """An exited pid the driver still lists reads as exited and kept by its children, never "not visible here";
    each child says whose memory it keeps. Another namespace's pid still reads "(not visible here)"."""
    dead = ProcSample(pid=520, gpu_mem_mib={0: 6662.0}, kind="exited", visible=False, held_by=[545, 546])
    kid = ProcSample(pid=545, start_time=7, kind="cuda", cmdline="python3 train.py", gpus=[0], inherits=[520])
    ghost = ProcSample(pid=4242, gpu_mem_mib={0: 512.0}, visible=False)
    assert proc_cells(dead, PLAIN)[-1].plain == (  # type: ignore[union-attr]
        "(exited; its memory kept by pid 545, 546 through inherited descriptors)")
    assert proc_cells(dead, PLAIN)[4].plain == "exited"  # type: ignore[union-attr]
    assert proc_cells(kid, PLAIN)[-1].plain == "keeps exited pid 520's memory · train.py"  # type: ignore[union-attr]
    assert proc_cells(ghost, PLAIN)[-1].plain == "(not visible here)"  # type: ignore[union-attr]
