"""Nothing from a host or a server reaches the terminal raw (issue #18, item 9): an error body, a command line,
a unit, a user, a hostname or a GPU's name with ESC sequences, BEL, bidi overrides or zero-width characters
is shown escaped (``\\x1b``, ``\\u202e``) by the CLI, the dashboard and the report, and text that looks like
markup (``[bold red]x[/]``) is shown as it is. The run file keeps the raw values.

These tests look at what reaches the screen or the file, with their own check (not kimitui's), against a
real HTTP server, a real process with a hostile command line, the real dashboard and the real report."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.core.events import (
    CleanupPlan,
    Event,
    GpuSample,
    HostSample,
    LogLine,
    MacroPoint,
    PhaseEnd,
    PhaseStart,
    ProcRef,
    ProcSample,
    StepPreview,
    StepResult,
)
from kimitui.core.runfile import RunReader, write_run
from kimitui.core.session import Session
from kimitui.report.markdown import render_report
from kimitui.report.summary import summarize
from kimitui.tui.screens.cleanup_consent import ConsentScreen
from kimitui.tui.widgets.proc_table import ProcTable
from tests.app_probe import ProbedApp
from tests.screen_text import screen_text
from tests.support import ROOT
from tests.waiting import Output, pilot_until, wait_until

TITLE = "\x1b]0;pwned\x07"
"""An OSC sequence that retitles the terminal window."""
HOSTILE = f"{TITLE}\x1b[31mred\u202eevil\u200bend"
"""A window title, a colour, a right-to-left override and a zero-width space."""
MARKUP = "[bold red]x[/]"
BIG = (160, 45)
KIMITUI = [sys.executable, "-m", "kimitui"]


def raw_controls(text: str) -> list[str]:
    """Characters that must not reach a screen raw: controls (but the newline), format characters (bidi,
    zero-width), surrogates, line and paragraph separators."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


def strings(obj: object) -> Iterator[str]:
    """Every string inside decoded JSON."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings(v)


def escaped(text: str) -> str:
    """How ``text`` reads shown: its control and format characters as Python escapes."""
    out = []
    for c in text:
        if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            code = ord(c)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(c)
    return "".join(out)


# -- bench macro: a server's error body -------------------------------------------------------------------

@pytest.fixture(scope="module")
def hostile_server() -> Iterator[str]:
    """A real HTTP server answering every completion 500 with a body that retitles the window and colours."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "faulty_server.py"), "--status", "500",
                             "--body", f"{TITLE}\x1b[31mred"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(5)


def test_a_server_error_body_is_escaped_on_stdout_stderr_in_the_report_and_the_summary(
        hostile_server: str, tmp_path: Path) -> None:
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    res = subprocess.run([*KIMITUI, "bench", "macro", "--url", hostile_server, "--model", "m", "--concurrency", "1",
                          "--requests", "2", "--max-tokens", "4"], capture_output=True, text=True, env=env,
                         timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 1, res.stderr  # every request failed
    for stream in (res.stdout, res.stderr):
        assert "\x1b" not in stream and "\x07" not in stream, stream
    shown = "HTTP 500: \\x1b]0;pwned\\x07\\x1b[31mred"
    assert shown in res.stdout  # the level's line: its failures
    assert shown in res.stderr  # the warning that every request failed
    (run,) = (tmp_path / "data" / "kimitui" / "runs").glob("*.jsonl*")
    points = [e for e in RunReader(run).events() if isinstance(e, MacroPoint)]
    assert f"HTTP 500: {TITLE}\x1b[31mred" in points[0].metrics["failures"]  # the record keeps the raw body
    report = subprocess.run([*KIMITUI, "report", str(run)], capture_output=True, text=True, env=env, timeout=120)
    assert report.returncode == 0, report.stderr
    assert not raw_controls(report.stdout) and shown in report.stdout
    summary = subprocess.run([*KIMITUI, "replay", "--summary", str(run)], capture_output=True, text=True, env=env,
                             timeout=120)
    assert summary.returncode == 0 and not raw_controls(summary.stdout), summary.stdout


# -- cleanup: a real process with a hostile command line ---------------------------------------------------

def _hostile_holder(sim_dir: Path) -> subprocess.Popen[bytes]:
    """A real process holding 1000 MiB of GPU 0 on the simulated host, its argv[0] a window title, a colour,
    a bidi override and a zero-width space, and an argument that looks like markup."""
    helper = ROOT / "tests" / "cleanup_support.py"
    return subprocess.Popen([HOSTILE, str(helper), "worker", str(sim_dir), "0", "1000", "0", MARKUP],
                            executable=sys.executable, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def _sampled(run_file: Path, pid: int) -> bool:
    """Whether a sample recorded in the (live) run file lists ``pid``."""
    for line in run_file.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:  # the line being written
            continue
        if event.get("type") == "sample" and any(p.get("pid") == pid for p in event.get("procs", [])):
            return True
    return False


def test_a_hostile_command_line_is_escaped_in_the_cleanup_previews_on_the_terminal(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    proc = subprocess.Popen([*KIMITUI, "cleanup", "--host", "demo", "--json", "--verify-s", "0.5"],
                            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    assert proc.stderr is not None
    stderr = Output(proc.stderr.fileno())
    until = stderr.until
    holder: subprocess.Popen[bytes] | None = None

    try:
        end = until(b"simulated host ready: ")
        sim_dir = Path(stderr.data[end:until(b", OpenAI API", end) - len(b", OpenAI API")].decode())
        end = until(b"recording this session to ")
        run_file = Path(stderr.data[end:until(b"\n", end) - 1].decode())
        first = until(b"go ahead with this step? [y/N] ")  # the first step asks: the host is up
        holder = _hostile_holder(sim_dir)
        # the telemetry has seen it: the next previews list it
        wait_until(lambda: _sampled(run_file, holder.pid) or holder.poll() is not None, "the hostile holder sampled")
        assert holder.poll() is None, "the hostile holder exited before it was sampled"
        mark = first
        os.write(master, b"n\n")
        # every later step is previewed with what holds the GPUs now, the hostile process among them
        while b"\\u202eevil" not in stderr.data[first:]:
            mark = until(b"go ahead with this step? [y/N] ", mark)
            os.write(master, b"n\n")
        os.write(master, b"n\n" * 6)  # the steps still to come are declined too
        out, rest = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        if holder is not None:
            holder.kill()
            holder.wait()
    text = (stderr.data + rest).decode()
    assert not raw_controls(text), [line for line in text.splitlines() if raw_controls(line)]
    assert escaped(HOSTILE)[:40] in text  # the preview's command column (cut to its width)
    events = [json.loads(line) for line in out.decode().splitlines()]
    assert all(not e["accepted"] for e in events if e["type"] == "consent")  # nothing was signalled
    assert any(HOSTILE in s for e in events for s in strings(e))  # --json: the raw value, escaped by JSON
    assert "\x1b" not in out.decode()
    # JSON escapes only U+0000-001F itself: printed as ASCII, the bidi override and C1 controls are
    # \uXXXX escapes too, never raw on the terminal
    assert out.isascii() and not raw_controls(out.decode())


# -- the dashboard -----------------------------------------------------------------------------------------

def _hostile_sample(t: float) -> HostSample:
    return HostSample(t, host=f"gpu-{TITLE}node", seq=1, gpus=[GpuSample(0, "GPU-0", f"NVIDIA {HOSTILE}")],
                      procs=[ProcSample(pid=4242, start_time=100, user=f"ana{TITLE}", gpu_mem_mib={0: 1000.0},
                                        kind="cuda", unit=f"vllm{TITLE}.service", cmdline=f"{HOSTILE} {MARKUP}")])


def _hostile_ref() -> ProcRef:
    return ProcRef(pid=4242, start_time=100, user=f"{MARKUP}{TITLE}", gpus=[0], mem_mib=1000.0,
                   unit=f"[b]u{TITLE}[/b]", cmdline=f"{HOSTILE} {MARKUP}", reason=f"NVML {HOSTILE} {MARKUP}",
                   kind="cuda")


async def test_the_dashboard_shows_outside_text_escaped_and_markup_literally() -> None:
    t = time.time()
    session = Session()
    session.publish(_hostile_sample(t))
    session.publish(LogLine(t, "error", "agent", f"the agent said: {HOSTILE} {MARKUP}"))
    app = ProbedApp(session)
    async with app.run_test(size=BIG, notifications=True) as pilot:
        procs = app.query_one(ProcTable)
        await pilot_until(pilot, lambda: len(procs.row_keys) == 1, "the hostile process")
        app.notify(f"the sweep failed: HTTP 500: {HOSTILE} {MARKUP}", title="macro sweep", severity="error")
        await pilot.pause()
        await pilot_until(pilot, lambda: "the sweep failed" in screen_text(app), "the notification")
        text = screen_text(app)
        assert not raw_controls(text), [line for line in text.splitlines() if raw_controls(line)]
        assert escaped(HOSTILE)[:30] in text  # the process table's command, the GPU's name
        assert MARKUP in text  # shown as it is, not read as markup
        assert app.notices[-1] == f"the sweep failed: HTTP 500: {escaped(HOSTILE)} {MARKUP}"  # the notification
        assert "red]x[/]" in text.split("the sweep failed")[-1]  # its markup-like words as they are
        assert "gpu-\\x1b]0;pwned\\x07node" in text  # the header's host

        screen = ConsentScreen(StepPreview(t, step="process", action=f"SIGKILL {HOSTILE}",
                                           targets=[_hostile_ref()]), "ana", "", session.state)
        app.push_screen(screen)
        await pilot_until(pilot, lambda: "Would signal" in screen_text(app), "the consent modal")
        text = screen_text(app)
        assert not raw_controls(text), [line for line in text.splitlines() if raw_controls(line)]
        assert "SIGKILL \\x1b]0;pwned\\x07" in text and "\\u202eevil" in text
        assert MARKUP[:9] in text and "[b]u" in text  # the user and the unit, not read as markup


# -- the report ------------------------------------------------------------------------------------------

def _hostile_run(t: float) -> list[Event]:
    """A cleanup that failed on the service manager's words and a sweep whose every request failed."""
    return [
        _hostile_sample(t),
        PhaseStart(t + 1, phase="cleanup", title=f"free {HOSTILE}"),
        CleanupPlan(t + 1, service=f"vllm{TITLE}", manager="systemd", host=f"gpu-{TITLE}node", gpus=[0],
                    steps=["process"]),
        StepPreview(t + 2, step="process", action=f"SIGKILL {HOSTILE}", targets=[_hostile_ref()]),
        StepResult(t + 3, step="process", status="failed", reason=f"systemctl said: {HOSTILE}\n## not a heading",
                   elapsed_s=1.0),
        PhaseEnd(t + 4, phase="cleanup", ok=False, note=f"a | b {HOSTILE}\nc"),
        MacroPoint(t + 5, concurrency=1, metrics={"completed": 0, "failed": 2, "num_prompts": 2,
                                                  "failures": {f"HTTP 500: {HOSTILE}": 2}}),
    ]


async def test_the_cleanup_and_benchmarks_tabs_show_outside_text_escaped() -> None:
    session = Session()
    for ev in _hostile_run(time.time()):
        session.publish(ev)
    app = ProbedApp(session)
    async with app.run_test(size=BIG) as pilot:
        for key, shown in (("c", "systemctl said: \\x1b]0;pwned"), ("b", "HTTP 500: \\x1b]0;pwned")):
            await pilot.press(key)
            await pilot_until(pilot, lambda shown=shown: shown in screen_text(app), f"{shown!r} on tab {key}")  # type: ignore[misc]
            text = screen_text(app)
            assert not raw_controls(text), [line for line in text.splitlines() if raw_controls(line)]


def test_the_report_escapes_outside_text_and_keeps_its_tables_and_lines_whole(tmp_path: Path) -> None:
    events = _hostile_run(1_750_000_000.0)
    path = write_run(tmp_path / "hostile.jsonl", events, host=f"gpu-{TITLE}node")
    report = render_report(RunReader(path))
    assert not raw_controls(report), [line for line in report.splitlines() if raw_controls(line)]
    assert "\\u202eevil" in report and "gpu-\\x1b]0;pwned\\x07node" in report
    assert "## not a heading" not in report.splitlines()  # a newline in a field does not start a line
    phase_row = next(line for line in report.splitlines() if line.startswith("| cleanup "))
    assert "a \\| b" in phase_row and phase_row.count(" | ") == 5, phase_row  # six cells, the | escaped
    summary = summarize(RunReader(path))
    assert not raw_controls(summary), summary
