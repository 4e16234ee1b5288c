"""The footer: the keys that apply, as many as the line has room for, with ``? Help`` and ``q Quit`` always
among them, then the keys of what the operator came for (free the GPUs, pause a replay or a campaign); a
narrow terminal leaves out the others from the right (the help lists every key)."""

from __future__ import annotations

from typing import Protocol

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer

KEPT = ("help", "quit")
"""The actions whose keys the footer always shows."""


class FooterKey(Protocol):
    """What the footer's key widgets carry (Textual's FooterKey, a name of a private module: read, not imported)."""

    key_display: str
    description: str
    action: str


def is_key(widget: Widget) -> bool:
    return all(hasattr(widget, name) for name in ("key_display", "description", "action"))


def key_width(key: FooterKey) -> int:
    """The cells a (non-compact) footer key takes: `` key desc `` (its component paddings)."""
    if not key.description:
        return cell_len(key.key_display)
    return cell_len(key.key_display) + cell_len(key.description) + 3


FIRST = ("free_gpus", "toggle_pause", "campaign_pause")
"""After the kept keys, these before the others when the line is short."""


def fitted(keys: list[FooterKey], room: int) -> list[FooterKey]:
    """The keys to show within ``room`` cells, in their order: the kept ones first counted, then those of
    ``FIRST``, then each other key that still fits."""
    used = sum(key_width(k) for k in keys if k.action in KEPT)
    shown = {id(k) for k in keys if k.action in KEPT}
    for key in sorted((k for k in keys if k.action not in KEPT), key=lambda k: k.action not in FIRST):
        width = key_width(key)
        if used + width <= room:
            used += width
            shown.add(id(key))
    return [k for k in keys if id(k) in shown]


class KeyFooter(Footer):
    """Textual's footer, its keys cut to the width (none is drawn cut off at the right edge)."""

    def compose(self) -> ComposeResult:
        widgets: list[Widget] = list(super().compose())  # kimitui's bindings have no groups: keys only
        keys = [w for w in widgets if is_key(w) and not w.has_class("-command-palette")]
        rest = [w for w in widgets if w not in keys]
        room = (self.app.size.width or 120) - sum(key_width(w) + 2 for w in rest if is_key(w))  # type: ignore[arg-type]
        shown = {id(k) for k in fitted(keys, room)}  # type: ignore[arg-type]
        yield from (w for w in widgets if w in rest or id(w) in shown)

    def fit(self, width: int) -> None:
        """Lay the keys out again for a terminal ``width`` wide (a resize)."""
        if getattr(self, "_fitted_for", None) != width:
            self._fitted_for = width
            if self.is_mounted:
                self.call_later(self.recompose)  # on the footer's own loop: its keys bind to it
