"""Benchmark tables: the macro sweep points, micro GEMM rows and all-reduce rows."""

from __future__ import annotations

from rich.text import Text

from kimitui.core.events import AllReduceRow, GemmRow, MacroPoint, first_error, level_failed
from kimitui.core.figures import correctness_failed
from kimitui.core.level_energy import LevelEnergy
from kimitui.core.micro_words import gemm_words, nccl_caps
from kimitui.core.state import SessionState, Sweep
from kimitui.tui import fmt
from kimitui.tui.widgets.keyed_table import Cell, KeyedTable, Row


def _r(value: str) -> Text:
    return Text(value, justify="right")


def _figure(value: float | None, spec: str = "{:.1f}") -> Text:
    return _r(fmt.num(value, spec))


def size_label(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def requests_cell(p: MacroPoint) -> Text:
    """'12/12' requests completed of those sent ('-' for a point recorded without the counts)."""
    done, sent = p.result.completed, p.result.num_prompts
    if done is None or sent is None:
        return _r(fmt.DASH)
    return Text(f"{done}/{sent}", justify="right", style="bold red" if done < sent else "")


def level_cell(p: MacroPoint) -> Text:
    """The level: its concurrency, or its rate (``2.5/s``) where the sweep's levels are rates."""
    return _r(f"{p.rate:g}/s" if p.rate is not None else str(p.concurrency))


def macro_cells(p: MacroPoint, energy: LevelEnergy | None = None) -> list[Cell]:
    """A level's cells; ``energy``: its GPU energy where the fold metered it (tok/J, ``level_energy``)."""
    error = first_error(p)
    note = Text(fmt.printable(error or ""), style="red", no_wrap=True, overflow="ellipsis")
    if level_failed(p):  # nothing was measured: no number, and no zero
        return [level_cell(p), Text("FAILED", justify="right", style="bold red"), requests_cell(p),
                *(_r(fmt.DASH) for _ in range(8)), note]
    r = p.result
    return [
        level_cell(p),
        _figure(r.output_throughput, "{:.0f}"),
        requests_cell(p),
        _figure(r.tok_per_stream),
        _figure(r.ttft.mean, "{:.0f}"),
        _figure(r.ttft.p(99), "{:.0f}"),
        _figure(r.ttfo.mean, "{:.0f}"),
        _figure(r.figure("mean_reasoning_tokens"), "{:.0f}"),
        _figure(r.tpot.mean),
        _figure(r.tpot.p(99)),
        _figure(energy.tokens_per_joule(r.output_throughput) if energy is not None else None, "{:.3g}"),
        note,
    ]


def gemm_cells(g: GemmRow) -> list[Cell]:
    """A GEMM row in ``describe.gemm_words``' cells (the CLI's and the report's); a row that failed its
    correctness check says FAIL, in red."""
    w = gemm_words(g)
    return [Text(fmt.shorten(w["name"], 18)), _r(w["m"]), _r(w["nk"]), Text(fmt.shorten(w["dtype"], 9)),
            Text(fmt.shorten(w["backend"], 10)), _r(w["time"]), _r(w["tflops"]), _r(w["gbps"]), _r(w["pct_roof"]),
            Text(w["rel_err"], justify="right", style="bold red" if correctness_failed(g) else ""),
            Text(w["cap"], style="bold yellow" if w["cap"] else "", no_wrap=True, overflow="ellipsis")]


def nccl_cells(modes: dict[str, AllReduceRow]) -> list[Cell]:
    """One message size in nccl-tests' columns: its eager and its CUDA-graph row side by side."""
    first = next(iter(modes.values()))
    cells: list[Cell] = [_r(f"{first.size_bytes:,}"), _r(f"{first.count:,}"), Text(first.dtype[:8]),
                         _r(fmt.num(first.tokens))]
    for mode in ("eager", "graph"):
        r = modes.get(mode)
        cells += [_r(fmt.num(r.time_us if r else None, "{:.1f}")),
                  _r(fmt.num(r.algbw_gbps if r else None, "{:.2f}")),
                  _r(fmt.num(r.busbw_gbps if r else None, "{:.2f}")), _r(fmt.num(r.wrong if r else None))]
    return [*cells, Text(nccl_caps(modes.get("eager"), modes.get("graph")))]


class MacroTable(KeyedTable):
    """Every sweep's points, sweep by sweep (a second sweep adds its rows under the first one's); the Sweep
    column, numbered as the plots' legend, is shown once there is more than one."""

    COLUMNS = (
        ("sweep", "Sweep", 5),
        ("concurrency", "Conc", 6),
        ("output_throughput", "Out tok/s", 9),
        ("requests", "ok/sent", 7),
        ("per_stream", "tok/s/req", 9),
        ("mean_ttft_ms", "TTFT ms", 7),
        ("p99_ttft_ms", "p99 TTFT", 8),
        ("mean_ttfo_ms", "TTFO ms", 7),
        ("mean_reasoning_tokens", "think tok", 9),
        ("mean_tpot_ms", "TPOT ms", 7),
        ("p99_tpot_ms", "p99 TPOT", 8),
        ("tok_per_joule", "tok/J", 6),
        ("error", "first error", None),
    )

    REASONING = ("mean_ttfo_ms", "mean_reasoning_tokens")
    """Shown where a level's requests thought before answering (a reasoning model): TTFO beside TTFT."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        for key in ("sweep", "tok_per_joule", *self.REASONING):
            self.set_column_hidden(key, True)

    def show(self, state: SessionState) -> None:
        """Each sweep's points (oldest first), a row each, keyed ``row_key(number, concurrency)``."""
        numbered = [(n, sweep) for n, sweep in zip(sweep_numbers(state.sweeps), state.sweeps, strict=True)
                    if sweep.points]
        self.set_column_hidden("sweep", len(numbered) < 2)
        thought = any(p.result.reasoning for _, sweep in numbered for p in sweep.point_list)
        for key in self.REASONING:
            self.set_column_hidden(key, not thought)
        # Shown where a level's GPU power was recorded (a host's samples beside the sweep; a URL alone has none)
        self.set_column_hidden("tok_per_joule", not any(sweep.energy for _, sweep in numbered))
        rows: list[Row] = [(row_key(n, p.key), [_r(str(n)), *macro_cells(p, sweep.energy.get(p.key))])
                           for n, sweep in numbered for p in sweep.point_list]
        self.sync(rows)


def sweep_numbers(sweeps: list[Sweep]) -> list[int]:
    """Each sweep's number, as the sweep-points table, the plots' legend and the report give it: the
    sweeps with points counted from 1; one without points yet takes the next number."""
    numbers, n = [], 0
    for sweep in sweeps:
        n += bool(sweep.points)
        numbers.append(n if sweep.points else n + 1)
    return numbers


def row_key(sweep: int, level: float) -> str:
    """A sweep-points row: '2:16' is the second sweep's concurrency 16 (sweeps numbered from 1), '2:2.5' its
    rate 2.5 req/s where its levels are rates."""
    return f"{sweep}:{level:g}"


class GemmTable(KeyedTable):
    """The GEMM rows: the Benchmarks tab's (every row) and the Micro tab's (the latest run's)."""

    COLUMNS = (("name", "GEMM", 18), ("m", "M", 4), ("nk", "N x K", 11), ("dtype", "dtype", 9),
               ("backend", "backend", 10), ("time", "time us", 9), ("tflops", "TFLOP/s", 7), ("gbps", "GB/s", 6),
               ("roof", "% roof", 6), ("err", "rel err", 11), ("cap", "clock cap", None))

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.set_column_hidden("cap", True)

    def show(self, rows_in: list[GemmRow]) -> None:
        """The rows; the clock cap column where a row was measured under one (kimitui/hostside/clocks.py)."""
        self.set_column_hidden("cap", not any(g.throttle for g in rows_in))
        self.sync([(str(i), gemm_cells(g)) for i, g in enumerate(rows_in)])


class AllReduceTable(KeyedTable):
    """The all-reduce rows in nccl-tests' columns; torch's all-reduce works in place, so the two groups are
    eager and CUDA graph. A burst row (``burst_line``) is not among them."""

    # size, count and M as wide as their widest value: a number is never cut (1,073,741,824 B)
    COLUMNS = (("size", "size (B)", None), ("count", "count", None), ("type", "type", 8), ("tokens", "M", None),
               ("e_time", "eager us", 9), ("e_alg", "algbw", 7), ("e_bus", "busbw", 7), ("e_wrong", "#wrong", 6),
               ("g_time", "graph us", 9), ("g_alg", "algbw", 7), ("g_bus", "busbw", 7), ("g_wrong", "#wrong", 6),
               ("cap", "clock cap", None))

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.set_column_hidden("cap", True)

    def show(self, rows_in: list[AllReduceRow]) -> None:
        """The rows by size; the clock cap column where a row was measured under one."""
        self.set_column_hidden("cap", not any(r.throttle for r in rows_in if r.burst == 1))
        by_size: dict[int, dict[str, AllReduceRow]] = {}
        for r in rows_in:
            if r.burst == 1:
                by_size.setdefault(r.size_bytes, {})[r.mode] = r
        self.sync([(str(size), nccl_cells(by_size[size])) for size in sorted(by_size)])
