"""The benchmark view: the single-stream headline on its own, the sweep (status, progress), three plots
against concurrency (output tok/s, median TTFT, median TPOT; plotext, imported on first show), the
sweep's points, and the micro benchmark tables.

The headline shows the latest sweep; the table every sweep's points, sweep by sweep; the plots the
latest sweep and the ones before it (up to ``SERIES``), each a series of its own, on an x axis of every
planned level, so the points fill in without the axis moving. A level where every request failed is not
a point (it is no zero): the table and the sweep panel say it failed and why.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from kimitui.core.events import MacroPoint, ServerSample, level_failed
from kimitui.core.state import SessionState, Sweep
from kimitui.tui.views.base import ViewContext
from kimitui.tui.views.compare_overlay import COMPARE_COLOR, compare_of
from kimitui.tui.views.macro_progress import HeadlineBox, SweepPanel, single_stream_content, sweep_headline
from kimitui.tui.views.result_tables import AllReduceTable, GemmTable, MacroTable, sweep_numbers

if TYPE_CHECKING:
    from textual_plotext import PlotextPlot

__all__ = ["PLOTS", "SERVER_PLOTS", "BenchView", "nice_ticks", "plot_series", "server_series",
           "single_stream_content"]

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


SERVER_PLOTS: tuple[tuple[str, str], ...] = (
    # (id, title): the server's own gauges through the latest sweep, under the tok/s plot
    ("server-requests", "server: running, waiting"),
    ("server-kv", "server: KV cache %"),
)


def server_series(samples: list[ServerSample]) -> dict[str, list[list[tuple[float, float]]]]:
    """Per server plot, its lines of (seconds since the first sample, value): running and waiting
    requests; the KV cache in use, in %. A gauge the engine does not have gives no line."""
    if not samples:
        return {key: [] for key, _ in SERVER_PLOTS}
    t0 = samples[0].t

    def line(values: list[tuple[float, float | None]]) -> list[tuple[float, float]]:
        return [(t, v) for t, v in values if v is not None]

    running = line([(s.t - t0, s.running) for s in samples])
    waiting = line([(s.t - t0, s.waiting) for s in samples])
    kv = line([(s.t - t0, None if s.kv_cache is None else s.kv_cache * 100) for s in samples])
    return {"server-requests": [one for one in (running, waiting) if one], "server-kv": [kv] if kv else []}


SERIES = 4
"""Sweeps plotted at once (the latest and the ones before it)."""


def plot_series(points: list[MacroPoint], keys: tuple[str, ...]) -> tuple[str | None, list[tuple[float, float]]]:
    """(metric key, [(level, value)]) for the first key every point with completed requests has; a level is
    its concurrency, or its rate where the sweep's levels are rates (``MacroPoint.key``). A level where every
    request failed has no throughput or latency: it is left out (never plotted as 0)."""
    usable = [p for p in points if p.key > 0 and not level_failed(p) and p.result.completed != 0]
    for key in keys:
        values = [(p.key, p.result.figure(key)) for p in usable]
        if values and all(v is not None for _, v in values):
            return key, [(c, v) for c, v in values if v is not None]
    return None, []


def stat_word(key: str | None) -> str:
    return "" if key is None else key.split("_", 1)[0]


def plot_titles(key: str, title: str, metric: str | None, sweeps: int, compared: bool) -> list[str]:
    """A plot's title, wordiest first: ``TTFT ms (median), 2 sweeps, cyan: B (--compare)`` down to
    ``TTFT p50 ms`` for a narrow box."""
    stat = stat_word(metric) or "median"
    head = [title] if key == "throughput" else [f"{title} ({stat})", f"{title.split()[0]} "
                                               f"{'p50' if stat == 'median' else stat} {title.split()[-1]}"]
    tails = [f", {sweeps} sweeps" if sweeps > 1 else "", ", cyan: B (--compare)" if compared else ""]
    tail = "".join(tails)
    short_tail = (f", {sweeps} sweeps" if sweeps > 1 else "") + (", B cyan" if compared else "")
    return [h + t for t, h in ((tail, head[0]), (short_tail, head[0]), *((short_tail, h) for h in head[1:]),
                               *(("", h) for h in head))]


def fit_title(titles: list[str], width: int) -> str:
    """The first of TITLES that fits in a border WIDTH cells wide (its corners and a space each side taken);
    the last one, which Textual cuts, if none does."""
    room = width - 4
    return next((t for t in titles if len(t) <= room), titles[-1]) if width else titles[0]


class BenchView(VerticalScroll):
    """Everything the benchmarks measured; the plot widgets are created the first time it is shown."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.plots: dict[str, PlotextPlot] = {}
        self.plotted: dict[str, tuple[str | None, list[tuple[float, float]]]] = {}
        """What each plot shows of the latest sweep: (metric key, [(concurrency, value)])."""
        self.plotted_series: dict[str, list[list[tuple[float, float]]]] = {}
        """Every series each plot shows, oldest sweep first."""
        self._plot_keys: dict[str, tuple[object, ...]] = {}
        """What each plot was last drawn from; its last item is the width it was drawn at."""
        self.plotted_server: dict[str, list[list[tuple[float, float]]]] = {}
        """What each server plot shows: its lines of (seconds into the sweep, value)."""
        self._last_sweeps: list[tuple[int, Sweep]] | None = None
        """The sweeps plotted, each with its number."""
        self._last_server: list[ServerSample] = []

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
        with Horizontal(id="server-plots"):
            for key, _ in SERVER_PLOTS:
                yield Vertical(id=f"{key}-box", classes="plot-box")
        yield MacroTable(id="macro-table")
        yield Static("GEMM (micro, per GPU)", classes="section")
        yield GemmTable(id="gemm-table")
        yield Static("All-reduce (NCCL, all ranks)", classes="section")
        yield AllReduceTable(id="allreduce-table")

    def on_mount(self) -> None:
        self.query_one("#macro-table").border_title = "sweep points (TTFT and TPOT: mean and p99)"
        self.query_one("#server-plots").display = False
        for key, title in SERVER_PLOTS:
            self.query_one(f"#{key}-box").border_title = title

    def _ensure_plots(self) -> dict[str, PlotextPlot]:
        if not self.plots:
            plot_class = resized_plot_class()  # heavy: imported on first show only
            for key in [k for k, _, _ in PLOTS] + [k for k, _ in SERVER_PLOTS]:
                plot = plot_class(self._draw_again, id=f"{key}-plot")
                self.plots[key] = plot
                self.query_one(f"#{key}-box").mount(plot)
            # a plot just mounted has no width yet (its x ticks would be chosen for 8 cells) and the view's
            # own size may not change when it is laid out: drawn again once the layout gave it its width
            self.call_after_refresh(self._draw_again)
        return self.plots

    def drawn_at_their_width(self) -> bool:
        """Every plot shown and drawn so far was drawn at the width it has now (its ticks chosen for it)."""
        return all(self._plot_keys[key][-1] == plot.size.width for key, plot in self.plots.items()
                   if key in self._plot_keys and plot.size.width)

    def _draw_again(self) -> None:
        if self._last_sweeps is not None:
            self._draw_plots(self._last_sweeps)
        if self._last_server:
            self._draw_server(self._last_server)

    def draw(self, ctx: ViewContext) -> None:
        self.show(ctx.state, live=ctx.live)

    def show(self, state: SessionState, live: bool = False) -> None:
        sweep = state.sweep
        points = sweep.point_list if sweep is not None else []
        self.query_one(HeadlineBox).show(sweep_headline(sweep), measuring=sweep is not None and sweep.active)
        self.query_one(SweepPanel).show(state, points, live)
        self.query_one(MacroTable).show(state)
        self.query_one("#gemm-table", GemmTable).show(state.gemm)
        self.query_one("#allreduce-table", AllReduceTable).show(state.allreduce)
        self._draw_plots(list(zip(sweep_numbers(state.sweeps), state.sweeps, strict=True))[-SERIES:])
        self._draw_server(sweep.server if sweep is not None else [])

    def on_resize(self) -> None:
        # the x ticks are chosen for the plot's width: a laid-out or resized plot is drawn again
        if self._last_sweeps is not None:
            self.call_after_refresh(self._draw_plots, self._last_sweeps)

    def _draw_plots(self, sweeps: list[tuple[int, Sweep]]) -> None:
        self._last_sweeps = sweeps
        plots = self._ensure_plots()
        axis_of = sweeps[-1][1].axis if sweeps else "concurrency"
        sweeps = [(n, s) for n, s in sweeps if s.axis == axis_of]  # rates and concurrencies share no x axis
        levels = sorted({c for _, s in sweeps for c in s.levels})
        for key, title, metrics in PLOTS:
            metric: str | None = None
            series: list[list[tuple[float, float]]] = []
            numbers: list[int] = []
            for n, sweep in sweeps:
                m, one = plot_series(sweep.point_list, metrics)
                if sweep is sweeps[-1][1] or one:
                    series.append(one)
                    numbers.append(n)
                metric = m or metric
            latest = series[-1] if series else []
            labels = [f"sweep {n}" for n in numbers] if len(series) > 1 else [None] * len(series)
            compare = compare_of(self.app) if key == "throughput" and axis_of == "concurrency" else None
            if compare is not None and compare.tok_s:  # replay --compare: run B's curve over A's
                series, labels = [*series, compare.tok_s], [*(lb or "A" for lb in labels), compare.label]
            axis = sorted(set(levels) | {c for one in series for c, _ in one})
            stamp = (metric, axis_of, tuple(tuple(one) for one in series), tuple(numbers), tuple(axis),
                     plots[key].size.width)
            box = self.query_one(f"#{key}-box")
            label = fit_title(plot_titles(key, title, metric, len(numbers),
                                          compare is not None and bool(compare.tok_s)), box.size.width)
            if box.border_title != label:
                box.border_title = label
            if self._plot_keys.get(key) == stamp:
                continue
            self._plot_keys[key] = stamp
            self.plotted[key] = (metric, latest)
            self.plotted_series[key] = series
            draw(plots[key], series, axis, numbers, labels if compare is not None else None,
                 "request rate (req/s)" if axis_of == "rate" else "concurrency")


    def _draw_server(self, samples: list[ServerSample]) -> None:
        """The server's gauges through the latest sweep; the row is hidden while it has none."""
        self._last_server = samples
        row = self.query_one("#server-plots")
        row.display = bool(samples)
        if not samples:
            return
        plots = self._ensure_plots()
        for key, lines in server_series(samples).items():
            stamp = (len(samples), samples[-1].t, plots[key].size.width)
            if self._plot_keys.get(key) == stamp:
                continue
            self._plot_keys[key] = stamp
            self.plotted_server[key] = lines
            draw_in_time(plots[key], lines, ("running", "waiting") if key == "server-requests" else ("KV %",))


@functools.cache
def resized_plot_class() -> type[PlotextPlot]:
    """A plot that calls back when its size changes: its x ticks are chosen for its width, and a plot can be
    resized while the view holding it is not (a scrollbar appears, the boxes share the row anew)."""
    from textual_plotext import PlotextPlot

    class ResizedPlot(PlotextPlot):
        def __init__(self, on_resized: Callable[[], None], **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._on_resized = on_resized

        def on_resize(self) -> None:
            self.call_after_refresh(self._on_resized)

    return ResizedPlot


SERIES_COLORS = ("green", "yellow", "magenta", "cyan")
"""Oldest to newest: the latest sweep is drawn last, on top."""


Y_AXIS_CELLS = 7
"""The y axis' labels and line, left of the plot area (about: the x ticks are placed in what is left)."""


def spaced_ticks(levels: list[float], lo: float, hi: float, width: int) -> list[float]:
    """The levels whose labels fit side by side (a space between) on an axis ``width`` cells wide from
    log2 ``lo`` to ``hi``, left to right. Chosen here, not by plotext: it drops overlapping labels in an
    order that changes from run to run."""
    kept: list[float] = []
    end = -2.0
    for c in levels:
        label = f"{c:g}"
        col = (math.log2(c) - lo) / (hi - lo) * (width - 1)
        start = col - len(label) / 2
        if start > end + 1:
            kept.append(c)
            end = start + len(label)
    return kept


def draw(plot: PlotextPlot, series: list[list[tuple[float, float]]], axis: list[float],
         numbers: list[int] | None = None, labels: list[str | None] | None = None,
         xlabel: str = "concurrency") -> None:
    """A line per sweep over log2(level: the concurrency, or the request rate), ticks at the levels, y from 0
    to a round top; with more than one, each labelled with its sweep's number (``numbers``, else 1, 2, ...),
    or with ``labels`` (replay --compare: the last line is run B's, in its own colour)."""
    plt = plot.plt
    plt.clear_figure()
    plt.xlabel(xlabel)
    if axis:
        xs_axis = [math.log2(c) for c in axis]
        pad = max(0.25, (xs_axis[-1] - xs_axis[0]) * 0.04)
        lo, hi = xs_axis[0] - pad, xs_axis[-1] + pad
        ticks = spaced_ticks(axis, lo, hi, max(plot.size.width - Y_AXIS_CELLS, 8))
        plt.xticks([math.log2(c) for c in ticks], [f"{c:g}" for c in ticks])
        plt.xlim(lo, hi)
    top = 0.0
    for n, one in enumerate(series):
        if not one:
            continue
        color = SERIES_COLORS[(n - len(series)) % len(SERIES_COLORS)]
        if labels is not None and n == len(series) - 1:
            color = COMPARE_COLOR
        xs = [math.log2(c) for c, _ in one]
        ys = [v for _, v in one]
        if len(one) > 1:
            # cell-aligned dots: a braille line is drawn at sub-cell positions, off the level markers
            plt.plot(xs, ys, marker="dot", color=color)
        number = numbers[n] if numbers is not None and n < len(numbers) else n + 1
        label = labels[n] if labels is not None else f"sweep {number}" if len(series) > 1 else None
        plt.scatter(xs, ys, marker="●", color=color, label=label)
        top = max(top, *ys)
    if top > 0:
        ticks = nice_ticks(top)
        plt.yticks(ticks, [f"{v:g}" for v in ticks])
        plt.ylim(0, ticks[-1])
    plot.refresh()


def draw_in_time(plot: PlotextPlot, lines: list[list[tuple[float, float]]], labels: tuple[str, ...]) -> None:
    """Lines over the seconds of the sweep, y from 0 to a round top."""
    plt = plot.plt
    plt.clear_figure()
    plt.xlabel("s")
    top = 0.0
    for n, one in enumerate(lines):
        xs, ys = [t for t, _ in one], [v for _, v in one]
        plt.plot(xs, ys, marker="braille", color=SERIES_COLORS[n % len(SERIES_COLORS)],
                 label=labels[n] if n < len(labels) and len(lines) > 1 else None)
        top = max(top, *ys)
    ticks = nice_ticks(top if top > 0 else 1.0)
    plt.yticks(ticks, [f"{v:g}" for v in ticks])
    plt.ylim(0, ticks[-1])
    plot.refresh()
