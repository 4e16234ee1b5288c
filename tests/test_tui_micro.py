"""The Micro tab replays a recorded micro run (made by the real workers in their modelled mode, through
the runner and the worker stand-in) and shows its progress, plots and tables; live, K on a simulated
host that still holds its GPUs is refused and names the holders, then runs when overridden."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from textual.widgets import Static, TabbedContent

from kimitui.bench.micro.runner import MicroConfig, MicroRunner
from kimitui.core.events import Event, PhaseEnd, PhaseStart
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader, RunWriter
from kimitui.core.session import Session
from kimitui.hosts.local import LocalHost
from kimitui.hosts.sim.layout import create_layout, make_gpus
from kimitui.tui.app import KimituiApp
from kimitui.tui.views.micro_view import MicroView, ShapesTable
from kimitui.tui.views.result_tables import AllReduceTable, GemmTable
from tests.support import BIG, FakeClock
from tests.waiting import pilot_until


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded micro run: the modelled workers on a simulated host's layout (8 GPUs)."""
    import asyncio

    tmp = tmp_path_factory.mktemp("micro")
    layout = create_layout(make_gpus(8), parent=str(tmp))
    events: list[Event] = []
    cfg = MicroConfig(modelled="rtx-pro-6000", sim_dir=str(layout.root), ms=[1, 8, 64], sweep_max=1 << 20,
                      burst_tokens=[1, 8], force=True, gpus=list(range(8)))
    events.append(PhaseStart(time.time(), phase="micro", title="micro"))
    async def run() -> None:
        async with LocalHost() as host:
            await MicroRunner(host, "kimi-node-01", cfg, events.append).run()

    asyncio.run(run())
    events.append(PhaseEnd(time.time(), phase="micro"))
    path = tmp / "micro.jsonl"
    with RunWriter(path, host="kimi-node-01") as w:
        for ev in events:
            w.append(ev)
    return path


async def test_the_micro_tab_replays_a_recorded_run(micro_run: Path) -> None:
    session = Session()
    app = KimituiApp(session, player=Player(RunReader(micro_run), session, clock=FakeClock()))
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e", "u")
        assert app.query_one("#views", TabbedContent).active == "micro"
        await pilot_until(pilot, lambda: bool(app.query(MicroView)), "the Micro tab mounted")
        gemm = app.query_one("#micro-gemm", GemmTable)
        await pilot_until(pilot, lambda: len(gemm.row_keys) == len(session.state.gemm), "GEMM rows")
        status = str(app.query_one("#micro-status", Static).render())
        assert "SIMULATED" in status and "gemm" in status and "done" in status
        assert "8 x PCIe Gen5 x16, no NVLink, P2P OK" in status
        shapes = app.query_one(ShapesTable)
        assert shapes.column_texts("name")[:2] == ["fused_qkv_a", "q_b_proj"]
        assert shapes.cell_text("moe_w13", "nk") == "[384, 512, 7168]"
        nccl = app.query_one("#micro-nccl", AllReduceTable)
        assert nccl.cell_text("14336", "tokens") == "1" and nccl.cell_text("14336", "e_wrong") == "0"
        view = app.query_one(MicroView)
        latency, = view.plotted["ar-latency"]  # type: ignore[misc]
        assert set(latency) == {"eager", "graph"}  # type: ignore[arg-type]
        busbw, limit = view.plotted["ar-busbw"]  # type: ignore[misc]
        assert set(busbw) == {"eager", "graph"} and limit == 63.0  # the link's limit is drawn beside the measured busbw
        roof, = view.plotted["gemm-roof"]  # type: ignore[misc]
        assert "moe (8 of 384) (marlin)" in roof and [m for m, _ in roof["lm_head (bf16)"]] == [1, 8, 64]  # type: ignore[index]
        burst, = view.plotted["burst"]  # type: ignore[misc]
        assert [m for m, _ in burst] == [1, 8]  # type: ignore[union-attr]
        bursts = str(app.query_one("#micro-bursts", Static).render())
        assert "122 all-reduces at M=1" in bursts


async def test_live_micro_run_refused_overridden_and_cancelled() -> None:
    from kimitui.core.events import MicroEnd
    from kimitui.hosts.sim.host import SimHost
    from kimitui.hosts.telemetry import TelemetrySource
    from kimitui.live.context import LiveContext
    from kimitui.tui.screens.micro_override import OverrideScreen

    async with SimHost(gpus=2, stuck_workers=0, nvml_monitor=False) as host:
        source = TelemetrySource(host, interval=0.1, sim_dir=host.sim_dir, dev_prefix=host.dev_prefix)
        live = LiveContext(host, "sim", simulated=True, sim_dir=host.sim_dir)
        session = Session()
        app = KimituiApp(session, host_label="sim", sources=[source], live=live)
        app.micro.defaults = {"ms": [1, 8, 64, 256], "sweep_max": 1 << 30, "burst_tokens": [1], "pace_s": 0.1}
        async with app.run_test(size=BIG) as pilot:
            await pilot_until(pilot, lambda: len(session.state.procs) >= 2, "the vLLM workers in telemetry")
            await pilot.press("K")
            await pilot_until(pilot, lambda: isinstance(app.screen, OverrideScreen), "the override question")
            refused = next(e for e in reversed(session.state.micro_runs[-1].ends.values()))
            assert refused.status == "refused" and len(refused.holders) == 2
            # the question says who holds the GPUs, by pid and command, before it asks to run beside them
            asked = str(app.screen.query_one(Static).render())
            assert "held by 2 process(es)" in asked
            for h in refused.holders:
                assert f"pid {h.pid}" in asked
            assert "VLLM::Worker_TP" in asked
            assert "refused" in str(app.screen_stack[0].query_one("#micro-status", Static).render())
            await pilot.press("y")
            run = lambda: session.state.micro  # noqa: E731
            await pilot_until(pilot, lambda: len(session.state.micro_runs) == 2 and "gemm" in run().progress,
                           "the overridden run's progress")
            assert run().plan.forced
            await pilot.press("x")
            await pilot_until(pilot, lambda: not app.micro.running, "the run to end")
            ends = [e for e in run().ends.values() if isinstance(e, MicroEnd)]
            assert [e.status for e in ends] == ["cancelled", "cancelled"]
            # the view shows it at its next redraw (drawn at most REDRAW_HZ times a second)
            status = app.screen_stack[0].query_one("#micro-status", Static)
            await pilot_until(pilot, lambda: "cancelled" in str(status.render()), "the status to say cancelled")
            source.stop()


async def test_the_bundled_campaign_shows_its_micro_rows() -> None:
    """The bundled campaign's Phase 2 (modelled on the simulated host) fills the Micro tab, marked simulated."""
    from kimitui.resources import bundled_sample_run

    session = Session()
    app = KimituiApp(session, player=Player(RunReader(bundled_sample_run()), session, clock=FakeClock()))
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e", "u")
        await pilot_until(pilot, lambda: bool(app.query(MicroView)), "the Micro tab mounted")
        gemm = app.query_one("#micro-gemm", GemmTable)
        await pilot_until(pilot, lambda: len(gemm.row_keys) == len(session.state.gemm) > 0, "GEMM rows")
        status = str(app.query_one("#micro-status", Static).render())
        assert status.startswith("micro run ") and "SIMULATED" in status
        sizes = {r.size_bytes for r in session.state.allreduce if r.burst == 1}
        nccl = app.query_one("#micro-nccl", AllReduceTable)
        assert len(nccl.row_keys) == len(sizes) > 0  # a line per size: eager and graph


def plot_y_labels(screen: str, title: str) -> list[str]:
    """The y tick labels of the plot boxed under ``title``, top to bottom, as the screen shows them."""
    lines = screen.splitlines()
    top = next(i for i, line in enumerate(lines) if title in line)
    left = lines[top].rindex("╭", 0, lines[top].index(title))
    right = lines[top].index("╮", left)
    labels = []
    for line in lines[top + 1:]:
        box = line[left:right + 1]
        if box.startswith("╰"):
            break
        if "┤" in box:
            labels.append(box[1:box.index("┤")].strip())
    return labels


def tick_value(label: str) -> float:
    return float(label[:-1]) * 1000 if label.endswith("k") else float(label)


async def test_the_all_reduce_latency_plot_has_a_log_axis() -> None:
    """The latency spans decades (a few us at 1 KiB, ms at 64 MiB): its y axis is logarithmic, labelled
    at powers of ten, so the small sizes are not a flat line at the bottom."""
    from kimitui.resources import bundled_sample_run
    from tests.screen_text import screen_text

    session = Session()
    app = KimituiApp(session, player=Player(RunReader(bundled_sample_run()), session, clock=FakeClock()))
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e", "u")
        await pilot_until(pilot, lambda: bool(app.query(MicroView)), "the Micro tab mounted")
        view = app.query_one(MicroView)
        await pilot_until(pilot, lambda: bool(view.plotted.get("ar-latency", ({},))[0]), "the latency plot")
        latency, = view.plotted["ar-latency"]  # type: ignore[misc]
        times = [t for pts in latency.values() for _, t in pts]  # type: ignore[attr-defined]
        assert max(times) / min(times) > 100  # decades apart: what a linear axis flattens
        await pilot_until(pilot, lambda: len(plot_y_labels(screen_text(app), "all-reduce us")) >= 3, "y labels")
        screen = screen_text(app)
        labels = plot_y_labels(screen, "all-reduce us")
        values = [tick_value(label) for label in labels]
        assert all(a / b == 10 for a, b in itertools.pairwise(values)), labels
        assert values[-1] <= min(times) and values[0] >= max(times), (labels, min(times), max(times))
        assert "all-reduce us (log)" in screen  # the box says so


def test_log_ticks_cover_the_range_with_round_values() -> None:
    from kimitui.tui.views.micro_view import log_ticks, us_tick

    assert log_ticks(3.2, 47_790) == [1, 10, 100, 1_000, 10_000, 100_000]
    assert log_ticks(19, 25) == [10, 20, 50]  # within a decade: 1, 2 and 5 times its powers of ten
    assert log_ticks(20, 20) == [10, 20, 50]  # one value: a tick either side
    assert [us_tick(t) for t in (10, 500, 1000, 20_000)] == ["10", "500", "1k", "20k"]
