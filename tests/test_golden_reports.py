"""The reports and summaries of the bundled runs, byte for byte: a move of code (issue 21's rooms) changes
none of them. A change that means to change what a report says regenerates them on purpose:

    KIMITUI_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden_reports.py

and the diff of tests/golden/ is read in review like any other change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kimitui.resources import bundled_runs

GOLDEN = Path(__file__).resolve().parent / "golden"
RUNS = [p.name.removesuffix(".jsonl.gz") for p in bundled_runs()]


def _kimitui(*args: str) -> str:
    env = {**os.environ, "TZ": "UTC"}
    done = subprocess.run([sys.executable, "-m", "kimitui", *args], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_bundled_run_has_its_golden_files() -> None:
    """Every bundled run has its golden report, and there is none for a run that is not bundled."""
    assert len(RUNS) >= 4
    if not os.environ.get("KIMITUI_UPDATE_GOLDEN"):
        assert sorted(p.name for p in GOLDEN.glob("*.md")) == sorted(f"{r}.md" for r in RUNS)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("what", ["report", "summary"])
def test_the_bundled_run_reads_as_it_did(run: str, what: str) -> None:
    """A bundled run's report and replay summary read exactly as their golden files: what a recorded run says does not
    change unless the change is meant (and the golden files are updated with it)."""
    text = _kimitui("report", run) if what == "report" else _kimitui("replay", "--summary", run)
    golden = GOLDEN / (f"{run}.md" if what == "report" else f"{run}.summary.txt")
    if os.environ.get("KIMITUI_UPDATE_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8"), f"{golden.name} changed (see the module's docstring)"
