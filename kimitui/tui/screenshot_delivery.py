"""The command palette's Screenshot, saved where it can be and said in plain words.

Textual saves it to the user's Downloads folder, and fails ("Failed to save screenshot") where there is none,
as on a fresh server account; its notice carries Textual markup, which kimitui's notices show as text. Here it
goes to Downloads when that exists, else to $XDG_DATA_HOME/kimitui/screenshots (made when needed), and the
notice names the file.
"""

from __future__ import annotations

import os
from pathlib import Path

SCREENSHOT_TITLE = "Screenshot"
TEXTUAL_MARK = "[$text-success]"
"""What Textual's own "Saved screenshot to ..." notice (textual 8.2.8, pinned) puts before the path."""


def screenshot_dir() -> Path:
    """Downloads when it exists, else kimitui's own folder for them (made)."""
    from platformdirs import user_downloads_path

    downloads = user_downloads_path()
    if downloads.is_dir():
        return downloads
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    folder = Path(base) / "kimitui" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def plain_notice(message: str, title: str) -> str:
    """Textual's screenshot notice without its markup (kimitui shows notices as text)."""
    return message.replace(TEXTUAL_MARK, "") if title == SCREENSHOT_TITLE else message


class ScreenshotDelivery:
    """Mixed into the app (before textual's App in its bases): the palette's Screenshot goes to ``screenshot_dir``
    unless a folder is named."""

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        if path is None:
            try:
                path = str(screenshot_dir())
            except OSError:  # nowhere to make it: Textual's own default, and its own failure notice
                path = None
        return super().deliver_screenshot(filename, path, time_format)  # type: ignore[misc, no-any-return]
