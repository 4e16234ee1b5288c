"""Themes as data: TOML files mapped onto Textual's ``Theme`` fields. The built-in ones ship as package
data (``themes/`` at the top of the repository); the operator's own are read from ``$XDG_CONFIG_HOME/kimitui/themes``
(``~/.config/kimitui/themes``), where a theme of a built-in's name replaces it.

A theme file holds top-level keys named like Theme's fields (``name``, ``primary``, ``secondary``,
``accent``, ``foreground``, ``background``, ``surface``, ``panel``, ``boost``, ``success``, ``warning``,
``error``, ``dark``, ``luminosity_spread``, ``text_alpha``) and an optional ``[variables]`` table of
CSS variable overrides. A file that does not parse or names a colour Textual cannot read is skipped
with a one-line warning naming the file; the others still load.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.theme import Theme

from kimitui.resources import builtin_themes_dir, user_themes_dir

DEFAULT_THEME = "kimitui-dark"
COLOR_FIELDS = ("primary", "secondary", "accent", "foreground", "background", "surface", "panel",
                "boost", "success", "warning", "error")
FLOAT_FIELDS = ("luminosity_spread", "text_alpha")


class ThemeFileError(ValueError):
    """A theme file that cannot be used."""


@dataclass(slots=True)
class LoadedThemes:
    themes: list[Theme] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.themes]


def theme_from_mapping(data: dict[str, Any], source: str) -> Theme:
    """Build and validate a Theme from a decoded TOML table."""
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ThemeFileError(f"{source}: missing 'name' (a non-empty string)")
    if not isinstance(data.get("primary"), str):
        raise ThemeFileError(f"{source}: missing 'primary' colour")
    known = {"name", "dark", "variables", *COLOR_FIELDS, *FLOAT_FIELDS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ThemeFileError(f"{source}: unknown keys {', '.join(unknown)}")
    kwargs: dict[str, Any] = {"name": name.strip()}
    for key in COLOR_FIELDS:
        if key in data:
            if not isinstance(data[key], str):
                raise ThemeFileError(f"{source}: '{key}' must be a colour string")
            kwargs[key] = data[key]
    for key in FLOAT_FIELDS:
        if key in data:
            if not isinstance(data[key], int | float):
                raise ThemeFileError(f"{source}: '{key}' must be a number")
            kwargs[key] = float(data[key])
    if "dark" in data:
        if not isinstance(data["dark"], bool):
            raise ThemeFileError(f"{source}: 'dark' must be true or false")
        kwargs["dark"] = data["dark"]
    variables = data.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ThemeFileError(f"{source}: [variables] must map names to strings")
    kwargs["variables"] = dict(variables)
    theme = Theme(**kwargs)
    try:
        theme.to_color_system().generate()
    except Exception as exc:  # Textual raises several kinds for a colour it cannot parse
        raise ThemeFileError(f"{source}: bad colour: {exc}") from exc
    return theme


def load_theme_file(path: Path) -> Theme:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ThemeFileError(f"{path.name}: cannot read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ThemeFileError(f"{path.name}: not valid TOML: {exc}") from exc
    return theme_from_mapping(data, path.name)


def load_themes(themes_dir: Path | None = None) -> LoadedThemes:
    """Every ``*.toml`` theme: of ``themes_dir`` when given, else the built-in ones and then the user's
    (a user theme of a built-in's name replaces it). In name order; bad files become warnings."""
    if themes_dir is not None:
        return _load_folder(themes_dir, LoadedThemes(), required=True)
    out = _load_folder(builtin_themes_dir(), LoadedThemes(), required=True)
    return _load_folder(user_themes_dir(), out, required=False)


def _load_folder(folder: Path, out: LoadedThemes, required: bool) -> LoadedThemes:
    if not folder.is_dir():
        if required:
            out.warnings.append(f"theme folder {folder} not found; using built-in themes only")
        return out
    seen: dict[str, str] = {}
    for path in sorted(folder.glob("*.toml")):
        try:
            theme = load_theme_file(path)
        except ThemeFileError as exc:
            out.warnings.append(f"theme file skipped: {exc}")
            continue
        if theme.name in seen:
            out.warnings.append(f"theme file skipped: {path.name}: name {theme.name!r} "
                                f"already defined by {seen[theme.name]}")
            continue
        seen[theme.name] = path.name
        out.themes = [t for t in out.themes if t.name != theme.name]
        out.themes.append(theme)
    return out


def resolve_theme(requested: str | None, available: list[str]) -> tuple[str, str | None]:
    """The theme to start with, and a warning when the requested one does not exist."""
    fallback = DEFAULT_THEME if DEFAULT_THEME in available else "textual-dark"
    if requested is None or requested == "":
        return fallback, None
    if requested in available:
        return requested, None
    return fallback, (f"unknown theme {requested!r}; using {fallback!r}. "
                      f"Available: {', '.join(sorted(available))}")
