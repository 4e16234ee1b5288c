"""Micro results as text: the GEMM table, the all-reduce table in nccl-tests' columns, the bursts.

``TextPrinter`` prints a run's events as they come (``kimitui bench micro`` without ``--json``): the plan,
the topology, each worker's findings and each part's end in ``describe``'s words (the event log's),
the rows as tables (``kimitui.core.micro_words`` writes each line, for the report too).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from kimitui.core.describe import describe, details
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
from kimitui.core.micro_words import GEMM_HEAD, INT4_NOTE, NCCL_HEAD, burst_line, gemm_line, nccl_line, progress_bar
from kimitui.core.printable import printable_lines


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
