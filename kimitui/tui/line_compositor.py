"""Render only the lines that changed.

Textual's compositor renders a partial update by asking every widget whose clip overlaps the bounding box
of the changed regions for its whole visible region, then keeps the lines that changed: a clock tick in the
header and a GPU row a few lines below make the footer, the process table, the event log and every
container render themselves (from their caches, but through ~30 ``render_lines`` calls a frame), which was
most of the dashboard's CPU at 2 Hz. ``LineCompositor`` asks a widget only for the changed lines it covers
(runs of adjacent lines as one call), and not at all when what it would draw there is hidden behind the
widgets in front of it or lies outside the changed spans. What reaches the screen is what Textual's would:
the same strips at the same cuts, the first (frontmost) one winning, within the changed spans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


def line_runs(lines: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted line numbers as [start, end) runs of adjacent lines."""
    runs: list[tuple[int, int]] = []
    for y in lines:
        if runs and runs[-1][1] == y:
            runs[-1] = (runs[-1][0], y + 1)
        else:
            runs.append((y, y + 1))
    return runs


class LineCompositor(Compositor):
    """Textual's compositor, whose partial updates render each widget on the changed lines only."""

    def render_partial_update(self) -> ChopsUpdate | None:
        update_regions = self._dirty_regions.copy()
        self._dirty_regions.clear()
        if not update_regions:
            return None
        spans = list(self._regions_to_spans(update_regions))
        chops = self._render_spans(spans)
        chop_ends = [cut_set[1:] for cut_set in self.cuts]
        return ChopsUpdate(chops, spans, chop_ends)

    def _render_spans(self, spans: list[tuple[int, int, int]]) -> Sequence[Mapping[int, Strip]]:
        cuts = self.cuts
        height, width = self.size.height, self.size.width
        line_spans: dict[int, list[tuple[int, int]]] = {}
        for y, x1, x2 in spans:
            if 0 <= y < height:
                line_spans.setdefault(y, []).append((x1, x2))
        chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
        runs = line_runs(sorted(line_spans))
        for widget, (region, clip) in self.visible_widgets.items():  # front to back
            visible = region.intersection(clip)
            if not visible:
                continue
            first_cut, last_cut = visible.column_span
            for start, end in runs:
                band = visible.intersection(Region(0, start, width, end - start))
                if not band:
                    continue
                band_cuts = [[cut for cut in cuts[y] if last_cut >= cut >= first_cut] for y in band.line_range]
                if not any(_wanted(chops[y], line_cuts, line_spans[y])
                           for y, line_cuts in zip(band.line_range, band_cuts, strict=True)):
                    continue
                strips = widget.render_lines(band.translate((-region.x, -region.y)))
                for y, strip, line_cuts in zip(band.line_range, strips, band_cuts, strict=False):
                    line, wanted = chops[y], line_spans[y]
                    pieces = strip.divide([cut - band.x for cut in line_cuts[1:]])
                    for cut, end, piece in zip(line_cuts, line_cuts[1:], pieces, strict=False):
                        # the first (frontmost) strip for a cut wins; one outside the spans is left out (a
                        # widget in front of this one may hold it, not drawn here)
                        if line.get(cut) is None and _in_spans(cut, end, wanted):
                            line[cut] = piece
        return chops  # type: ignore[return-value]


def _wanted(line: dict[int, Strip | None], cuts: list[int], spans: list[tuple[int, int]]) -> bool:
    """Whether a widget's pieces between these cuts fill a chop of the line that is still empty and lies in a
    changed span (one outside every span is not sent; one already filled is in front of it)."""
    return any(line.get(cut) is None and _in_spans(cut, end, spans) for cut, end in pairwise(cuts))


def _in_spans(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    return any(x1 < end and start < x2 for x1, x2 in spans)


class LineScreen(Screen[object]):
    """A screen drawn by ``LineCompositor``."""

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._compositor = LineCompositor()
