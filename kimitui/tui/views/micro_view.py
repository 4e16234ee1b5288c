"""The Micro tab: the micro run's status and progress per part, the interconnect, what each worker found,
four plots (all-reduce latency and busbw against message size with the link's limit, GEMM % of roofline
per shape against M, the 122-all-reduce burst against M), the shapes of the run's plan, and the GEMM and
all-reduce tables (nccl-tests' columns). Everything comes from the fold; the series are pure functions of
the state (tested without a terminal)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.columns import Columns
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from kimitui.core.describe import describe
from kimitui.core.events import AllReduceRow, GemmRow
from kimitui.core.figures import roofline_pct
from kimitui.core.state import MicroRunState, SessionState
from kimitui.tui import fmt
from kimitui.tui.views.base import ViewContext
from kimitui.tui.views.result_tables import AllReduceTable, GemmTable
from kimitui.tui.widgets.keyed_table import KeyedTable

if TYPE_CHECKING:
    from textual_plotext import PlotextPlot

INT4_HINT = "torch-int4 (tinygemm) is honest only near M=1: it stands in for Marlin where vLLM is not installed"
PLOTS = (("ar-latency", "all-reduce us (log)"), ("ar-busbw", "busbw GB/s vs size"),
         ("gemm-roof", "GEMM % of roofline vs M"), ("burst", "122-burst us vs M"))
BACKEND_RANK = {"marlin": 0, "torch-int4": 1, "bf16": 2}
MARKS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
COLOURS = (39, 208, 40, 196, 135, 173, 205, 248, 184, 44, 27, 214)
"""Terminal (256-colour) colours of the GEMM plot's series, one each in turn."""
Series = dict[str, list[tuple[float, float]]]


# --- series (pure) -----------------------------------------------------------------------------------------


def run_rows(state: SessionState) -> tuple[list[GemmRow], list[AllReduceRow]]:
    """The latest micro run's rows (rows recorded without a run id, e.g. older runs, when there is none)."""
    run = state.micro
    rid = run.plan.run_id if run is not None else ""
    return [g for g in state.gemm if g.run_id == rid], [a for a in state.allreduce if a.run_id == rid]


def latency_series(rows: list[AllReduceRow]) -> Series:
    out: Series = {}
    for r in rows:
        if r.burst == 1 and r.size_bytes > 0:
            out.setdefault(r.mode, []).append((float(r.size_bytes), r.time_us))
    return {k: sorted(v) for k, v in out.items()}


def busbw_series(rows: list[AllReduceRow]) -> Series:
    out: Series = {}
    for r in rows:
        if r.burst == 1 and r.size_bytes > 0:
            out.setdefault(r.mode, []).append((float(r.size_bytes), r.busbw_gbps))
    return {k: sorted(v) for k, v in out.items()}


def roofline_series(rows: list[GemmRow]) -> Series:
    """Per shape, % of the memory roofline against M, for the production backend measured (marlin, else
    torch-int4, else bf16)."""
    best: dict[str, str] = {}
    for g in rows:
        if roofline_pct(g) is not None:
            cur = best.get(g.name)
            if cur is None or BACKEND_RANK.get(g.backend, 9) < BACKEND_RANK.get(cur, 9):
                best[g.name] = g.backend
    out: Series = {}
    for g in rows:
        pct = roofline_pct(g)
        if best.get(g.name) == g.backend and pct is not None:
            label = fmt.printable(f"{g.name} ({g.backend or '?'})")
            out.setdefault(label, []).append((float(g.m), pct))
    return {k: sorted(v) for k, v in out.items()}


def series_keys(series: Series) -> list[tuple[str, str, int]]:
    """(the letter that marks it in the plot, its name, its colour) of each series in turn: a plot of a
    dozen shapes in a box 30 cells wide has no room for a legend inside it, so each series is drawn with
    its letter at its points and named in the legend under the plots."""
    return [(MARKS[k % len(MARKS)], name, COLOURS[k % len(COLOURS)]) for k, name in enumerate(series)]


def mark_points(series: Series, rows: int, y_range: tuple[float, float]) -> dict[str, list[tuple[float, float]]]:
    """Where each series' letter is drawn in a plot ROWS cells tall (plotext's rows: the nearest, halves
    up): one letter a cell (a later letter hid an earlier one: shapes the model runs at the same share of
    the roofline lie on one line). First each series, in turn, takes its rightmost point whose cell is
    free, so series on one line are lettered at different M; then each takes every cell still free."""
    lo, hi = y_range
    scale = (max(rows, 2) - 1) / ((hi - lo) or 1.0)
    taken: set[tuple[float, int]] = set()
    placed: dict[str, list[tuple[float, float]]] = {name: [] for name in series}

    def claim(name: str, x: float, y: float) -> bool:
        cell = (x, int((y - lo) * scale + 0.5))
        if cell in taken:
            return False
        taken.add(cell)
        placed[name].append((x, y))
        return True

    for name, pts in series.items():
        next((True for x, y in reversed(pts) if claim(name, x, y)), False)
    for name, pts in series.items():
        for x, y in pts:
            if (x, y) not in placed[name]:
                claim(name, x, y)
    return {name: sorted(pts) for name, pts in placed.items()}


def nice_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """At most MOST round ticks (a 1, 2 or 5 times a power of ten apart) from the one at or below ``lo`` to
    the one at or above ``hi``: '0 20 40 60', not plotext's '0.1 10.6 21.0'."""
    if hi <= lo:
        hi = lo + 1.0
    for k in range(math.floor(math.log10((hi - lo) / most)) - 1, math.ceil(math.log10(hi - lo)) + 2):
        for m in (1, 2, 5):
            step = m * 10.0 ** k
            first, last = math.floor(lo / step), math.ceil(hi / step)
            if last - first + 1 <= most:
                return [round(i * step, 12) for i in range(first, last + 1)]
    return [lo, hi]


def tick_label(v: float) -> str:
    return f"{v / 1000:g}k" if abs(v) >= 10_000 else f"{v:g}"


def roofline_legend(series: Series) -> Columns:
    """The legend of the GEMM plot: its title, then 'A fused_qkv_a (bf16)', 'B ...' in columns (an entry
    never split across lines), each in its series' colour."""
    entries = [Text(f"{PLOTS[2][1]}:", style="bold")] if series else []
    entries += [Text(f"{mark} {name}", style=f"color({colour})", no_wrap=True)
                for mark, name, colour in series_keys(series)]
    return Columns(entries, padding=(0, 2))


def burst_series(rows: list[AllReduceRow]) -> list[tuple[int, float]]:
    return sorted(((r.tokens or 0), r.burst_us if r.burst_us is not None else r.time_us * r.burst)
                  for r in rows if r.burst > 1)


def status_text(state: SessionState) -> Text:
    run = state.micro
    out = Text()
    if run is None:
        out.append("No micro run in this session.", style="bold")
        out.append("  Live: K runs the GEMM and all-reduce benchmarks on the host (the GPUs must be free: F).",
                   style="dim")
        if state.topology is not None:
            out.append("\nInterconnect: " + fmt.printable(state.topology.summary))
        return out
    p = run.plan
    out.append(f"micro run {p.run_id}", style="bold")
    out.append(fmt.printable(f"  {p.model} at TP={p.tp} on {p.host or '?'}, GPUs {fmt.gpu_list(p.gpus)}"))
    if p.simulated:
        out.append("  SIMULATED: modelled figures", style="bold yellow")
    if p.forced:
        out.append("  (GPU memory check overridden)", style="yellow")
    refused = run.ends.get("all")
    if refused is not None:
        out.append("\nrefused: " + fmt.printable(refused.detail), style="bold red")
        for h in refused.holders[:4]:
            out.append(f"\n  pid {h.pid:<7} {fmt.printable(h.user or '?')}  GPU {fmt.gpu_list(h.gpus):<5} "
                       f"{fmt.mib(h.mem_mib):>7} MiB  {fmt.shorten(fmt.command_gist(h.cmdline), 60)}")
        if len(refused.holders) > 4:
            out.append(f"\n  and {len(refused.holders) - 4} more", style="dim")
    for part in p.parts:
        out.append("\n")
        out.append_text(part_line(run, part))
    if state.topology is not None:
        t = state.topology
        out.append("\n" + fmt.printable(f"Interconnect ({t.source}): {t.summary}"))
    for env in run.env.values():
        out.append(f"\n{describe(env)}", style="dim")  # the worker's device, torch and bandwidth in the log's words
        missing = [f"{k}: {v}" for k, v in env.backends.items() if v.startswith("not available")]
        if missing:
            out.append("  " + fmt.printable("; ".join(missing)), style="dim yellow")
    return out


def part_line(run: MicroRunState, part: str) -> Text:
    status = run.status(part)
    prog = run.progress.get(part)
    total = prog.total if prog is not None and prog.total else run.plan.totals.get(part, 0)
    done = run.ends[part].rows if part in run.ends else (prog.done if prog is not None else 0)
    style = {"done": "green", "skipped": "dim", "running": "bold", "cancelled": "yellow", "failed": "bold red",
             "refused": "bold red"}.get(status, "dim")
    line = Text(f"{part:<10}")
    line.append(fmt.bar(done / total if total else None, 24))
    line.append(f" {done}/{total} ")
    line.append(status, style=style)
    end = run.ends.get(part)
    if end is not None and end.detail:
        line.append(": " + fmt.printable(end.detail[:80]), style=style)
    elif prog is not None and status == "running":
        line.append("  " + fmt.printable(prog.item), style="dim")
    return line


# --- tables ----------------------------------------------------------------------------------------------


def _r(value: str) -> Text:
    return Text(value, justify="right")


class ShapesTable(KeyedTable):
    COLUMNS = (("name", "GEMM", 16), ("nk", "per-GPU N x K", 18), ("split", "split", 14), ("dtype", "dtype", 9),
               ("calls", "calls/token", 11), ("note", "note", 36))

    def show(self, state: SessionState) -> None:
        run = state.micro
        rows = []
        for s in run.plan.gemms if run is not None else []:
            n, k, e = s.get("n"), s.get("k"), s.get("experts")
            nk = f"[{e}, {n}, {k}]" if e else f"{n} x {k}"
            calls = f"{s.get('calls_per_token')}" + (f" x {s.get('topk')}" if s.get("topk") else "")
            rows.append((str(s.get("name")), [Text(str(s.get("name"))), _r(nk), Text(str(s.get("split", ""))),
                                               Text(str(s.get("dtype", ""))), _r(calls), Text(str(s.get("note", "")))]))
        self.sync(rows)


# --- the view --------------------------------------------------------------------------------------------


class MicroView(VerticalScroll):
    DEFAULT_CSS = "MicroView #micro-plot-legend { height: auto; padding: 0 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.plots: dict[str, PlotextPlot] = {}
        self.plotted: dict[str, object] = {}
        """What each plot shows (for tests): the series it was drawn from."""
        self._stamps: dict[str, object] = {}
        self.lettered: dict[str, list[tuple[float, float]]] = {}
        """Where the GEMM plot's letters are (for tests): each series' points that carry its letter."""

    def compose(self) -> ComposeResult:
        yield Static(id="micro-status")
        with Horizontal(id="micro-plots"):
            for key, title in PLOTS:
                box = Vertical(id=f"{key}-box", classes="plot-box")
                box.border_title = title
                yield box
        yield Static(id="micro-plot-legend")
        yield Static("Shapes (per GPU, from the run's plan)", classes="section")
        yield ShapesTable(id="micro-shapes")
        yield Static("GEMM", classes="section", id="micro-gemm-title")
        yield GemmTable(id="micro-gemm")
        yield Static("All-reduce (nccl-tests' columns; torch all-reduces in place: eager and CUDA graph)",
                     classes="section")
        yield AllReduceTable(id="micro-nccl")
        yield Static(id="micro-bursts")

    def _ensure_plots(self) -> dict[str, PlotextPlot]:
        if not self.plots:
            from textual_plotext import PlotextPlot  # heavy: imported on first show only

            view = self

            class RoofPlot(PlotextPlot):
                def on_resize(self) -> None:
                    view.redraw_roof()

            for key, _ in PLOTS:
                plot = (RoofPlot if key == "gemm-roof" else PlotextPlot)(id=f"{key}-plot")
                self.plots[key] = plot
                self.query_one(f"#{key}-box").mount(plot)
        return self.plots

    def draw(self, ctx: ViewContext) -> None:
        self.show(ctx.state)

    def show(self, state: SessionState) -> None:
        gemm, ar = run_rows(state)
        self.query_one("#micro-status", Static).update(status_text(state))
        self.query_one(ShapesTable).show(state)
        self.query_one("#micro-gemm", GemmTable).show(gemm)
        title = "GEMM" + (f"   ({INT4_HINT})" if any(g.backend == "torch-int4" for g in gemm) else "")
        self.query_one("#micro-gemm-title", Static).update(title)
        self.query_one("#micro-nccl", AllReduceTable).show(ar)
        bursts = [r for r in ar if r.burst > 1]
        self.query_one("#micro-bursts", Static).update(
            "\n".join(f"burst: {r.burst} all-reduces at M={r.tokens}: "
                      f"{fmt.num(r.burst_us, '{:,.1f}')} us per step, {r.time_us:.1f} us each ({r.mode})"
                      for r in bursts))
        limit = state.topology.link_gbps if state.topology is not None else None
        self._draw(state, gemm, ar, limit)

    def _draw(self, state: SessionState, gemm: list[GemmRow], ar: list[AllReduceRow], limit: float | None) -> None:
        plots = self._ensure_plots()
        series: dict[str, tuple[object, ...]] = {
            "ar-latency": (latency_series(ar),),
            "ar-busbw": (busbw_series(ar), limit),
            "gemm-roof": (roofline_series(gemm),),
            "burst": (burst_series(ar),),
        }
        for key, data in series.items():
            if self._stamps.get(key) == data:
                continue
            self._stamps[key] = data
            self.plotted[key] = data
            plt = plots[key].plt
            plt.clear_figure()
            if key == "burst":
                pts = data[0]
                if pts:
                    plt.bar([str(m) for m, _ in pts], [v for _, v in pts])  # type: ignore[union-attr]
                    plt.xlabel("M tokens")
                    ticks = nice_ticks(0.0, max(v for _, v in pts))  # type: ignore[union-attr]
                    plt.ylim(ticks[0], ticks[-1])
                    plt.yticks(ticks, [tick_label(t) for t in ticks])
            else:
                lines: Series = data[0]  # type: ignore[assignment]
                log_y = key == "ar-latency"  # a few us at 1 KiB to tens of ms at 1 GiB: decades apart
                if key == "gemm-roof":
                    self.query_one("#micro-plot-legend", Static).update(roofline_legend(lines))
                    self._draw_roof(plots[key], lines)
                elif key == "ar-busbw" and lines:
                    top = max([y for pts in lines.values() for _, y in pts] + [limit or 0.0])
                    ticks = nice_ticks(0.0, top)
                    plt.ylim(ticks[0], ticks[-1])
                    plt.yticks(ticks, [tick_label(t) for t in ticks])
                for name, pts in lines.items() if key != "gemm-roof" else ():
                    shown = [(x, y) for x, y in pts if y > 0] if log_y else pts
                    xs = [math.log2(x) for x, _ in shown]  # sizes and M both double step by step
                    plt.plot(xs, [math.log10(y) if log_y else y for _, y in shown], label=name, marker="dot")
                ys_all = [y for pts in lines.values() for _, y in pts if y > 0]
                if log_y and ys_all:
                    ticks = log_ticks(min(ys_all), max(ys_all))
                    plt.yticks([math.log10(t) for t in ticks], [us_tick(t) for t in ticks])
                    plt.ylim(math.log10(ticks[0]), math.log10(ticks[-1]))
                if key == "ar-busbw" and limit and lines:
                    xs_all = [math.log2(x) for pts in lines.values() for x, _ in pts]
                    plt.plot([min(xs_all), max(xs_all)], [limit, limit], label=f"link {limit:.0f}",
                             color="red")
                x_axis(plt, key, lines)
            plots[key].refresh()


    def _draw_roof(self, plot: PlotextPlot, lines: Series) -> None:
        """The GEMM lines, then each series' letter where it has a cell to itself: placed for the plot's
        size, so drawn again when that changes."""
        plt = plot.plt
        ys_all = [y for pts in lines.values() for _, y in pts]
        ticks = nice_ticks(min(ys_all), max(ys_all)) if ys_all else []
        rows = max(plot.size.height - 4, 0) or 10  # the frame, the ticks and the label take 4
        at = mark_points(lines, rows, (ticks[0], ticks[-1])) if ticks else {}
        keys = series_keys(lines)
        for _, name, colour in keys:
            plt.plot([math.log2(x) for x, _ in lines[name]], [y for _, y in lines[name]], marker="braille",
                     color=colour)  # M doubles step by step
        for mark, name, colour in keys:  # over every line: a later line hid an earlier letter
            plt.scatter([math.log2(x) for x, _ in at[name]], [y for _, y in at[name]], marker=mark, color=colour)
        if ticks:
            plt.ylim(ticks[0], ticks[-1])
            plt.yticks(ticks, [tick_label(t) for t in ticks])
        self.lettered = at

    def redraw_roof(self) -> None:
        """The GEMM plot's size changed: its letters placed again."""
        lines = self.plotted.get("gemm-roof", ({},))[0]
        if lines and "gemm-roof" in self.plots:
            plot = self.plots["gemm-roof"]
            plot.plt.clear_figure()
            self._draw_roof(plot, lines)  # type: ignore[arg-type]
            x_axis(plot.plt, "gemm-roof", lines)  # type: ignore[arg-type]
            plot.refresh()


def x_axis(plt: Any, key: str, lines: Series) -> None:
    """Ticks at the sizes (or M) measured, at most about five, on the log2 axis the points are drawn on."""
    xs_all = sorted({x for pts in lines.values() for x, _ in pts})
    if xs_all:
        ticks = xs_all[:: max(1, len(xs_all) // 5)]
        plt.xticks([math.log2(x) for x in ticks], [size_tick(x) if key != "gemm-roof" else f"{x:g}" for x in ticks])
    plt.xlabel("message size" if key != "gemm-roof" else "M tokens")


def log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks for a log axis holding ``lo`` to ``hi`` (both > 0): the powers of ten from the one at or below
    ``lo`` to the one at or above ``hi``; when that spans fewer than two decades, 1, 2 and 5 times them
    within the range widened to its neighbouring 1-2-5 values (at least two ticks)."""
    low, high = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if high - low >= 2:
        return [10.0 ** k for k in range(low, high + 1)]
    steps = [m * 10.0 ** k for k in range(low - 1, high + 1) for m in (1, 2, 5)]
    below = max(i for i, t in enumerate(steps) if t <= lo)
    above = min(i for i, t in enumerate(steps) if t >= hi)
    if below == above:  # one value: a tick either side of it too
        below, above = below - 1, above + 1
    return steps[below:above + 1]


def us_tick(us: float) -> str:
    """'500', '1k', '20k': a latency tick in us, short."""
    return f"{us / 1000:g}k" if us >= 1000 else f"{us:g}"


def size_tick(n: float) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"
