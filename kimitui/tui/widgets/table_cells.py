"""A table cell: what it may be given as, and how it is rendered (DataTable's rendering, inlined)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.renderables.styled import Styled

Cell = str | Text
Row = tuple[str, Sequence[Cell]]

CELL_PADDING = 1
"""Blank cells either side of a cell's content (DataTable's default)."""


def as_text(cell: Cell) -> Text:
    """A cell as DataTable reads it: a str is markup (one line); a Text is drawn as it is."""
    if isinstance(cell, Text):
        return cell
    text = Text.from_markup(cell, end="")
    text.no_wrap = True
    return text


def same_cell(a: Cell, b: Cell) -> bool:
    """Whether two cells draw the same (Text's == compares only the characters and spans)."""
    if a is b:
        return True
    if isinstance(a, Text) and isinstance(b, Text):
        return (a.plain == b.plain and a.style == b.style and a.spans == b.spans and a.justify == b.justify
                and a.overflow == b.overflow and a.no_wrap == b.no_wrap and a.end == b.end
                and a.tab_size == b.tab_size)
    return type(a) is type(b) and a == b


def render_cell(console: Console, options: ConsoleOptions, cell: Text, width: int, style: Style,
                post_style: Style) -> list[Segment]:
    """One line of a cell, as DataTable renders it: ``Styled(Padding(cell, (0, 1)), style, post_style)``
    through ``Console.render_lines`` at the column's width, one line high, no wrapping. The steps of
    those renderables are inlined (a third of the time); a one-line Text that fits its column (most
    cells) skips the wrapping and cropping too."""
    inner = width - 2 * CELL_PADDING
    if inner < 1:
        lines = console.render_lines(
            Styled(Padding(cell, (0, CELL_PADDING)), pre_style=style, post_style=post_style),
            options.update_dimensions(width, 1).update(no_wrap=True))
        return lines[0] if lines else [Segment(" " * width)]
    null = Style.null()
    plain = cell.plain
    justify = cell.justify or options.justify or "default"
    if (cell.end in ("\n", "") and "\n" not in plain and "\t" not in plain
            and cell.cell_len <= inner and not cell.spans):
        # One line that fits, in one style (a figure): what the steps below make of it, without the Text
        # copies. A joined line's style is a span over it, rendered as that style alone; no style, no style.
        cell_style = console.get_style(cell.style, default=null) if cell.style else None
        if justify in ("left", "center", "right"):
            text = plain if justify == "left" else plain.rstrip()
            room = inner - cell_len(text)
            left = 0 if justify == "left" else room if justify == "right" else room // 2
            text_line = [Segment(" " * left + text + " " * (room - left), cell_style)]
        else:
            text_line = [Segment(plain, cell_style)] if plain else []
            if cell.cell_len < inner:
                text_line.append(Segment(" " * (inner - cell.cell_len), null))
    elif (cell.end in ("\n", "") and "\n" not in plain and "\t" not in plain
            and cell.cell_len <= inner):
        # What Text.wrap does to one line that fits (Lines.justify), then its render as one joined line
        line = cell.copy()
        if justify == "left":
            line.pad_right(inner - line.cell_len)
        elif justify == "center":
            line.rstrip()
            line.pad_left((inner - line.cell_len) // 2)
            line.pad_right(inner - line.cell_len)
        elif justify == "right":
            line.rstrip()
            line.pad_left(inner - line.cell_len)
        text_line = list(Text("\n").join([line]).render(console))
        if line.cell_len < inner:
            text_line.append(Segment(" " * (inner - line.cell_len), null))
    else:
        # Text.__rich_console__ with DataTable's options (width, one line, no_wrap)
        tab_size = console.tab_size if cell.tab_size is None else cell.tab_size
        wrapped = cell.wrap(console, inner, justify=justify, overflow=cell.overflow or options.overflow or "fold",
                            tab_size=tab_size or 8, no_wrap=True if cell.no_wrap is None else cell.no_wrap)
        segments = list(Text("\n").join(wrapped).render(console, end=cell.end))
        # Padding(cell, (0, pad)): its inner Console.render_lines (padded, first line only)
        first = next(Segment.split_and_crop_lines(segments, inner, include_new_lines=False, pad=True,
                                                  style=null), None)
        text_line = first if first is not None else [Segment(" " * inner, null)]
    # the padding either side, in its style ("none", the null style); Styled(pre_style=style, post_style)
    side = Segment(" " * CELL_PADDING, null)
    # simplified here, once a cell: a row is not simplified again (its cells' styles differ: each names its column)
    return list(Segment.simplify(Segment.apply_style([side, *text_line, side], style=style, post_style=post_style)))
