"""What the first frame needs, and nothing more: the modules the dashboard's start imports (the CLI and its
parser, the live and replay entry points, the app, the simulated host) leave the heavy ones for later."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FIRST_FRAME_PATH = """
import json, sys
from kimitui.commands.main import build_parser
build_parser().parse_args(["demo"])
import kimitui.commands.bench, kimitui.commands.micro, kimitui.commands.campaign, kimitui.commands.cleanup
import kimitui.commands.live, kimitui.live.targets, kimitui.hosts.telemetry, kimitui.hosts.sim.host, kimitui.hosts.local
import kimitui.tui.launch, kimitui.tui.app, kimitui.core.replay, kimitui.core.runfile, kimitui.resources
print(json.dumps(sorted(sys.modules)))
"""

HEAVY = ("httpx", "prometheus_client", "asyncssh", "plotext", "textual_plotext", "torch", "numpy",
         "kimitui.report.markdown", "kimitui.report.campaign", "aiohttp", "textual_serve")
"""Needed by a sweep, a drain, an SSH host, a chart, a report or kimitui serve: imported when one is used."""


def test_the_first_frame_imports_none_of_the_heavy_modules() -> None:
    out = subprocess.run([sys.executable, "-c", FIRST_FRAME_PATH], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    loaded = set(json.loads(out.stdout))
    assert "kimitui.tui.app" in loaded and "textual.app" in loaded
    assert sorted(m for m in HEAVY if m in loaded) == []


LOCAL_DASHBOARD_PATH = """
import json, sys
from kimitui.commands.main import _read
args = _read(sys.argv[1:])
print(json.dumps({"modules": sorted(m for m in sys.modules if m.startswith("kimitui.commands")),
                  "args": {k: v for k, v in vars(args).items()}}))
"""


def test_the_local_dashboards_command_line_imports_no_other_command() -> None:
    """``kimitui`` (its theme at most) is parsed by the top level alone: no command's module is imported to build
    the others' parsers before its start; the arguments read are the full parser's."""
    from kimitui.commands.main import build_parser, parse

    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    for argv in ([], ["--theme", "nord"], ["--theme=nord"]):
        out = subprocess.run([sys.executable, "-c", LOCAL_DASHBOARD_PATH, *argv], cwd=ROOT, capture_output=True,
                             text=True, check=True, env=env)
        got = json.loads(out.stdout)
        assert got["modules"] == ["kimitui.commands", "kimitui.commands.main", "kimitui.commands.output"], got
        assert got["args"] == vars(parse(build_parser(), argv)), argv
