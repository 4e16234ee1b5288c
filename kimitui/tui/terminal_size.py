"""What the dashboard's layout does with the terminal's size: compact below 100x30 (the 80x24 layout), short
below 24 lines (the process table and the events give up rows, both keep some), and below the least size it
can be used at, only the footer (help and quit) and a line that says so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Static

from kimitui.tui.widgets.key_footer import KeyFooter

if TYPE_CHECKING:
    from textual.screen import Screen

COMPACT_WIDTH = 100
COMPACT_HEIGHT = 30
SHORT_HEIGHT = 24
MIN_WIDTH = 60
MIN_HEIGHT = 20
"""The least size the dashboard is drawn at (the footer keeps ? Help and q Quit, each pane keeps rows)."""


def too_small_text(width: int, height: int) -> str:
    return (f"terminal too small (needs {MIN_WIDTH} x {MIN_HEIGHT}, has {width} x {height})\n"
            "make it larger, or press q to quit")


def apply_size(screen: Screen[object], width: int, height: int) -> None:
    """Set the dashboard screen's size classes, its footer's keys and the too-small line for WIDTH x HEIGHT."""
    small = width < MIN_WIDTH or height < MIN_HEIGHT
    screen.set_class(width < COMPACT_WIDTH or height < COMPACT_HEIGHT, "-compact")
    screen.set_class(height < SHORT_HEIGHT, "-short")
    screen.set_class(small, "-too-small")
    if small:
        screen.query_one("#too-small", Static).update(too_small_text(width, height))
    footer = screen.query_one(KeyFooter)
    footer.show_command_palette = width >= COMPACT_WIDTH  # ^p is in the help; the keys need the room
    footer.fit(width)
