"""A report as an operator writes it (issue 33 items 2 and 3), through the real command line: the nccl-tests
header is our own three lines, never one line with ``\\x0a`` in it; ``-o r.html`` without matplotlib is the
plain page (the figures are what needs matplotlib, not HTML); and where an extra is missing (matplotlib for
``--figures``, textual-serve for ``serve``) the one line names the command that installs it for this install:
here the clone's venv pip (the other installs: tests/test_install_advice.py, tests/test_wheel.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from kimitui.core.micro_words import NCCL_HEAD
from kimitui.report.html import to_html

ROOT = Path(__file__).resolve().parent.parent
RUN = "campaign-demo-8x-rtx-pro-6000"
HEAD = NCCL_HEAD.split("\n")


def kimitui(*args: str, cwd: Path, block: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``python -m kimitui ARGS`` from this clone, the packages in ``block`` unimportable (a package of that
    name first on the path, whose import raises ImportError)."""
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    if block:
        blocker = cwd / "block"
        for name in block:
            (blocker / name).mkdir(parents=True, exist_ok=True)
            (blocker / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
        path.insert(0, str(blocker))
    env = {**os.environ, "TZ": "UTC", "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run([sys.executable, "-m", "kimitui", *args], capture_output=True, text=True, timeout=180,
                          env=env, stdin=subprocess.DEVNULL, cwd=cwd)


def clone_command(extra: str) -> str:
    """What the advice says in this test's setting: this venv's python, its pip, this clone with the extra."""
    return f"{shlex.quote(sys.executable)} -m pip install -e {shlex.quote(f'{ROOT}[{extra}]')}"


def header_lines(text: str) -> list[str]:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith(HEAD[0]))
    return lines[at:at + len(HEAD)]


def test_the_nccl_header_is_three_lines_in_markdown_and_html(tmp_path: Path) -> None:
    assert len(HEAD) == 3
    md = kimitui("report", RUN, "-o", "r.md", cwd=tmp_path)
    assert md.returncode == 0, md.stderr
    text = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "\\x0a" not in text
    assert header_lines(text) == HEAD
    page = kimitui("report", RUN, "-o", "r.html", cwd=tmp_path, block=("matplotlib",))
    assert page.returncode == 0, page.stderr
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "\\x0a" not in html
    assert header_lines(html) == ["<pre><code>" + HEAD[0], *HEAD[1:]]


def test_html_without_matplotlib_is_the_plain_page(tmp_path: Path) -> None:
    plain = kimitui("report", RUN, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    done = kimitui("report", RUN, "-o", "r.html", cwd=tmp_path, block=("matplotlib",))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"report written to r.html; without figures (they need matplotlib: {clone_command('figures')})"]
    assert (tmp_path / "r.html").read_text(encoding="utf-8") == to_html(plain.stdout, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["block", "r.html"]  # nothing beside it


def test_compare_html_without_matplotlib_is_the_plain_page(tmp_path: Path) -> None:
    pair = (f"{RUN}-allreduce-1x", f"{RUN}-allreduce-2x")
    done = kimitui("compare", *pair, "-o", "c.html", cwd=tmp_path, block=("matplotlib",))
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "c.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page and "<svg" not in page
    assert "figure not available" not in page and "Figures" not in page


def test_figures_without_matplotlib_name_the_clone_venv_command(tmp_path: Path) -> None:
    done = kimitui("report", RUN, "--figures", "figs", cwd=tmp_path, block=("matplotlib",))
    assert done.returncode == 2 and done.stdout == "" and not (tmp_path / "figs").exists()
    assert done.stderr.splitlines() == [
        f"kimitui: --figures needs matplotlib, which is not installed: {clone_command('figures')}"]


def test_serve_without_textual_serve_names_the_clone_venv_command(tmp_path: Path) -> None:
    done = kimitui("serve", "--replay", RUN, cwd=tmp_path, block=("textual_serve",))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"kimitui: kimitui serve needs textual-serve, which is not installed: {clone_command('serve')}"]


def test_the_html_page_escapes_what_the_run_says() -> None:
    """Text from outside (a process name, a server's error) reaches the page as text: a tag in it is escaped,
    never markup (raw HTML off); a table cell's escaped pipe is a pipe; a lone image is a figure, not in a <p>."""
    md = ("# r <b>\n\n| a | b |\n|---|--:|\n| <script>x</script> | 1 \\| 2 |\n\n"
          "`<img src=x onerror=alert(1)>` and **<i>bold</i>**\n\n![missing figure](f.png)\n")
    page = to_html(md, {})
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page and "<i>" not in page
    assert "<title>r &lt;b&gt;</title>" in page and '<td style="text-align:right">1 | 2</td>' in page
    assert "<p>[figure not available: missing figure]</p>" in page and "<p><p>" not in page
