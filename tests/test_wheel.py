"""kimitui installed like a real tool: the wheel is built, installed in a fresh venv outside the repository,
and run from another directory: replay --summary and report of the bundled run, the first frame of the
replay, the demo's dashboard on the simulated host (the agent sent from the installed package), and a micro
benchmark on it (the worker modules sent from the installed package).

No network: the wheel is built without build isolation (setuptools is already here), installed with
--no-deps --no-index, and the fresh venv finds its dependencies through a .pth line naming this
interpreter's site-packages (a plain path entry: the editable install's own .pth there is not processed,
so the repository's kimitui cannot leak in; the tests check where kimitui is imported from).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from kimitui.core.runfile import RunReader
from kimitui.report.markdown import render_report
from kimitui.report.summary import summarize
from kimitui.resources import bundled_sample_run
from tests.support import ROOT
from tests.terminal import on_a_terminal

SOURCES = ("kimitui", "themes", "sample_runs", "pyproject.toml", "README.md")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    source: Path
    venv: Path
    cwd: Path
    """Not the repository, nor above it: the commands run from here."""
    env: dict[str, str]

    @property
    def kimitui(self) -> str:
        return str(self.venv / "bin" / "kimitui")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.kimitui, *args], cwd=self.cwd, env=self.env, capture_output=True,
                              text=True, timeout=timeout)


def _pip(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    top = tmp_path_factory.mktemp("wheel")
    # A copy of what the wheel is built from: the build's own files (build/, *.egg-info) stay out of the
    # repository, and what the wheel lacks cannot be made up for by the clone.
    source = top / "src"
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, source / name, ignore=SKIPPED)
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(src, source / name)
    dist = top / "dist"
    _pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "--wheel-dir", str(dist),
         str(source))
    (wheel,) = dist.glob("kimitui-*.whl")
    venv = top / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    _pip("--python", str(python), "install", "--quiet", "--no-deps", "--no-index", str(wheel))
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    Path(purelib, "kimitui-test-dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    cwd = top / "elsewhere"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(XDG_DATA_HOME=str(top / "data"), XDG_CONFIG_HOME=str(top / "config"),
               XDG_STATE_HOME=str(top / "state"), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return Installed(wheel=wheel, source=source, venv=venv, cwd=cwd, env=env)


def test_the_wheel_holds_every_file_of_the_package(installed: Installed) -> None:
    """Every file under kimitui/ is in the wheel: the themes, the bundled runs, the stylesheet, and the
    modules sent to a host from their files (the host side: the agent, the micro workers)."""
    tree = {p.relative_to(installed.source).as_posix() for p in (installed.source / "kimitui").rglob("*")
            if p.is_file()}
    for shipped in ("themes", "sample_runs"):  # at the top of the repository, mapped in under kimitui/data/
        tree |= {f"kimitui/data/{shipped}/{p.name}" for p in (installed.source / shipped).iterdir() if p.is_file()}
    with zipfile.ZipFile(installed.wheel) as whl:
        packed = {n for n in whl.namelist() if n.startswith("kimitui/")}
    assert tree - packed == set(), "not in the wheel (pyproject.toml's package-data?)"
    for needed in ("kimitui/hostside/bootstrap.py", "kimitui/hostside/agent/server.py", "kimitui/hostside/gemm.py",
                   "kimitui/tui/app.tcss",
                   "kimitui/data/sample_runs/" + bundled_sample_run().name, "kimitui/data/themes/kimitui-dark.toml"):
        assert needed in packed


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    """pyproject.toml lists the packages (the data folders are mapped in, so none are found): a new folder of
    modules under kimitui/ must be listed there, or the wheel goes without it."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kimitui").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert folders - listed == set()
    assert {"kimitui.data.themes", "kimitui.data.sample_runs"} <= listed


def test_the_installed_package_is_imported_from_the_venv_with_its_data(installed: Installed) -> None:
    probe = ("import json, sys, kimitui, kimitui.resources as r\n"
             "print(json.dumps({'file': kimitui.__file__, 'path': sys.path,\n"
             "  'runs': [p.name for p in r.bundled_runs()],\n"
             "  'themes': sorted(p.name for p in r.builtin_themes_dir().iterdir())}))")
    proc = subprocess.run([installed.python, "-c", probe], cwd=installed.cwd, env=installed.env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert Path(found["file"]).is_relative_to(installed.venv)
    assert not any(Path(p).resolve() == ROOT for p in found["path"] if p)
    assert found["runs"] == sorted(p.name for p in (ROOT / "sample_runs").glob("*.jsonl.gz"))
    assert found["themes"] == sorted(p.name for p in (ROOT / "themes").glob("*.toml"))


def test_replay_summary_and_report_of_the_bundled_run(installed: Installed) -> None:
    reader = RunReader(bundled_sample_run())
    summary = installed.run("replay", "--summary")
    assert summary.returncode == 0, summary.stderr
    assert summary.stdout == summarize(reader) + "\n"
    assert f"events    {len(reader)} (" in summary.stdout

    out = installed.cwd / "report.md"
    report = installed.run("report", "-o", str(out))
    assert report.returncode == 0, report.stderr
    assert out.read_text() == render_report(reader)
    assert "## Campaign" in out.read_text()


def test_without_matplotlib_the_wheel_names_its_own_pythons_pip(installed: Installed) -> None:
    """An installed wheel is no clone: the advice is the venv's own pip with the extra's requirement (kimitui
    itself is on no index), and ``-o r.html`` without matplotlib is still written, as the plain page."""
    blocker = installed.cwd / "block" / "matplotlib"
    blocker.mkdir(parents=True, exist_ok=True)
    (blocker / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = {**installed.env, "PYTHONPATH": str(blocker.parent)}
    done = subprocess.run([installed.kimitui, "report", "--figures", "figs"], cwd=installed.cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"kimitui: --figures needs matplotlib, which is not installed: "
                                        f"{installed.python} -m pip install 'matplotlib>=3.8'"]
    page = subprocess.run([installed.kimitui, "report", "-o", "r.html"], cwd=installed.cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert page.returncode == 0, page.stderr
    assert "<table>" in (installed.cwd / "r.html").read_text(encoding="utf-8")


def test_the_first_frame_of_the_replay(installed: Installed) -> None:
    n = len(RunReader(bundled_sample_run()))
    first = f"event 1/{n}".encode()
    rc, out = on_a_terminal([installed.kimitui, "replay"], cwd=installed.cwd, env=installed.env,
                            ready=lambda seen: first in seen and b"RTX PRO 6000" in seen, keys=b"q")
    assert rc == 0, out[-2000:]
    assert "stopped on an error" not in out


def test_the_demo_dashboard_on_the_simulated_host(installed: Installed) -> None:
    """The sim host's processes and the agent both come from the installed package: the dashboard shows
    the agent connected and the simulated vLLM workers in the process table; quitting tears it down."""
    def ready(seen: bytes) -> bool:
        return b"connected (agent pid" in seen and b"VLLM::Worker_TP" in seen

    rc, out = on_a_terminal([installed.kimitui, "demo"], cwd=installed.cwd, env=installed.env, ready=ready,
                            keys=b"q")
    assert rc == 0, out[-2000:]
    assert "stopped on an error" not in out


def test_a_micro_benchmark_on_the_demo_host(installed: Installed) -> None:
    """The micro workers are sent to the host from the installed files (modelled on the simulated GPUs)."""
    proc = installed.run("bench", "micro", "--host", "demo", "--force", "--json", "--ms", "1", "--burst-tokens",
                         "1", "--sweep-max", "0", "--pace", "0.001", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    ends = {e["part"]: e["status"] for e in events if e["type"] == "micro_end"}
    assert ends == {"gemm": "done", "allreduce": "done"}, proc.stderr[-2000:]
    assert any(e["type"] == "gemm_row" for e in events)
    assert any(e["type"] == "allreduce_row" for e in events)


def test_the_fleet_demo_from_the_installed_package(installed: Installed) -> None:
    """The demo's hosts process is started from the installed files, outside the clone."""
    proc = installed.run("fleet", "--demo", "4", "--json", "--count", "1", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = proc.stdout.splitlines()
    hosts = json.loads(line)["hosts"]
    assert [(h["name"], h["state"], len(h["gpus"])) for h in hosts] == [(f"demo-0{i}", "up", 8) for i in range(1, 5)]
