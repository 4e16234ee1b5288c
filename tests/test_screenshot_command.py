"""``python -m kimitui.tui.screenshot`` (how docs/dashboard.svg is made, README): it runs, and the picture is the
view it was asked for at the replay position it was given, the Benchmarks tab's levels with their energy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def test_the_screenshot_command_draws_the_benchmarks_tab_with_each_levels_energy(tmp_path: Path) -> None:
    out = tmp_path / "bench.svg"
    done = subprocess.run([sys.executable, "-m", "kimitui.tui.screenshot", str(out), "--view", "bench", "--size",
                           "160x50"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    svg = out.read_text()
    # the bundled campaign's sweep, its levels metered from the simulated GPUs' power (the table's tok/J column)
    assert "Out&#160;tok/s" in svg or "Out tok/s" in svg
    assert "tok/J" in svg
    bad = subprocess.run([sys.executable, "-m", "kimitui.tui.screenshot", str(out), "--view", "nowhere"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "invalid choice: 'nowhere'" in bad.stderr
