"""The Micro tab: the micro run's status and progress per part, the interconnect, what each worker found,
four plots (all-reduce latency and busbw against message size with the link's limit, GEMM % of roofline
per shape against M, the 122-all-reduce burst against M), the shapes of the run's plan, and the GEMM and
all-reduce tables (nccl-tests' columns). Everything comes from the fold; the series are pure functions of
the state (tested without a terminal)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from kimitui.core.describe import describe
from kimitui.core.events import AllReduceRow, GemmRow
from kimitui.core.state import MicroRunState, SessionState
from kimitui.tui import fmt
from kimitui.tui.keyed_table import Cell, KeyedTable

if TYPE_CHECKING:
    from textual_plotext import PlotextPlot

INT4_HINT = "torch-int4 (tinygemm) is honest only near M=1: it stands in for Marlin where vLLM is not installed"
PLOTS = (("ar-latency", "all-reduce us vs size"), ("ar-busbw", "busbw GB/s vs size"),
         ("gemm-roof", "GEMM % of roofline vs M"), ("burst", "122-burst us vs M"))
BACKEND_RANK = {"marlin": 0, "torch-int4": 1, "bf16": 2}
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
        if g.roofline_us and g.time_us > 0:
            cur = best.get(g.name)
            if cur is None or BACKEND_RANK.get(g.backend, 9) < BACKEND_RANK.get(cur, 9):
                best[g.name] = g.backend
    out: Series = {}
    for g in rows:
        if best.get(g.name) == g.backend and g.roofline_us and g.time_us > 0:
            label = fmt.printable(f"{g.name} ({g.backend or '?'})")
            out.setdefault(label, []).append((float(g.m), g.roofline_us / g.time_us * 100))
    return {k: sorted(v) for k, v in out.items()}


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
                       f"{fmt.mem_mib(h.mem_mib):>9}  {fmt.shorten(fmt.command_gist(h.cmdline), 60)}")
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


class MicroGemmTable(KeyedTable):
    COLUMNS = (("name", "GEMM", 18), ("m", "M", 4), ("nk", "N x K", 11), ("dtype", "dtype", 9),
               ("backend", "backend", 10), ("time", "time us", 9), ("tflops", "TFLOP/s", 7), ("gbps", "GB/s", 6),
               ("roof", "% roof", 6), ("err", "rel err", 8))

    def show(self, rows_in: list[GemmRow]) -> None:
        rows = []
        for i, g in enumerate(rows_in):
            pct = g.roofline_us / g.time_us * 100 if g.roofline_us and g.time_us else None
            err = fmt.num(g.rel_err, "{:.4f}") + ("!" if g.correct is False else "")
            cells: list[Cell] = [Text(fmt.shorten(fmt.printable(g.name), 18)), _r(str(g.m)), _r(f"{g.n}x{g.k}"),
                                 Text(fmt.shorten(fmt.printable(g.dtype), 9)), Text(fmt.printable(g.backend or "-")),
                                 _r(fmt.num(g.time_us, "{:.2f}")),
                                 _r(fmt.num(g.tflops, "{:.1f}")), _r(fmt.num(g.gbps, "{:.0f}")),
                                 _r(fmt.num(pct, "{:.0f}", "%")), _r(err)]
            rows.append((str(i), cells))
        self.sync(rows)


class NcclTable(KeyedTable):
    """nccl-tests' columns; torch's all-reduce works in place, so the two groups are eager and CUDA graph."""

    # size, count and M as wide as their widest value: a number is never cut (1,073,741,824 B)
    COLUMNS = (("size", "size (B)", None), ("count", "count", None), ("type", "type", 8), ("tokens", "M", None),
               ("e_time", "eager us", 9), ("e_alg", "algbw", 7), ("e_bus", "busbw", 7), ("e_wrong", "#wrong", 6),
               ("g_time", "graph us", 9), ("g_alg", "algbw", 7), ("g_bus", "busbw", 7), ("g_wrong", "#wrong", 6))

    def show(self, rows_in: list[AllReduceRow]) -> None:
        by_size: dict[int, dict[str, AllReduceRow]] = {}
        for r in rows_in:
            if r.burst == 1:
                by_size.setdefault(r.size_bytes, {})[r.mode] = r
        rows = []
        for size in sorted(by_size):
            modes = by_size[size]
            first = next(iter(modes.values()))
            cells: list[Cell] = [_r(f"{size:,}"), _r(f"{first.count:,}"), Text(first.dtype[:8]),
                                 _r(fmt.num(first.tokens))]
            for mode in ("eager", "graph"):
                r = modes.get(mode)
                cells += [_r(fmt.num(r.time_us if r else None, "{:.1f}")),
                          _r(fmt.num(r.algbw_gbps if r else None, "{:.2f}")),
                          _r(fmt.num(r.busbw_gbps if r else None, "{:.2f}")), _r(fmt.num(r.wrong if r else None))]
            rows.append((str(size), cells))
        self.sync(rows)


# --- the view --------------------------------------------------------------------------------------------


class MicroView(VerticalScroll):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.plots: dict[str, PlotextPlot] = {}
        self.plotted: dict[str, object] = {}
        """What each plot shows (for tests): the series it was drawn from."""
        self._stamps: dict[str, object] = {}

    def compose(self) -> ComposeResult:
        yield Static(id="micro-status")
        with Horizontal(id="micro-plots"):
            for key, title in PLOTS:
                box = Vertical(id=f"{key}-box", classes="plot-box")
                box.border_title = title
                yield box
        yield Static("Shapes (per GPU, from the run's plan)", classes="section")
        yield ShapesTable(id="micro-shapes")
        yield Static("GEMM", classes="section", id="micro-gemm-title")
        yield MicroGemmTable(id="micro-gemm")
        yield Static("All-reduce (nccl-tests' columns; torch all-reduces in place: eager and CUDA graph)",
                     classes="section")
        yield NcclTable(id="micro-nccl")
        yield Static(id="micro-bursts")

    def _ensure_plots(self) -> dict[str, PlotextPlot]:
        if not self.plots:
            from textual_plotext import PlotextPlot  # heavy: imported on first show only

            for key, _ in PLOTS:
                plot = PlotextPlot(id=f"{key}-plot")
                self.plots[key] = plot
                self.query_one(f"#{key}-box").mount(plot)
        return self.plots

    def show(self, state: SessionState) -> None:
        gemm, ar = run_rows(state)
        self.query_one("#micro-status", Static).update(status_text(state))
        self.query_one(ShapesTable).show(state)
        self.query_one(MicroGemmTable).show(gemm)
        title = "GEMM" + (f"   ({INT4_HINT})" if any(g.backend == "torch-int4" for g in gemm) else "")
        self.query_one("#micro-gemm-title", Static).update(title)
        self.query_one(NcclTable).show(ar)
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
            else:
                lines: Series = data[0]  # type: ignore[assignment]
                for name, pts in lines.items():
                    xs = [math.log2(x) for x, _ in pts]  # sizes and M both double step by step
                    plt.plot(xs, [y for _, y in pts], label=name, marker="dot")
                if key == "ar-busbw" and limit and lines:
                    xs_all = [math.log2(x) for pts in lines.values() for x, _ in pts]
                    plt.plot([min(xs_all), max(xs_all)], [limit, limit], label=f"link {limit:.0f}",
                             color="red")
                xs_all = sorted({x for pts in lines.values() for x, _ in pts})
                if xs_all:
                    ticks = xs_all[:: max(1, len(xs_all) // 5)]
                    plt.xticks([math.log2(x) for x in ticks],
                               [size_tick(x) if key != "gemm-roof" else f"{x:g}" for x in ticks])
                plt.xlabel("message size" if key != "gemm-roof" else "M tokens")
            plots[key].refresh()


def size_tick(n: float) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"
