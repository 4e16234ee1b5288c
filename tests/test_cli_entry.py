"""The command line's edges, each a real ``python -m kimitui`` process: Ctrl-C before the command started
(one line, exit 130, no traceback), ``demo --help`` saying what each option is, and a mistyped option
refused by the subcommand it was given to, with that subcommand's usage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import CLI_WAIT_S, cli_env, run_kimitui
from tests.waiting import wait_until

HOLD = """
import os, signal, sys
from importlib.abc import MetaPathFinder

class Hold(MetaPathFinder):
    \"\"\"Hold the import of one module (KIMITUI_TEST_HOLD_AT) until a signal comes: a Ctrl-C lands in it.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("KIMITUI_TEST_HOLD_AT"):
            sys.meta_path.remove(self)
            open(os.environ["KIMITUI_TEST_HELD"], "w").close()
            while True:
                signal.pause()
        return None

sys.meta_path.insert(0, Hold())
"""


def default_sigint() -> None:
    """In the child: SIGINT as a shell gives its foreground command (the suite, started in the background by a
    script, may have it ignored, and an ignored SIGINT stays ignored: Python then installs no handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("argv", "module"), [
    (["replay", "--summary"], "kimitui.commands.main"),  # python -m kimitui importing the command line
    (["replay", "--summary"], "kimitui.commands.compare"),  # building the parser
    ([], "kimitui.hosts.prestart"),  # the dashboard's agent about to be started
])
def test_ctrl_c_before_the_command_starts_is_one_line_and_130(tmp_path: Path, argv: list[str],
                                                               module: str) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOLD)
    held = tmp_path / "held"
    env = cli_env(tmp_path)
    env.update(PYTHONPATH=f"{hook}{os.pathsep}{env['PYTHONPATH']}", KIMITUI_TEST_HOLD_AT=module,
               KIMITUI_TEST_HELD=str(held))
    proc = subprocess.Popen([sys.executable, "-m", "kimitui", *argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            preexec_fn=default_sigint)
    try:
        wait_until(held.exists, f"the import of {module}", CLI_WAIT_S)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=CLI_WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err == "kimitui: interrupted before the command started\n", err
    assert out == ""


def test_demo_help_says_what_gpus_is() -> None:
    done = subprocess.run([sys.executable, "-m", "kimitui", "demo", "--help"], capture_output=True, text=True,
                          timeout=CLI_WAIT_S)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.strip().startswith("--gpus")]
    said = " ".join(lines[at:at + 2])
    assert "how many GPUs the simulated host has" in said, said


@pytest.mark.parametrize(("argv", "usage"), [
    (["demo", "--bogus"], "usage: kimitui demo "),
    (["campaign", "c.toml", "--head-less"], "usage: kimitui campaign "),
    (["bench", "macro", "--host", "demo", "--bogus", "1"], "usage: kimitui bench macro "),
    (["cleanup", "--host", "demo", "--dryrun"], "usage: kimitui cleanup "),
])
def test_a_mistyped_option_shows_the_subcommands_usage(tmp_path: Path, argv: list[str], usage: str) -> None:
    done = run_kimitui(tmp_path, *argv)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(usage), done.stderr
    name = usage.removeprefix("usage: ").strip()
    assert f"{name}: error: unrecognized arguments: " in done.stderr, done.stderr
    assert "{replay,report" not in done.stderr, "not the list of commands"
