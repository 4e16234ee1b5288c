"""Render a partial update from the widgets and lines that changed, not from everything around them.

Textual's compositor turns the dirty regions of a frame into one crop (their bounding box) and renders every
widget whose clip overlaps it, each over its whole visible region: the clip of a screen's child is the
screen, so a frame where the header (row 0) and the GPU rows (5-12) changed renders all 25 widgets of the
dashboard, the event log and the footer included, every line of each (from cache, but each line through
the widget's line filters), then keeps the lines of the dirty spans. ``BandCompositor`` renders a widget
only on the lines where its visible region meets a dirty span, and fills only the chops (the pieces of a
line between two widget edges) that meet a span: every widget that covers such a chop meets the span there
too, so it is rendered, and the front-most one wins, as in Textual; a widget behind them all (a container
whose children fill the line) is not rendered there. Lines outside the spans are not written
to the terminal by either compositor (``ChopsUpdate`` writes the spans); here they are not rendered either,
so a widget's dirty line stays dirty until a frame shows it.

Full updates (the first frame, a resize, a screen pushed) are Textual's own.
"""

from __future__ import annotations

from itertools import pairwise

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


class BandCompositor(Compositor):
    def render_partial_update(self) -> ChopsUpdate | None:
        if not self._dirty_regions:
            return None
        screen = self.size.region
        regions = [clipped for region in self._dirty_regions if (clipped := region.intersection(screen))]
        self._dirty_regions.clear()
        if not regions:
            return None
        spans = list(self._regions_to_spans(regions))
        by_line: dict[int, list[tuple[int, int]]] = {}
        for y, x1, x2 in spans:
            by_line.setdefault(y, []).append((x1, x2))
        cuts = self.cuts
        chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
        intersection = Region.intersection
        first_line, last_line = spans[0][0], spans[-1][0]
        for widget, (region, clip) in self.visible_widgets.items():  # front to back
            x, y, width, height = intersection(region, clip)
            if not (width and height) or y > last_line or y + height <= first_line:
                continue
            right = x + width
            lines = [line for line in range(max(y, first_line), min(y + height, last_line + 1))
                     if _open_chop(chops[line], cuts[line], by_line.get(line, ()), x, right)]
            for start, end in _runs(lines):
                strips = widget.render_lines(Region(x - region.x, start - region.y, width, end - start))
                for line, strip in zip(range(start, end), strips, strict=False):
                    line_spans = by_line[line]
                    line_chops = chops[line]
                    line_cuts = cuts[line]
                    final_cuts = [cut for cut in line_cuts if right >= cut >= x]
                    pieces = strip.divide([cut - x for cut in final_cuts[1:]])
                    for cut, end_cut, piece in zip(final_cuts, final_cuts[1:], pieces, strict=False):
                        if line_chops.get(cut) is None and any(x1 < end_cut and x2 > cut for x1, x2 in line_spans):
                            line_chops[cut] = piece
        return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in cuts])


def _open_chop(line_chops: dict[int, Strip | None], line_cuts: list[int], spans: list[tuple[int, int]] | tuple[()],
               x: int, right: int) -> bool:
    """Whether a chop of this line between ``x`` and ``right`` meets a dirty span and is not filled yet (by a
    widget in front): a widget with none there has nothing to show on the line."""
    if not spans:
        return False
    for cut, end_cut in pairwise(line_cuts):
        if cut >= right:
            break
        if (end_cut > x and line_chops.get(cut) is None
                and any(x1 < end_cut and x2 > cut for x1, x2 in spans)):
            return True
    return False


def _runs(lines: list[int]) -> list[tuple[int, int]]:
    """Sorted line numbers as [start, end) runs of consecutive lines."""
    runs: list[tuple[int, int]] = []
    for line in lines:
        if runs and runs[-1][1] == line:
            runs[-1] = (runs[-1][0], line + 1)
        else:
            runs.append((line, line + 1))
    return runs


class BandScreen(Screen[object]):
    """A screen whose partial updates are rendered by ``BandCompositor`` (the dashboard's default screen)."""

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._compositor = BandCompositor()
