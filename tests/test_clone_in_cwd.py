"""Issue 14, item 6: ``python -m kimitui`` from a folder holding a clone named ``kimitui``.

The clone's folder (no ``__init__.py`` at its top) is found first on ``sys.path`` (the working
directory) and becomes a namespace package named ``kimitui``, while the installed package's modules still
load through the editable install's finder. Shipped data must not be looked up through the name
``kimitui`` (nor ``kimitui.__file__``, which is None there)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def test_replay_summary_runs_from_a_folder_holding_a_clone_named_kimitui(tmp_path: Path) -> None:
    clone = tmp_path / "kimitui"
    clone.mkdir()
    shutil.copytree(ROOT / "kimitui", clone / "kimitui", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, clone / name)
    probe = subprocess.run([sys.executable, "-c", "import kimitui; print(kimitui.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == "None", probe  # the situation of the issue: a namespace package
    done = subprocess.run([sys.executable, "-m", "kimitui", "replay", "--summary"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("kimitui run campaign-demo-8x-rtx-pro-6000.jsonl.gz")
    assert "Traceback" not in done.stderr
    assert "tok/s at concurrency 128" in done.stdout and "budget    bound by gemm" in done.stdout
