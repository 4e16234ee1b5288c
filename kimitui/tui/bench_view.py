"""The benchmark view: the single-stream headline on its own, the sweep (status, progress), three plots
against concurrency (output tok/s, median TTFT, median TPOT; plotext, imported on first show), the
sweep's points, and the micro benchmark tables.

While a sweep started from the dashboard runs (or after it), the plots, table and headline show that
sweep's points, on an x axis of its planned levels, so the points fill in without the axis moving.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from kimitui.core.events import MacroPoint
from kimitui.core.state import SessionState
from kimitui.tui.bench_progress import HeadlineBox, SweepPanel, single_stream_content
from kimitui.tui.bench_runner import MacroRun, headline
from kimitui.tui.bench_tables import AllReduceTable, GemmTable, MacroTable

if TYPE_CHECKING:
    from textual_plotext import PlotextPlot

__all__ = ["PLOTS", "BenchView", "nice_ticks", "plot_series", "single_stream_content"]

PLOTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # (id, title, metric keys: the first one present in every point is plotted)
    ("throughput", "output tok/s", ("output_throughput",)),
    ("ttft", "TTFT ms", ("median_ttft_ms", "mean_ttft_ms")),
    ("tpot", "TPOT ms", ("median_tpot_ms", "mean_tpot_ms")),
)


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round y ticks from 0 to at least ``top``: steps of 1, 2, 2.5 or 5 times a power of ten."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / (count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    n = math.ceil(top / step)
    return [i * step for i in range(n + 1)]


def plot_series(points: list[MacroPoint], keys: tuple[str, ...]) -> tuple[str | None, list[tuple[int, float]]]:
    """(metric key, [(concurrency, value)]) for the first key every point with completed requests has.
    A level where every request failed has no latency: it is left out (not plotted as 0)."""
    usable = [p for p in points if p.concurrency > 0 and p.metrics.get("completed", 1)]
    for key in keys:
        values = [(p.concurrency, p.metrics.get(key)) for p in usable]
        if values and all(isinstance(v, int | float) and math.isfinite(v) for _, v in values):
            return key, [(c, float(v)) for c, v in values if isinstance(v, int | float)]
    return None, []


def stat_word(key: str | None) -> str:
    return "" if key is None else key.split("_", 1)[0]


class BenchView(VerticalScroll):
    """Everything the benchmarks measured; the plot widgets are created the first time it is shown."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.plots: dict[str, PlotextPlot] = {}
        self.plotted: dict[str, tuple[str | None, list[tuple[int, float]]]] = {}
        """What each plot shows: (metric key, [(concurrency, value)]) (for tests and the screenshot)."""
        self._plot_keys: dict[str, object] = {}

    @property
    def plot(self) -> PlotextPlot | None:
        """The output tok/s plot."""
        return self.plots.get("throughput")

    def compose(self) -> ComposeResult:
        with Horizontal(id="bench-head"):
            yield HeadlineBox(id="headline")
            yield SweepPanel(id="sweep-panel")
        with Horizontal(id="bench-plots"):
            for key, _, _ in PLOTS:
                yield Vertical(id=f"{key}-box", classes="plot-box")
        yield MacroTable(id="macro-table")
        yield Static("GEMM (micro, per GPU)", classes="section")
        yield GemmTable(id="gemm-table")
        yield Static("All-reduce (NCCL, all ranks)", classes="section")
        yield AllReduceTable(id="allreduce-table")

    def on_mount(self) -> None:
        self.query_one("#macro-table").border_title = "sweep points (TTFT and TPOT: mean and p99)"

    def _ensure_plots(self) -> dict[str, PlotextPlot]:
        if not self.plots:
            from textual_plotext import PlotextPlot  # heavy: imported on first show only

            for key, _, _ in PLOTS:
                plot = PlotextPlot(id=f"{key}-plot")
                self.plots[key] = plot
                self.query_one(f"#{key}-box").mount(plot)
        return self.plots

    def show(self, state: SessionState, run: MacroRun | None = None, live: bool = False) -> None:
        points = run.points(state) if run is not None else state.macro_points
        self.query_one(HeadlineBox).show(headline(points), measuring=run is not None and run.active)
        self.query_one(SweepPanel).show(state, points, run, live)
        self.query_one(MacroTable).show_points(points)
        self.query_one(GemmTable).show(state)
        self.query_one(AllReduceTable).show(state)
        self._draw_plots(points, run.levels if run is not None else None)

    def _draw_plots(self, points: list[MacroPoint], levels: list[int] | None) -> None:
        plots = self._ensure_plots()
        for key, title, metrics in PLOTS:
            metric, series = plot_series(points, metrics)
            axis = sorted(set(levels or []) | {c for c, _ in series})
            stamp = (metric, tuple(series), tuple(axis))
            box = self.query_one(f"#{key}-box")
            label = title if key == "throughput" else f"{title} ({stat_word(metric) or 'median'})"
            if box.border_title != label:
                box.border_title = label
            if self._plot_keys.get(key) == stamp:
                continue
            self._plot_keys[key] = stamp
            self.plotted[key] = (metric, series)
            draw(plots[key], series, axis)


def draw(plot: PlotextPlot, series: list[tuple[int, float]], axis: list[int]) -> None:
    """A line over log2(concurrency), ticks at the levels, y from 0 to a round top."""
    plt = plot.plt
    plt.clear_figure()
    plt.xlabel("concurrency")
    if axis:
        xs_axis = [math.log2(c) for c in axis]
        plt.xticks(xs_axis, [str(c) for c in axis])
        pad = max(0.25, (xs_axis[-1] - xs_axis[0]) * 0.04)
        plt.xlim(xs_axis[0] - pad, xs_axis[-1] + pad)
    if series:
        xs = [math.log2(c) for c, _ in series]
        ys = [v for _, v in series]
        if len(series) > 1:
            # cell-aligned dots: a braille line is drawn at sub-cell positions, off the level markers
            plt.plot(xs, ys, marker="dot")
        plt.scatter(xs, ys, marker="●")
        ticks = nice_ticks(max(ys))
        plt.yticks(ticks, [f"{v:g}" for v in ticks])
        plt.ylim(0, ticks[-1])
    plot.refresh()
