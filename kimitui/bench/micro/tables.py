"""Micro results as text: the GEMM table, the all-reduce table in nccl-tests' columns, the bursts.

``TextPrinter`` prints a run's events as they come (``kimitui bench micro`` without ``--json``): the plan,
the topology, each worker's findings and each part's end in ``describe``'s words (the event log's),
the rows as tables; the functions format rows for it and for the fidelity script.
torch.distributed's all-reduce works in place, so nccl-tests' two column groups (out-of-place, in-place)
are here eager and CUDA graph, both in place.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from kimitui.core.describe import describe, details, gemm_words
from kimitui.core.events import (
    AllReduceRow,
    Event,
    GemmRow,
    LogLine,
    MicroEnd,
    MicroEnv,
    MicroPlan,
    MicroProgress,
    Topology,
)
from kimitui.core.printable import printable_lines

INT4_NOTE = ("torch-int4 is torch._weight_int4pack_mm (tinygemm): correct, but honest only near M=1; it stands "
             "in for Marlin where vLLM is not installed")
GEMM_HEAD = (f"{'GEMM':<20} {'M':>4} {'N x K':>13} {'dtype':<14} {'backend':<10} {'time us':>9} {'TFLOP/s':>8} "
             f"{'GB/s':>7} {'% roof':>7} {'rel err':>11}")
NCCL_HEAD = (
    "#                                                   eager (in place)                    CUDA graph (in place)\n"
    "#       size       count      type redop  root     time    algbw    busbw  #wrong     time    algbw"
    "    busbw  #wrong\n"
    "#        (B)  (elements)                           (us)   (GB/s)   (GB/s)             (us)   (GB/s)"
    "   (GB/s)")


def gemm_line(g: GemmRow) -> str:
    """A GEMM row under ``GEMM_HEAD``, in ``describe.gemm_words``' cells (the dashboard's and the report's)."""
    w = gemm_words(g)
    return (f"{w['name'][:20]:<20} {w['m']:>4} {w['nk']:>13} {w['dtype'][:14]:<14} {w['backend'][:10]:<10} "
            f"{w['time']:>9} {w['tflops']:>8} {w['gbps']:>7} {w['pct_roof']:>7} {w['rel_err']:>11}")


def _cols(r: AllReduceRow | None) -> str:
    if r is None:
        return f"{'-':>8} {'-':>8} {'-':>8} {'-':>7}"
    return f"{r.time_us:>8.1f} {r.algbw_gbps:>8.2f} {r.busbw_gbps:>8.2f} {r.wrong:>7}"


def nccl_line(eager: AllReduceRow | None, graph: AllReduceRow | None) -> str:
    r = eager or graph
    assert r is not None
    dtype = {"bfloat16": "bfloat16", "float16": "half", "float32": "float"}.get(r.dtype, r.dtype)
    return f"{r.size_bytes:>12} {r.count:>11} {dtype:>9}   sum    -1 {_cols(eager)} {_cols(graph)}"


def burst_line(r: AllReduceRow) -> str:
    where = "in one CUDA graph" if r.mode == "graph" else "back to back (eager)"
    per = r.burst_us if r.burst_us is not None else r.time_us * r.burst
    return (f"burst: {r.burst} all-reduces of M={r.tokens} ({r.size_bytes:,} B) {where}: {per:,.1f} us per burst, "
            f"{r.time_us:.1f} us each ({r.ranks} ranks, {r.backend or '?'})")


def progress_bar(p: MicroProgress, width: int = 24) -> str:
    frac = p.done / p.total if p.total else 0.0
    full = int(frac * width)
    return f"[{'#' * full}{'.' * (width - full)}] {p.part} {p.done}/{p.total} {p.item}"


class TextPrinter:
    """The run's events as text, as they come; progress is redrawn on a terminal's stderr only."""

    def __init__(self, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
                 tty: Callable[[], bool] | None = None) -> None:
        self.out, self.err = out, err
        self.tty = tty if tty is not None else (lambda: err.isatty())
        self.modes: list[str] = []
        self.pending: dict[int, dict[str, AllReduceRow]] = {}
        self.bursts: list[AllReduceRow] = []
        self.gemm_head = self.nccl_head = False
        self.int4_rows = 0
        self._progress = False

    def _print(self, text: str) -> None:
        if self._progress:
            self.err.write("\r\033[K")
            self._progress = False
        print(printable_lines(text), file=self.out, flush=True)  # a row's backend and device come from the host

    def __call__(self, ev: Event) -> None:
        if isinstance(ev, MicroPlan):
            self.modes = ["eager", "graph"]
            self._words(ev)
        elif isinstance(ev, Topology):
            self._words(ev)
        elif isinstance(ev, MicroEnv):
            self._words(ev)
            if ev.part == "allreduce" and not any(b == "nccl" for b in ev.backends):
                self.modes = ["eager"]
        elif isinstance(ev, MicroProgress):
            if self.tty():
                self.err.write("\r\033[K" + progress_bar(ev))
                self.err.flush()
                self._progress = True
        elif isinstance(ev, GemmRow):
            if not self.gemm_head:
                self.gemm_head = True
                self._print("\n" + GEMM_HEAD)
            self.int4_rows += ev.backend == "torch-int4"
            self._print(gemm_line(ev))
        elif isinstance(ev, AllReduceRow):
            self._allreduce(ev)
        elif isinstance(ev, MicroEnd):
            self._flush_allreduce()
            if ev.part == "gemm" and self.int4_rows:
                self._print(f"note: {INT4_NOTE}")
            self._words(ev)
        elif isinstance(ev, LogLine) and ev.source.startswith(("micro", "topology")) and \
                ev.level in ("warning", "error"):
            if self._progress:
                self.err.write("\r\033[K")
                self._progress = False
            print(f"{ev.level}: {describe(ev)}", file=self.err, flush=True)

    def _words(self, ev: Event) -> None:
        """The event in the words of the event log and the report (``describe``), and the lines under it."""
        text = describe(ev)
        if text is not None:
            self._print(text)
        for line in details(ev):
            self._print(line)

    def _allreduce(self, r: AllReduceRow) -> None:
        if r.burst > 1:
            self.bursts.append(r)
            return
        if not self.nccl_head:
            self.nccl_head = True
            self._print("\n" + NCCL_HEAD)
        got = self.pending.setdefault(r.size_bytes, {})
        got[r.mode] = r
        if all(m in got for m in self.modes):
            self._print(nccl_line(got.get("eager"), got.get("graph")))
            del self.pending[r.size_bytes]

    def _flush_allreduce(self) -> None:
        for got in self.pending.values():
            self._print(nccl_line(got.get("eager"), got.get("graph")))
        self.pending.clear()
        for b in self.bursts:
            self._print(burst_line(b))
        self.bursts.clear()
