"""The pythons the host agent is tested under: the oldest supported (3.8) and the newest on this machine.

They are found by searching pyenv's versions directory ($PYENV_ROOT/versions, default ~/.pyenv/versions),
as installed on the CI machines, plus the system's python3 and the one running the tests. A missing
python 3.8 is a failure with the install hint, never a skip. Interpreters older than 3.8 found there are
used to check the agent refuses them with one line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

OLDEST = (3, 8)
PYENV_VERSIONS = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "versions"
MISSING_38 = (f"no python 3.8 under {PYENV_VERSIONS}: the agent must be tested on the oldest python it "
              "supports; install it (pyenv install 3.8) or set PYENV_ROOT")


def _version(python: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d %d %d' % sys.version_info[:3])"],
                             capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (int(out[0]), int(out[1]), int(out[2])) if len(out) == 3 else None


@cache
def installed() -> dict[tuple[int, int, int], str]:
    """version -> interpreter path, for every python found (pyenv's, the system's, this one)."""
    found: dict[tuple[int, int, int], str] = {}
    candidates = [sys.executable, shutil.which("python3") or ""]
    if PYENV_VERSIONS.is_dir():
        for d in sorted(PYENV_VERSIONS.iterdir()):
            if re.fullmatch(r"\d+\.\d+\.\d+", d.name):
                major, minor = d.name.split(".")[:2]
                candidates += [str(d / "bin" / f"python{major}.{minor}"), str(d / "bin" / f"python{major}")]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            v = _version(path)
            if v is not None:
                found.setdefault(v, path)
    return found


def agent_pythons() -> list[str]:
    """[oldest >= 3.8, newest], as pytest params; the first is "" (a failing param) when 3.8 is missing."""
    versions = sorted(v for v in installed() if v[:2] >= OLDEST)
    oldest = next((installed()[v] for v in versions if v[:2] == OLDEST), "")
    newest = installed()[versions[-1]] if versions else sys.executable
    return [oldest, newest] if oldest != newest else [oldest]


def too_old_pythons() -> list[str]:
    """Interpreters older than 3.8 on this machine (the agent must refuse them in one line)."""
    return [p for v, p in sorted(installed().items()) if v[:2] < OLDEST]


def require(python: str) -> str:
    assert python, MISSING_38
    return python


def label(python: str) -> str:
    v = _version(python) if python else None
    return "python" + ".".join(map(str, v)) if v else "python3.8-missing"
