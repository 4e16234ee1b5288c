"""What ``kimitui bench macro`` writes while a sweep runs: a line (or JSON object) per level on stdout,
progress on stderr (a live line on a terminal, a one-line summary per level otherwise), and ``--output``,
replaced atomically as each level ends so a killed sweep leaves valid JSON of the levels it finished.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, TextIO

from kimitui.bench.macro import LevelProgress, MacroConfig, SweepLevel, SweepResult
from kimitui.core.events.macro import LevelAxis, level_label
from kimitui.core.level_energy import NO_POWER, LevelEnergy
from kimitui.core.level_result import LevelResult
from kimitui.core.printable import printable


def _clean(value: Any) -> Any:
    """NaN and infinities (a level with no completed request has no TTFT) as null: JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def json_level(concurrency: int, metrics: dict[str, Any]) -> str:
    """One level as the --json line: vLLM's key names, non-finite numbers as null."""
    return json.dumps({"concurrency": concurrency, **{k: _clean(v) for k, v in metrics.items()}})


def _label(concurrency: int, rate: float | None) -> str:
    """``c=8``, or ``2.5 req/s`` for a level of a sweep by rate."""
    axis: LevelAxis = "rate" if rate is not None else "concurrency"
    return level_label(rate if rate is not None else concurrency, axis)


def _n(value: float | None, spec: str) -> str:
    """A figure in SPEC, or n/a (right-aligned to SPEC's width) where the level has none."""
    if value is None:
        width = spec.split(".")[0].lstrip(">")
        return format("n/a", f">{width}") if width else "n/a"
    return format(value, spec)


def energy_figures(r: LevelResult, energy: LevelEnergy | None) -> dict[str, Any]:
    """A level's energy figures for --json and --output (``core.level_energy``): where the host's power was not
    recorded, null and why."""
    if energy is None:
        return {"output_tokens_per_joule": None, "joules_per_request": None, "energy_note": NO_POWER}
    return {"output_tokens_per_joule": energy.tokens_per_joule(r.output_throughput),
            "joules_per_request": energy.joules_per_request(r.duration, r.completed),
            "mean_gpu_power_w": energy.mean_w, "energy_gpus": list(energy.gpus), "energy_samples": energy.samples}


def energy_words(r: LevelResult, energy: LevelEnergy | None) -> str:
    """``2.41 tok/J, 130 J/req on 8 GPUs``, or that the power is not known."""
    if energy is None:
        return "energy n/a (no GPU power recorded)"
    per_j, per_req = energy.tokens_per_joule(r.output_throughput), energy.joules_per_request(r.duration, r.completed)
    return (f"{_n(per_j, '.3g')} tok/J, {_n(per_req, '.4g')} J/req on {len(energy.gpus)} GPU"
            f"{'s' if len(energy.gpus) != 1 else ''} ({energy.mean_w:.0f} W)")


def format_level(r: LevelResult, energy: LevelEnergy | None = None, metered: bool = False,
                 rate: float | None = None) -> str:
    """One level as a line: throughput, TTFT / TPOT / ITL (mean and the highest percentile asked for), the
    input tokens achieved, the concurrency reached, goodput, the server's prefix-cache hit rate and failures;
    RATE: the level's request rate, where the sweep's levels are rates (the line starts with it)."""
    top, pk = r.top_percentile, r.top_word
    figure = r.figure
    where = f"{rate:g} req/s" if rate is not None else f"c={r.concurrency:<4}"
    line = (f"{where} {_n(r.completed, '>5')} ok {_n(r.failed, '>4')} failed  "
            f"out {_n(r.output_throughput, '>9.1f')} tok/s  req {_n(figure('request_throughput'), '>7.2f')}/s  "
            f"TTFT {_n(r.ttft.mean, '>8.1f')} ms ({pk} {_n(r.ttft.p(top), '.1f')})  "
            + (f"TTFO {_n(r.ttfo.mean, '>8.1f')} ms ({pk} {_n(r.ttfo.p(top), '.1f')}, "
               f"thinking {_n(figure('mean_reasoning_tokens'), '.0f')} tok)  " if r.reasoning else "") +
            f"TPOT {_n(r.tpot.mean, '>7.2f')} ms  ITL {pk} {_n(r.itl.p(top), '.2f')} ms  "
            f"in {_n(figure('mean_input_tokens'), '.0f')}±{_n(figure('std_input_tokens'), '.0f')} tok  "
            f"reached {_n(r.count('concurrency_reached'), '')}")
    if (good := figure("request_goodput")) is not None:
        line += f"  goodput {good:.2f}/s"
    if (r.count("turns") or 1) > 1:
        line += (f"  {r.count('turns')}-turn chats: TTFT first {_n(figure('mean_ttft_first_turn_ms'), '.1f')} ms, "
                 f"later {_n(figure('mean_ttft_later_turns_ms'), '.1f')} ms")
    if (hit := figure("prefix_cache_hit_rate")) is not None:
        line += f"  prefix cache {hit:.0%}"
    if metered:
        line += "  " + energy_words(r, energy)
    if r.failures:
        line += "  [" + printable("; ".join(f"{n} x {why}" for why, n in r.failures)) + "]"
    return line


class StderrProgress:
    """On a terminal, one line rewritten in place (about 10 times a second) with the level in hand; else,
    when each level ends, one line saying how it went."""

    PREFIX = "kimitui bench macro: "

    def __init__(self, err: TextIO, levels: list[float], live: bool | None = None) -> None:
        self.err = err
        self.levels = levels
        self.live = err.isatty() if live is None else live
        self.shown = False
        self.done = 0
        self.planned = len(levels)
        """Levels the sweep plans (a search's: at most this many probes, from its progress)."""

    def clear(self) -> None:
        """Take the live line away (before anything else is written to the terminal)."""
        if self.shown:
            self.err.write("\r\x1b[K")
            self.err.flush()
            self.shown = False

    def update(self, p: LevelProgress) -> None:
        self.planned = max(p.levels, self.done + 1)
        if not self.live:
            return
        where = f"level {p.level_index + 1}/{p.levels} {_label(p.concurrency, p.rate)}"
        if p.stage == "warmup":
            what = "warming up"
        else:
            total = f"/{p.total}" if p.total else ""
            what = (f"{p.done}{total} requests done, {p.failed} failed, {p.in_flight} in flight, "
                    f"{p.output_tokens} tokens")
        self.err.write(f"\r\x1b[K{self.PREFIX}{where}: {what}, {max(0.0, p.elapsed_s):.1f}s "
                       f"({p.overall_fraction:.0%} of the sweep)")
        self.err.flush()
        self.shown = True

    def level_done(self, r: LevelResult, rate: float | None = None) -> None:
        self.done += 1
        self.clear()
        if self.live:
            return
        where = _label(r.concurrency, rate)
        self.err.write(f"{self.PREFIX}level {self.done}/{self.planned} {where} done in "
                       f"{r.duration or 0.0:.1f}s: {_n(r.completed, '')} ok, {_n(r.failed, '')} "
                       f"failed, {_n(r.output_throughput, '.1f')} tok/s\n")
        self.err.flush()


class OutputFile:
    """``--output``: the sweep so far, written to a temporary file beside it and renamed over it, so the
    file is always whole JSON (``"finished": false`` until the command ends)."""

    def __init__(self, path: Path, config: MacroConfig, model: str) -> None:
        self.path = path
        self.partial = SweepResult(config=config, model=model)

    def level(self, concurrency: int, metrics: dict[str, Any], rate: float | None = None) -> None:
        self.partial.levels.append(SweepLevel(concurrency, metrics, rate=rate))
        self.write(self.partial, finished=False)

    def write(self, result: SweepResult, finished: bool) -> None:
        text = json.dumps(_clean({**result.to_dict(), "finished": finished}), indent=2, allow_nan=False) + "\n"
        folder = self.path.parent if str(self.path.parent) else Path(".")
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=folder)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
