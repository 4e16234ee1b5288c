"""The figures as images (issue 22 item 3): ``kimitui report RUN --figures DIR`` and ``kimitui compare ...
--figures DIR`` write PNG and SVG that open (the PNG's header gives its size, the SVG is text with its title
in it), the Markdown links them relative to itself, ``-o report.html`` is one file with the figures inline,
and without matplotlib ``--figures`` says so in one line (exit 2; the install command it names, and the
plain HTML page without matplotlib: tests/test_report_outputs.py). Through the real command line."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAIR = ("campaign-demo-8x-rtx-pro-6000-allreduce-1x", "campaign-demo-8x-rtx-pro-6000-allreduce-2x")
STEMS = ("throughput", "ttft", "tpot", "memory", "budget", "allreduce")


def kimitui(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kimitui", *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "TZ": "UTC", **(env or {})}, stdin=subprocess.DEVNULL, cwd=cwd)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG's signature and IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def test_report_writes_every_figure_and_links_them(tmp_path: Path) -> None:
    out, figs = tmp_path / "report.md", tmp_path / "figs"
    done = kimitui("report", PAIR[0], "--figures", str(figs), "-o", str(out))
    assert done.returncode == 0, done.stderr
    for stem in STEMS:
        width, height = png_size(figs / f"{stem}.png")
        assert 500 <= width <= 1200 and 300 <= height <= 1200, (stem, width, height)
        svg = (figs / f"{stem}.svg").read_text(encoding="utf-8")
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "Output tok/s against concurrency" in (figs / "throughput.svg").read_text(encoding="utf-8")
    assert "GPU memory through the transition" in (figs / "memory.svg").read_text(encoding="utf-8")
    assert "All-reduce latency against size" in (figs / "allreduce.svg").read_text(encoding="utf-8")
    text = out.read_text(encoding="utf-8")
    links = re.findall(r"^!\[([^\]]+)\]\(([^)]+)\)$", text, re.M)
    assert [p for _, p in links] == [f"figs/{s}.png" for s in STEMS]
    assert all((out.parent / p).is_file() for _, p in links)


def test_the_report_without_figures_is_the_report_as_before() -> None:
    plain = kimitui("report", PAIR[0])
    assert plain.returncode == 0 and "## Figures" not in plain.stdout and "![" not in plain.stdout


def test_compare_figures_draw_every_run(tmp_path: Path) -> None:
    figs = tmp_path / "cmp-figs"
    done = kimitui("compare", *PAIR, "--figures", str(figs), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in figs.iterdir()) == sorted(f"{s}.{e}" for s in STEMS for e in ("png", "svg"))
    svg = (figs / "throughput.svg").read_text(encoding="utf-8")
    assert "Output tok/s against concurrency: A vs B" in svg and PAIR[1] in svg
    assert "![Output tok/s against concurrency](cmp-figs/throughput.png)" in done.stdout  # relative to the cwd


def test_html_is_one_file_with_the_figures_inline(tmp_path: Path) -> None:
    out = tmp_path / "cmp.html"
    done = kimitui("compare", *PAIR, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp.html"]  # nothing beside it
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<svg") == len(STEMS) and "<img" not in page and ".png" not in page
    assert "<table>" in page and ">concurrency</th>" in page and "<strong>" in page
    assert "<title>kimitui compare: " in page


def test_without_matplotlib_one_line_and_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "block"
    (blocker / "matplotlib").mkdir(parents=True)
    (blocker / "matplotlib" / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    path = os.pathsep.join([str(blocker), str(ROOT), os.environ.get("PYTHONPATH", "")])
    figs = tmp_path / "figs"
    done = kimitui("report", PAIR[0], "--figures", str(figs), env={"PYTHONPATH": path})
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("kimitui: --figures needs matplotlib, which is not installed: ")
    assert done.stdout == "" and not figs.exists()
    done = kimitui("compare", *PAIR, "--figures", str(figs), "-o", str(tmp_path / "x.html"), env={"PYTHONPATH": path})
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and not (tmp_path / "x.html").exists()
