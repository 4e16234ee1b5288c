"""The benchmark view: output tok/s against concurrency (plotext, imported on first show), the sweep's
points, single-stream tok/s on its own, and the micro benchmark tables."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Static

from kimitui.state import SessionState
from kimitui.tui import fmt
from kimitui.tui.bench_tables import AllReduceTable, GemmTable, MacroTable

if TYPE_CHECKING:
    from textual_plotext import PlotextPlot


def single_stream_content(state: SessionState) -> Content:
    tok = state.single_stream_tok_s()
    peak = max((p.metrics.get("output_throughput") or 0.0 for p in state.macro_points), default=None)
    parts: list[str | tuple[str, str]] = [("single stream ", "$text-muted"),
                                          (fmt.num(tok, "{:.1f}", " tok/s"), "bold $accent")]
    if peak:
        parts += [("   peak ", "$text-muted"), (f"{peak:.0f} tok/s", "bold")]
    parts += [("   points ", "$text-muted"), str(len(state.macro))]
    return Content.assemble(*parts)


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round y ticks from 0 to at least ``top``: steps of 1, 2, 2.5 or 5 times a power of ten."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / (count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    n = math.ceil(top / step)
    return [i * step for i in range(n + 1)]


class BenchView(VerticalScroll):
    """Everything the benchmarks measured; the plot widget is created the first time it is shown."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.plot: PlotextPlot | None = None
        self._plotted: tuple[tuple[int, float], ...] | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="bench-top"):
            yield Vertical(id="plot-box")
            with Vertical(id="macro-box"):
                yield Static(id="single-stream")
                yield MacroTable(id="macro-table")
        yield Static("GEMM (micro, per GPU)", classes="section")
        yield GemmTable(id="gemm-table")
        yield Static("All-reduce (NCCL, all ranks)", classes="section")
        yield AllReduceTable(id="allreduce-table")

    def _ensure_plot(self) -> PlotextPlot:
        if self.plot is None:
            from textual_plotext import PlotextPlot  # heavy: imported on first show only

            self.plot = PlotextPlot(id="throughput-plot")
            self.query_one("#plot-box").mount(self.plot)
        return self.plot

    def show(self, state: SessionState) -> None:
        self.query_one("#single-stream", Static).update(single_stream_content(state))
        self.query_one(MacroTable).show(state)
        self.query_one(GemmTable).show(state)
        self.query_one(AllReduceTable).show(state)
        self._draw_plot(state)

    def _draw_plot(self, state: SessionState) -> None:
        plot = self._ensure_plot()
        points = tuple(
            (p.concurrency, float(p.metrics["output_throughput"]))
            for p in state.macro_points
            if isinstance(p.metrics.get("output_throughput"), int | float) and p.concurrency > 0
        )
        if points == self._plotted:
            return
        self._plotted = points
        plt = plot.plt
        plt.clear_figure()
        plt.title("output tok/s vs concurrency")
        plt.xlabel("concurrency (log2)")
        if points:
            xs = [math.log2(c) for c, _ in points]
            ys = [tok for _, tok in points]
            plt.plot(xs, ys, marker="braille")
            plt.xticks(xs, [str(c) for c, _ in points])
            ticks = nice_ticks(max(ys))
            plt.yticks(ticks, [f"{v:g}" for v in ticks])
            plt.ylim(0, ticks[-1])
        plot.refresh()
