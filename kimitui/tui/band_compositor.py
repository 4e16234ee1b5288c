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
        cuts = self.cuts
        no_chops: dict[int, Strip | None] = {}
        chops: list[dict[int, Strip | None]] = [no_chops] * len(cuts)  # ChopsUpdate reads the spans' lines only
        # per line, the chops that meet a dirty span and that no widget in front has filled yet
        open_chops: dict[int, list[tuple[int, int]]] = {}
        for y, x1, x2 in spans:
            line_cuts = cuts[y]
            if chops[y] is no_chops:
                chops[y] = dict.fromkeys(line_cuts[:-1])
            line_open = open_chops.setdefault(y, [])
            for chop in pairwise(line_cuts):
                if chop[0] < x2 and chop[1] > x1 and chop not in line_open:
                    line_open.append(chop)
        first_line, last_line = spans[0][0], spans[-1][0]
        intersection = Region.intersection
        for widget, (region, clip) in self.visible_widgets.items():  # front to back
            if not open_chops:
                break  # every chop filled: the widgets behind show nothing new
            x, y, width, height = intersection(region, clip)
            if not (width and height) or y > last_line or y + height <= first_line:
                continue
            right = x + width
            # a chop never straddles a widget's edge (the cuts are all the edges): in the widget or beside it
            lines = [line for line in range(max(y, first_line), min(y + height, last_line + 1))
                     if any(cut >= x and end <= right for cut, end in open_chops.get(line, ()))]
            for start, end in _runs(lines):
                strips = widget.render_lines(Region(x - region.x, start - region.y, width, end - start))
                for line, strip in zip(range(start, end), strips, strict=False):
                    line_open = open_chops[line]
                    line_chops = chops[line]
                    for chop in [chop for chop in line_open if chop[0] >= x and chop[1] <= right]:
                        line_chops[chop[0]] = strip.crop(chop[0] - x, chop[1] - x)
                        line_open.remove(chop)
                    if not line_open:
                        del open_chops[line]
        return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in cuts])


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
