"""The host side (kimitui/hostside: the agent, the workers) runs on the host's own python, 3.8 and newer:
every module is linted for 3.8 (vermin for library calls, ruff's per-file target for syntax), the lints are
shown to catch what broke it before (zip(strict=), os.pidfd_open, 3.9+ syntax), and pythons older than 3.8
get one line naming what was found and what is needed. (The request tests run the agent under 3.8 and the
newest python: tests/test_agent_requests.py; tests/test_hostside.py loads every program's payload.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kimitui.hosts.base import HostFatal
from kimitui.hosts.launch import agent_command, agent_payload
from kimitui.hosts.local import LocalHost
from tests.pythons import MISSING_38, agent_pythons, too_old_pythons

ROOT = Path(__file__).resolve().parent.parent
HOSTSIDE = ROOT / "kimitui" / "hostside"
HOSTSIDE_FILES = sorted(HOSTSIDE.rglob("*.py"))
VENV_BIN = Path(sys.executable).parent


def vermin(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "vermin"), "-t=3.8-", "--violations", "--no-tips", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_python_38_is_there_to_test_on() -> None:
    assert agent_pythons()[0], MISSING_38


def test_vermin_finds_nothing_newer_than_38_on_the_host_side() -> None:
    res = vermin(HOSTSIDE)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Minimum required versions: 3." in res.stdout
    assert len(HOSTSIDE_FILES) > 15  # the package, not an empty folder


@pytest.mark.parametrize("code,feature", [
    ("rows = dict(zip(['a'], [1], strict=False))\n", "zip(strict)"),
    ("import os\nfd = os.pidfd_open(1)\n", "os.pidfd_open"),
])
def test_vermin_catches_what_broke_the_agent_on_38(tmp_path: Path, code: str, feature: str) -> None:
    f = tmp_path / "snippet.py"
    f.write_text(code)
    res = vermin(f)
    assert res.returncode != 0 and feature in res.stdout, res.stdout


@pytest.mark.parametrize("path", [HOSTSIDE / "procfs.py", HOSTSIDE / "agent" / "server.py", HOSTSIDE / "gemm.py"],
                         ids=lambda p: p.name)
def test_ruff_checks_the_host_sides_syntax_for_38(path: Path) -> None:
    code = "with (open('a') as f, open('b') as g):\n    pass\n"
    ruff = [str(VENV_BIN / "ruff"), "check", "--output-format", "concise", "--stdin-filename"]
    res = subprocess.run([*ruff, str(path.relative_to(ROOT)), "-"], input=code, capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert "on Python 3.8" in res.stdout, res.stdout
    elsewhere = subprocess.run([*ruff, "kimitui/hosts/base.py", "-"], input=code, capture_output=True, text=True,
                               cwd=ROOT, timeout=60)
    assert "on Python 3.8" not in elsewhere.stdout  # the 3.8 target is the host side's alone


async def test_every_python_older_than_38_here_gets_one_line() -> None:
    """pyenv's 2.7, 3.6 and 3.7 where installed: refused by the bootstrap, in syntax each of them parses,
    before anything else runs. (The check itself is exercised on any machine by the test below.)"""
    for python in too_old_pythons():
        async with LocalHost("box", python=python) as host:
            with pytest.raises(HostFatal) as err:
                await host.link.connect()
        msg = str(err.value)
        assert msg.startswith(f"box: python {msg.split()[2]} at {python} is too old"), msg
        assert msg.endswith("the kimitui agent needs python >= 3.8; name another with --remote-python PATH")
        assert "\n" not in msg


def test_the_bootstraps_version_check_runs_first() -> None:
    res = subprocess.run(agent_command(sys.executable, min_python=(3, 99)), input=agent_payload(),
                         capture_output=True, timeout=30)
    assert res.returncode == 5 and res.stderr == b""
    assert res.stdout.count(b"\n") == 1 and b'"type": "fatal"' in res.stdout
    assert f"at {sys.executable} is too old: the kimitui agent needs python >= 3.99".encode() in res.stdout
