"""Which path a frame takes to the terminal: kimitui's own, or Textual's (``KIMITUI_PLAIN_DRAW=1``).

kimitui's path reaches into Textual's and Rich's internals (pyproject.toml lists them beside the pins):
``band_compositor.BandScreen`` renders a partial update from the lines that changed, ``screen_diff`` sends
only the cells that changed (the app's ``_display``), ``quiet_driver`` waits for a key without waking,
``widgets/bare_lines`` draws lines past the styles cache and ``widgets/refresh_batch`` posts a redraw's
repaints from the redraw. The plain path is Textual's own: its default screen, its ``_display``, its Linux
driver, each widget's repaint posted from its own idle and every line through the styles cache. It draws
the same picture (tests/test_snapshots.py holds both to the same snapshots), slower: the way out for a user
hit by a drawing bug, and the way to try a Textual release the pins do not allow yet.

On the plain path ``band_compositor``, ``screen_diff`` and ``quiet_driver`` are not imported; ``bare_lines``
and ``refresh_batch`` are (mixins of the tables and lines) but read none of Textual's private names there.
What kimitui still reads of Textual's internals on the plain path: ``Widget._get_style`` (``part_lines``)
and ``App._exception`` (``launch``, through getattr); the app's ``_display`` override stays defined and
hands every frame straight to Textual's.

Importing this module imports nothing of Textual.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

PLAIN_DRAW_ENV = "KIMITUI_PLAIN_DRAW"
"""1: draw on Textual's own path (read once, when the app is made)."""


def plain_draw_asked(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for Textual's own drawing path."""
    return environ.get(PLAIN_DRAW_ENV) == "1"


def plain_draw(app: object) -> bool:
    """Whether ``app`` draws on Textual's own path (False for an app that is not kimitui's: a widget of ours
    in a test's app draws on kimitui's path)."""
    return getattr(app, "plain_draw", False) is True
