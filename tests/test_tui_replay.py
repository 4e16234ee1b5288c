"""Pilot tests of the dashboard on a small deterministic replay (tests/tui_runs.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import TabbedContent

from kimitui.core.events import GpuSample, HostSample, ProcSample
from kimitui.core.session import QueueSource, Session
from kimitui.tui.app import KimituiApp
from kimitui.tui.screens.help_screen import HelpScreen
from kimitui.tui.views.cleanup_view import StepTable
from kimitui.tui.views.macro_view import BenchView
from kimitui.tui.views.result_tables import AllReduceTable, GemmTable, MacroTable
from kimitui.tui.widgets.event_log import EventLog
from kimitui.tui.widgets.gpu_table import GpuTable
from kimitui.tui.widgets.proc_table import ProcTable
from tests.app_probe import ProbedApp
from tests.support import BIG, ROOT, FakeClock, replay_app, status_text
from tests.tui_runs import API_PID, MONITOR_PID, STUCK, TOKS, WORKER_PIDS, write_test_run
from tests.waiting import pilot_until


@pytest.fixture(scope="module")
def run_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_run(tmp_path_factory.mktemp("tui") / "campaign.jsonl")


def palette_highlight(app: KimituiApp) -> str | None:
    """The text of the command palette's highlighted hit, if the palette is open."""
    from textual.command import CommandList, CommandPalette

    if not isinstance(app.screen, CommandPalette):
        return None
    option_list = app.screen.query_one(CommandList)
    option = option_list.highlighted_option
    if option is None:
        return None
    return getattr(option, "hit", None).text if getattr(option, "hit", None) else str(option.prompt)


def phase_of(app: KimituiApp) -> str | None:
    span = app.session.state.phase
    return span.phase if span else None


async def test_replay_opens_with_gpu_and_process_tables(run_path: Path) -> None:
    clock = FakeClock()
    app = replay_app(run_path, clock)
    async with app.run_test(size=BIG) as pilot:
        assert app.player is not None
        assert app.player.position == 2  # the log line and the baseline start share the first instant
        clock.now += 1.0  # one second of run time: the first sample is due
        await pilot_until(pilot, lambda: len(app.query_one(GpuTable).row_keys) == 8, "8 GPU rows")
        gpus = app.query_one(GpuTable)
        assert gpus.column_texts("gpu") == [str(i) for i in range(8)]
        assert gpus.cell_text("0", "memory").endswith("90.2/95.6 GiB")
        assert gpus.cell_text("0", "name").startswith("RTX PRO 6000")
        assert gpus.cell_text("3", "power") == "330W"
        # GPU 7 reports no utilisation, temperature, power or clock: shown as '-'
        assert [gpus.cell_text("7", c) for c in ("util", "temp", "power", "clock")] == ["-"] * 4

        procs = app.query_one(ProcTable)
        await pilot_until(pilot, lambda: len(procs.row_keys) == 100, "100 process rows")
        # largest first: the 8 workers, each on its own GPU
        top = procs.row_keys[:8]
        assert [int(k.split(":")[0]) for k in top] == WORKER_PIDS
        assert procs.cell_text(top[0], "memory") == "89.64"  # GiB, the column says
        assert procs.cell_text(top[0], "kind") == "cuda"
        assert procs.cell_text(top[0], "unit") == "vllm.service"
        monitor = next(k for k in procs.row_keys if k.startswith(f"{MONITOR_PID}:"))
        assert procs.cell_text(monitor, "kind") == "handle"
        assert procs.cell_text(monitor, "gpus") == "0-7"
        # a command with brackets is shown as text, not read as markup
        filler = next(k for k in procs.row_keys if k.startswith("7003:"))
        assert procs.cell_text(filler, "command") == "probe_3.py [--quiet]"  # what python runs
        assert procs.border_title == "Processes (100)"
        # 100 processes do not fit at 120x40: the table scrolls, and the other panels keep their place
        assert procs.max_scroll_y > 0
        assert app.query_one("#event-log").region.bottom <= app.screen.region.bottom - 1
        assert "gpu-node-7" in status_text(app)
        assert "phase baseline" in status_text(app)


async def test_pause_step_and_speed(run_path: Path) -> None:
    clock = FakeClock()
    app = replay_app(run_path, clock)
    async with app.run_test(size=BIG) as pilot:
        player = app.player
        assert player is not None
        await pilot.press("space")
        assert player.paused
        await pilot_until(pilot, lambda: "PAUSED" in status_text(app), "PAUSED in the header")
        before = player.position
        clock.now += 30.0
        await pilot.pause()
        app._tick()
        assert player.position == before, "a paused replay must not move"
        await pilot.press("full_stop")
        assert player.position == before + 1
        assert app.session.state.events_folded == before + 1
        await pilot.press("plus", "plus")
        assert player.speed == 4.0
        await pilot.press("minus")
        assert player.speed == 2.0
        await pilot_until(pilot, lambda: " 2x" in status_text(app), "speed 2x in the header")
        await pilot.press("space")
        assert not player.paused
        app._tick()  # starts the clock from now
        resumed_at = player.elapsed
        clock.now += 3.0  # 3 s of wall time at 2x = 6 s of run time
        app._tick()
        assert player.elapsed - resumed_at == pytest.approx(6.0, abs=0.01)
        assert player.position > before + 1


async def test_phase_jumps_next_and_previous(run_path: Path) -> None:
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        assert phase_of(app) == "baseline"
        # paused, so the clock does not also publish the events that share a boundary's instant
        await pilot.press("space")
        seen = []
        for _ in range(10):
            await pilot.press("n")
            if phase_of(app) and (not seen or seen[-1] != phase_of(app)):
                seen.append(phase_of(app))
            if phase_of(app) == "macro":
                break
        assert seen[-2:] == ["cleanup", "macro"]
        await pilot_until(pilot, lambda: "phase macro" in status_text(app), "macro in the header")
        assert len(app.query_one(GpuTable).row_keys) == 8  # the seek rebuilt the state with samples
        # cleanup's end and macro's start share an instant: one boundary, so one press lands in cleanup
        await pilot.press("p")
        assert phase_of(app) == "cleanup"
        await pilot_until(pilot, lambda: "phase cleanup" in status_text(app), "cleanup in the header")
        # the event log was rebuilt from the state after the seek
        log = app.query_one(EventLog)
        await pilot_until(pilot, lambda: any("phase cleanup started" in ln for ln in log.shown), "cleanup log")
        assert not any("phase macro started" in ln for ln in log.shown)
        assert any("phase baseline ended" in ln for ln in log.shown)


async def test_jump_to_end_then_benchmark_and_cleanup_views(run_path: Path) -> None:
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        assert not app.query(BenchView)  # mounted when first shown
        await pilot.press("e")
        assert app.player is not None and app.player.finished
        await pilot_until(pilot, lambda: "END" in status_text(app), "END in the header")
        # after the cleanup only the NVML monitor is left and the GPUs are back at the driver's reserve
        assert app.query_one(GpuTable).cell_text("0", "memory").endswith("0.6/95.6 GiB")
        assert app.query_one(ProcTable).row_keys == [f"{MONITOR_PID}:900"]

        await pilot.press("b")
        assert app.query_one("#views", TabbedContent).active == "bench"
        macro = app.query_one(MacroTable)
        await pilot_until(pilot, lambda: len(macro.row_keys) == len(TOKS), "macro rows")
        assert macro.column_texts("concurrency") == [str(c) for c in TOKS]
        assert macro.cell_text("1:128", "output_throughput") == "1536"
        assert macro.cell_text("1:1", "output_throughput") == "72"
        single = str(app.query_one("#single-stream").render())
        assert "71.5 tok/s" in single and "peak 1536 tok/s" in single
        gemm = app.query_one("#gemm-table", GemmTable)
        assert gemm.column_texts("name") == ["qkv_proj", "o_proj", "moe_up"]
        assert gemm.cell_text("0", "roof") == "80%"
        ar = app.query_one("#allreduce-table", AllReduceTable)
        assert ar.column_texts("e_time") == ["27.8", "70.0"]
        assert ar.cell_text("1835008", "size") == "1,835,008"
        view = app.query_one(BenchView)
        assert view.plot is not None and view.plot.is_mounted
        await pilot_until(pilot, lambda: view.plot.size.width > 20 and view.plot.size.height > 8,  # type: ignore[union-attr]
                          "the plot laid out")

        await pilot.press("c")
        steps = app.query_one(StepTable)
        await pilot_until(pilot, lambda: len(steps.row_keys) == 3, "3 cleanup steps")
        assert steps.column_texts("status") == ["done", "done", "skipped"]
        assert steps.cell_text("kill_tree", "signals") == "SIGKILL x2 (2 exited)"
        # 3 s from the step's start, less the 1 s the operator took to confirm: the step acted for 2 s
        assert steps.cell_text("graceful_stop", "elapsed") == "2.00 s"
        verdict = str(app.query_one("#cleanup-verdict").render())
        assert "CLEAN" in verdict and "NOT CLEAN" not in verdict


async def test_cleanup_view_mid_cleanup(run_path: Path) -> None:
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        player = app.player
        assert player is not None
        await pilot.press("space")
        # just after the sample that follows the graceful stop: 2 stuck workers still hold their GPUs
        player.seek_index(player.reader.indices_of("sample")[6] + 1)
        await pilot.press("c")
        steps = app.query_one(StepTable)
        await pilot_until(pilot, lambda: steps.column_texts("status")[:2] == ["done", "pending"], "step states")
        assert "not yet" in str(app.query_one("#cleanup-verdict").render())
        await pilot.press("d")
        procs = app.query_one(ProcTable)
        await pilot_until(pilot, lambda: len(procs.row_keys) == 3, "2 stuck workers and the monitor")
        assert {int(k.split(":")[0]) for k in procs.row_keys} == {*STUCK, MONITOR_PID}
        assert API_PID not in {int(k.split(":")[0]) for k in procs.row_keys}


async def test_theme_switch_from_palette_and_action(run_path: Path) -> None:
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        assert app.theme == "kimitui-dark"
        assert {"kimitui-dark", "kimitui-light", "high-contrast"} <= set(app.loaded_theme_names)
        before = app.query_one(GpuTable).styles.background
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Theme: high")
        await pilot_until(pilot, lambda: palette_highlight(app) == "Theme: high-contrast", "palette hit")
        await pilot.press("enter")
        await pilot_until(pilot, lambda: app.theme == "high-contrast", "high-contrast theme")
        await pilot_until(pilot, lambda: app.query_one(GpuTable).styles.background != before, "the table restyled")
        app.action_set_theme("kimitui-light")
        assert app.theme == "kimitui-light"
        app.action_set_theme("no-such-theme")
        assert app.theme == "kimitui-light"


async def test_small_terminal_80x24(run_path: Path) -> None:
    clock = FakeClock()
    app = replay_app(run_path, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        clock.now += 1.0
        await pilot_until(pilot, lambda: len(app.query_one(GpuTable).row_keys) == 8, "8 GPU rows")
        assert app.screen.has_class("-compact")
        gpu = app.query_one(GpuTable)
        assert gpu.region.height >= 9 and gpu.region.right <= 80
        # every GPU column is visible at 80 columns
        assert gpu.virtual_size.width <= gpu.region.width
        procs = app.query_one(ProcTable)
        assert procs.region.height >= 4 and procs.display
        assert app.query_one(EventLog).region.bottom <= 23
        for key in ("b", "c", "d", "e", "b"):
            await pilot.press(key)
        await pilot_until(pilot, lambda: len(app.query_one(MacroTable).row_keys) == len(TOKS), "macro rows")
        assert app.query_one(MacroTable).region.height > 0
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)


async def test_help_screen_opens_and_closes(run_path: Path) -> None:
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        assert "jump to the next / previous phase boundary" in str(app.screen.query_one("#help-text").render())
        # the dashboard keeps drawing under the help screen
        app.action_to_end()
        assert "END" in status_text(app)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_malformed_theme_file_warns_and_app_starts(run_path: Path, tmp_path: Path) -> None:
    themes = tmp_path / "themes"
    themes.mkdir()
    (themes / "good.toml").write_text('name = "good"\nprimary = "#336699"\ndark = true\n')
    (themes / "broken.toml").write_text('name = "broken"\nprimary = "#336699\n')  # unterminated string
    (themes / "badcolour.toml").write_text('name = "badcolour"\nprimary = "not-a-colour"\n')
    app = replay_app(run_path, themes_dir=themes, theme="good")
    async with app.run_test(size=BIG) as pilot:
        await pilot_until(pilot, lambda: sum("broken.toml" in m or "badcolour.toml" in m for m in app.notices) == 2,
                          "a warning for each bad theme file")
        assert app.loaded_theme_names == ["good"]
        assert app.theme == "good"
        messages = list(app.notices)
        assert any("broken.toml" in m and "not valid TOML" in m for m in messages), messages
        assert len(app.query_one(GpuTable).columns) == 7


async def test_unknown_theme_falls_back_with_message(run_path: Path) -> None:
    app = replay_app(run_path, theme="neon-nonsense")
    async with app.run_test(size=BIG) as pilot:
        await pilot_until(pilot, lambda: any("unknown theme 'neon-nonsense'" in m for m in app.notices), "the warning")
        assert app.theme == "kimitui-dark"
        messages = list(app.notices)
        assert any("unknown theme 'neon-nonsense'" in m and "high-contrast" in m for m in messages), messages


async def test_palette_lists_replay_controls_and_themes(run_path: Path) -> None:
    from kimitui.tui.commands import palette_commands

    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        titles = [t for t, _, _ in palette_commands(app)]
        for needed in ("Replay: pause / resume", "Replay: next phase", "Replay: previous phase",
                       "Replay: jump to end", "Replay: speed 64x", "Replay: speed 0.5x", "View: benchmarks",
                       "View: cleanup", "Theme: high-contrast", "Theme: kimitui-light"):
            assert needed in titles
        run = dict((t, cb) for t, _, cb in palette_commands(app))
        run["Replay: speed 64x"]()
        assert app.player is not None and app.player.speed == 64.0
        run["View: cleanup"]()
        await pilot_until(pilot, lambda: app.query_one("#views", TabbedContent).active == "cleanup"
                          and app.query("#cleanup-plan"), "the cleanup tab shown")


async def test_live_source_is_pumped_into_the_views() -> None:
    source = QueueSource()
    session = Session()
    app = ProbedApp(session, sources=[source], host_label="sim-host")
    async with app.run_test(size=BIG) as pilot:
        assert "sim-host" in status_text(app)
        source.put(HostSample(t=1000.0, host="sim-host", seq=1,
                              gpus=[GpuSample(index=i, uuid=f"u{i}", name="Sim GPU", mem_used_mib=1024.0 * i,
                                              mem_total_mib=8192.0) for i in range(2)],
                              procs=[ProcSample(pid=42, user="me", gpu_mem_mib={1: 1024.0}, kind="cuda")]))
        await pilot_until(pilot, lambda: len(app.query_one(GpuTable).row_keys) == 2, "live GPU rows")
        assert app.query_one(GpuTable).cell_text("1", "memory").endswith("1.0/8.0 GiB")
        await pilot_until(pilot, lambda: app.query_one(ProcTable).row_keys == ["42:-"], "live process row")
        # replay controls are not offered without a player
        assert app.check_action("toggle_pause", ()) is False
        source.close()


async def test_exit_after_first_frame(run_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMITUI_EXIT_AFTER_FIRST_FRAME", "1")
    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        await pilot_until(pilot, lambda: app.first_frame_s is not None, "first frame")
    assert app.first_frame_s is not None and app.first_frame_s > 0
    assert app.return_code == 0


def test_importing_the_app_does_not_import_plotext() -> None:
    code = "import sys, kimitui.tui.app; print('textual_plotext' in sys.modules, 'plotext' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_importing_the_launcher_does_not_import_textual() -> None:
    code = "import sys, kimitui.tui; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_an_exit_right_after_a_view_is_asked_for_leaves_no_error(run_path: Path) -> None:
    """A view mounted on first show whose mount finishes while the app exits is not drawn: its children are
    gone by then, and drawing it raised NoMatches from the mount's worker (run_test re-raised it)."""
    from kimitui.tui.commands import palette_commands

    app = replay_app(run_path)
    async with app.run_test(size=BIG) as pilot:
        dict((t, cb) for t, _, cb in palette_commands(app))["View: cleanup"]()
        await pilot_until(pilot, lambda: app.query_one("#views", TabbedContent).active == "cleanup", "the cleanup tab")
    # leaving run_test without its WorkerFailed is the test
