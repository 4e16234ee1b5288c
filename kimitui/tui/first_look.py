"""The host's GPUs on the terminal before the dashboard is up.

The dashboard's first frame waits for Textual's import (0.4-1 s on a GPU host's CPU); the host's first
sample is often in hand sooner, read while that import runs (``commands/live.py``). An operator who opened
the dashboard to see whether the GPUs are free should not wait for a widget toolkit to read a number:
``FirstLook`` folds the events as they are read and, at the first sample with GPUs, writes them plainly on
the terminal's alternate screen, where the dashboard's first frame then paints over them. No textual import
here; drawn from the fold, as every view is, and only on a terminal.
"""

from __future__ import annotations

import os
import shutil
from typing import TextIO

from kimitui.core.events import Event
from kimitui.core.state import SessionState, fold
from kimitui.live.process_clock import mark, since_process_start
from kimitui.tui import fmt

ALT_SCREEN_ON = "\x1b[?1049h\x1b[H\x1b[2J"
ALT_SCREEN_OFF = "\x1b[?1049l"


def first_look_lines(state: SessionState, label: str, width: int) -> list[str]:
    """The header, a line per GPU (memory used/total, utilisation, temperature, power), the process count."""
    lines = [f" kimitui  {fmt.printable(label)}  starting the dashboard ...", "",
             f" {'GPU':>3}  {'NAME':<18} {'MEMORY':>17} {'UTIL':>5} {'TEMP':>5} {'POWER':>6}"]
    for g in state.gpus.values():
        name = fmt.shorten(fmt.printable(fmt.short_gpu_name(g.name)) or "-", 18)
        lines.append(f" {g.index:>3}  {name:<18} {fmt.mem_label(g.mem_used_mib, g.mem_total_mib):>17} "
                     f"{fmt.num(g.util_pct, '{:.0f}', '%'):>5} {fmt.num(g.temp_c, '{:.0f}', 'C'):>5} "
                     f"{fmt.num(g.power_w, '{:.0f}', 'W'):>6}")
    lines += ["", f" {len(state.procs)} processes on the GPUs"]
    return [line[:width] for line in lines]


class FirstLook:
    """Offered every event read before the dashboard starts; draws once, at the first sample with GPUs."""

    def __init__(self, label: str, out: TextIO | None, *, enabled: bool = True) -> None:
        self.label = label
        self.out = out
        self.enabled = enabled and out is not None and _is_terminal(out)
        self.state = SessionState()
        self._seen: set[str] = set()
        self.drawn_at: float | None = None
        """Seconds from this process's start to the first look (None: not drawn)."""

    def offer(self, event: Event) -> None:
        if not self.enabled:
            return
        if event.type not in self._seen:  # the start's trace: when each kind of event first came
            self._seen.add(event.type)
            mark(f"first-{event.type}")
        fold(self.state, event)
        if self.drawn_at is None and self.state.gpus:
            self._draw()

    def _draw(self) -> None:
        assert self.out is not None
        width = shutil.get_terminal_size((120, 40)).columns
        try:
            self.out.write(ALT_SCREEN_ON + "\r\n".join(first_look_lines(self.state, self.label, width)))
            self.out.flush()
        except (OSError, ValueError):  # the terminal went away: the dashboard will say so
            self.enabled = False
            return
        self.drawn_at = since_process_start()
        mark("first-look")

    def hand_over(self) -> None:
        """The dashboard starts now and paints over the first look: nothing more is drawn."""
        self.enabled = False

    def withdraw(self) -> None:
        """The dashboard did not start (a failed open or import): back to the main screen, as it was."""
        if self.drawn_at is not None and self.out is not None:
            try:
                self.out.write(ALT_SCREEN_OFF)
                self.out.flush()
            except (OSError, ValueError):
                pass
        self.enabled = False


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty() and os.environ.get("TERM", "") not in ("", "dumb")
    except (OSError, ValueError):
        return False
