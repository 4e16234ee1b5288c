"""Benchmark tables: the macro sweep points, micro GEMM rows and all-reduce rows."""

from __future__ import annotations

from rich.text import Text

from kimitui.core.events import AllReduceRow, GemmRow, MacroPoint, first_error, level_failed
from kimitui.core.state import SessionState
from kimitui.tui import fmt
from kimitui.tui.keyed_table import Cell, KeyedTable, Row


def _r(value: str) -> Text:
    return Text(value, justify="right")


def _metric(point: MacroPoint, key: str, spec: str = "{:.1f}") -> Text:
    return _r(fmt.num(point.metric(key), spec))


def size_label(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def requests_cell(p: MacroPoint) -> Text:
    """'12/12' requests completed of those sent ('-' for a point recorded without the counts)."""
    m = p.metrics
    done, sent = m.get("completed"), m.get("num_prompts")
    if not isinstance(done, int) or not isinstance(sent, int):
        return _r(fmt.DASH)
    return Text(f"{done}/{sent}", justify="right", style="bold red" if done < sent else "")


def macro_cells(p: MacroPoint) -> list[Cell]:
    error = first_error(p)
    note = Text(fmt.printable(error or ""), style="red", no_wrap=True, overflow="ellipsis")
    if level_failed(p):  # nothing was measured: no number, and no zero
        return [_r(str(p.concurrency)), Text("FAILED", justify="right", style="bold red"), requests_cell(p),
                *(_r(fmt.DASH) for _ in range(5)), note]
    tok = p.metric("output_throughput")
    per_stream = tok / p.concurrency if tok is not None and p.concurrency else None
    return [
        _r(str(p.concurrency)),
        _metric(p, "output_throughput", "{:.0f}"),
        requests_cell(p),
        _r(fmt.num(per_stream, "{:.1f}")),
        _metric(p, "mean_ttft_ms", "{:.0f}"),
        _metric(p, "p99_ttft_ms", "{:.0f}"),
        _metric(p, "mean_tpot_ms", "{:.1f}"),
        _metric(p, "p99_tpot_ms", "{:.1f}"),
        note,
    ]


def gemm_cells(g: GemmRow) -> list[Cell]:
    eff = g.roofline_us / g.time_us * 100 if g.roofline_us and g.time_us else None
    return [
        Text(fmt.shorten(fmt.printable(g.name), 17)),
        _r(str(g.m)), _r(str(g.n)), _r(str(g.k)),
        Text(g.dtype or "-"),
        Text(fmt.shorten(fmt.printable(g.kernel or "-"), 10)),
        _r(fmt.num(g.time_us, "{:.1f}")),
        _r(fmt.num(g.tflops, "{:.1f}")),
        _r(fmt.num(g.gbps, "{:.0f}")),
        _r(fmt.num(g.roofline_us, "{:.1f}")),
        _r(fmt.num(eff, "{:.0f}", "%")),
        _r(fmt.num(g.rel_err, "{:.1e}")),
    ]


def allreduce_cells(a: AllReduceRow) -> list[Cell]:
    return [
        _r(size_label(a.size_bytes)),
        _r(str(a.count)),
        Text(a.dtype),
        _r(str(a.ranks)),
        _r(fmt.num(a.tokens)),
        _r(str(a.burst)),
        _r(fmt.num(a.time_us, "{:.1f}")),
        _r(fmt.num(a.algbw_gbps, "{:.1f}")),
        _r(fmt.num(a.busbw_gbps, "{:.1f}")),
    ]


class MacroTable(KeyedTable):
    COLUMNS = (
        ("concurrency", "Conc", 5),
        ("output_throughput", "Out tok/s", 9),
        ("requests", "ok/sent", 7),
        ("per_stream", "tok/s/req", 9),
        ("mean_ttft_ms", "TTFT ms", 7),
        ("p99_ttft_ms", "p99 TTFT", 8),
        ("mean_tpot_ms", "TPOT ms", 7),
        ("p99_tpot_ms", "p99 TPOT", 8),
        ("error", "first error", None),
    )

    def show(self, state: SessionState) -> None:
        self.show_points(state.macro_points)

    def show_points(self, points: list[MacroPoint]) -> None:
        rows: list[Row] = [(str(p.concurrency), macro_cells(p)) for p in points]
        self.sync(rows)


class GemmTable(KeyedTable):
    COLUMNS = (
        ("name", "GEMM", 17), ("m", "M", 6), ("n", "N", 6), ("k", "K", 6), ("dtype", "dtype", 5),
        ("kernel", "kernel", 10), ("time_us", "time us", 8), ("tflops", "TFLOPS", 7),
        ("gbps", "GB/s", 6), ("roofline_us", "roof us", 7), ("eff", "eff", 5), ("rel_err", "rel err", 8),
    )

    def show(self, state: SessionState) -> None:
        self.sync([(str(i), gemm_cells(g)) for i, g in enumerate(state.gemm)])


class AllReduceTable(KeyedTable):
    COLUMNS = (
        ("size", "size", 10), ("count", "count", 10), ("dtype", "dtype", 9), ("ranks", "ranks", 5),
        ("tokens", "tokens", 6), ("burst", "burst", 5), ("time_us", "time us", 9),
        ("algbw", "algbw GB/s", 10), ("busbw", "busbw GB/s", 10),
    )

    def show(self, state: SessionState) -> None:
        self.sync([(str(i), allreduce_cells(a)) for i, a in enumerate(state.allreduce)])
