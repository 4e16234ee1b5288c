"""Where kimitui's shipped data and the user's own files are.

Shipped data (themes, bundled runs) lives at the top of the repository (``themes/``, ``sample_runs/``) and is
package data of the wheel, mapped in under ``kimitui/data/`` (pyproject.toml's package-dir). It is found
through importlib.resources from the ``kimitui.data`` module itself, so it works from a wheel or a pipx
install, and never through ``kimitui.__file__`` or the name ``kimitui`` (a folder named ``kimitui`` in the
working directory can shadow that as a namespace package); from a clone (the folders are not under
kimitui/data there) it is found beside the package. User files follow the XDG base directories.
"""

from __future__ import annotations

import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from kimitui import data as _data

BUNDLED_RUN = "campaign-demo-8x-rtx-pro-6000.jsonl.gz"
"""The run a new user replays when no file is given: `kimitui demo --campaign --headless`, recorded
(scripts/record_sample_run.py)."""
RUN_SUFFIXES = (".jsonl", ".jsonl.gz")


def package_root() -> str:
    """The folder that holds this kimitui package: what a child python (the simulated host's processes, the demo
    fleet's hosts) puts first on its path to import the very kimitui this one runs, from a clone or an install."""
    return str(Path(__file__).resolve().parent.parent)


def data_dir() -> Traversable:
    # Anchored at the data package's module object, not at the name "kimitui": a folder named kimitui in
    # the working directory (a clone) makes that name a namespace package whose files are the clone's
    # top level, while the submodules still come from the installed package.
    return resources.files(_data)


def shipped_dir(name: str) -> Path:
    """``themes`` or ``sample_runs``: under kimitui/data in an installed wheel, at the top of a clone."""
    installed = Path(str(data_dir().joinpath(name)))
    if installed.is_dir():
        return installed
    return Path(str(data_dir())).parent.parent / name


def builtin_themes_dir() -> Path:
    return shipped_dir("themes")


def user_themes_dir() -> Path:
    """$XDG_CONFIG_HOME/kimitui/themes (~/.config/kimitui/themes): the operator's own themes."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kimitui" / "themes"


def bundled_runs_dir() -> Path:
    return shipped_dir("sample_runs")


def bundled_runs() -> list[Path]:
    """The recorded runs shipped with kimitui, by name."""
    folder = bundled_runs_dir()
    return sorted(p for p in folder.iterdir() if p.name.endswith(RUN_SUFFIXES)) if folder.is_dir() else []


def bundled_sample_run() -> Path:
    """The sample run a new user replays with no file given."""
    runs = bundled_runs()
    for p in runs:
        if p.name == BUNDLED_RUN:
            return p
    if not runs:
        raise FileNotFoundError(f"no bundled run under {bundled_runs_dir()}")
    return runs[0]


def find_run(name: str | os.PathLike[str] | None) -> Path:
    """A run file by path, else a bundled run by name (with or without its suffix); None: the sample run."""
    if name is None:
        return bundled_sample_run()
    path = Path(name)
    if path.exists():
        return path
    for p in bundled_runs():
        if str(name) in (p.name, p.name.removesuffix(".gz").removesuffix(".jsonl")):
            return p
    known = ", ".join(p.name.removesuffix(".jsonl.gz") for p in bundled_runs())
    raise FileNotFoundError(f"{name}: no such run file (bundled runs: {known or 'none'})")
