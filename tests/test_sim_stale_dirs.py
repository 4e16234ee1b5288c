"""A sim killed with ``kill -9`` leaves its ``kimitui-sim-*`` directory; the next start removes it, and only
the directories whose recorded owner (pid and start time) is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kimitui.hosts.sim.layout import OWNER_FILE, create_layout, make_gpus, remove_stale_layouts

ROOT = Path(__file__).resolve().parent.parent


def test_only_the_directories_of_a_gone_owner_are_removed(tmp_path: Path) -> None:
    # A real process makes a sim directory and is killed before it can remove it.
    maker = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom kimitui.hosts.sim.layout import create_layout, make_gpus\n"
         "print(create_layout(make_gpus(2), parent=sys.argv[1]).root, flush=True)\nsys.stdin.read()",
         str(tmp_path)], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env={**os.environ,
                                                                                         "PYTHONPATH": str(ROOT)})
    assert maker.stdout is not None
    orphan = Path(maker.stdout.readline().strip())
    assert json.loads((orphan / OWNER_FILE).read_text())["pid"] == maker.pid
    assert remove_stale_layouts(str(tmp_path)) == []  # its owner still runs: left alone
    maker.kill()
    maker.wait()
    mine = create_layout(make_gpus(1), parent=str(tmp_path)).root  # this process: alive
    unrecorded = tmp_path / "kimitui-sim-norecord"
    unrecorded.mkdir()
    (unrecorded / "gpus.json").write_text("{}")
    reused = create_layout(make_gpus(1), parent=str(tmp_path)).root  # our pid, another start time: gone
    record = json.loads((reused / OWNER_FILE).read_text())
    (reused / OWNER_FILE).write_text(json.dumps({**record, "start_time": record["start_time"] - 1}))
    other = tmp_path / "unrelated"
    other.mkdir()

    removed = remove_stale_layouts(str(tmp_path))

    assert sorted(removed) == sorted([orphan, reused])
    assert not orphan.exists() and not reused.exists()
    assert mine.is_dir() and unrecorded.is_dir() and other.is_dir()
