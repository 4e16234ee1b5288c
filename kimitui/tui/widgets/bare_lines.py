"""Lines drawn past Textual's styles cache where it would add nothing to them.

Textual passes every line a widget renders through its styles cache: borders, padding, outline, tint, text
opacity, hatch and the widget's opacity are applied there, then the app's line filters. For a Line API
widget with none of those, what comes out is the widget's own line through the filters, but the cache's
generic work (about 40 us a line: reading the border, outline and padding rules, building closures) is a
third of what a changed table row costs. ``BareLines`` skips it when the CSS gives the widget none of
those, and falls back to Textual's path as soon as it does (tests/test_tui_render.py holds our tables and
lines to what a DataTable and a Static draw through that path, bare and boxed). In an app that draws on
Textual's own path (``KIMITUI_PLAIN_DRAW=1``, kimitui/tui/draw_mode.py) every line takes Textual's path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Self

from textual.color import Color
from textual.filter import ANSIToTruecolor, DimFilter, LineFilter, Monochrome, NoColor
from textual.geometry import Region
from textual.strip import Strip

from kimitui.tui.draw_mode import plain_draw

if TYPE_CHECKING:
    from textual.widget import Widget

    _Mixin = Widget
else:
    _Mixin = object  # not a DOMNode: Textual takes CSS (DEFAULT_CSS, type names) along the first DOMNode base


SEGMENT_FILTERS = (ANSIToTruecolor, DimFilter, Monochrome, NoColor)
"""Textual's line filters: each makes a segment's style anew from that segment alone."""

Filters = tuple[tuple[LineFilter, ...], Color | None]


class BareLines(_Mixin):
    """A mixin for a widget whose ``render_line`` returns whole lines of its width: put before the widget's
    Textual base (``class Table(BareLines, ScrollView)``)."""

    FILTERS_OWN = False
    """A widget that sets this applies ``_filters`` (each of them one of ``SEGMENT_FILTERS``) to the segments
    it renders, and keeps them so: its lines are not filtered again. With any other filter among the app's,
    ``_filters`` is empty and the lines are filtered here."""
    _filters: Filters = ((), None)

    _bare: bool | None = None
    """Whether the CSS gives this widget no border, padding, outline, tint or hatch (None: to read)."""
    _styles_cache_used = False

    def notify_style_update(self) -> None:
        self._restyled()
        super().notify_style_update()

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        # Textual repaints a widget whole when its styles or its component styles change (a theme, focus,
        # an ancestor's background): what was read from the styles is read again
        if repaint and not regions:
            self._restyled()
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _restyled(self) -> None:
        """The styles may have changed: forget what was read from them (a subclass adds its own)."""
        self._bare = None

    def _bare_box(self) -> bool:
        """Whether Textual's styles cache would add nothing to this widget's lines."""
        if self._bare is None:
            styles = self.styles
            self._bare = (not any(edge for edge, _ in styles.border) and not any(edge for edge, _ in styles.outline)
                          and not any(styles.padding) and not styles.tint.a and styles.text_opacity == 1.0
                          and not (styles.has_rule("hatch") and styles.hatch != "none"))
        return self._bare and self.opacity == 1.0 and not (self.auto_links and self.hover_style._link_id)

    def render_lines(self, crop: Region) -> list[Strip]:
        if plain_draw(self.app) or not self._bare_box():
            self._styles_cache_used = True
            self._filters = ((), None)  # Textual's path filters the lines
            return super().render_lines(crop)
        if self._styles_cache_used:
            # the lines it keeps were not kept up while this widget drew its own
            self._styles_cache.clear()
            self._styles_cache_used = False
        filters: Sequence[LineFilter] = self.get_line_filters()
        background = self.background_colors[1] if filters else None
        if self.FILTERS_OWN:
            if all(type(line_filter) in SEGMENT_FILTERS for line_filter in filters):
                self._filters = (tuple(filters), background)
                filters = ()
            else:
                self._filters = ((), None)
        render_line = self.render_line
        strips = []
        for y in crop.line_range:
            strip = render_line(y)
            for line_filter in filters:
                strip = strip.apply_filter(line_filter, background)  # type: ignore[arg-type]
            strips.append(strip)
        x1, x2 = crop.column_span
        if (x1, x2) != (0, self.size.width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips
