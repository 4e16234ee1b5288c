"""Send the terminal only the cells that changed.

Textual repaints a widget's dirty lines whole: a GPU row whose utilisation went from 39 % to 40 % is sent
as its 84 cells with their styles, twice a second for every GPU, which over SSH on a slow link is what the
operator feels. ``ScreenShadow`` keeps what the terminal shows (a character and a style a cell) and turns
each partial update (Textual's ``ChopsUpdate``) into the runs of cells that differ from it, each written
at its position, as curses does. A full update (``LayoutUpdate``: the first frame, a resize, a screen
pushed, a layout that changed as the first samples filled the tables) is diffed the same way once the shadow
knows every cell of a screen of that size; the first one, one after a resize, or after the app handed the
terminal away (a suspend) is sent whole and taken as the new picture. Two full paints in the first seconds
were half of what the dashboard wrote on its start (issue 37).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice, repeat

from rich.cells import cell_len, get_character_cell_size
from rich.color import ColorSystem
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual._compositor import ChopsUpdate, CompositorUpdate, LayoutUpdate
from textual.strip import SGR_STYLES, Strip

Pen = tuple[str, str, str, str | None] | None
"""The pen a style draws a cell with on the terminal: its SGR parameters (attributes, foreground, background)
and its link; None: the terminal's default (Textual's styles also carry meta, the widget and offset a click goes
to, which the terminal never sees)."""
ScreenCell = tuple[str, Pen]
"""One terminal cell: its character ("" for the right half of a wide one) and its pen."""

Run = tuple[int, int, list[ScreenCell], list[Style | None]]
"""Cells to write: at (x, y), each with its style."""

UNKNOWN: ScreenCell = ("\0", None)
"""A cell whose content the terminal shows is not known (never drawn, or drawn by a control sequence)."""


def pen_of(style: Style | None, color_system: ColorSystem) -> Pen:
    if style is None:
        return None
    attributes = style._attributes & style._set_attributes
    attrs = ";".join(SGR_STYLES[bit] for bit in range(attributes.bit_length()) if attributes & (1 << bit))
    fg = ";".join(style._color.downgrade(color_system).get_ansi_codes()) if style._color is not None else ""
    bg = (";".join(style._bgcolor.downgrade(color_system).get_ansi_codes(False))
          if style._bgcolor is not None else "")
    if not (attrs or fg or bg or style._link):
        return None
    return (attrs, fg, bg, style._link)


def sgr_change(before: Pen, after: Pen) -> str:
    """The SGR sequence from ``before`` to ``after``: only the colour that changed when the attributes are
    the same, else a reset and the whole of ``after``."""
    if after is None:
        return "\x1b[0m"
    attrs, fg, bg, _ = after
    if before is None:  # the terminal's default pen (a frame starts in it): nothing to reset
        return f"\x1b[{';'.join(code for code in (attrs, fg, bg) if code)}m"
    if before is not None and before[0] == attrs and (fg or not before[1]) and (bg or not before[2]):
        codes = [code for code, was in ((fg, before[1]), (bg, before[2])) if code != was]
        return f"\x1b[{';'.join(codes)}m" if codes else ""
    return f"\x1b[{';'.join(['0', *(code for code in (attrs, fg, bg) if code)])}m"


_PENS: dict[tuple[Style | None, ColorSystem], Pen] = {}
"""pen_of's answers: a frame's strips share a few dozen styles."""


def _pen(style: Style | None, color_system: ColorSystem) -> Pen:
    key = (style, color_system)
    pen = _PENS.get(key, UNKNOWN)
    if pen is UNKNOWN:
        if len(_PENS) > 4096:  # styles made and dropped (a theme tried, a link's id): start again
            _PENS.clear()
        pen = _PENS[key] = pen_of(style, color_system)
    return pen  # type: ignore[return-value]


def strip_cells(strip: Iterable[Segment], color_system: ColorSystem
                ) -> tuple[list[ScreenCell], list[Style | None]] | None:
    """The cells a strip (or a run of its segments) paints, left to right, and each one's style; None when it
    holds a control segment (not diffed)."""
    cells: list[ScreenCell] = []
    styles: list[Style | None] = []
    for text, style, control in strip:
        if control:
            return None
        pen = _pen(style, color_system)
        if text.isascii() and text.isprintable():  # a cell a character
            cells += zip(text, repeat(pen))
            styles += repeat(style, len(text))
            continue
        for char in text:
            width = get_character_cell_size(char)
            if width == 0:
                if cells:  # a combining mark joins the cell before it
                    prev, prev_look = cells[-1]
                    cells[-1] = (prev + char, prev_look)
                continue
            cells.append((char, pen))
            styles.append(style)
            if width == 2:
                cells.append(("", pen))
                styles.append(style)
    return cells, styles


class DiffUpdate(CompositorUpdate):
    """An update already turned into terminal sequences (only the changed cells)."""

    def __init__(self, sequences: str) -> None:
        self.sequences = sequences

    def render_segments(self, console: Console) -> str:
        return self.sequences


class ScreenShadow:
    """What the terminal shows, cell by cell, as far as the updates sent to it say."""

    def __init__(self) -> None:
        self.rows: list[list[ScreenCell]] = []
        self.width = 0
        self.strips: list[dict[int, Strip]] = []
        """Per row, the strips whose cells the row holds, by column: a chop that is the same (immutable)
        strip again is skipped without looking at its cells (Textual keeps a line it did not repaint)."""
        self.complete = False
        """Every cell of the screen is known (a full update covered it): a full update can be diffed."""
        self.drawn = False
        """A full update has been sent since the start (or since the terminal was handed away): until then a
        partial one paints over a screen that is not ours yet, and the full one that follows paints it all again
        (Python 3.12's asyncio gets a partial update of the first widgets out before the first frame: 3.3 KB
        of a 120x40 start, issue 37)."""

    def reset(self, width: int, height: int) -> None:
        self.width = width
        self.rows = [[UNKNOWN] * width for _ in range(height)]
        self.strips = [{} for _ in range(height)]
        self.complete = False

    def forget(self) -> None:
        """The terminal was someone else's a while (a suspend): nothing on it is known."""
        self.reset(self.width, len(self.rows))
        self.drawn = False

    def _took(self, y: int, x: int, strip: Strip | None) -> None:
        """Row ``y`` now holds ``strip``'s cells from ``x`` (None: cells not known): forget the strips it
        covered."""
        end = x + (strip.cell_length if strip is not None else self.width)
        held = self.strips[y]
        for at in [at for at, old in held.items() if at < end and at + old.cell_length > x]:
            del held[at]
        if strip is not None:
            held[x] = strip

    def _paint(self, y: int, x: int, painted: tuple[list[ScreenCell], list[Style | None]] | None, length: int) -> None:
        if not 0 <= y < len(self.rows):
            return
        row = self.rows[y]
        end = min(x + length, self.width)
        if x >= end:
            return
        row[x:end] = painted[0][: end - x] if painted is not None else [UNKNOWN] * (end - x)
        if painted is None:
            self._took(y, x, None)

    def take_full(self, update: LayoutUpdate, width: int, height: int, color_system: ColorSystem) -> None:
        """A full update is sent as it is: it becomes the picture."""
        if width != self.width or height != len(self.rows):
            self.reset(width, height)
        region = update.region
        if region.x <= 0 and region.y <= 0 and region.right >= width and region.bottom >= height:
            self.complete = True
        for y, line in enumerate(update.strips, region.y):
            x = region.x
            for strip in line:
                painted = strip_cells(strip, color_system)
                self._paint(y, x, painted, strip.cell_length)
                if painted is not None and 0 <= y < len(self.rows):
                    self._took(y, x, strip)
                x += strip.cell_length

    def diff(self, update: ChopsUpdate, console: Console) -> str:
        """The sequences that bring the terminal from the shadow to ``update``'s lines; the shadow follows."""
        color_system = console._color_system or ColorSystem.TRUECOLOR
        out = _Writer(self.width)
        runs: list[Run] = []
        lines = {y for y, _, _ in update.spans}
        for y in sorted(lines):
            if not 0 <= y < len(self.rows):
                continue
            row, held = self.rows[y], self.strips[y]
            for x, strip in update.chops[y].items():
                if strip is None or x >= self.width:
                    continue
                before = held.get(x)
                if before is strip:
                    continue
                window = _changed_window(before, strip) if before is not None else WHOLE
                if window is None:  # the same segments: the row holds them already
                    held[x] = strip
                    continue
                if window is WHOLE:
                    at, painted = x, strip_cells(strip, color_system)
                else:  # only the segments that differ from the strip the row holds, and those between them
                    first, last, offset = window
                    at = x + offset
                    if at >= self.width:  # what changed is off the screen
                        self._took(y, x, strip)
                        continue
                    painted = strip_cells(islice(strip, first, last), color_system)
                if painted is None:  # a control sequence: sent as it is, its cells no longer known
                    out.raw(x, y, strip.render(console))
                    self._paint(y, x, None, strip.cell_length)
                    continue
                cells, styles = painted[0][: self.width - at], painted[1]
                for start, end in _changed_runs(row, at, cells):
                    runs.append((start, y, cells[start - at:end - at], styles[start - at:end - at]))
                row[at:at + len(cells)] = cells
                self._took(y, x, strip)
        # The runs do not overlap: written a pen at a time (the SGR changes once a pen, not once a run), the
        # pens in the order they first appear on the screen, each pen's runs top to bottom then left to
        # right, or left to right then top to bottom, whichever is shorter (figures in a column, a row apart:
        # a cursor step down and back, not a move to each row's next figure)
        runs.sort(key=lambda run: (run[1], run[0]))
        groups: dict[Pen, list[Run]] = {}
        for run in runs:
            groups.setdefault(run[2][0][1], []).append(run)
        for group in groups.values():
            if len(group) < 3:
                out.write(group, console)
                continue
            by_rows, by_columns = out.fork(), out.fork()
            by_rows.write(group, console)
            by_columns.write(sorted(group, key=lambda run: (run[0], run[1])), console)
            out.take(min(by_rows, by_columns, key=lambda writer: writer.length))
        return out.done()


class _Writer:
    """Terminal sequences for runs of cells: a cursor move only where the cursor is not already, an SGR only
    where the pen changes (one reset at the end, as Textual leaves the terminal after a frame)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.parts: list[str] = []
        self.at: tuple[int, int] | None = None
        self.pen: Pen = None

    @property
    def length(self) -> int:
        return sum(len(part.encode()) for part in self.parts)

    def fork(self) -> _Writer:
        """A writer that goes on from where this one is (its parts its own)."""
        fork = _Writer(self.width)
        fork.at, fork.pen = self.at, self.pen
        return fork

    def take(self, fork: _Writer) -> None:
        """What a fork wrote, as if written here."""
        self.parts += fork.parts
        self.at, self.pen = fork.at, fork.pen

    def write(self, runs: list[Run], console: Console) -> None:
        for x, y, cells, styles in runs:
            self.cells(x, y, cells, styles, console)

    def move(self, x: int, y: int) -> None:
        if self.at == (x, y):
            return
        # After a write to the last column the terminal holds the cursor there, a wrap pending: only an
        # absolute move is sure to land where meant
        at = self.at if self.at is not None and self.at[0] < self.width else None
        self.parts.append(cursor_move(at, x, y))
        self.at = (x, y)

    def raw(self, x: int, y: int, rendered: str) -> None:
        """Sequences rendered by Textual (they end on a reset); where the cursor ends is not known."""
        self.move(x, y)
        self.parts.append(rendered)
        self.at, self.pen = None, None

    def cells(self, x: int, y: int, cells: list[ScreenCell], styles: list[Style | None], console: Console) -> None:
        if any(style is not None and style._link for style in styles):
            self.raw(x, y, _render(cells, styles, console))
            return
        self.move(x, y)
        for char, pen in cells:
            if pen != self.pen:
                self.parts.append(sgr_change(self.pen, pen))
                self.pen = pen
            self.parts.append(char)
        self.at = (x + len(cells), y)

    def done(self) -> str:
        if self.pen is not None:
            self.parts.append("\x1b[0m")
        return "".join(self.parts)


def cursor_move(at: tuple[int, int] | None, x: int, y: int) -> str:
    """The shortest sequence that takes the cursor from ``at`` (None: not known) to column ``x``, row ``y``,
    as curses chooses: an absolute move, or moves relative to where it is (up or down, then right, left or
    backspaces), or a carriage return and a move right. Every one is VT100's."""
    absolute = f"\x1b[{y + 1};{x + 1}H" if x else f"\x1b[{y + 1}H" if y else "\x1b[H"
    if at is None:
        return absolute
    vertical = _steps(y - at[1], "B", "A")
    candidates = [absolute, vertical + _horizontal(x - at[0]), "\r" + _steps(x, "C", "") + vertical]
    return min(candidates, key=len)


def _steps(n: int, forward: str, back: str) -> str:
    if n == 0:
        return ""
    final, n = (forward, n) if n > 0 else (back, -n)
    return f"\x1b[{final}" if n == 1 else f"\x1b[{n}{final}"


def _horizontal(dx: int) -> str:
    return "\b" * -dx if -3 <= dx < 0 else _steps(dx, "C", "D")


WHOLE = (0, 0, 0)
"""_changed_window's answer when the strips cannot be compared segment by segment."""


def _changed_window(before: Strip, after: Strip) -> tuple[int, int, int] | None:
    """The segments of ``after`` from the first to the last that differ from ``before``'s, as (first, end,
    the cell where the first starts); None when none differ; ``WHOLE`` unless every pair of segments is as
    wide (the cells of one line up with the other's) and no mark that joins the cell before it starts a
    segment at the window's edges (the first, in either strip, or the one after the last). A table row
    redrawn for one new figure reuses the segments of its other cells: only that figure's segments are
    turned into cells and compared."""
    old, new = list(before), list(after)
    if len(old) != len(new):
        return WHOLE
    first = end = offset = 0
    found = False
    for i, (was, now) in enumerate(zip(old, new, strict=True)):
        if was is now or was == now:
            if not found:
                offset += cell_len(now.text)
            continue
        if was.control or now.control or cell_len(was.text) != cell_len(now.text):
            return WHOLE
        if not found:
            first, found = i, True
        end = i + 1
    if not found:
        return None
    edges = (old[first].text, new[first].text, new[end].text if end < len(new) else "")
    if any(text and get_character_cell_size(text[0]) == 0 for text in edges):
        return WHOLE
    return first, end, offset


def _changed_runs(row: list[ScreenCell], x: int, cells: list[ScreenCell]) -> list[tuple[int, int]]:
    """[start, end) screen columns where ``cells`` (painted from ``x``) differ from ``row``, each run of one
    pen, never starting or ending inside a wide character. Two runs of a pen are sent as one when the
    unchanged cells between them are of that pen too and cost no more bytes than the cursor move over them."""
    runs: list[list[int]] = []
    pens: list[Pen] = []
    for i, cell in enumerate(cells):
        if row[x + i] == cell:
            continue
        pen = cell[1]
        if runs and pens[-1] == pen:
            gap = cells[runs[-1][1]:i]
            if not gap or (all(c[1] == pen for c in gap)
                           and sum(len(c[0].encode()) for c in gap) <= len(_steps(len(gap), "C", ""))):
                runs[-1][1] = i + 1
                continue
        runs.append([i, i + 1])
        pens.append(pen)
    out = []
    for start, end in runs:
        while start > 0 and cells[start][0] == "":
            start -= 1
        while end < len(cells) and cells[end][0] == "":
            end += 1
        out.append((x + start, x + end))
    return out


def _render(cells: list[ScreenCell], styles: list[Style | None], console: Console) -> str:
    """The cells as one strip of segments, a segment per run of one pen."""
    segments: list[Segment] = []
    text: list[str] = []
    pen, style = cells[0][1], styles[0]
    for (char, cell_pen), cell_style in zip(cells, styles, strict=True):
        if cell_pen != pen:
            segments.append(Segment("".join(text), style))
            text, pen, style = [], cell_pen, cell_style
        text.append(char)
    segments.append(Segment("".join(text), style))
    return Strip(segments).render(console)


def minimal_update(shadow: ScreenShadow, update: object, size: tuple[int, int],
                   console: Console) -> object:
    """The update to write instead of ``update``: only the changed cells of a partial one, and of a full one
    once the shadow knows the whole screen; else a full one as it is (the shadow takes it). A partial one
    before any full one writes nothing (``ScreenShadow.drawn``)."""
    if isinstance(update, LayoutUpdate):
        shadow.drawn = True
        region = update.region
        whole = region.x <= 0 and region.y <= 0 and region.right >= size[0] and region.bottom >= size[1]
        if not (shadow.complete and shadow.width == size[0] and len(shadow.rows) == size[1]):
            if not whole:
                shadow.take_full(update, *size, console._color_system or ColorSystem.TRUECOLOR)
                return update
            shadow.reset(*size)  # every cell unknown: all written, a pen's SGR once per run of it
        diffed = DiffUpdate(shadow.diff(_as_chops(update, size[1]), console))
        shadow.complete = shadow.complete or whole
        return diffed
    if isinstance(update, ChopsUpdate):
        if not shadow.drawn:  # before the first full update: it paints everything, this included, newer
            return DiffUpdate("")
        if shadow.width != size[0] or len(shadow.rows) != size[1]:
            shadow.reset(*size)  # a resize with no full update yet: nothing is known
        return DiffUpdate(shadow.diff(update, console))
    return update


def _as_chops(update: LayoutUpdate, height: int) -> ChopsUpdate:
    """A full update as the partial one of its every line (what ``ScreenShadow.diff`` reads)."""
    chops: list[dict[int, Strip | None]] = [{} for _ in range(height)]
    spans: list[tuple[int, int, int]] = []
    for y, line in enumerate(update.strips, update.region.y):
        if not 0 <= y < height:
            continue
        x = update.region.x
        for strip in line:
            chops[y][x] = strip
            x += strip.cell_length
        spans.append((y, update.region.x, x))
    return ChopsUpdate(chops, spans, [[end] for _, _, end in spans])
