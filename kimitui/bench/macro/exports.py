"""A sweep's files besides its run: every request as JSON Lines (``--requests-out``), the levels as CSV.

The vLLM-style JSON of the whole sweep is ``SweepResult.to_json``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import IO, Any

from kimitui.bench.macro.config import ConfigError
from kimitui.bench.macro.records import export_lines
from kimitui.bench.macro.sweep import SweepResult
from kimitui.core.events import Event, MacroRequests


def _open(path: Path) -> IO[str]:
    try:
        return path.open("w", encoding="utf-8", newline="")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None


class RequestsOut:
    """Writes each request of each finished level to a JSONL file as its ``MacroRequests`` events are
    published (one self-describing object a line, ``records.export_lines``); other events pass by. The
    file is opened at once, so a path that cannot be written fails before the sweep starts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = _open(path)
        self.lines = 0

    def __call__(self, ev: Event) -> None:
        if isinstance(ev, MacroRequests) and not self._fh.closed:
            for line in export_lines(ev):
                self._fh.write(json.dumps(line, separators=(",", ":")) + "\n")
                self.lines += 1
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(str(v) for v in value)
    return value


def write_csv(result: SweepResult, path: Path) -> None:
    """One row per level: ``concurrency`` and every figure of the level (vLLM's key names; a failure
    table or a list becomes one "; "-separated cell)."""
    columns: list[str] = ["concurrency"]
    for level in result.levels:
        columns += [k for k in level.metrics if k not in columns]
    with _open(path) as fh:
        out = csv.writer(fh)
        out.writerow(columns)
        for level in result.levels:
            row = {"concurrency": level.concurrency, **level.metrics}
            out.writerow([_cell(row.get(c)) for c in columns])
