"""The optional extras (pyproject.toml's ``[project.optional-dependencies]``) and the one command that installs
one where this kimitui runs: a pipx install gets ``pipx inject``, a clone (its venv, or ``PYTHONPATH``) gets
this python's pip with the clone's path, anything else this python's pip with the extra's requirement.
``pip install 'kimitui[figures]'`` is no such command: kimitui is not on an index (pip answers "No matching
distribution"), and under pipx pip is not on the PATH of kimitui's venv."""

from __future__ import annotations

import shlex
import sys
import tomllib
from pathlib import Path

EXTRAS = {"figures": "matplotlib>=3.8", "serve": "textual-serve>=1.1"}
"""Each extra a command may miss -> its requirement (tests/test_report_outputs.py holds this to pyproject.toml)."""


def source_tree(package_dir: Path) -> Path | None:
    """The clone kimitui runs from: the folder above the package holding kimitui's pyproject.toml, else None
    (an installed wheel's site-packages has no pyproject.toml beside the package)."""
    pyproject = package_dir.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return package_dir.parent if project.get("name") == "kimitui" else None


def pipx_venv(prefix: Path) -> str | None:
    """The name of the pipx venv ``prefix`` is (``pipx inject`` takes it), else None: pipx writes its
    ``pipx_metadata.json`` into each venv, kept under ``.../pipx/venvs/NAME`` unless PIPX_HOME moves it."""
    under_pipx = prefix.parent.name == "venvs" and prefix.parent.parent.name == "pipx"
    return prefix.name if under_pipx or (prefix / "pipx_metadata.json").is_file() else None


def install_command(extra: str, *, prefix: Path | None = None, executable: str | None = None,
                    package_dir: Path | None = None) -> str:
    """The shell command that installs ``extra`` for this kimitui (the keywords stand in for ``sys.prefix``,
    ``sys.executable`` and the imported package's folder)."""
    requirement = EXTRAS[extra]
    venv = pipx_venv(Path(prefix if prefix is not None else sys.prefix))
    if venv is not None:
        return f"pipx inject {shlex.quote(venv)} {shlex.quote(requirement)}"
    pip = f"{shlex.quote(executable or sys.executable or 'python3')} -m pip install"
    clone = source_tree(package_dir if package_dir is not None else Path(__file__).resolve().parent.parent)
    if clone is not None:
        return f"{pip} -e {shlex.quote(f'{clone}[{extra}]')}"
    return f"{pip} {shlex.quote(requirement)}"


def importable(module: str) -> bool:
    """Whether ``module`` imports here (imported for real: a package that is present but broken is missing too)."""
    try:
        __import__(module)
    except ImportError:
        return False
    return True
