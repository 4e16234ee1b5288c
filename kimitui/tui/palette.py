"""Theme colours for Rich text cells (DataTable cells cannot use CSS variables)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import App
from textual.color import Color, ColorParseError


@dataclass(frozen=True, slots=True)
class Colors:
    primary: str
    accent: str
    success: str
    warning: str
    error: str
    muted: str
    foreground: str

    @classmethod
    def of(cls, app: App[object]) -> Colors:
        v = app.get_css_variables()
        return cls(
            primary=v.get("primary", "blue"),
            accent=v.get("accent", "yellow"),
            success=v.get("success", "green"),
            warning=v.get("warning", "yellow"),
            error=v.get("error", "red"),
            muted=_muted(v.get("foreground", "#E0E0E0"), v.get("background", "#000000")),
            foreground=v.get("foreground", "white"),
        )

    def level(self, fraction: float | None) -> str:
        """Colour for a fill level: calm below 50 %, warning to 90 %, error above."""
        if fraction is None:
            return self.muted
        if fraction >= 0.9:
            return self.error
        if fraction >= 0.5:
            return self.warning
        return self.success


def _muted(foreground: str, background: str) -> str:
    """The foreground faded 40 % towards the background (what $text-muted looks like)."""
    try:
        return Color.parse(foreground).blend(Color.parse(background), 0.4).hex
    except ColorParseError:
        return "grey50"
